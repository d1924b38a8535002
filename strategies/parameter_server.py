"""ParameterServerStrategy: asynchronous training; variables on ps tasks, steps on workers.

Only the coordinator (the chief) builds this strategy; worker and ps tasks run a
`tf.distribute.Server` instead.
"""

import tensorflow as tf

from .cluster import ClusterConfig
from .cluster import TaskType
from .config import StrategyConfig
from .config import StrategyConfigError
from .config import VariablePartition
from .resolver import cluster_resolver

_MIN_SHARD_BYTES = 256 << 10


def _partitioner(partition: VariablePartition, num_ps: int):
    """Returns the variable partitioner for `partition`; None keeps variables whole."""
    partitioners = tf.distribute.experimental.partitioners
    if partition.kind == "min_size":
        return partitioners.MinSizePartitioner(min_shard_bytes=partition.value, max_shards=num_ps)
    if partition.kind == "max_shards":
        return partitioners.MinSizePartitioner(
            min_shard_bytes=_MIN_SHARD_BYTES, max_shards=partition.value
        )
    return None


def build(
    config: StrategyConfig, cluster: ClusterConfig
) -> tf.distribute.experimental.ParameterServerStrategy:
    """Returns the coordinator's ParameterServerStrategy; connects to the cluster's tasks."""
    if cluster.task.type is not TaskType.CHIEF:
        raise StrategyConfigError(
            f"strategy=parameter_server is coordinated by the chief, but this task is "
            f'{cluster.task.type.value}:{cluster.task.index}; add a "chief" job to TF_CONFIG and '
            "build the strategy there (worker and ps tasks run a tf.distribute.Server)."
        )
    return tf.distribute.experimental.ParameterServerStrategy(
        cluster_resolver(cluster),
        variable_partitioner=_partitioner(config.variable_partition, cluster.num_ps),
    )
