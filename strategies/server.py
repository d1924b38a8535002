"""The gRPC servers of a cluster's tasks: the one parameter-server `worker` and `ps` tasks run
for the chief to use, and `listening`, which turns a port another process holds into one line
wherever TensorFlow starts this task's server (a multi-worker or parameter-server strategy's
build, `start_server`)."""

import contextlib
from collections.abc import Iterator

import tensorflow as tf

from .cluster import ClusterConfig
from .cluster import ClusterConfigError
from .resolver import cluster_resolver

# TF 2.21's words when gRPC cannot bind the task's port (grpc_server_lib.cc), raised as
# UnknownError by `tf.distribute.Server` and by the strategies' builds.
_NOT_STARTED = "Could not start gRPC server"
_PORT_FIX = "end what holds the port, or give this task another one in TF_CONFIG"


@contextlib.contextmanager
def listening(cluster: ClusterConfig | None) -> Iterator[None]:
    """Raises, in one line, `ClusterConfigError` instead of TensorFlow's UnknownError where this
    task's server cannot listen on its port inside the `with`: the line names the task, its
    address, the job it belongs to and the fix (the cluster's `Origin` says both)."""
    try:
        yield
    except tf.errors.UnknownError as error:
        if cluster is None or _NOT_STARTED not in str(error):
            raise
        raise ClusterConfigError(port_taken(cluster)) from None


def port_taken(cluster: ClusterConfig) -> str:
    """The line that says another process holds this task's port."""
    task = f"{cluster.task.type.value}:{cluster.task.index}"
    origin = cluster.origin
    job = f"{origin.job}: " if origin else ""
    how = f" ({origin.ports})" if origin else ""
    return (
        f"{job}{task} cannot listen on {cluster.task_address}: another process on that host "
        f"holds the port{how}; {origin.port_fix if origin else _PORT_FIX}."
    )


def start_server(cluster: ClusterConfig) -> tf.distribute.Server:
    """Starts this task's `tf.distribute.Server` and returns it (it serves until the process ends).

    Worker servers get `inter_op_parallelism_threads >= num_workers + 1`: with fewer, the
    closures the coordinator schedules can wait on each other and hang on small machines.

    The server listens on every interface, whatever host the cluster names: TF 2.21 binds
    "0.0.0.0:<port>" (core/distributed_runtime/rpc/grpc_server_lib.cc), and no ServerDef or
    ConfigProto field picks another address. Keep a local cluster in a network namespace of its
    own (`tfdist launch` does) or firewall the port.

    Raises:
        ClusterConfigError: another process holds this task's port (`listening`).
    """
    config = tf.compat.v1.ConfigProto(
        inter_op_parallelism_threads=max(len(cluster.jobs.get("worker", ())) + 1, 2)
    )
    with listening(cluster):
        return tf.distribute.Server(
            cluster_resolver(cluster).cluster_spec(),
            job_name=cluster.task.type.value,
            task_index=cluster.task.index,
            protocol=cluster.rpc_layer or "grpc",
            config=config,
            start=True,
        )
