"""`tfdist data check` and `tfdist data serve` as a user runs them, and their one-line errors;
what `data serve` exposes; training with no dispatcher fails in bounded time."""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import portpicker
import pytest
from absl.testing import absltest
from absl.testing import parameterized

from tests import ports
from tests.input_pipelines.images import write_image_tfrecords
from tests.input_pipelines.records import bytes_feature
from tests.input_pipelines.records import damage_first_record
from tests.input_pipelines.records import encoded_image
from tests.input_pipelines.records import image_example
from tests.input_pipelines.records import int64_feature
from tests.input_pipelines.records import write_records
from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist
from tests.tfdist.cli_runner import run_tfdist_cases
from tfdist.cluster import network
from tfdist.commands import data as data_service_command
from tfdist.input_pipelines import dispatcher


class _SmallShapes:
    @pytest.fixture(autouse=True)
    def _data_dir(self, small_shapes_data_dir):
        self.data_dir = f"--data_dir={small_shapes_data_dir}"


_AUTOSHARDS = ("auto", "file", "data")


@pytest.fixture(name="data_checks", scope="module")
def _data_checks(small_shapes_data_dir, tmp_path_factory):
    """`tfdist data check` on the small built-in set, exactly once under each autoshard policy
    (with --json) and with sharding off, in one child: {autoshard or "off": (result, report
    path)}."""
    scratch = tmp_path_factory.mktemp("data_check")
    cases = {
        autoshard: [
            "data",
            "check",
            f"--data_dir={small_shapes_data_dir}",
            "--num_workers=2",
            "--replicas_per_worker=2",
            f"--autoshard={autoshard}",
            f"--json={scratch / autoshard}.json",
        ]
        for autoshard in _AUTOSHARDS
    }
    cases["off"] = ["data", "check", f"--data_dir={small_shapes_data_dir}", "--autoshard=off"]
    results = run_tfdist_cases(list(cases.values()))
    return {name: (result, scratch / f"{name}.json") for name, result in zip(cases, results)}


@pytest.mark.multiprocess
class DataCheckTest(parameterized.TestCase):
    @pytest.fixture(autouse=True)
    def _checks(self, data_checks):
        self.checks = data_checks

    @parameterized.parameters(*_AUTOSHARDS)
    def test_exactly_once_exits_0(self, autoshard):
        result, json_path = self.checks[autoshard]
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("ok: every example read exactly once", result.stdout)
        with open(json_path, encoding="utf-8") as report_file:
            report = json.load(report_file)
        self.assertTrue(report["exactly_once"])
        self.assertEqual(report["examples_per_worker"], [320, 320])

    def test_duplicates_exit_1(self):
        result, _ = self.checks["off"]
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("FAIL: 640 example(s) read more than once, 0 never read", result.stdout)


@pytest.mark.multiprocess
class DataCheckErrorTest(_SmallShapes, unittest.TestCase):
    """Each bad input to `tfdist data check` is one line and exit status 2. The cases run one
    after the other in one child process (`run_tfdist_cases`: TensorFlow imported once)."""

    def _directory(self, *files: tuple[str, list[bytes]]) -> str:
        """A new directory holding TFRecord files written here, (name, records) each."""
        directory = self.enterContext(tempfile.TemporaryDirectory())
        for name, serialized in files:
            write_records(os.path.join(directory, name), serialized)
        return directory

    def test_each_bad_input_is_one_line(self):
        unprepared = self._directory()
        with_a_directory = self._directory()
        os.mkdir(os.path.join(with_a_directory, "train-dir"))
        with_an_empty_file = self._directory(("train-0", [image_example()] * 2), ("train-1", []))
        out_of_range = self._directory(
            ("train-0", [image_example()] * 2 + [image_example(label=int64_feature(3))])
        )
        left_empty = self._directory(("train-0", [image_example()] * 2))
        damage_first_record(os.path.join(left_empty, "train-0"))
        damaged_directory = self._directory()
        damaged = write_image_tfrecords(damaged_directory, "train", 2, 8)[0]
        with open(damaged, "r+b") as damaged_file:
            damaged_file.seek(200)
            damaged_file.write(b"garbage!")
        undecodable = self._directory(
            ("train-0", [image_example(), image_example(bytes_feature(encoded_image()[:200]))])
        )

        def records(directory: str, *flags: str) -> list[str]:
            return [
                "data",
                "check",
                f"--dataset=tfrecord:{directory}/train-*",
                "--num_classes=3",
                *flags,
            ]

        cases = [  # (arguments, the texts its line holds)
            (
                ["data", "check", self.data_dir, "--num_workers=16", "--autoshard=file"],
                ("autoshard=file: 8 file(s) for 16 input pipelines", "--autoshard=data"),
            ),
            (
                [
                    "data",
                    "check",
                    self.data_dir,
                    "--num_workers=2",
                    "--replicas_per_worker=2",
                    "--global_batch_size=2",
                ],
                ("global_batch_size=2 is smaller than the 4 replicas",),
            ),
            (
                ["data", "check", "--dataset=mnist", f"--data_dir={unprepared}"],
                (
                    "dataset='mnist' is not prepared",
                    f"tfds build mnist --data_dir={unprepared}",
                    "--download",
                ),
            ),
            (records("/nonexistent"), ("the pattern '/nonexistent/train-*' matches no files",)),
            (
                records(damaged_directory, "--global_batch_size=2"),
                (f"file {damaged} is damaged", "--skip_corrupt_records"),
            ),
            (
                records(with_an_empty_file, "--global_batch_size=2"),
                (f"file {with_an_empty_file}/train-1 is empty (0 bytes)",),
            ),
            (
                records(with_a_directory),
                (f"{with_a_directory}/train-dir is a directory, not a TFRecord file",),
            ),
            (
                records(out_of_range, "--global_batch_size=2"),
                (
                    f"file {out_of_range}/train-0, record 2 (from 0): "
                    f"image/class/label=3 is outside "
                    "[0, 3) (--num_classes=3)",
                    "--num_classes=4",
                ),
            ),
            (
                records(left_empty, "--skip_corrupt_records"),
                ("the train split has no readable records", f"({left_empty}/train-0)"),
            ),
        ]
        skipped, decoding = (
            records(damaged_directory, "--global_batch_size=2", "--skip_corrupt_records"),
            records(undecodable, "--global_batch_size=2"),
        )
        *results, skipped_result, decoding_result = run_tfdist_cases(
            [args for args, _ in cases] + [skipped, decoding]
        )
        for (args, expected), result in zip(cases, results):
            with self.subTest(args=args):
                assert_one_line_error(self, result, *expected)
        with self.subTest("a damaged file skipped"):
            self.assertEqual(skipped_result.returncode, 0, skipped_result.stderr)
            self.assertIn(f"skipping the rest of {damaged}", skipped_result.stderr)
            self.assertIn("1 of 1 file(s) damaged", skipped_result.stderr)
        with self.subTest("an image that does not decode"):
            # TensorFlow's JPEG decoder writes its own lines to stderr before this one.
            self.assertEqual(decoding_result.returncode, 2, decoding_result.stderr)
            self.assertNotIn("Traceback", decoding_result.stderr)
            self.assertIn(
                f"tfdist data check: error: file {undecodable}/train-0, record 1 "
                "(from 0): its image/encoded image does not decode",
                decoding_result.stderr.strip().splitlines()[-1],
            )


def _start_data_serve(port: int) -> subprocess.Popen:
    """`tfdist data serve --port=PORT --num_workers=2` in a child process; stop it when done."""
    return subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-m", "tfdist", "data", "serve", f"--port={port}", "--num_workers=2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.multiprocess
class DataServeTest(_SmallShapes, unittest.TestCase):
    def test_train_reads_through_a_served_pipeline_which_serves_until_terminated(self):
        port = portpicker.pick_unused_port()
        server = _start_data_serve(port)
        try:
            line = server.stdout.readline()
            self.assertIn(
                f"dispatcher at grpc://127.0.0.1:{port} with 2 worker(s)",
                line,
                "data serve names its dispatcher",
            )
            self.assertIn(
                f"--tf_data_service=grpc://127.0.0.1:{port}",
                line,
                "data serve shows the flag that reads from it",
            )
            result = run_tfdist(
                "train",
                self.data_dir,
                f"--tf_data_service=grpc://127.0.0.1:{port}",
                "--epochs=2",
                "--steps_per_epoch=5",
                "--validation_steps=2",
            )
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertIn(
                f"train: runs on the tf.data service at grpc://127.0.0.1:{port} "
                "(distributed_epoch)",
                result.stderr,
            )
            self.assertIn("2 epoch(s) of 5 steps", result.stdout)
            server.send_signal(signal.SIGTERM)
            self.assertEqual(
                server.wait(timeout=60),
                0,
                f"data serve ends with 0 on SIGTERM: {server.stderr.read()}",
            )
        finally:
            server.kill()
            server.wait(timeout=60)


class ExposureTest(unittest.TestCase):
    def test_names_every_port_and_interface(self):
        addresses = ["grpc://127.0.0.1:5050", "127.0.0.1:6001", "127.0.0.1:6002"]
        with mock.patch.object(network, "exposed_interfaces", return_value=["eth0"]):
            exposure = data_service_command._exposure(addresses)  # pylint: disable=protected-access
            self.assertEqual(
                exposure,
                (
                    "TensorFlow binds every interface (0.0.0.0 and [::]), so "
                    "port(s) 5050, 6001, 6002 "
                    "accept unauthenticated connections through eth0; firewall "
                    "them on an untrusted "
                    "network"
                ),
            )
        with mock.patch.object(network, "exposed_interfaces", return_value=[]):
            exposure = data_service_command._exposure(addresses)  # pylint: disable=protected-access
            self.assertIn("connections through loopback only", exposure)


# `tfdist train` with the dispatcher wait (DISPATCHER_WAIT_S, 20 s) cut to 1 s: a line that says
# 1 s also shows that train waits as long as that default says.
_TRAIN_WAITING_1_S = """
import sys
from tfdist.commands import cli
from tfdist.input_pipelines import dispatcher
dispatcher.check_dispatcher.__kwdefaults__["wait_s"] = 1.0
sys.exit(cli.main(["tfdist", "train", *sys.argv[1:]]))
"""


@pytest.mark.multiprocess
class NoDispatcherTest(absltest.TestCase):
    def test_train_fails_in_one_line_instead_of_hanging(self):
        address = f"grpc://127.0.0.1:{ports.refusing_port(self)}"
        try:
            result = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _TRAIN_WAITING_1_S,
                    f"--tf_data_service={address}",
                    "--epochs=1",
                    "--steps_per_epoch=2",
                ],
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.fail("tfdist train waited for a dispatcher that is not there")
        self.assertEqual(result.returncode, 2, result.stderr[-3000:])
        self.assertNotIn("Traceback", result.stderr)
        self.assertLen(result.stderr.strip().splitlines(), 1, result.stderr)
        self.assertRegex(
            result.stderr.splitlines()[-1],
            rf"^tfdist train: error: --tf_data_service='{address}': no dispatcher "
            r"answered there within 1 s \(last try: connection refused\); start one "
            r"with `tfdist data serve --port=\d+`, or fix the address\.$",
        )

    def test_the_wait_is_20_s(self):
        self.assertEqual(dispatcher.check_dispatcher.__kwdefaults__, {"wait_s": 20.0})


class JobSetPodServeTest(absltest.TestCase):
    """`tfdist data serve --jobset_pod` refuses, in one line, what is not a data service pod."""

    def _serve(self, *args: str, env: dict[str, str]) -> tuple[int, str]:
        from tfdist.commands import cli  # pylint: disable=import-outside-toplevel

        stderr = io.StringIO()
        with (
            mock.patch.dict(os.environ, env, clear=True),
            contextlib.redirect_stderr(stderr),
            mock.patch.object(
                data_service_command.tf_import,
                "import_tensorflow",
                side_effect=AssertionError("reached TensorFlow"),
            ),
        ):
            status = cli.main(["tfdist", "data", "serve", "--jobset_pod", *args])
        return status, stderr.getvalue()

    def test_outside_a_jobset(self):
        status, stderr = self._serve(env={})
        self.assertEqual(status, 2)
        self.assertEqual(stderr.count("\n"), 1, stderr)
        self.assertIn("JobSet pod: TFDIST_JOBSET_LAYOUT is not set", stderr)

    def test_in_a_training_pod(self):
        status, stderr = self._serve(
            env={
                "TFDIST_JOBSET_LAYOUT": "worker=2,dispatcher=1,data-worker=1",
                "TFDIST_JOBSET_NAME": "ds",
                "TFDIST_REPLICATED_JOB": "worker",
                "TFDIST_JOB_INDEX": "0",
                "JOB_COMPLETION_INDEX": "1",
                "TFDIST_JOBSET_SUBDOMAIN": "ds",
                "TFDIST_JOBSET_PORT": "2222",
            }
        )
        self.assertEqual(status, 2)
        self.assertIn("this pod is worker:1, not a tf.data service pod", stderr)

    def test_port_does_not_apply(self):
        status, stderr = self._serve("--port=6000", env={})
        self.assertEqual(status, 2)
        self.assertIn("--port does not apply with --jobset_pod", stderr)
