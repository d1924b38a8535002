"""Turns a typed `ClusterConfig` into the cluster resolver TensorFlow's strategies take."""

import tensorflow as tf

from .cluster import ClusterConfig
from .cluster import TaskType


def cluster_resolver(
    cluster: ClusterConfig | None,
) -> tf.distribute.cluster_resolver.ClusterResolver:
    """Returns a resolver for `cluster`; an empty one for a single process.

    The resolver is built from our validated config rather than TF's own TF_CONFIG reader, so the
    strategy sees exactly what `strategies.cluster` checked. The evaluator is left out of the spec,
    as TensorFlow expects: it does not take part in training.
    """
    if cluster is None:
        return tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}))
    jobs = {
        job: list(addresses)
        for job, addresses in cluster.jobs.items()
        if job != TaskType.EVALUATOR.value
    }
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(jobs),
        task_type=cluster.task.type.value,
        task_id=cluster.task.index,
        rpc_layer=cluster.rpc_layer,
    )
