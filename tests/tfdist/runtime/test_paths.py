"""`tfdist.runtime.paths`: the paths a run reads and writes, checked before training."""

import os
import tempfile
import unittest

from absl.testing import parameterized

from tests import scratch_files

from tfdist.input_pipelines import InputConfig
from tfdist.strategies import make_cluster
from tfdist.runtime import paths
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig


def _config(**train) -> RunConfig:
    return RunConfig(train=TrainConfig(**train))


class CheckTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.enterContext(tempfile.TemporaryDirectory())
        self.file = os.path.join(self.dir, "file")
        open(self.file, "w", encoding="utf-8").close()

    @parameterized.named_parameters(
        (
            "metrics_is_a_directory",
            dict(metrics_json="{dir}"),
            r"^metrics_json='{dir}' is a directory; pass the path of a file in it\.$",
        ),
        (
            "metrics_under_a_file",
            dict(metrics_json="{file}/m.json"),
            r"^metrics_json='{file}/m\.json': {file} is a file, not a directory",
        ),
        (
            "metrics_not_writable",
            dict(metrics_json="/proc/m.json"),
            r"^metrics_json='/proc/m\.json': cannot write in /proc \(",
        ),
        (
            "model_dir_is_a_file",
            dict(model_dir="{file}"),
            r"^model_dir='{file}' is a file; pass a directory\.$",
        ),
        (
            "model_dir_under_a_file",
            dict(model_dir="{file}/a/b"),
            r"^model_dir='{file}/a/b': {file} is a file, not a directory; pass a directory\.$",
        ),
        (
            "model_dir_not_writable",
            dict(model_dir="/proc/sys/m"),
            r"^model_dir='/proc/sys/m': cannot write in /proc/sys \(",
        ),
    )
    def test_rejects_before_training(self, train, pattern):
        train = {key: value.format(dir=self.dir, file=self.file) for key, value in train.items()}
        with self.assertRaisesRegex(ConfigError, pattern.format(dir=self.dir, file=self.file)):
            paths.check(_config(**train))
        self.assertEqual(os.listdir(self.dir), ["file"], "nothing may be written")

    def test_data_dir_that_is_a_file(self):
        config = RunConfig(input=InputConfig(data_dir=self.file))
        with self.assertRaisesRegex(ValueError, r"^data_dir='.*': .* is a file"):
            paths.check(config)

    def test_a_file_where_the_data_directory_belongs(self):
        for data_dir in (self.file, os.path.join(self.file, "sub")):
            with self.assertRaisesRegex(
                ConfigError,
                rf"^data_dir='{data_dir}': {self.file} is a file, "
                r"not a directory; pass a directory\.$",
            ):
                paths.check_input_dir("data_dir", data_dir)

    def test_a_data_directory_to_be_made_is_fine_and_not_made_by_the_check(self):
        data_dir = os.path.join(self.dir, "new", "dir")
        paths.check_input_dir("data_dir", data_dir)
        self.assertFalse(os.path.exists(data_dir))
        self.assertEqual(os.listdir(self.dir), ["file"], "the check may make nothing")

    def test_a_data_directory_that_cannot_be_made(self):
        # /proc refuses every new entry, even root's.
        with self.assertRaisesRegex(
            ConfigError,
            r"^data_dir='/proc/tfdist_data': cannot write "
            r"in /proc \(.*\); pass a path you may write\.$",
        ):
            paths.check_input_dir("data_dir", "/proc/tfdist_data")
        paths.check_input_dir("data_dir", "/proc")  # It exists: reading it needs no writes.

    def test_paths_to_be_made_pass(self):
        paths.check(
            _config(
                model_dir=os.path.join(self.dir, "new", "model"),
                metrics_json=os.path.join(self.dir, "new", "m.json"),
            )
        )

    def test_metrics_json_is_checked_only_where_it_is_written(self):
        worker = make_cluster(num_workers=2, ports=[1, 2], task=("worker", 1))
        config = RunConfig(train=TrainConfig(metrics_json=self.dir), cluster=worker)
        paths.check(config)  # Worker 1 writes no summary.

    def test_an_evaluator_needs_the_model_dir_it_reads_the_checkpoints_from(self):
        evaluator = make_cluster(num_workers=1, evaluator=True, ports=[1, 2], task=("evaluator", 0))
        with self.assertRaisesRegex(
            ConfigError,
            r"^the evaluator task needs model_dir=DIR, the chief's, to find the checkpoints it "
            r"evaluates\.$",
        ):
            paths.check(RunConfig(cluster=evaluator))
        paths.check(RunConfig(train=TrainConfig(model_dir=self.dir), cluster=evaluator))
        paths.check(RunConfig(train=TrainConfig(model_dir="gs://b/run"), cluster=evaluator))


class FullDiskTest(unittest.TestCase):
    def test_an_output_on_a_full_disk_is_refused_before_anything_runs(self):
        with scratch_files.small_tmpfs(64) as disk:
            scratch_files.fill(disk)
            for check, path in (
                (paths.check_output_file, f"{disk}/metrics.json"),
                (paths.check_output_dir, f"{disk}/logs"),
            ):
                with self.subTest(check=check.__name__):
                    with self.assertRaisesRegex(
                        ConfigError,
                        rf"^json={path!r}: cannot write in "
                        rf"{disk} \(No space left on device"
                        r"\); free space there",
                    ):
                        check("json", path)
            self.assertEqual(len(os.listdir(disk)), 1, "only the filler")


class AbsoluteTest(unittest.TestCase):
    def test_local_paths_are_resolved_once_and_uris_kept(self):
        with tempfile.TemporaryDirectory() as scratch:
            here = os.getcwd()
            os.chdir(scratch)
            self.addCleanup(os.chdir, here)
            config = paths.absolute(
                RunConfig(
                    input=InputConfig(data_dir="data"),
                    train=TrainConfig(model_dir="run", metrics_json="out/metrics.json"),
                )
            )
            os.chdir(here)  # As a plug-in might: the run still writes where it was started.
            real = os.path.realpath(scratch)
            self.assertEqual(os.path.realpath(config.train.model_dir), os.path.join(real, "run"))
            self.assertEqual(
                os.path.realpath(config.train.metrics_json),
                os.path.join(real, "out", "metrics.json"),
            )
            self.assertEqual(os.path.realpath(config.input.data_dir), os.path.join(real, "data"))
        self.assertEqual(
            paths.absolute(_config(model_dir="gs://bucket/run")).train.model_dir, "gs://bucket/run"
        )


class UrlTest(parameterized.TestCase):
    """URLs are checked for a file system TensorFlow has here, never as local paths."""

    @parameterized.named_parameters(
        ("s3_model_dir", "model_dir", "s3://bucket/run", "s3"),
        ("hdfs_model_dir", "model_dir", "hdfs://namenode:8020/run", "hdfs"),
        ("s3_data_dir", "data_dir", "s3://bucket/data", "s3"),
        ("s3_metrics_json", "metrics_json", "s3://bucket/m.json", "s3"),
    )
    def test_a_scheme_tensorflow_cannot_open_is_one_line(self, field, url, scheme):
        config = RunConfig(
            input=InputConfig(data_dir=url if field == "data_dir" else None),
            train=TrainConfig(
                model_dir=url if field == "model_dir" else None,
                metrics_json=url if field == "metrics_json" else None,
            ),
        )
        with self.assertRaisesRegex(
            ConfigError,
            rf"^{field}='{url}': TensorFlow here cannot open {scheme}:// \(it opens [^)]*gs://"
            rf"[^)]*\); mount that storage as a volume and pass its path, or install the "
            rf"TensorFlow file-system plug-in for {scheme}:// \(tensorflow-io has s3://\)\.$",
        ):
            paths.check_urls(config)
        paths.check(config)  # Before TensorFlow: URLs are not local paths.

    @parameterized.named_parameters(("gs", "gs://bucket/run"), ("ram", "ram://run"))
    def test_a_url_tensorflow_opens_passes_and_nothing_local_is_made_of_it(self, url):
        scratch = self.enterContext(tempfile.TemporaryDirectory())
        here = os.getcwd()
        os.chdir(scratch)
        self.addCleanup(os.chdir, here)
        config = RunConfig(
            input=InputConfig(data_dir=url),
            train=TrainConfig(model_dir=url, metrics_json=f"{url}/m.json"),
        )
        paths.check(config)
        paths.check_urls(config)
        self.assertEqual(os.listdir(scratch), [], "no local path made of the URL")


if __name__ == "__main__":
    unittest.main()
