"""`check`: refuses, in one line, a cluster that holds a task of another job. TensorFlow joins
whatever answers at its cluster spec's addresses and never asks whose task it is, so two jobs
whose ports collide on a shared node could train as one. Where the cluster's `Origin` names its
job (a Slurm job step), every task compares after the strategy's build:

- multi-worker mirrored: each task puts its job into TensorFlow's coordination service's
  key-value store; the leader (the chief, else worker 0) reads every task's, the others read
  the leader's. The store has no public API in TF 2.21: `context().set_config_key_value` and
  `get_config_key_value` are TensorFlow's own, as its PreemptionCheckpointHandler uses them
  (tensorflow/python/distribute/failure_handling/failure_handling.py); asked only on the
  release where it was checked, elsewhere the check is skipped.
- parameter server: the chief reads each worker's and ps task's environment
  (`/proc/self/environ`, read on that task's CPU, where Slurm wrote its job and step) and
  derives its job as its own was (`slurm.job_of`). Linux only, as Slurm is.
"""

from .cluster import ClusterConfig
from .cluster import ClusterConfigError
from .cluster import TaskType
from .config import StrategyKind
from .messages import cut
from . import slurm

_KEY = "tfdist/job/"
_WAIT_S = 60.0  # For a peer's job, when no collective timeout is set.
_TENSORFLOW_CHECKED = "2.21."
_ENVIRON = "/proc/self/environ"


def check(cluster: ClusterConfig | None, kind: StrategyKind, timeout_s: float | None) -> None:
    """Refuses a peer of another job, once this training task's strategy is built (see the
    module's docstring); waits at most `timeout_s` (None: 60 s) for a peer to say its job.

    Raises:
        ClusterConfigError: a peer belongs to another job, or did not say which, in one line.
    """
    if cluster is None or cluster.origin is None:
        return
    if kind is StrategyKind.MULTI_WORKER_MIRRORED and cluster.num_workers > 1:
        _through_coordination(cluster, timeout_s or _WAIT_S)
    elif kind is StrategyKind.PARAMETER_SERVER and cluster.task.type is TaskType.CHIEF:
        _through_environ(cluster)


def _name(job: str, index: int) -> str:
    return f"{job}:{index}"


def _tasks(cluster: ClusterConfig, jobs: tuple[str, ...]) -> list[str]:
    """ "job:index" of each task of `jobs` in `cluster`, in order."""
    return [_name(job, i) for job in jobs for i in range(len(cluster.jobs.get(job, ())))]


def _through_coordination(cluster: ClusterConfig, timeout_s: float) -> None:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel

    if not tf.__version__.startswith(_TENSORFLOW_CHECKED):
        return
    store = context.context()
    own = _name(cluster.task.type.value, cluster.task.index)
    store.set_config_key_value(_KEY + own, cluster.origin.job)
    tasks = _tasks(cluster, ("chief", "worker"))
    for peer in [task for task in tasks if task != own] if cluster.is_chief else tasks[:1]:
        try:
            job = store.get_config_key_value(_KEY + peer, timeout_in_ms=int(timeout_s * 1000))
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError):
            job = None
        _compare(cluster, peer, job, f"said no job within {timeout_s:g} s")


def _through_environ(cluster: ClusterConfig) -> None:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    for peer in _tasks(cluster, ("worker", "ps")):
        job, _, index = peer.partition(":")
        with tf.device(f"/job:{job}/replica:0/task:{index}/device:CPU:0"):
            text = tf.io.read_file(_ENVIRON).numpy()
        environ = dict(
            entry.decode("utf-8", "replace").partition("=")[::2]
            for entry in text.split(b"\0")
            if entry
        )
        try:
            job = slurm.job_of(environ)
        except ClusterConfigError:
            job = None
        _compare(cluster, peer, job, "runs in no Slurm job step")


def _compare(cluster: ClusterConfig, peer: str, job: str | None, missing: str) -> None:
    """Raises the one line unless task `peer`'s job (`job`; None: `missing` says what it did
    instead) is this cluster's."""
    origin = cluster.origin
    if job == origin.job:
        return
    name, _, index = peer.partition(":")
    found = (
        f"is {cut(job)}'s, not this job's: another job's task holds this job's port there"
        if job
        else f"{missing}: another job's task or another program may hold this job's port there"
    )
    raise ClusterConfigError(
        f"{origin.job}: the task at {peer}'s address {cluster.jobs[name][int(index)]} {found} "
        f"({origin.ports}); {origin.port_fix}."
    )
