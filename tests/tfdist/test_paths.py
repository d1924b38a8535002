"""Paths a run writes: checked before training, the model dir owned, the summary written whole."""

import contextlib
import errno
import io
import json
import os
import tempfile
import unittest
from unittest import mock

from absl.testing import parameterized

from tfdist.input_pipelines import InputConfig
from tfdist.strategies import make_cluster
from tfdist.runtime import paths
from tfdist.runtime.model_dir import ModelDir
from tfdist.training import summary
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
        ("metrics_is_a_directory", dict(metrics_json="{dir}"),
         r"^metrics_json='{dir}' is a directory; pass the path of a file in it\.$"),
        ("metrics_under_a_file", dict(metrics_json="{file}/m.json"),
         r"^metrics_json='{file}/m\.json': {file} is a file, not a directory"),
        ("metrics_not_writable", dict(metrics_json="/proc/m.json"),
         r"^metrics_json='/proc/m\.json': cannot write in /proc \("),
        ("model_dir_is_a_file", dict(model_dir="{file}"),
         r"^model_dir='{file}' is a file; pass a directory\.$"),
        ("model_dir_under_a_file", dict(model_dir="{file}/a/b"),
         r"^model_dir='{file}/a/b': {file} is a file, not a directory; pass a directory\.$"),
        ("model_dir_not_writable", dict(model_dir="/proc/sys/m"),
         r"^model_dir='/proc/sys/m': cannot write in /proc/sys \("),
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
            with self.assertRaisesRegex(ConfigError,
                                        rf"^data_dir='{data_dir}': {self.file} is a file, "
                                        r"not a directory; pass a directory\.$"):
                paths.check_input_dir("data_dir", data_dir)

    def test_a_data_directory_to_be_made_is_fine(self):
        paths.check_input_dir("data_dir", os.path.join(self.dir, "new", "dir"))

    def test_a_data_directory_that_cannot_be_made(self):
        # /proc refuses every new entry, even root's.
        with self.assertRaisesRegex(ConfigError, r"^data_dir='/proc/tfdist_data': cannot write "
                                                 r"in /proc \(.*\); pass a path you may write\.$"):
            paths.check_input_dir("data_dir", "/proc/tfdist_data")
        paths.check_input_dir("data_dir", "/proc")  # It exists: reading it needs no writes.

    def test_paths_to_be_made_pass(self):
        paths.check(_config(model_dir=os.path.join(self.dir, "new", "model"),
                            metrics_json=os.path.join(self.dir, "new", "m.json")))

    def test_metrics_json_is_checked_only_where_it_is_written(self):
        worker = make_cluster(num_workers=2, ports=[1, 2], task=("worker", 1))
        config = RunConfig(train=TrainConfig(metrics_json=self.dir), cluster=worker)
        paths.check(config)  # Worker 1 writes no summary.


class OwnedModelDirTest(unittest.TestCase):

    def test_second_owner_is_refused_in_one_line_naming_the_first(self):
        with tempfile.TemporaryDirectory() as model_dir:
            with ModelDir(model_dir).owned():
                with self.assertRaisesRegex(
                        ConfigError, rf"^model_dir='{model_dir}' is in use by another run \(pid "
                                     rf"{os.getpid()} on .* since .*\); wait for it to end or "
                                     r"stop it, or pass another --model_dir\.$"):
                    with ModelDir(model_dir).owned():
                        pass
            with ModelDir(model_dir).owned():  # Released when the owner is done.
                pass


class WriteJsonTest(unittest.TestCase):

    def test_writes_whole_files(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "sub", "out.json")
            summary.write_json(path, {"a": 1})
            with open(path, encoding="utf-8") as written:
                self.assertEqual(json.load(written), {"a": 1})
            self.assertEqual(os.listdir(os.path.dirname(path)), ["out.json"])

    def test_full_disk_leaves_neither_a_temp_file_nor_a_half_file(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "out.json")
            summary.write_json(path, {"before": 1})
            full = OSError(errno.ENOSPC, "No space left on device")
            with mock.patch.object(summary.json, "dump", side_effect=full):
                with self.assertRaises(OSError):
                    summary.write_json(path, {"after": 2})
            self.assertEqual(os.listdir(scratch), ["out.json"])
            with open(path, encoding="utf-8") as written:
                self.assertEqual(json.load(written), {"before": 1})


class ResultNotSavedTest(unittest.TestCase):

    def test_the_summary_line_is_printed_before_the_one_line_error(self):
        # pylint: disable-next=import-outside-toplevel
        from tfdist.commands import cli
        from tfdist.training import from_config as train_command
        from tfdist.training import fit as training
        result = {"strategy": "one_device", "num_replicas": 1, "num_workers": 1, "epochs": 1,
                  "steps_per_epoch": 2, "wall_s": 3.0, "final": {"loss": 0.5},
                  "examples_per_sec": 9.0}
        failure = training.ResultNotSaved("metrics_json='/x/m.json': could not write the summary "
                                          "(No space left on device); ...", result)
        stdout, stderr = io.StringIO(), io.StringIO()
        with mock.patch.object(train_command, "train", side_effect=failure), \
                mock.patch.dict(os.environ), contextlib.redirect_stdout(stdout), \
                contextlib.redirect_stderr(stderr):
            os.environ.pop("TF_CONFIG", None)
            status = cli.main(["tfdist", "train"])
        self.assertEqual(status, 2)
        self.assertIn("tfdist: one_device on 1 replica(s), 1 epoch(s) of 2 steps in 3.0s: "
                      "loss=0.5000", stdout.getvalue())
        self.assertEqual(stderr.getvalue(), "tfdist train: error: --metrics_json='/x/m.json': "
                                            "could not write the summary (No space left on "
                                            "device); ...\n")


class FormatLineTest(parameterized.TestCase):

    @parameterized.named_parameters(
        ("one_worker", "mirrored", 2, 1, None, "mirrored on 2 replica(s), 3 epoch(s)"),
        ("two_workers", "multi_worker_mirrored", 2, 2, None,
         "multi_worker_mirrored on 2 replica(s) in all (2 workers x 1), 3 epoch(s)"),
        ("parameter_server", "parameter_server", 1, 2, None,
         "parameter_server on 2 worker(s), asynchronous, 1 replica(s) each"),
        ("resumed", "one_device", 1, 1, 1, "in 5.0s (resumed at epoch 2):"),
    )
    def test_says_how_many_replicas_in_all(self, strategy, replicas, workers, resumed, expected):
        line = summary.format_line({
            "strategy": strategy, "num_replicas": replicas, "num_workers": workers,
            "epochs": 3, "steps_per_epoch": 10, "wall_s": 5.0, "final": {"loss": 0.5},
            "examples_per_sec": 100.0, "resumed_from_epoch": resumed})
        self.assertIn(expected, line)


if __name__ == "__main__":
    unittest.main()
