"""What a launched program did with its cluster, seen from outside it. Pure Python, Linux.

Joining: a program that builds its strategy from TF_CONFIG listens on its task's port
(TensorFlow's gRPC server) for as long as it runs; one that ignores TF_CONFIG (a MirroredStrategy
script, a plain Keras script) never does, and N such tasks train N independent copies. A task's
listening sockets are read from /proc/PID/net/tcp and tcp6, which show the task's own network
namespace. The evaluator serves no port, so it is not watched.

Keras 3's own `fit` joins, then crashes under MultiWorkerMirroredStrategy (keras-team/keras#20585):
its traceback in a task's output is recognised, and `tfdist.fit` named as the way to train.
"""

import contextlib
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence

from tfdist.cluster import processes
from tfdist.strategies import ClusterConfig

# A task's TensorFlow server listened 4-5 s after its start with 2 tasks on an idle 2-core machine,
# 9-13 s with 3 tasks at a load of 5; a program may also read or make its data before it builds
# its strategy. Ten times that, so a slow start is not named.
JOIN_CHECK_S = 120.0
_LISTEN = "0A"  # The TCP state LISTEN in /proc/net/tcp.
_FIX = (
    "build the strategy from TF_CONFIG (tfdist.setup, or "
    "tf.distribute.MultiWorkerMirroredStrategy), or run the program without tfdist launch"
)


def listening_ports(pid: int) -> set[int]:
    """The TCP ports that sockets in process `pid`'s network namespace listen on (empty when it
    is gone or this is not Linux)."""
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}", encoding="ascii") as sockets:
                rows = sockets.readlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == _LISTEN:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def serving_ports(cluster: ClusterConfig) -> dict[str, int]:
    """The TF_CONFIG port of each task that serves one, by task name ("worker:1"): every task
    but the evaluator."""
    return {
        f"{job}:{index}": int(address.rsplit(":", 1)[1])
        for job, addresses in cluster.jobs.items()
        if job != "evaluator"
        for index, address in enumerate(addresses)
    }


class JoinWatch:
    """Watches the tasks of a launch (`notice`, at every supervisor poll) and warns once for each
    task that still does not listen on its TF_CONFIG port `check_s` after it started, or that
    exited 0 without ever listening on it (a task that failed or was stopped is the
    supervisor's to report)."""

    def __init__(self, ports: dict[str, int], *, check_s: float, announcer: str):
        """`ports`: the watched tasks' TF_CONFIG ports, by task name (`serving_ports`);
        `check_s`: seconds after a task's start; 0 only checks when it exits."""
        self._ports, self._check_s, self._announcer = ports, check_s, announcer
        self._joined: set[str] = set()
        self._warned: set[str] = set()

    def notice(self, tasks: Sequence[processes.Process]) -> None:
        """Looks at each watched task once; run it from the supervisor's loop."""
        now = time.monotonic()
        for task in tasks:
            name = task.name
            if (
                name not in self._ports
                or name in self._joined
                or name in self._warned
                or task.process is None
            ):
                continue
            status = task.poll()
            if self._ports[name] in listening_ports(task.process.pid):
                self._joined.add(name)
            elif status == 0:
                self._warn(
                    f"{name} ended without ever listening on its TF_CONFIG port "
                    f"{self._ports[name]}: the program did not join the cluster, so the "
                    "tasks ran as independent copies",
                    name,
                )
            elif status is None and self._check_s and now - task.started_s >= self._check_s:
                self._warn(
                    f"{name} has not listened on its TF_CONFIG port {self._ports[name]} "
                    f"in {self._check_s:g} s: the program did not join the cluster, so "
                    "the tasks run as independent copies",
                    name,
                    " (a program that joins later: raise --join_check_s)",
                )

    def _warn(self, what: str, name: str, later: str = "") -> None:
        self._warned.add(name)
        print(
            f"{self._announcer}: warning: {what} (their weights drift apart; they write the "
            f"same paths); {_FIX}{later}",
            file=sys.stderr,
            flush=True,
        )


# Keras 3.15's `fit` (and `evaluate`, `predict`) under MultiWorkerMirroredStrategy, TF 2.21: the
# batch arrives as a PerReplica that Keras 3's step converts to a tensor. The traceback names a
# frame of Keras 3 (`.../keras/src/...`; tf-keras is `tf_keras/src`), then this ValueError, whose
# message spans the PerReplica's repr.
_TRACEBACK = "Traceback (most recent call last):"
_KERAS3_FRAME = re.compile(r'^\s*File "[^"]*/keras/src/')
_PER_REPLICA_VALUE = "ValueError: Attempt to convert a value (PerReplica:"
_PER_REPLICA_TYPE = (
    "with an unsupported type (<class 'tensorflow.python.distribute.values."
    "PerReplica'>) to a Tensor."
)


class _Keras3Traceback:
    """Reads one task's output, a line at a time, for that traceback."""

    def __init__(self):
        self._in_traceback = self._keras3_frame = self._in_message = False

    def read(self, line: str) -> bool:
        """Whether `line` completes the traceback."""
        line = line.rstrip("\n")
        if line == _TRACEBACK:
            self._in_traceback, self._keras3_frame, self._in_message = True, False, False
        elif self._in_traceback and _KERAS3_FRAME.match(line):
            self._keras3_frame = True
        elif self._keras3_frame and line.startswith(_PER_REPLICA_VALUE):
            self._in_message = True
        if self._in_message and line.endswith(_PER_REPLICA_TYPE):
            self._in_traceback = self._keras3_frame = self._in_message = False
            return True
        return False


class Keras3FitCrash:
    """Says once per task, in a line, that it crashed in Keras 3's own multi-worker `fit`; give
    each task's `Process` `on_line=reader(name)`."""

    def __init__(self, *, announcer: str):
        self._announcer = announcer
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def reader(self, name: str) -> Callable[[str], None]:
        """What reads task `name`'s output (on its output thread)."""
        traceback = _Keras3Traceback()

        def read(line: str) -> None:
            if traceback.read(line):
                self._say(name)

        return read

    def _say(self, name: str) -> None:
        with self._lock:  # Also keeps two tasks' lines whole, each task on its own thread.
            if name in self._said:
                return
            self._said.add(name)
            with contextlib.suppress(OSError, ValueError):  # Our stderr closed.
                print(
                    f"{self._announcer}: {name} crashed in Keras 3's own model.fit, which "
                    "cannot train under MultiWorkerMirroredStrategy (keras-team/keras#20585); "
                    "train the model through tfdist.fit, which runs Keras 3 models under "
                    "every strategy (docs/library.md and docs/keras.md)",
                    file=sys.stderr,
                    flush=True,
                )
