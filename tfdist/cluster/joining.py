"""What a launched program did with its cluster, seen from outside it. Pure Python, Linux.

Joining: a program that builds its strategy from TF_CONFIG listens on its task's port
(TensorFlow's gRPC server) for as long as it runs; one that ignores TF_CONFIG (a MirroredStrategy
script, a plain Keras script) never does, and N such tasks train N independent copies. A task's
listening sockets are read from /proc/PID/net/tcp and tcp6, which show the task's own network
namespace. The evaluator serves no port, so it is not watched.
"""

import sys
import time
from collections.abc import Sequence

from tfdist.cluster import processes
from tfdist.strategies import ClusterConfig

# A task's TensorFlow server listened 4-5 s after its start with 2 tasks on an idle 2-core machine,
# 9-13 s with 3 tasks at a load of 5; a program may also read or make its data before it builds
# its strategy. Ten times that, so a slow start is not named.
JOIN_CHECK_S = 120.0
_LISTEN = "0A"  # The TCP state LISTEN in /proc/net/tcp.
_FIX = ("build the strategy from TF_CONFIG (tfdist.setup, or "
        "tf.distribute.MultiWorkerMirroredStrategy), or run the program without tfdist launch")


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
    return {f"{job}:{index}": int(address.rsplit(":", 1)[1])
            for job, addresses in cluster.jobs.items() if job != "evaluator"
            for index, address in enumerate(addresses)}


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
            if (name not in self._ports or name in self._joined or name in self._warned
                    or task.process is None):
                continue
            status = task.poll()
            if self._ports[name] in listening_ports(task.process.pid):
                self._joined.add(name)
            elif status == 0:
                self._warn(f"{name} ended without ever listening on its TF_CONFIG port "
                           f"{self._ports[name]}: the program did not join the cluster, so the "
                           "tasks ran as independent copies", name)
            elif status is None and self._check_s and now - task.started_s >= self._check_s:
                self._warn(f"{name} has not listened on its TF_CONFIG port {self._ports[name]} "
                           f"in {self._check_s:g} s: the program did not join the cluster, so "
                           "the tasks run as independent copies", name,
                           " (a program that joins later: raise --join_check_s)")

    def _warn(self, what: str, name: str, later: str = "") -> None:
        self._warned.add(name)
        print(f"{self._announcer}: warning: {what} (their weights drift apart; they write the "
              f"same paths); {_FIX}{later}", file=sys.stderr, flush=True)

