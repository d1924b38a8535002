"""Whether each launched task joined its cluster: a program that builds its strategy from
TF_CONFIG listens on its task's port (TensorFlow's gRPC server) for as long as it runs; one that
ignores TF_CONFIG (a MirroredStrategy script, a plain Keras script) never does, and N such tasks
train N independent copies. Pure Python, Linux: a task's listening sockets are read from
/proc/PID/net/tcp and tcp6, which show the task's own network namespace.
"""

import sys
from collections.abc import Sequence

from tfdist.cluster import processes

_LISTEN = "0A"  # The TCP state LISTEN in /proc/net/tcp.


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


class JoinWatch:
    """Watches the tasks of a launch (`notice`, at every supervisor poll) and warns once for
    each task that ended without ever listening on its TF_CONFIG port."""

    def __init__(self, ports: dict[str, int], *, announcer: str):
        """`ports`: each task's TF_CONFIG port, by task name ("worker:1")."""
        self._ports, self._announcer = ports, announcer
        self._joined: set[str] = set()
        self._warned: set[str] = set()

    def notice(self, tasks: Sequence[processes.Process]) -> None:
        for task in tasks:
            if task.name in self._joined or task.name in self._warned or task.process is None:
                continue
            running = task.poll() is None
            if self._ports[task.name] in listening_ports(task.process.pid):
                self._joined.add(task.name)
            elif not running:
                self._warned.add(task.name)
                self._warn(task.name)

    def _warn(self, name: str) -> None:
        print(f"{self._announcer}: warning: {name} ended without ever listening on its "
              f"TF_CONFIG port {self._ports[name]}: the program did not join the cluster, so "
              "the tasks ran as independent copies (their weights drift apart; they write the "
              "same paths); build the strategy from TF_CONFIG (tfdist.setup, or "
              "tf.distribute.MultiWorkerMirroredStrategy), or launch one task", file=sys.stderr,
              flush=True)
