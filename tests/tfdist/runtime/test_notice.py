"""The process's preemption notice (`tfdist.runtime.notice`) in each phase of a run: before
training it ends the process at once (75), while training it is noted for the step loop, after
the save that acts on it the signals are ignored, and once the run is complete it ends the
process at once (0). Real signals to this process; `tests.leaving.Left` stands for the exit."""

import contextlib
import io
import os
import signal
import threading
import unittest

from tests.leaving import Left
from tfdist.errors import EXIT_PREEMPTED
from tfdist.runtime import notice
from tfdist.runtime.config import NoticeSignal


def _left(test: unittest.TestCase, signum: int) -> tuple[int, str]:
    """(status, stderr's line) of the exit that `signum` to this process causes."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), test.assertRaises(Left) as left:
        os.kill(os.getpid(), signum)
    return left.exception.status, stderr.getvalue()


class NoticeTest(unittest.TestCase):
    def test_before_training_a_notice_ends_the_process_at_once_with_75_and_one_line(self):
        for signum, extra in ((signal.SIGTERM, "SIGTERM"), (signal.SIGUSR1, "SIGUSR1")):
            with self.subTest(signal=signum.name):
                notice.install(NoticeSignal(extra))
                status, line = _left(self, signum)
                self.assertEqual(status, EXIT_PREEMPTED)
                self.assertRegex(
                    line,
                    rf"^[^:]+: preempted \({signum.name}\) before training began: nothing new "
                    r"to save; start the same command again\.\n$",
                )

    def test_in_training_the_first_signal_is_noted_and_after_the_save_signals_are_ignored(self):
        run = notice.install(NoticeSignal.SIGUSR1)
        run.training()
        self.assertFalse(run.received)
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGTERM)  # Later ones change nothing.
        self.assertEqual(run.signal_name, "SIGUSR1")
        run.leaving()  # Saved: on its way out.
        for signum in (signal.SIGUSR1, signal.SIGTERM):
            self.assertIs(signal.getsignal(signum), signal.SIG_IGN)
        self.assertIs(signal.getsignal(signal.SIGUSR2), signal.SIG_DFL, "not a notice signal")

    def test_a_run_on_its_way_out_does_not_go_back_to_training(self):
        # Saved and on its way out: a step loop calling `training` again changes nothing.
        run = notice.install()
        run.training()
        run.leaving()
        run.training()
        run.reclaim()  # Nothing to take back on its way out: the signals stay ignored.
        self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_IGN)

    def test_once_the_run_is_complete_a_notice_ends_the_process_at_once_with_0(self):
        run = notice.install()
        run.training()
        run.finished("at epoch 3")
        status, line = _left(self, signal.SIGTERM)
        self.assertEqual(status, 0)
        self.assertRegex(
            line,
            r"^[^:]+: a preemption notice \(SIGTERM\) came after the run finished at epoch 3: "
            r"nothing is left to save or train\.\n$",
        )

    def test_a_loop_that_trains_on_after_its_run_finished_is_training_again(self):
        """A `CustomLoop` of yours that goes on past `--epochs`: a notice then is noted for its
        step loop, not an exit with 0 that would lose its steps."""
        run = notice.install()
        run.finished("at epoch 3")
        run.training()
        os.kill(os.getpid(), signal.SIGTERM)
        self.assertEqual((run.signal_name, run.phase), ("SIGTERM", notice.Phase.TRAINING))

    def test_a_notice_noted_in_the_last_steps_ends_the_process_when_the_run_is_complete(self):
        run = notice.install()
        run.training()
        os.kill(os.getpid(), signal.SIGTERM)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), self.assertRaises(Left) as left:
            run.finished("at epoch 3")
        self.assertEqual(left.exception.status, 0)
        self.assertIn("came after the run finished at epoch 3", stderr.getvalue())

    def test_the_signals_are_taken_back_from_a_handler_set_beside_python(self):
        """As TensorFlow's multi-worker runtime sets its SIGTERM handler in C++ (python's
        `getsignal` still names the old one): `reclaim` sets them again."""
        run = notice.install()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Stands for TensorFlow's.
        run.reclaim()
        self.assertEqual(_left(self, signal.SIGTERM)[0], EXIT_PREEMPTED)
        run.leaving()
        run.reclaim()  # Nothing to take back on its way out.
        self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_IGN)

    def test_a_new_run_gets_a_new_notice_and_outside_the_main_thread_none_is_handled(self):
        first = notice.install()
        first.training()
        self.assertIsNot(notice.install(), first)
        self.assertIsNot(notice.current(), first)
        before = signal.getsignal(signal.SIGTERM)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            elsewhere = threading.Thread(target=notice.install)
            elsewhere.start()
            elsewhere.join(timeout=30)
        self.assertIn("preemption notices are not watched", stderr.getvalue())
        self.assertIs(signal.getsignal(signal.SIGTERM), before)


if __name__ == "__main__":
    unittest.main()
