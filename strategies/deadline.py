"""A bound on how long a multi-worker step may wait for its peers, kept by one thread.

TensorFlow's own bound, `CommunicationOptions(timeout_seconds=T)`, starts a thread per
collective that sleeps for T whether or not the collective ends (TF 2.21, `Env::
SchedClosureAfter`): measured with T = 600 s, a 2-worker job of a small model held 3,730
threads a task after 10 epochs of 40 steps and 7,010 after 20, and on Slurm aborted near epoch
50 with `std::system_error: Resource temporarily unavailable`. So tfdist never passes it.
Instead the step loop brackets each call of its step function with `step()`, and one daemon
thread per process aborts the process's collectives when a call outlives the timeout: the
collective waiting on a lost or hung peer then raises, as TensorFlow's timeout would, and the
task must start again (a group restart), as after TensorFlow's.

The abort is TensorFlow's `Context.abort_collective_ops`, a private API that
`MultiWorkerMirroredStrategy`'s own peer health check uses (TF 2.21,
tensorflow/python/distribute/collective_all_reduce_strategy.py); it is reached here only.
"""

import contextlib
import threading
import time
from typing import Callable, Hashable, Iterator

# Words a step's error carries once the deadline aborted it; `tfdist.cluster.liveness` reads
# them ("Collective has timed out" is TensorFlow's own words for its timeout).
TIMED_OUT = "Collective has timed out"

Abort = Callable[[str], None]

# The least a function's first call, which traces it (minutes for a large model, and slower on a
# busy machine), is given: TensorFlow's own timeout never counted tracing.
FIRST_CALL_S = 600.0


def _abort_collectives(message: str) -> None:
    """Fails every collective of this process, pending or to come, with `message`."""
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    from tensorflow.python.framework import errors  # pylint: disable=import-outside-toplevel

    context.context().abort_collective_ops(errors.DEADLINE_EXCEEDED, message)


class CollectiveDeadline:
    """Aborts this process's collectives when one call of a step function takes longer than
    `timeout_s`; a call is what `step()` brackets (under `steps_per_execution`, that many
    steps). A function's first call traces it, so it is given at least FIRST_CALL_S.

    Runs on every multi-worker task, around each training or validation call.
    """

    def __init__(
        self,
        timeout_s: float,
        *,
        abort: Abort = _abort_collectives,
    ):
        """`abort`: what fails the collectives, given the message (tests pass their own)."""
        self.timeout_s = timeout_s
        self._abort = abort
        self._changed = threading.Condition()
        self._ends_at: float | None = None
        self._thread: threading.Thread | None = None
        self._called: set[Hashable] = set()

    @contextlib.contextmanager
    def step(self, function: Hashable) -> Iterator[None]:
        """Bounds the block: one call of `function` (the step function, or a name for it)."""
        self.started(function)
        try:
            yield
        finally:
            self.ended()

    def started(self, function: Hashable) -> None:
        """A call of `function` begins: the deadline counts from now."""
        with self._changed:
            bound = self.timeout_s
            if function not in self._called:
                self._called.add(function)
                bound = max(bound, FIRST_CALL_S)
            self._ends_at = time.monotonic() + bound
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="tfdist-collective-deadline", daemon=True
                )
                self._thread.start()
            self._changed.notify()

    def ended(self) -> None:
        """The call ended: nothing is bounded until the next `started()`."""
        with self._changed:
            self._ends_at = None

    def _watch(self) -> None:
        with self._changed:
            while True:
                if self._ends_at is None:
                    self._changed.wait()
                    continue
                left = self._ends_at - time.monotonic()
                if left > 0:
                    self._changed.wait(left)
                    continue
                self._abort(
                    f"{TIMED_OUT}: a call of the step function ran longer than "
                    f"collective_timeout_s={self.timeout_s:g} s"
                )
                return
