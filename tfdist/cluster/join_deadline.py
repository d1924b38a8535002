"""A deadline for a wait that no Python code can interrupt.

TF 2.21's MultiWorkerMirroredStrategy waits for every peer inside `Context.ensure_initialized`,
in native code that holds the GIL and with a SIGTERM handler installed: measured, neither a
Python timer thread nor a plain `kill` ends that wait, and `--collective_timeout_s` does not reach
it. So the deadline lives in a child process. It waits on a pipe from the parent: the parent
closing the pipe (the wait is over, or the parent died) ends the watch; the deadline passing
prints the message, naming the peers whose ports do not answer, and SIGKILLs the parent.

Run as `python -m tfdist.cluster.join_deadline PARENT_PID TIMEOUT_S MESSAGE [PEER_ADDRESS ...]`.
"""

import contextlib
import os
import select
import signal
import subprocess
import sys
from typing import Iterator, Sequence

from tfdist import errors
from tfdist.cluster import PYTHON

_CHILD_EXIT_WAIT_S = 5.0


@contextlib.contextmanager
def deadline(timeout_s: float, message: str, peers: Sequence[str] = ()) -> Iterator[None]:
    """Kills this process with `message` on stderr unless the block ends within `timeout_s`.

    `peers` ("host:port") that do not answer at the deadline are listed after the message.
    """
    child = subprocess.Popen(  # pylint: disable=consider-using-with
        [
            *PYTHON,
            "-m",
            "tfdist.cluster.join_deadline",
            str(os.getpid()),
            str(timeout_s),
            message,
            *peers,
        ],
        stdin=subprocess.PIPE,
    )
    try:
        yield
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=_CHILD_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()


def joining(cluster, task: str, timeout_s: float) -> contextlib.AbstractContextManager:
    """The deadline for `task` (e.g. "worker:0") of `cluster` (a `ClusterConfig`) to join its
    multi-worker peers, named in its message if their ports do not answer."""
    peers = [
        address
        for job in ("chief", "worker")
        for address in cluster.jobs.get(job, ())
        if address != cluster.task_address
    ]
    message = errors.line(
        f"{task} waited {timeout_s:g} s (--collective_timeout_s) for the "
        f"other {cluster.num_workers - 1} worker(s) to join; start every task (a JobSet "
        "or a Slurm job starts them all: if one did not start, submit the job again), check "
        "them with `tfdist doctor --probe`, or raise --collective_timeout_s."
    )
    return deadline(timeout_s, message, peers)


def _silent_peers(peers: Sequence[str]) -> list[str]:
    from tfdist.cluster.probe import answers  # pylint: disable=import-outside-toplevel

    return [peer for peer in peers if not answers(peer, timeout_s=1.0)]


def _watch(parent_pid: int, timeout_s: float, message: str, peers: Sequence[str]) -> int:
    ready, _, _ = select.select([sys.stdin], [], [], timeout_s)
    if ready:  # EOF: the parent is past the wait, or gone.
        return 0
    silent = _silent_peers(peers)
    if silent:
        message += f" Not answering: {', '.join(silent)}."
    print(message, file=sys.stderr, flush=True)
    with contextlib.suppress(ProcessLookupError):
        os.kill(parent_pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(_watch(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4:]))
