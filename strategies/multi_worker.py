"""MultiWorkerMirroredStrategy: synchronous training across workers with collective ops."""

import tensorflow as tf

from . import ring_chunks
from .cluster import ClusterConfig
from .config import Collective
from .config import StrategyConfig
from .config import StrategyConfigError
from .resolver import cluster_resolver

_IMPLEMENTATIONS = {
    Collective.AUTO: tf.distribute.experimental.CommunicationImplementation.AUTO,
    Collective.RING: tf.distribute.experimental.CommunicationImplementation.RING,
    Collective.NCCL: tf.distribute.experimental.CommunicationImplementation.NCCL,
}


def build(
    config: StrategyConfig, cluster: ClusterConfig | None, *, num_gpus: int
) -> tf.distribute.MultiWorkerMirroredStrategy:
    """Returns a MultiWorkerMirroredStrategy for this task of `cluster` (None: one worker).

    `collective_timeout_s` is not TensorFlow's per-collective timeout, which costs a thread per
    collective (`strategies.deadline` bounds the step calls instead);
    `allreduce_pack_mib` sizes the packs gradients are all-reduced in, and the ring moves each
    pack in overlapping chunks of at most 4 MiB (`strategies.ring_chunks`).
    """
    if config.collective is Collective.NCCL and not num_gpus:
        raise StrategyConfigError(
            "collective=nccl needs GPUs, but this worker has none; use collective=auto or ring."
        )
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=_IMPLEMENTATIONS[config.collective],
        bytes_per_pack=config.allreduce_pack_mib * 1024 * 1024,
    )
    ring_chunks.apply()
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=cluster_resolver(cluster), communication_options=options
    )
