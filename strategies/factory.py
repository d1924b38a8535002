"""`build`: a tf.distribute.Strategy from a `StrategyConfig` and an optional cluster."""

import tensorflow as tf

from . import devices
from . import mirrored
from . import multi_worker
from . import one_device
from . import parameter_server
from . import selection
from .cluster import ClusterConfig
from .config import StrategyConfig
from .config import StrategyKind
from .server import listening


def build(config: StrategyConfig, cluster: ClusterConfig | None) -> tf.distribute.Strategy:
    """See `strategies.build`."""
    replica_devices = devices.replica_devices(config)
    kind = selection.kind_for(config, cluster)
    if kind is StrategyKind.ONE_DEVICE:
        return one_device.build(replica_devices)
    if kind is StrategyKind.MIRRORED:
        return mirrored.build(config, replica_devices)
    with listening(cluster):  # Both start this task's server.
        if kind is StrategyKind.MULTI_WORKER_MIRRORED:
            return multi_worker.build(config, cluster, num_gpus=devices.num_gpus(config))
        return parameter_server.build(config, cluster)


def kind_of(strategy: tf.distribute.Strategy) -> StrategyKind:
    """Returns which of our strategy kinds `strategy` is."""
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return StrategyKind.PARAMETER_SERVER
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return StrategyKind.MULTI_WORKER_MIRRORED
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return StrategyKind.MIRRORED
    return StrategyKind.ONE_DEVICE
