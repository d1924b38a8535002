"""The backups of `tfdist.training.callbacks`, through `tfdist train --model_dir` as a user runs
it: killed in epoch 2 and started again, it resumes from its backup on one_device and on mirrored
CPUs; started with another model, it says so in one line; a second run on the same dir is
refused."""

import json
import os
import signal
import subprocess
import sys
import shutil
import tempfile
import time
import unittest

import pytest
import tensorflow as tf
from absl.testing import parameterized

from tests import scratch_files
from tests.tfdist.cli_runner import DEFAULT_TIMEOUT_S
from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist
from tfdist.runtime.config import ConfigError
from tfdist.training import callbacks

_EPOCHS = 3


def _start(*args: str) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    return subprocess.Popen([sys.executable, "-m", "tfdist", "train", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _read_until(process: subprocess.Popen, marker: str) -> str:
    """Reads the run's output until a line starts with `marker`; returns what it read."""
    seen = []
    deadline = time.monotonic() + DEFAULT_TIMEOUT_S
    for line in process.stdout:
        seen.append(line)
        if line.startswith(marker) or time.monotonic() > deadline:
            break
    return "".join(seen)


@pytest.mark.multiprocess
class ResumeTest(parameterized.TestCase):

    @pytest.fixture(autouse=True)
    def _dirs(self, small_shapes_data_dir, tmp_path):
        self.model_dir = str(tmp_path / "model")
        self.metrics = str(tmp_path / "metrics.json")
        self.args = [f"--data_dir={small_shapes_data_dir}", f"--model_dir={self.model_dir}",
                     f"--metrics_json={self.metrics}", f"--epochs={_EPOCHS}",
                     "--steps_per_epoch=20", "--global_batch_size=32"]

    @parameterized.named_parameters(
        ("one_device", ["--strategy=one_device"]),
        ("mirrored_cpus", ["--strategy=mirrored", "--num_cpu_devices=2"]),
    )
    def test_killed_in_epoch_2_resumes_there(self, strategy_args):
        run = _start(*self.args, *strategy_args)
        # Keras prints "Epoch 2/3" once every callback has ended epoch 1: the backup is written.
        output = _read_until(run, "Epoch 2/")
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=60)
        run.stdout.close()
        self.assertIn("Epoch 2/", output)
        self.assertFalse(os.path.exists(self.metrics))

        backup = os.path.join(self.model_dir, "backup")
        fewer = run_tfdist("train", *self.args, *strategy_args, "--epochs=1")
        assert_one_line_error(self, fewer, "epochs=1: the backup in --model_dir=", "has 1 epoch(s) "
                              "done, so nothing is left to train", "(the backup is kept)")
        self.assertTrue(os.listdir(backup))

        result = run_tfdist("train", *self.args, *strategy_args)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertNotIn("Epoch 1/", result.stdout)
        self.assertIn("Epoch 2/", result.stdout)
        self.assertIn("(resumed at epoch 2)", result.stdout)
        self.assertIn("tfdist: resuming at epoch 2 from the backup an earlier run left in this "
                      "--model_dir", result.stderr)
        with open(self.metrics, encoding="utf-8") as metrics_file:
            metrics = json.load(metrics_file)
        self.assertEqual(metrics["resumed_from_epoch"], 1)
        for name, values in metrics["history"].items():
            self.assertLen(values, _EPOCHS, name)
            self.assertNotIn(None, values, name)
        self.assertEqual(sorted(os.listdir(os.path.join(self.model_dir, "checkpoints")))[-1:],
                         ["epoch-003.index"])
        self.assertTrue(os.listdir(os.path.join(self.model_dir, "logs", "train")))

    def test_the_backup_of_another_model_is_one_line(self):
        run = _start(*self.args, "--strategy=one_device")
        self.assertIn("Epoch 2/", _read_until(run, "Epoch 2/"))
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=60)
        run.stdout.close()
        result = run_tfdist("train", *self.args, "--strategy=one_device", "--model=resnet20")
        # Found when the backup is restored into the built model, after the input notices.
        self.assertEqual(result.returncode, 2, result.stderr[-3000:])
        self.assertNotIn("Traceback", result.stderr)
        last = result.stderr.strip().splitlines()[-1]
        self.assertTrue(last.startswith(
            f"tfdist train: error: --model_dir={self.model_dir!r}: the backup an interrupted "
            "run left there cannot be restored into this one (Received incompatible tensor "
            "with shape"), last)
        self.assertIn("resume it with that run's --model and flags, or pass another "
                      "--model_dir", last)

    def test_a_second_run_on_the_same_model_dir_is_refused(self):
        # Long enough to outlive the second run's start (3 short epochs end within seconds).
        first = _start(*self.args, "--strategy=one_device", "--steps_per_epoch=100000")
        try:
            self.assertIn("Epoch 1/", _read_until(first, "Epoch 1/"))
            result = run_tfdist("train", *self.args, "--strategy=one_device")
            assert_one_line_error(self, result, f"model_dir={self.model_dir!r} is in use by "
                                                f"another run (pid {first.pid} on ")
        finally:
            first.kill()
            first.wait(timeout=60)
            first.stdout.close()

    def test_a_full_disk_is_one_line_and_keeps_the_last_complete_backup(self):
        with scratch_files.small_tmpfs(1200) as disk:  # Room for one backup, not for more.
            model_dir = os.path.join(disk, "run")
            args = [arg for arg in self.args if not arg.startswith("--model_dir=")]
            result = run_tfdist("train", *args, f"--model_dir={model_dir}",
                                "--strategy=one_device")
            self.assertEqual(result.returncode, 2, result.stderr[-3000:])
            self.assertNotIn("Traceback", result.stderr)
            self.assertRegex(result.stderr.strip().splitlines()[-1],
                             r"^tfdist train: error: --model_dir='.*': saving into it failed "
                             r"\(No space left on device\); the last complete backup and "
                             "checkpoints are kept")
            left = [os.path.join(directory, name) for directory, names, files in os.walk(disk)
                    for name in names + files]
            self.assertFalse([path for path in left if "temp" in os.path.basename(path)], left)
            backup = tf.train.latest_checkpoint(os.path.join(model_dir, "backup", "chief"))
            self.assertIsNotNone(backup, left)
            self.assertGreaterEqual(tf.train.load_variable(
                backup, "ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE"), 0)


class NoiseScaleAdviceTest(unittest.TestCase):
    """The end-of-run advice applies `tfdist plan`'s rule: a doubling pays while it saves a
    quarter of the steps, up to the critical batch B_simple stands for."""

    def test_the_knee_is_where_plan_puts_it(self):
        self.assertIn("should still save about 38% of the steps", callbacks.advice(13, 4))
        self.assertIn("should still save about 25% of the steps", callbacks.advice(13, 13))
        self.assertIn("past it, doubling the batch saves only about 17%", callbacks.advice(13, 26))


class RefuseFinishedBackupTest(unittest.TestCase):
    """Both flavours' backups, as they lay them out, read without a model."""

    def _save(self, directory: str, **counters: int) -> None:
        checkpoint = tf.train.Checkpoint(**{name: tf.Variable(value, dtype=tf.int64)
                                            for name, value in counters.items()})
        tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1).save()

    def test_a_backup_with_every_epoch_done_is_refused_and_a_shorter_one_resumes(self):
        with tempfile.TemporaryDirectory() as model_dir:
            backup = os.path.join(model_dir, "backup")
            callbacks.refuse_finished_backup(backup, 3)  # None yet.
            self._save(backup, epochs_done=2)  # Keras 3's.
            callbacks.refuse_finished_backup(backup, 3)
            with self.assertRaisesRegex(ConfigError, r"^epochs=2: the backup in model_dir='.*' "
                                                     r"has 2 epoch\(s\) done"):
                callbacks.refuse_finished_backup(backup, 2)
            shutil.rmtree(backup)
            # tf-keras': in epoch 2 (from 0) at its end, so 3 done; mid-epoch, 2.
            self._save(os.path.join(backup, "chief"), ckpt_saved_epoch=2, ckpt_saved_batch=-1)
            with self.assertRaisesRegex(ConfigError, r"has 3 epoch\(s\) done"):
                callbacks.refuse_finished_backup(backup, 3)
            self._save(os.path.join(backup, "chief"), ckpt_saved_epoch=2, ckpt_saved_batch=7)
            callbacks.refuse_finished_backup(backup, 3)


if __name__ == "__main__":
    unittest.main()
