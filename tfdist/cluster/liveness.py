"""Whether a task's peers are alive: the chief followed from another task, and the peers a
failed collective names.

The chief listens on its TF_CONFIG address while it trains. A watch probes that address every
few seconds from a daemon thread: the chief is seen once it answers, and finished once it has
been seen and then misses `GONE_AFTER_MISSES` probes in a row. Tasks that outlive no chief
(parameter-server workers and ps, the evaluator) use it to stop instead of waiting forever.

A multi-worker run whose peer is lost (killed, or its link cut) fails its next collective with
TensorFlow's words, e.g. "The following tasks are unhealthy (stopped sending heartbeats):
/job:worker/replica:0/task:1", or "Collective has timed out during execution" on the side cut
off; `lost_peer` turns them into one line that names the peer where the words or the group's
size tell it. A task that TensorFlow names as a "remote target" but that answered with an
aborted collective of its own is alive, passing on what it lost: with three workers and worker 1
killed, worker 0's error names worker 1 (the connection it reset) and worker 2 (which answered
"Collective ops is aborted by: ..." about worker 1), and only worker 1 is lost.
"""

import re
import threading
import time

from tfdist import errors
from tfdist.errors import LostPeer
from tfdist.cluster.probe import answers
from tfdist.strategies import ClusterConfig

PROBE_EVERY_S = 2.0
GONE_AFTER_MISSES = 3
_TASK_RE = re.compile(r"/job:(\w+)(?:/replica:\d+)?/task:(\d+)")
_REMOTE_RE = re.compile(r"remote target (/job:\w+(?:/replica:\d+)?/task:\d+)")
_REPLY_RE = re.compile(r'grpc_message:[\\"]*')  # Its words, quoted (and escaped when nested).
_ABORTED = "Collective ops is aborted"
_HEARTBEAT_RPC = "CoordinationService/Heartbeat"
_COLLECTIVE_TIMEOUT = "Collective has timed out"
_PEER_WORDS = (
    "unhealthy",
    "stopped sending heartbeats",
    "Collective ops is aborted",
    "failed to connect",
    "Socket closed",
    "Connection reset",
    _HEARTBEAT_RPC,
    _COLLECTIVE_TIMEOUT,
)
_COLLECTIVE_JOBS = ("chief", "worker")
_MAX_SHOWN = 5  # Peers a line names; "and N more" counts the rest.
_MAX_QUOTED = 200  # Characters of TensorFlow's words a line quotes.


def lost_peer(message: str, cluster: ClusterConfig | None) -> LostPeer | None:
    """The one-line `LostPeer` for TensorFlow's error `message` when it says a peer was lost;
    None when it says something else."""
    if cluster is None or not any(words in message for words in _PEER_WORDS):
        return None
    own = (cluster.task.type.value, cluster.task.index)
    named = [(job, int(index)) for job, index in _TASK_RE.findall(message)]
    alive = _answered(message)
    peers = list(dict.fromkeys(task for task in named if task != own and task not in alive))
    if peers:
        reason = (
            "it stopped sending heartbeats"
            if "heartbeats" in message
            else f"TensorFlow: {_telling_line(message)}"
        )
    elif _HEARTBEAT_RPC in message:
        peers = [("chief", 0) if cluster.has_chief else ("worker", 0)]
        reason = "it holds the coordination service, and it stopped answering heartbeats"
    elif _COLLECTIVE_TIMEOUT in message and len(others := _group_peers(cluster, own)) == 1:
        peers = others
        reason = "a collective waited for it longer than --collective_timeout_s"
    elif alive - {own}:
        return LostPeer(
            f"lost a peer, as {_shown(cluster, sorted(alive - {own}))} said "
            f"({_telling_line(message)}); every task of the group stops. {_RESTART_FIX}"
        )
    else:
        return LostPeer(
            f"lost a peer ({_telling_line(message)}); every task of the group stops. {_RESTART_FIX}"
        )
    return LostPeer(
        f"lost peer{'s' if len(peers) > 1 else ''} {_shown(cluster, peers)}: {reason}; every "
        f"task of the group stops. {_RESTART_FIX}"
    )


def _answered(message: str) -> set[tuple[str, int]]:
    """The tasks `message` names as remote targets that answered with an aborted collective of
    their own (alive, passing on a loss), and never as one that did not answer."""
    answered, silent = set(), set()
    targets = list(_REMOTE_RE.finditer(message))
    for target, following in zip(targets, [*targets[1:], None]):
        words = message[target.end() : following.start() if following else len(message)]
        reply = _REPLY_RE.search(words)
        job, index = _TASK_RE.fullmatch(target.group(1)).groups()
        said_aborted = reply is not None and words[reply.end() :].startswith(_ABORTED)
        (answered if said_aborted else silent).add((job, int(index)))
    return answered - silent


def _shown(cluster: ClusterConfig, tasks: list[tuple[str, int]]) -> str:
    """`tasks` with their addresses, up to _MAX_SHOWN; "and N more" counts the rest."""
    shown = ", ".join(
        f"{job}:{index} at {_address(cluster, job, index)}" for job, index in tasks[:_MAX_SHOWN]
    )
    return shown + (f" and {len(tasks) - _MAX_SHOWN} more" if len(tasks) > _MAX_SHOWN else "")


# How each engine runs a failed job again. Slurm's --requeue never requeues a failed job by
# itself; `scontrol requeue` does, while slurmctld still holds the job (MinJobAge).
_RESTART_FIX = (
    "Restart the job to resume from --model_dir's backup (a JobSet's "
    "failurePolicy.maxRestarts; `tfdist launch` or `tfdist ray` with --max_restarts; on Slurm "
    "`scontrol requeue JOBID` within MinJobAge (300 s by default) of the job's end, else the "
    "script submitted again), and check that task's log and network (`tfdist doctor --probe`)."
)


def _address(cluster: ClusterConfig, job: str, index: int) -> str:
    addresses = cluster.jobs.get(job, ())
    return addresses[index] if index < len(addresses) else "an address not in the cluster"


def _group_peers(cluster: ClusterConfig, own: tuple[str, int]) -> list[tuple[str, int]]:
    """The other tasks of `own`'s collective group: every chief and worker."""
    return [
        (job, index)
        for job in _COLLECTIVE_JOBS
        for index in range(len(cluster.jobs.get(job, ())))
        if (job, index) != own
    ]


def _first_line(message: str) -> str:
    """The first line of `message` that says something: not a heading such as "Graph
    execution error:", whose words follow it."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    telling = [line for line in lines if not line.endswith(":")] or lines
    return errors.cut(telling[0], _MAX_QUOTED) if telling else "no message"


def _telling_line(message: str) -> str:
    """The first line of `message` in TensorFlow's words for a lost peer, else its first."""
    lines = [line.strip() for line in message.splitlines()]
    return next(
        (
            errors.cut(line, _MAX_QUOTED)
            for line in lines
            if any(words in line for words in _PEER_WORDS)
        ),
        _first_line(message),
    )


def chief_address(cluster: ClusterConfig) -> str:
    """The chief's host:port: the "chief" task, else worker 0."""
    return cluster.jobs["chief"][0] if cluster.has_chief else cluster.jobs["worker"][0]


class ChiefWatch:
    """Probes the chief at `address` until it has come and gone; `start` begins."""

    def __init__(self, address: str):
        self.address = address
        self._started = time.monotonic()
        self._seen = threading.Event()
        self._finished = threading.Event()

    def start(self) -> "ChiefWatch":
        threading.Thread(target=self._probe, daemon=True, name="chief-watch").start()
        return self

    @property
    def seen(self) -> bool:
        return self._seen.is_set()

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    def unseen_for_s(self) -> float:
        """Seconds since the watch started, while the chief has never answered; else 0."""
        return 0.0 if self.seen else time.monotonic() - self._started

    def wait_finished(self, timeout_s: float) -> bool:
        """Waits up to `timeout_s` for the chief to finish; returns whether it has."""
        return self._finished.wait(timeout_s)

    def _probe(self) -> None:
        misses = 0
        while True:
            if answers(self.address):
                self._seen.set()
                misses = 0
            elif self.seen:
                misses += 1
                if misses >= GONE_AFTER_MISSES:
                    self._finished.set()
                    return
            time.sleep(PROBE_EVERY_S)
