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

from tests.input_pipelines.test_pipeline import write_image_tfrecords
from tests.input_pipelines.test_records import bytes_feature
from tests.input_pipelines.test_records import damage_first_record
from tests.input_pipelines.test_records import encoded_image
from tests.input_pipelines.test_records import image_example
from tests.input_pipelines.test_records import int64_feature
from tests.input_pipelines.test_records import write_records
from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist
from tfdist.cluster import network
from tfdist.commands import data as data_service_command


class _SmallShapes:

    @pytest.fixture(autouse=True)
    def _data_dir(self, small_shapes_data_dir):
        self.data_dir = f"--data_dir={small_shapes_data_dir}"


@pytest.mark.multiprocess
class DataCheckTest(_SmallShapes, parameterized.TestCase):

    @parameterized.parameters("auto", "file", "data")
    def test_exactly_once_exits_0(self, autoshard):
        json_path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "check.json")
        result = run_tfdist("data", "check", self.data_dir, "--num_workers=2",
                            "--replicas_per_worker=2", f"--autoshard={autoshard}",
                            f"--json={json_path}")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("ok: every example read exactly once", result.stdout)
        with open(json_path, encoding="utf-8") as report_file:
            report = json.load(report_file)
        self.assertTrue(report["exactly_once"])
        self.assertEqual(report["examples_per_worker"], [320, 320])

    def test_duplicates_exit_1(self):
        result = run_tfdist("data", "check", self.data_dir, "--autoshard=off")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("FAIL: 640 example(s) read more than once, 0 never read", result.stdout)


@pytest.mark.multiprocess
class DataCheckErrorTest(_SmallShapes, parameterized.TestCase):

    def assert_one_line_error(self, result, *expected):
        assert_one_line_error(self, result, *expected)

    def test_file_sharding_with_too_few_files(self):
        result = run_tfdist("data", "check", self.data_dir, "--num_workers=16",
                            "--autoshard=file")
        self.assert_one_line_error(result, "autoshard=file: 8 file(s) for 16 input pipelines",
                                   "--autoshard=data")

    def test_global_batch_smaller_than_replicas(self):
        result = run_tfdist("data", "check", self.data_dir, "--num_workers=2",
                            "--replicas_per_worker=2", "--global_batch_size=2")
        self.assert_one_line_error(result, "global_batch_size=2 is smaller than the 4 replicas")

    def test_unprepared_tfds_dataset(self):
        data_dir = self.enterContext(tempfile.TemporaryDirectory())
        result = run_tfdist("data", "check", "--dataset=mnist", f"--data_dir={data_dir}")
        self.assert_one_line_error(result, "dataset='mnist' is not prepared",
                                   f"tfds build mnist --data_dir={data_dir}", "--download")

    def test_empty_glob(self):
        result = run_tfdist("data", "check", "--dataset=tfrecord:/nonexistent/*",
                            "--num_classes=3")
        self.assert_one_line_error(result, "the pattern '/nonexistent/*' matches no files")

    def test_damaged_file_is_named_and_can_be_skipped(self):
        directory = self.enterContext(tempfile.TemporaryDirectory())
        files = write_image_tfrecords(directory, "train", 2, 8)
        with open(files[0], "r+b") as damaged:
            damaged.seek(200)
            damaged.write(b"garbage!")
        args = ("data", "check", f"--dataset=tfrecord:{directory}/train-*", "--num_classes=3",
                "--global_batch_size=2")
        self.assert_one_line_error(run_tfdist(*args), f"file {files[0]} is damaged",
                                   "--skip_corrupt_records")
        skipped = run_tfdist(*args, "--skip_corrupt_records")
        self.assertEqual(skipped.returncode, 0, skipped.stderr)
        self.assertIn(f"skipping the rest of {files[0]}", skipped.stderr)
        self.assertIn("1 of 1 file(s) damaged", skipped.stderr)

    def _check_records(self, *files: tuple[str, list[bytes]]):
        """`tfdist data check` over TFRecord files written here, (name, records) each; returns
        (their directory, the result)."""
        directory = self.enterContext(tempfile.TemporaryDirectory())
        for name, serialized in files:
            write_records(os.path.join(directory, name), serialized)
        return directory, run_tfdist("data", "check", f"--dataset=tfrecord:{directory}/train-*",
                                     "--num_classes=3", "--global_batch_size=2")

    def test_empty_file(self):
        directory, result = self._check_records(("train-0", [image_example()] * 2),
                                                ("train-1", []))
        self.assert_one_line_error(result, f"file {directory}/train-1 is empty (0 bytes)")

    def test_directory_in_glob(self):
        directory = self.enterContext(tempfile.TemporaryDirectory())
        os.mkdir(os.path.join(directory, "train-dir"))
        result = run_tfdist("data", "check", f"--dataset=tfrecord:{directory}/train-*",
                            "--num_classes=3")
        self.assert_one_line_error(result, f"{directory}/train-dir is a directory, not a "
                                           "TFRecord file")

    def test_label_out_of_range(self):
        directory, result = self._check_records(
            ("train-0", [image_example()] * 2 + [image_example(label=int64_feature(3))]))
        self.assert_one_line_error(result, f"file {directory}/train-0, record 2 (from 0): "
                                           "image/class/label=3 is outside [0, 3) "
                                           "(--num_classes=3)",
                                   "--num_classes=4")

    def test_files_left_empty_by_skip_corrupt_records(self):
        directory = self.enterContext(tempfile.TemporaryDirectory())
        damage_first_record(write_records(os.path.join(directory, "train-0"),
                                          [image_example()] * 2))
        result = run_tfdist("data", "check", f"--dataset=tfrecord:{directory}/train-*",
                            "--num_classes=3", "--skip_corrupt_records")
        self.assert_one_line_error(result, "the train split has no readable records",
                                   f"({directory}/train-0)")

    def test_undecodable_image(self):
        truncated = image_example(bytes_feature(encoded_image()[:200]))
        directory, result = self._check_records(("train-0", [image_example(), truncated]))
        # TensorFlow's JPEG decoder writes its own lines to stderr before this one.
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn(f"tfdist data check: error: file {directory}/train-0, record 1 (from 0): "
                      "its image/encoded image does not decode",
                      result.stderr.strip().splitlines()[-1])


def _start_data_serve(port: int) -> subprocess.Popen:
    """`tfdist data serve --port=PORT --num_workers=2` in a child process; stop it when done."""
    return subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-m", "tfdist", "data", "serve", f"--port={port}", "--num_workers=2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.multiprocess
class DataServeTest(unittest.TestCase):

    def test_serves_until_terminated(self):
        port = portpicker.pick_unused_port()
        server = _start_data_serve(port)
        try:
            line = server.stdout.readline()
            self.assertIn(f"dispatcher at grpc://127.0.0.1:{port} with 2 worker(s)", line)
            self.assertIn(f"--tf_data_service=grpc://127.0.0.1:{port}", line)
            server.send_signal(signal.SIGTERM)
            self.assertEqual(server.wait(timeout=60), 0, server.stderr.read())
        finally:
            server.kill()
            server.wait(timeout=60)


@pytest.mark.multiprocess
class TrainThroughServiceTest(_SmallShapes, unittest.TestCase):

    def test_train_reads_through_a_served_pipeline(self):
        port = portpicker.pick_unused_port()
        server = _start_data_serve(port)
        try:
            self.assertIn("dispatcher at", server.stdout.readline())
            result = run_tfdist("train", self.data_dir,
                                f"--tf_data_service=grpc://127.0.0.1:{port}", "--epochs=2",
                                "--steps_per_epoch=5", "--validation_steps=2")
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertIn(f"train: runs on the tf.data service at grpc://127.0.0.1:{port} "
                          "(distributed_epoch)", result.stderr)
            self.assertIn("2 epoch(s) of 5 steps", result.stdout)
        finally:
            server.terminate()
            server.wait(timeout=60)


class ExposureTest(unittest.TestCase):

    def test_names_every_port_and_interface(self):
        addresses = ["grpc://127.0.0.1:5050", "127.0.0.1:6001", "127.0.0.1:6002"]
        with mock.patch.object(network, "exposed_interfaces", return_value=["eth0"]):
            exposure = data_service_command._exposure(addresses)  # pylint: disable=protected-access
            self.assertEqual(exposure, (
                "TensorFlow binds every interface (0.0.0.0 and [::]), so port(s) 5050, 6001, 6002 "
                "accept unauthenticated connections through eth0; firewall them on an untrusted "
                "network"))
        with mock.patch.object(network, "exposed_interfaces", return_value=[]):
            exposure = data_service_command._exposure(addresses)  # pylint: disable=protected-access
            self.assertIn("connections through loopback only", exposure)


@pytest.mark.multiprocess
class NoDispatcherTest(absltest.TestCase):

    def test_train_fails_in_one_line_instead_of_hanging(self):
        address = f"grpc://127.0.0.1:{portpicker.pick_unused_port()}"
        try:
            result = run_tfdist("train", f"--tf_data_service={address}", "--epochs=1",
                                "--steps_per_epoch=2", timeout_s=240)
        except subprocess.TimeoutExpired:
            self.fail("tfdist train waited for a dispatcher that is not there")
        self.assertEqual(result.returncode, 2, result.stderr[-3000:])
        self.assertNotIn("Traceback", result.stderr)
        self.assertLen(result.stderr.strip().splitlines(), 1, result.stderr)
        self.assertRegex(result.stderr.splitlines()[-1],
                         rf"^tfdist train: error: --tf_data_service='{address}': no dispatcher "
                         r"answered there within 20 s \(last try: connection refused\); start one "
                         r"with `tfdist data serve --port=\d+`, or fix the address\.$")


class JobSetPodServeTest(absltest.TestCase):
    """`tfdist data serve --jobset_pod` refuses, in one line, what is not a data service pod."""

    def _serve(self, *args: str, env: dict[str, str]) -> tuple[int, str]:
        from tfdist.commands import cli  # pylint: disable=import-outside-toplevel
        stderr = io.StringIO()
        with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stderr(stderr), \
                mock.patch.object(data_service_command.tf_import, "import_tensorflow",
                                  side_effect=AssertionError("reached TensorFlow")):
            status = cli.main(["tfdist", "data", "serve", "--jobset_pod", *args])
        return status, stderr.getvalue()

    def test_outside_a_jobset(self):
        status, stderr = self._serve(env={})
        self.assertEqual(status, 2)
        self.assertEqual(stderr.count("\n"), 1, stderr)
        self.assertIn("JobSet pod: TFDIST_JOBSET_LAYOUT is not set", stderr)

    def test_in_a_training_pod(self):
        status, stderr = self._serve(env={
            "TFDIST_JOBSET_LAYOUT": "worker=2,dispatcher=1,data-worker=1",
            "TFDIST_JOBSET_NAME": "ds", "TFDIST_REPLICATED_JOB": "worker",
            "TFDIST_JOB_INDEX": "0", "JOB_COMPLETION_INDEX": "1",
            "TFDIST_JOBSET_SUBDOMAIN": "ds", "TFDIST_JOBSET_PORT": "2222"})
        self.assertEqual(status, 2)
        self.assertIn("this pod is worker:1, not a tf.data service pod", stderr)

    def test_port_does_not_apply(self):
        status, stderr = self._serve("--port=6000", env={})
        self.assertEqual(status, 2)
        self.assertIn("--port does not apply with --jobset_pod", stderr)
