"""The process's preemption notice: SIGTERM (a pod's deletion, `scancel`, `tfdist launch`
stopping) or the signal `--preemption_signal` names, watched from the start of a run to the
process's exit, so that no notice is lost or ignored:

- while training (`training` to `finished`), the handler notes it and the step loop stops at a
  step every task agrees on and saves there (`tfdist.training.preemption`); after that save the
  signals are ignored until the exit (`leaving`);
- before training (set-up, the model's build, the input's checks) nothing is trained that a save
  would keep: the process ends at once with one line and exit 75;
- once the run is complete (`finished`), nothing is left: it ends at once with one line and
  exit 0.

`install` is called as a run starts (`tfdist.run`, `tfdist train`, `setup`). TF 2.21's
multi-worker runtime installs a SIGTERM handler of its own (in C++) when its strategy is built,
and holds SIGTERM while the workers join: `setup` takes the signals back after (`reclaim`), and a
SIGTERM TensorFlow caught meanwhile, which it tells every worker through its coordination
service, is the run's notice too (`_caught_by_tensorflow`). Pure Python, but for that question.
"""

import enum
import logging
import os
import signal
import sys
import threading
import time

from tfdist import errors
from tfdist.runtime.config import NoticeSignal


class Phase(enum.Enum):
    """Where the run is, which decides what a notice does."""

    SETTING_UP = "setting up"  # Nothing trained yet: end at once, 75.
    TRAINING = "training"  # Noted; the step loop saves at a step and ends, 75.
    LEAVING = "leaving"  # Saved and on the way out: ignored.
    FINISHED = "finished"  # Complete: end at once, 0.


class Notice:
    """The first preemption notice this process received (`signal_name`) and the run's phase."""

    def __init__(self, extra: NoticeSignal = NoticeSignal.SIGTERM):
        self._signums = sorted({signal.SIGTERM, signal.Signals[NoticeSignal(extra).value]})
        self.signal_name: str | None = None
        self.phase = Phase.SETTING_UP
        self._finished_at = ""
        self._installed = False
        self._tensorflow_held_since: float | None = None  # `reclaim`'s time, if it held SIGTERM.

    @property
    def received(self) -> bool:
        """Whether a notice has come."""
        return self.signal_name is not None

    def install(self) -> "Notice":
        """Handles the notice signals from now on; outside the main thread, where Python cannot
        take a signal, says so and handles nothing."""
        if threading.current_thread() is not threading.main_thread():
            print(
                "tfdist: preemption notices are not watched: training runs outside the main "
                "thread; a SIGTERM ends it as before (the last backup stays)",
                file=sys.stderr,
                flush=True,
            )
            return self
        for signum in self._signums:
            signal.signal(signum, self._on_signal)
        self._installed = True
        return self

    def reclaim(self) -> None:
        """Handles the notice signals again after a multi-worker strategy's build, where
        TensorFlow took SIGTERM (in C++, where Python does not see it); a SIGTERM it caught
        meanwhile ends the set-up as a notice would."""
        if self._installed and self.phase is not Phase.LEAVING:
            self.install()
            self._tensorflow_held_since = time.monotonic()
            self._ask_tensorflow(wait_s=0.0)

    def training(self) -> None:
        """The step loop watches from here: a notice is noted and acted on at a step (a loop
        that trains on after its run finished is training again)."""
        if self.phase is Phase.SETTING_UP and self._tensorflow_held_since is not None:
            held = time.monotonic() - self._tensorflow_held_since  # It tells within a second.
            self.phase = Phase.TRAINING
            self._ask_tensorflow(wait_s=max(0.0, _TENSORFLOW_TELLS_S - held))
        if self.phase in (Phase.SETTING_UP, Phase.FINISHED):
            self.phase = Phase.TRAINING

    def _ask_tensorflow(self, wait_s: float) -> None:
        if not self.received and _caught_by_tensorflow(wait_s):
            self._on_signal(signal.SIGTERM, None)

    def leaving(self) -> None:
        """The state is saved and the process on its way out: later signals must not end it in
        its exit (srun's --kill-on-bad-exit sends SIGTERM to the other tasks as soon as the
        first exits 75), so they are ignored (SIG_IGN: Python's finalization puts back the
        default action of a Python handler, and TensorFlow's shutdown comes after it)."""
        self.phase = Phase.LEAVING
        if self._installed and threading.current_thread() is threading.main_thread():
            for signum in self._signums:
                signal.signal(signum, signal.SIG_IGN)

    def finished(self, where: str) -> None:
        """The run is complete (`where`: "at epoch 3 of 3"): a notice noted before, or any
        later one, ends the process at once with exit 0."""
        self.phase, self._finished_at = Phase.FINISHED, where
        if self.received:
            self._leave()

    def _on_signal(self, signum, _frame) -> None:
        if self.signal_name is None:  # Later ones change nothing.
            self.signal_name = signal.Signals(signum).name
            if self.phase in (Phase.SETTING_UP, Phase.FINISHED):
                self._leave()

    def _leave(self) -> None:
        if self.phase is Phase.FINISHED:
            line = (
                f"a preemption notice ({self.signal_name}) came after the run finished "
                f"{self._finished_at}: nothing is left to save or train."
            )
            status = 0
        else:
            line = (
                f"preempted ({self.signal_name}) before training began: nothing new to save; "
                "start the same command again."
            )
            status = errors.EXIT_PREEMPTED
        self.phase = Phase.LEAVING
        line = errors.line(line, heading="")
        try:
            print(line, file=sys.stderr, flush=True)
        except RuntimeError:  # The handler interrupted a write to stderr: a reentrant call.
            os.write(2, (line + "\n").encode())
        leave_now(status)


_CURRENT = [Notice()]  # This process's run's notice (a new run, a new one).
# TF 2.21's SigtermNotifier (xla/tsl/distributed_runtime/preemption/preemption_notifier.cc) looks
# at its flag every second, then its PreemptionSyncManager sets this key in the coordination
# service, which TensorFlow's own PreemptionCheckpointHandler reads
# (tensorflow/python/distribute/failure_handling/failure_handling.py).
_TENSORFLOW_NOTICE_KEY = "TF_DEFAULT_PREEMPTION_NOTICE_KEY"
_TENSORFLOW_TELLS_S = 1.1
_TENSORFLOW_CHECKED = "2.21."


def _caught_by_tensorflow(wait_s: float) -> bool:
    """Whether TensorFlow's multi-worker runtime caught a SIGTERM on any worker (waiting up to
    `wait_s` for it to say so). A private TensorFlow API, asked only on the release where it was
    checked; elsewhere False (the notice then is lost during the workers' join, as before)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel

    if not tf.__version__.startswith(_TENSORFLOW_CHECKED):
        return False
    try:
        context.context().get_config_key_value(
            _TENSORFLOW_NOTICE_KEY, timeout_in_ms=max(1, int(wait_s * 1000))
        )
    except (
        tf.errors.DeadlineExceededError,
        tf.errors.UnavailableError,
        tf.errors.FailedPreconditionError,
    ):
        return False
    return True


def install(extra: NoticeSignal = NoticeSignal.SIGTERM) -> Notice:
    """A new notice for the run this process starts, its signals handled from now on (see the
    module's docstring); returns it."""
    _CURRENT[0] = Notice(extra).install()
    return _CURRENT[0]


def current() -> Notice:
    """The notice of the run this process runs (the last `install`ed)."""
    return _CURRENT[0]


def leave_now(status: int) -> None:
    """Ends the process at once with `status`, its state saved and its line printed: with
    TF 2.21 the teardown after a run stopped mid-epoch can outlast the grace (a parameter-server
    chief waited for good in `Context.remove_function` in 3 of 16 runs; multi_worker_mirrored
    tasks reading tfdist's file pipeline on real Slurm were still tearing down when `scancel`'s
    KillWait of 5 s ran out, and were killed, not 75). stdout and Python's log handlers are
    flushed; atexit hooks do not run."""
    try:
        sys.stdout.flush()
    except (OSError, RuntimeError, ValueError):  # A reentrant call, a closed pipe.
        pass
    logging.shutdown()
    os._exit(status)  # pylint: disable=protected-access
