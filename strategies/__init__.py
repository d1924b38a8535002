"""tf.distribute strategies built from a typed config, and TF_CONFIG parsing.

A library of its own (installed as `tfdist.strategies`): it imports nothing else of tfdist, and
nothing here imports TensorFlow at import time, so the CLI can validate input before paying for
it. The Keras flavour TensorFlow loads is tfdist's to choose, when `tfdist` is imported
(`tfdist.runtime.keras_env`).
"""

from .cluster import ClusterConfig
from .cluster import ClusterConfigError
from .cluster import Origin
from .cluster import Task
from .cluster import TaskType
from .cluster import from_environment
from .cluster import parse_tf_config
from .deadline import CollectiveDeadline
from .config import AllReduce
from .config import Collective
from .config import StrategyConfig
from .config import StrategyConfigError
from .config import StrategyKind
from .config import VariablePartition
from .config import WireDtype
from .local_cluster import make_cluster


def ps_without_chief(num_ps: int, has_chief: bool) -> str | None:
    """The rule that parameter-server tasks need a chief: None when a layout of `num_ps` ps tasks
    keeps it, else the problem in words (for the caller's one-line error)."""
    from . import cluster  # pylint: disable=import-outside-toplevel

    return cluster.ps_without_chief(num_ps, has_chief)


def build(config: StrategyConfig, cluster: ClusterConfig | None = None):
    """Returns the `tf.distribute.Strategy` that `config` describes (never None).

    Args:
        config: which strategy and its options.
        cluster: this job's cluster (from `from_environment()` or `make_cluster`), or None for a
            single-process job.

    Raises:
        StrategyConfigError: the config does not fit the cluster or the machine.
    """
    from . import factory  # pylint: disable=import-outside-toplevel

    return factory.build(config, cluster)


def check_job(cluster: ClusterConfig | None, kind: StrategyKind, timeout_s: float | None) -> None:
    """Refuses a task of another job in `cluster`, once this training task's `kind` of strategy
    is built, where the cluster's origin names its job (a Slurm step); waits at most `timeout_s`
    (None: 60 s) for a peer to say its job.

    Raises:
        ClusterConfigError: a peer belongs to another job, or did not say which, in one line.
    """
    from . import job_check  # pylint: disable=import-outside-toplevel

    job_check.check(cluster, kind, timeout_s)


def collective_deadline(
    config: StrategyConfig, cluster: ClusterConfig | None, kind: StrategyKind
) -> CollectiveDeadline | None:
    """Returns the `CollectiveDeadline` that bounds each step call of a multi-worker task by
    `config.collective_timeout_s` (the step loop brackets its calls with its `step()`), or None
    where nothing is bounded: no timeout set, one worker, or another strategy."""
    if (
        config.collective_timeout_s is None
        or kind is not StrategyKind.MULTI_WORKER_MIRRORED
        or cluster is None
        or cluster.num_workers < 2
    ):
        return None
    return CollectiveDeadline(config.collective_timeout_s)


def configure_local_devices(config: StrategyConfig) -> None:
    """Splits the host CPU into `config.num_cpu_devices` logical devices; before any op runs."""
    from . import devices  # pylint: disable=import-outside-toplevel

    devices.configure(config)


def start_server(cluster: ClusterConfig):
    """Starts the `tf.distribute.Server` a parameter-server worker or ps task runs."""
    from . import server  # pylint: disable=import-outside-toplevel

    return server.start_server(cluster)


def use_ring_chunks(max_subdivs_per_device: int | None = None) -> int:
    """Makes every ring all-reduce between processes traced from now on move each pack in
    chunks of at most 4 MiB, up to `max_subdivs_per_device` of them at once (tfdist's choice,
    8, when None), as multi_worker_mirrored strategies built here do; returns the number in
    use."""
    from . import ring_chunks  # pylint: disable=import-outside-toplevel

    ring_chunks.apply()
    if max_subdivs_per_device is not None:
        ring_chunks.MAX_SUBDIVS_PER_DEVICE = max_subdivs_per_device
    return ring_chunks.MAX_SUBDIVS_PER_DEVICE


def kind_of(strategy) -> StrategyKind:
    """Returns which `StrategyKind` a built strategy is (e.g. what `auto` resolved to)."""
    from . import factory  # pylint: disable=import-outside-toplevel

    return factory.kind_of(strategy)


def replica_devices_of(strategy) -> tuple[str, ...]:
    """Returns the devices a built strategy's replicas run on (one_device's default strategy
    included, which lists none itself)."""
    from . import one_device  # pylint: disable=import-outside-toplevel

    return one_device.replica_devices(strategy)


def kind_for(config: StrategyConfig, cluster: ClusterConfig | None = None) -> StrategyKind:
    """Returns the strategy `config` resolves to in `cluster` on this machine (what `build`
    builds: `auto` picked, an explicit choice checked against the cluster).

    Raises:
        StrategyConfigError: an explicit choice that the cluster cannot run.
    """
    from . import selection  # pylint: disable=import-outside-toplevel

    return selection.kind_for(config, cluster)


def visible_gpus() -> list:
    """Returns the GPUs this machine shows TensorFlow (`tf.config.PhysicalDevice`s)."""
    from . import devices  # pylint: disable=import-outside-toplevel

    return devices.physical_gpus()


def is_gpu(device: str) -> bool:
    """Returns whether the device `device` names is a GPU."""
    from . import devices  # pylint: disable=import-outside-toplevel

    return devices.is_gpu(device)


def num_gpus(config: StrategyConfig) -> int:
    """Returns how many GPUs this process uses under `config` (its logical GPUs when it splits
    one), 0 on a machine without."""
    from . import devices  # pylint: disable=import-outside-toplevel

    return devices.num_gpus(config)


def num_replica_devices(config: StrategyConfig) -> int:
    """Returns how many replicas this process can hold under `config`: GPUs, else logical CPUs."""
    from . import devices  # pylint: disable=import-outside-toplevel

    return devices.num_replica_devices(config)
