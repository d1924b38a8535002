"""Where a run resumes (`tfdist.training.resume`), read from a backup's counters without a model:
tf-keras' (the epoch and batch it saved in) and Keras 3's and `CustomLoop`'s (epochs done, steps
into the next). Finished runs: tests/tfdist/training/test_callbacks.py."""

import contextlib
import io
import os
import shutil
import tempfile

import tensorflow as tf
from absl.testing import parameterized

from tfdist.training import resume


class ResumePointTest(parameterized.TestCase):
    """tf-keras' backup, saved in `epoch` after `batch` (both from 0; batch -1: at the epoch's
    end), of 4 steps an epoch."""

    @parameterized.named_parameters(
        ("nothing_saved", -1, -1, (0, 0)),
        ("first_epochs_end", 0, -1, (1, 0)),
        ("in_the_first_epoch", 0, 1, (0, 2)),
        ("after_the_first_step", 0, 0, (0, 1)),
        ("after_an_epochs_last_step", 2, 3, (3, 0)),
        ("after_the_step_before_the_last", 2, 2, (2, 3)),
        ("a_later_epochs_end", 2, -1, (3, 0)),
    )
    def test_the_next_step(self, epoch, batch, expected):
        self.assertEqual(resume.resume_point(epoch, batch, 4), expected)

    def test_one_step_an_epoch(self):
        self.assertEqual(resume.resume_point(0, 0, 1), (1, 0))


class CountersPositionTest(parameterized.TestCase):
    """Keras 3's and `CustomLoop`'s counters, as their checkpoints hold them."""

    def _position(self, **counters: int) -> tuple[int, int]:
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = tf.train.Checkpoint(
                **{name: tf.Variable(value, dtype=tf.int64) for name, value in counters.items()}
            )
            path = checkpoint.write(os.path.join(directory, "ckpt"))
            saved = dict(tf.train.list_variables(path))
            return resume.counters_position(path, saved, "epochs_done/.ATTRIBUTES/VARIABLE_VALUE")

    def test_epochs_done_and_steps_into_the_next(self):
        self.assertEqual(self._position(epochs_done=2, step_in_epoch=3), (2, 3))

    def test_without_a_step_counter_the_next_epoch_from_its_start(self):
        self.assertEqual(self._position(epochs_done=2), (2, 0))


class SayResumingTest(parameterized.TestCase):
    @parameterized.parameters((2, 1, "epoch 2"), (2, 2, "epoch 2 step 2"), (1, 5, "epoch 1 step 5"))
    def test_the_line_names_a_step_after_the_first(self, epoch, step, where):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            resume.say_resuming(epoch, "the backup an interrupted run", step)
        self.assertEqual(
            stderr.getvalue(),
            f"tfdist: resuming at {where} from the backup an interrupted run left in this "
            "--model_dir; pass another --model_dir to start afresh\n",
        )


class RecordedHistoryTest(parameterized.TestCase):
    """A run's `history.json` is read only when it has the shape tfdist writes; anything else
    is no history, said in one line, never a traceback or an allocation it sizes."""

    def setUp(self):
        super().setUp()
        self.path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "h.json")

    def _read(self, text: str):
        with open(self.path, "w", encoding="utf-8") as file:
            file.write(text)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            finish = resume.recorded_finish(self.path)
        return resume.recorded_epochs(self.path), finish, stderr.getvalue()

    def test_the_shape_tfdist_writes(self):
        epochs, finish, said = self._read(
            '{"epochs": {"0": {"loss": 1.5}, "1": {"loss": 1}}, '
            '"finished": {"epochs_done": 2, "epochs": 3}}'
        )
        self.assertEqual(epochs, {0: {"loss": 1.5}, 1: {"loss": 1.0}})
        self.assertEqual((finish, said), ((2, 3), ""))

    @parameterized.named_parameters(
        ("empty", ""),
        ("not_json", "{garbage"),
        ("a_list", "[1, 2]"),
        ("no_epochs", '{"finished": {"epochs_done": 2, "epochs": 3}}'),
        ("epochs_a_list", '{"epochs": [1, 2]}'),
        ("an_index_not_a_number", '{"epochs": {"x": {"loss": 1}}}'),
        ("a_negative_index", '{"epochs": {"-1": {"loss": 1}}}'),
        ("an_index_past_any_run", '{"epochs": {"1000000000": {"loss": 1}}}'),
        ("a_non_ascii_digit", '{"epochs": {"\u0663": {"loss": 1}}}'),
        ("logs_not_an_object", '{"epochs": {"0": 3}}'),
        ("a_metric_not_a_number", '{"epochs": {"0": {"loss": "low"}}}'),
        ("a_metric_true", '{"epochs": {"0": {"loss": true}}}'),
        ("a_metric_named_with_escapes", '{"epochs": {"0": {"\\u001b]0;pwned\\u0007": 1}}}'),
        ("finished_a_number", '{"epochs": {}, "finished": 3}'),
        ("finished_without_epochs", '{"epochs": {}, "finished": {"epochs_done": 3}}'),
        ("finished_a_float", '{"epochs": {}, "finished": {"epochs_done": 2.5, "epochs": 3}}'),
    )
    def test_any_other_shape_is_no_history_in_one_line(self, text):
        epochs, finish, said = self._read(text)
        self.assertEqual((epochs, finish), ({}, None))
        self.assertEqual(
            said,
            f"tfdist: {self.path} is not a history tfdist wrote (damaged, or another "
            "program's); this run's epochs replace it, and the metrics of earlier attempts "
            "are not in its summary\n",
        )

    def test_no_file_is_no_history_without_a_line(self):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            self.assertIsNone(resume.recorded_finish(self.path))
        self.assertEqual((resume.recorded_epochs(self.path), stderr.getvalue()), ({}, ""))


class DamagedBackupTest(parameterized.TestCase):
    """A backup's files are checked before TensorFlow reads them: each damage is one line that
    names the file and the fix, never a traceback, a hang on a FIFO or a silent start-over."""

    def setUp(self):
        super().setUp()
        self.model_dir = self.enterContext(tempfile.TemporaryDirectory())
        self.backup = os.path.join(self.model_dir, "backup")
        checkpoint = tf.train.Checkpoint(
            epochs_done=tf.Variable(2, dtype=tf.int64), step_in_epoch=tf.Variable(5, tf.int64)
        )
        self.saved = tf.train.CheckpointManager(checkpoint, self.backup, max_to_keep=1).save(7)
        self.pointer = os.path.join(self.backup, "checkpoint")

    def _assert_damaged(self, path: str, why: str) -> None:
        with self.assertRaisesRegex(
            resume.DamagedBackup,
            rf"^model_dir='{self.model_dir}': its backup is damaged \({path}: {why}\); delete "
            rf"{self.backup} to start afresh \(the checkpoints/ of each epoch stay\), or put back "
            r"a copy of it\.$",
        ):
            resume.backup_position(self.backup, steps_per_epoch=10)

    def _replace(self, path: str, data: bytes) -> None:
        with open(path, "wb") as file:
            file.write(data)

    def test_a_sound_backup_gives_its_position(self):
        self.assertEqual(resume.backup_position(self.backup, steps_per_epoch=10), (2, 5))

    def test_a_pointer_that_is_a_link_or_a_fifo_is_never_read(self):
        os.rename(self.pointer, self.pointer + ".real")
        os.symlink(self.pointer + ".real", self.pointer)
        self._assert_damaged(self.pointer, "a symbolic link")
        os.unlink(self.pointer)
        os.mkfifo(self.pointer)  # Opening it would wait for a writer.
        self._assert_damaged(self.pointer, "not a regular file")

    def test_a_pointer_that_is_huge_garbage_empty_or_names_elsewhere(self):
        elsewhere = os.path.join(self.model_dir, "elsewhere", "ckpt-7")  # A checkpoint there.
        shutil.copytree(self.backup, os.path.dirname(elsewhere))
        missing = os.path.join(self.backup, "ckpt-8")
        for data, why in (
            (b"x" * (1 << 17), f"{1 << 17} bytes"),
            (b"\x00\xff garbage", ".+"),
            (b"", "Invalid checkpoint state loaded from .+"),
            (f'model_checkpoint_path: "{missing}"\n'.encode(), "names no checkpoint"),
            (f'model_checkpoint_path: "{elsewhere}"\n'.encode(), f"it names {elsewhere}"),
        ):
            with self.subTest(why=why[:12]):
                self._replace(self.pointer, data)
                self._assert_damaged(self.pointer, why)

    def test_an_index_or_data_that_is_truncated_zeroed_or_a_link(self):
        index, data = self.saved + ".index", self.saved + ".data-00000-of-00001"
        with open(index, "rb") as file:
            sound = file.read()
        for damage, path, why in (
            (lambda: self._replace(index, sound[: len(sound) // 2]), self.saved, ".+"),
            (lambda: self._replace(index, bytes(len(sound))), self.saved, ".+"),
            (lambda: (os.unlink(data), os.symlink(index, data)), data, "a symbolic link"),
        ):
            with self.subTest(path=path, why=why):
                damage()
                self._assert_damaged(path, why)
