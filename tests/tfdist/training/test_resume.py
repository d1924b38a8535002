"""Where a run resumes (`tfdist.training.resume`), read from a backup's counters without a model:
tf-keras' (the epoch and batch it saved in) and Keras 3's and `CustomLoop`'s (epochs done, steps
into the next). Finished runs: tests/tfdist/training/test_callbacks.py."""

import contextlib
import io
import os
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
