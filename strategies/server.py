"""The gRPC server that parameter-server `worker` and `ps` tasks run for the chief to use."""

import tensorflow as tf

from .cluster import ClusterConfig
from .resolver import cluster_resolver


def start_server(cluster: ClusterConfig) -> tf.distribute.Server:
    """Starts this task's `tf.distribute.Server` and returns it (it serves until the process ends).

    Worker servers get `inter_op_parallelism_threads >= num_workers + 1`: with fewer, the
    closures the coordinator schedules can wait on each other and hang on small machines.

    The server listens on every interface, whatever host the cluster names: TF 2.21 binds
    "0.0.0.0:<port>" (core/distributed_runtime/rpc/grpc_server_lib.cc), and no ServerDef or
    ConfigProto field picks another address. Keep a local cluster in a network namespace of its
    own (`tfdist launch` does) or firewall the port.
    """
    config = tf.compat.v1.ConfigProto(
        inter_op_parallelism_threads=max(len(cluster.jobs.get("worker", ())) + 1, 2)
    )
    return tf.distribute.Server(
        cluster_resolver(cluster).cluster_spec(),
        job_name=cluster.task.type.value,
        task_index=cluster.task.index,
        protocol=cluster.rpc_layer or "grpc",
        config=config,
        start=True,
    )
