"""The backups of `tfdist.training.callbacks`, through `tfdist train --model_dir` as a user runs
it: killed in epoch 2 and started again, it resumes from its backup (on 2 CPU replicas, a
preempted run resuming at its step: test_preemption.py); started with another model, it says so
in one line; a run holds its model dir's lock, and a second run on a dir in use is refused; a full
disk is one line and keeps the last complete backup.

The scenario starts one run, kills it in epoch 2 and runs what follows (the runs that cannot go
on, then the resumed run) as cases of one child: TensorFlow is imported once for them.
"""

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import shutil
import tempfile
import time
import unittest
from unittest import mock

import pytest
import tensorflow as tf

from tests import scratch_files
from tests.tfdist.cli_runner import DEFAULT_TIMEOUT_S
from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist_cases
from tfdist.runtime import model_dir
from tfdist.runtime.config import ConfigError
from tfdist.training import callbacks
from tfdist.training import resume

_EPOCHS = 3


def _start(*args: str) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    return subprocess.Popen(
        [sys.executable, "-m", "tfdist", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


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
class ResumeTest(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _dirs(self, small_shapes_data_dir, tmp_path):
        self.tmp = tmp_path
        self.model_dir = str(tmp_path / "model")
        self.metrics = str(tmp_path / "metrics.json")
        self.args = [
            f"--data_dir={small_shapes_data_dir}",
            f"--model_dir={self.model_dir}",
            f"--metrics_json={self.metrics}",
            f"--epochs={_EPOCHS}",
            "--steps_per_epoch=20",
            "--global_batch_size=32",
        ]

    def _kill_in_epoch_2(self, strategy_args: list[str], while_stopped=lambda pid: None) -> None:
        """Starts a run and SIGKILLs it once it prints "Epoch 2/" (Keras prints it once every
        callback has ended epoch 1: the backup is written); `while_stopped(pid)` runs between,
        the run stopped (SIGSTOP) in that state, its lock still held."""
        run = _start(*self.args, *strategy_args)
        try:
            output = _read_until(run, "Epoch 2/")
            run.send_signal(signal.SIGSTOP)
            self.assertIn("Epoch 2/", output, "the first run reaches epoch 2")
            while_stopped(run.pid)
        finally:
            run.kill()
            run.wait(timeout=60)
            run.stdout.close()
        self.assertFalse(os.path.exists(self.metrics), "the killed run wrote no metrics")

    def _assert_resumed_in_epoch_2(self, result: subprocess.CompletedProcess) -> None:
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertNotIn("Epoch 1/", result.stdout, "the resumed run skips epoch 1")
        self.assertIn("Epoch 2/", result.stdout, "the resumed run trains epoch 2")
        self.assertIn(
            "(resumed at epoch 2)",
            result.stdout,
            "the summary says it resumed from the backup (kept by any refused run)",
        )
        self.assertIn(
            "tfdist: resuming at epoch 2 from the backup an earlier run left in this --model_dir",
            result.stderr,
            "the resumed run says where it resumes",
        )
        with open(self.metrics, encoding="utf-8") as metrics_file:
            metrics = json.load(metrics_file)
        self.assertEqual(metrics["resumed_from_epoch"], 1, "metrics: resumed_from_epoch")
        for name, values in metrics["history"].items():
            self.assertEqual(len(values), _EPOCHS, f"metrics: {name} has every epoch")
            self.assertNotIn(None, values, f"metrics: {name} has every epoch")
        self.assertEqual(
            sorted(os.listdir(os.path.join(self.model_dir, "checkpoints")))[-1:],
            ["epoch-003.index"],
            "the last epoch's checkpoint",
        )
        self.assertTrue(os.listdir(os.path.join(self.model_dir, "logs", "train")), "the train logs")

    def test_killed_in_epoch_2_resumes_there_one_device(self):
        """With, on the way, the runs that cannot go on: a second run on a model dir in use,
        one with another model, one whose disk fills up."""
        strategy_args = ["--strategy=one_device"]

        def holds_its_lock(pid: int) -> None:
            refusal = rf"^model_dir={re.escape(repr(self.model_dir))} is in use by another run "
            with self.assertRaisesRegex(
                ConfigError,
                refusal + rf"\(pid {pid} on ",
                msg="a training run holds its model dir's lock",
            ):
                model_dir.ModelDir(self.model_dir).hold().release()

        self._kill_in_epoch_2(strategy_args, while_stopped=holds_its_lock)
        in_use = str(self.tmp / "in_use")
        with scratch_files.small_tmpfs(1200) as disk, model_dir.ModelDir(in_use).owned():
            full_disk_dir = os.path.join(disk, "run")  # Room for one backup, not for more.
            other_args = [
                arg for arg in self.args if not arg.startswith(("--model_dir=", "--metrics_json="))
            ]
            second, fewer, another_model, resumed, full_disk = run_tfdist_cases(
                [
                    ["train", *other_args, f"--model_dir={in_use}", *strategy_args],
                    ["train", *self.args, *strategy_args, "--epochs=1"],
                    ["train", *self.args, *strategy_args, "--model=resnet20"],
                    ["train", *self.args, *strategy_args],
                    [
                        "train",
                        *other_args,
                        f"--model_dir={full_disk_dir}",
                        f"--metrics_json={self.tmp / 'full_disk.json'}",
                        *strategy_args,
                    ],
                ]
            )
            with self.subTest("a second run on a model dir in use is refused"):
                assert_one_line_error(
                    self,
                    second,
                    f"model_dir={in_use!r} is in use by another run (pid {os.getpid()} on ",
                )
            with self.subTest("a run of fewer epochs than the backup has done is refused"):
                assert_one_line_error(
                    self,
                    fewer,
                    "epochs=1: the backup in --model_dir=",
                    "has 1 epoch(s) done, so nothing is left to train",
                    "(the backup is kept)",
                )
            with self.subTest("the backup of another model is one line"):
                self._assert_another_model_refused(another_model)
            # The refused runs keep the backup: the run after them resumes from it.
            self._assert_resumed_in_epoch_2(resumed)
            with self.subTest("a full disk is one line and keeps the last complete backup"):
                self._assert_full_disk_kept_a_backup(full_disk, disk, full_disk_dir)

    def _assert_another_model_refused(self, result: subprocess.CompletedProcess) -> None:
        # Found when the backup is restored into the built model, after the input notices.
        self.assertEqual(result.returncode, 2, result.stderr[-3000:])
        self.assertNotIn("Traceback", result.stderr)
        last = result.stderr.strip().splitlines()[-1]
        self.assertTrue(
            last.startswith(
                f"tfdist train: error: --model_dir={self.model_dir!r}: the backup an interrupted "
                "run left there cannot be restored into this one (Received incompatible tensor "
                "with shape"
            ),
            last,
        )
        self.assertIn(
            "resume it with that run's --model=MODEL and options, or pass another --model_dir=DIR",
            last,
        )

    def _assert_full_disk_kept_a_backup(
        self, result: subprocess.CompletedProcess, disk: str, model_dir: str
    ) -> None:
        self.assertEqual(result.returncode, 1, result.stderr[-3000:])  # A failed run (DiskFull).
        self.assertNotIn("Traceback", result.stderr)
        self.assertRegex(
            result.stderr.strip().splitlines()[-1],
            r"^tfdist train: error: --model_dir='.*': saving into it failed "
            r"\(No space left on device\); the last complete backup and "
            "checkpoints are kept",
        )
        left = [
            os.path.join(directory, name)
            for directory, names, files in os.walk(disk)
            for name in names + files
        ]
        self.assertFalse([path for path in left if "temp" in os.path.basename(path)], left)
        backup = tf.train.latest_checkpoint(os.path.join(model_dir, "backup", "chief"))
        self.assertIsNotNone(backup, left)
        self.assertGreaterEqual(
            tf.train.load_variable(backup, "ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE"), 0
        )


class ProgressTest(unittest.TestCase):
    """A line during a long epoch, every minute in a log (not a terminal), on a fake clock."""

    def _lines(self, calls, *, tty: bool) -> list[str]:
        """stderr's lines after `calls`: (seconds, hook, argument) in turn."""
        stderr = io.StringIO()
        stderr.isatty = lambda: tty
        now = [0.0]
        with (
            mock.patch.object(callbacks.time, "monotonic", lambda: now[0]),
            contextlib.redirect_stderr(stderr),
        ):
            progress = callbacks.Progress(steps_per_epoch=1000)
            for now[0], hook, argument in calls:
                getattr(progress, hook)(argument)
        return stderr.getvalue().splitlines()

    def test_a_long_epoch_says_its_step_rate_and_time_left_every_minute_in_a_log(self):
        calls = [
            (0.0, "on_epoch_begin", 1),
            (5.0, "on_train_batch_end", 0),  # The first step (tracing) starts the count.
            (59.0, "on_train_batch_end", 99),
            (65.0, "on_train_batch_end", 120),  # 120 steps in 60 s.
            (100.0, "on_train_batch_end", 199),
            (125.0, "on_train_batch_end", 239),
        ]
        self.assertEqual(
            self._lines(calls, tty=False),
            [
                "tfdist: epoch 2: step 121 of 1000 (2.0 steps/s, about 7 min left in the epoch)",
                "tfdist: epoch 2: step 240 of 1000 (2.0 steps/s, about 6 min left in the epoch)",
            ],
        )
        self.assertEqual(len(self._lines(calls, tty=True)), 3, "every 10 s on a terminal")

    def test_a_resumed_epoch_counts_from_its_first_step_and_a_short_one_says_nothing(self):
        resumed = [(0.0, "on_epoch_begin", 0), (1.0, "on_train_batch_end", 899)]
        resumed.append((61.0, "on_train_batch_end", 959))
        self.assertEqual(
            self._lines(resumed, tty=False),
            ["tfdist: epoch 1: step 960 of 1000 (1.0 steps/s, about 40 s left in the epoch)"],
        )
        short = [
            (0.0, "on_epoch_begin", 0),
            *((step, "on_train_batch_end", step) for step in range(59)),
        ]
        self.assertEqual(self._lines(short, tty=False), [])


class NoiseScaleAdviceTest(unittest.TestCase):
    """The end-of-run advice applies `tfdist plan`'s rule: a doubling pays while it saves a
    quarter of the steps, up to the critical batch B_simple stands for."""

    def test_the_knee_is_where_plan_puts_it(self):
        self.assertIn("should still save about 38% of the steps", callbacks.advice(13, 4))
        self.assertIn("should still save about 25% of the steps", callbacks.advice(13, 13))
        self.assertIn("past it, doubling the batch saves only about 17%", callbacks.advice(13, 26))


class FinishedTest(unittest.TestCase):
    """Both flavours' backups, as they lay them out, read without a model, against the history's
    record of a finished run."""

    def _save(self, directory: str, **counters: int) -> None:
        checkpoint = tf.train.Checkpoint(
            **{name: tf.Variable(value, dtype=tf.int64) for name, value in counters.items()}
        )
        tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1).save()

    def test_a_run_is_finished_when_its_history_says_so_and_its_backup_is_that_state(self):
        with tempfile.TemporaryDirectory() as model_dir:
            backup = os.path.join(model_dir, "backup")

            def finished(epochs: int, finish=(3, 3)) -> bool:
                return resume.is_finished(resume.backup_position(backup, 10), epochs, finish, "md")

            self.assertFalse(finished(3), "no backup yet")
            self._save(backup, epochs_done=3)  # Keras 3's, at its end.
            self.assertTrue(finished(3))
            self.assertTrue(finished(2), "done as asked, and more")
            self.assertFalse(finished(5), "a longer schedule goes on from the final state")
            self.assertTrue(finished(5, finish=(3, 5)), "stopped early by a callback of its own")
            shutil.rmtree(backup)
            # tf-keras': in epoch 2 (from 0) at its end or after its last step, so 3 done.
            for batch in (-1, 9):
                self._save(
                    os.path.join(backup, "chief"), ckpt_saved_epoch=2, ckpt_saved_batch=batch
                )
                self.assertTrue(finished(3))
            self._save(os.path.join(backup, "chief"), ckpt_saved_epoch=2, ckpt_saved_batch=7)
            self.assertEqual(resume.backup_position(backup, 10), (2, 8))
            self.assertFalse(finished(3), "a backup mid-epoch (a preemption's) is no final state")

    def test_a_backup_with_as_many_epochs_done_that_did_not_finish_is_refused(self):
        """A longer run's, stopped at an epoch's end: resuming it with fewer epochs would train
        nothing, and it is not finished."""
        with tempfile.TemporaryDirectory() as model_dir:
            backup = os.path.join(model_dir, "backup")
            self._save(backup, epochs_done=2)
            self.assertFalse(resume.is_finished(resume.backup_position(backup, 10), 3, None, "md"))
            for epochs, finish in ((2, None), (1, None), (1, (3, 3))):
                with self.assertRaisesRegex(
                    ConfigError,
                    rf"^epochs={epochs}: the backup in model_dir='md' has 2 epoch\(s\) done, so "
                    rf"nothing is left to train; pass epochs=3 or more to train on from it, or "
                    r"another model_dir=DIR to start afresh \(the backup is kept\)\.$",
                ):
                    resume.is_finished(resume.backup_position(backup, 10), epochs, finish, "md")


if __name__ == "__main__":
    unittest.main()
