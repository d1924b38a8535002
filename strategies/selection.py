"""Which strategy a job runs: `auto` resolved, and explicit choices checked against the cluster."""

from .cluster import ClusterConfig
from .config import StrategyConfig
from .config import StrategyConfigError
from .config import StrategyKind

_SINGLE_PROCESS_KINDS = (StrategyKind.ONE_DEVICE, StrategyKind.MIRRORED)


def resolve_kind(
    kind: StrategyKind, cluster: ClusterConfig | None, num_local_devices: int
) -> StrategyKind:
    """Returns the concrete strategy for `kind`, checked against the cluster.

    `auto` picks parameter_server when the cluster has ps tasks, multi_worker_mirrored when it has
    several workers, mirrored with several local devices, else one_device.

    Args:
      kind: the requested strategy.
      cluster: the job's cluster, or None for a single process.
      num_local_devices: replicas this process could hold (GPUs, or logical CPUs).

    Raises:
      StrategyConfigError: an explicit choice that the cluster cannot run.
    """
    num_ps = cluster.num_ps if cluster else 0
    num_workers = cluster.num_workers if cluster else 1
    if kind is StrategyKind.AUTO:
        if num_ps:
            return StrategyKind.PARAMETER_SERVER
        if num_workers > 1:
            return StrategyKind.MULTI_WORKER_MIRRORED
        return StrategyKind.MIRRORED if num_local_devices > 1 else StrategyKind.ONE_DEVICE
    if kind is StrategyKind.PARAMETER_SERVER and not num_ps:
        raise StrategyConfigError(
            "strategy=parameter_server needs ps tasks, but the cluster has none; set TF_CONFIG "
            'with a "ps" job (or run `tfdist launch --num_ps=1 ...`), or pick another strategy.'
        )
    if kind is StrategyKind.MULTI_WORKER_MIRRORED and num_ps:
        raise StrategyConfigError(
            f"strategy=multi_worker_mirrored cannot use the cluster's {num_ps} ps task(s); drop "
            'the "ps" job from TF_CONFIG, or use strategy=parameter_server.'
        )
    if kind in _SINGLE_PROCESS_KINDS and (num_ps or num_workers > 1):
        raise StrategyConfigError(
            f"strategy={kind.value} trains in one process, but TF_CONFIG lists {num_workers} "
            f"worker(s) and {num_ps} ps task(s); use strategy=multi_worker_mirrored, "
            "parameter_server or auto, or unset TF_CONFIG."
        )
    return kind


def kind_for(config: StrategyConfig, cluster: ClusterConfig | None) -> StrategyKind:
    """The strategy `config` resolves to in `cluster` on this machine: the one derivation that
    `build`, tfdist's set-up and `tfdist doctor` all read."""
    from . import devices  # pylint: disable=import-outside-toplevel  (TensorFlow)

    return resolve_kind(config.strategy, cluster, devices.num_replica_devices(config))
