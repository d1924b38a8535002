"""tf.data service: run an input pipeline on service workers, and an in-process service cluster.

Imports TensorFlow; `input_pipelines` imports this module lazily.
"""

import re
import socket

import portpicker
import tensorflow as tf

from .choices import HOST_PATTERN
from .choices import SERVICE_PROTOCOL
from .choices import ServiceMode
from .choices import parse_service_address
from .dispatcher import DISPATCHER_WAIT_S
from .dispatcher import check_dispatcher
from .messages import InputConfigError

_SHARDING = {
    ServiceMode.DISTRIBUTED_EPOCH: tf.data.experimental.service.ShardingPolicy.DYNAMIC,
    ServiceMode.PARALLEL_EPOCHS: tf.data.experimental.service.ShardingPolicy.OFF,
}


def distribute(
    dataset: tf.data.Dataset,
    address: str,
    mode: ServiceMode,
    job_name: str,
    *,
    dispatcher_wait_s: float = DISPATCHER_WAIT_S,
) -> tf.data.Dataset:
    """Runs `dataset` on the workers of the tf.data service at `address`.

    Consumers (training workers) that pass the same `job_name` read from one shared job.
    `distributed_epoch` splits the source files or elements dynamically between the service
    workers: one epoch delivers each example once across all consumers of the job, provided the
    pipeline splits cleanly (TF 2.21: a shuffle or repeat before a sequential, non-parallel
    `interleave` duplicates examples, `zip` drops some, and `take` and `shard` apply per worker).
    `parallel_epochs` has every service worker produce the whole epoch: each example arrives once
    per service worker, so exactly-once needs the pipeline itself to shard or to run on one worker.

    Args:
      dataset: the pipeline to run on the service workers, built on the consumer.
      address: the dispatcher, `grpc://host:port`.
      mode: how the service workers divide an epoch.
      job_name: the job that consumers sharing this pipeline join.
      dispatcher_wait_s: how long to wait for the dispatcher to answer (see `check_dispatcher`).

    Returns:
      The elements that the service delivers to this consumer.

    Raises:
      InputConfigError: `address` is malformed, or nothing answers there.
    """
    if not job_name:
        raise InputConfigError(
            f"job_name={job_name!r}: consumers share a job by name; pass a "
            "non-empty name, e.g. 'train'."
        )
    service = parse_service_address(address)
    check_dispatcher(address, wait_s=dispatcher_wait_s)
    return dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=_SHARDING[ServiceMode(mode)], service=service, job_name=job_name
        )
    )


class ServiceCluster:
    """An in-process part of a tf.data service: a dispatcher, its workers, or both. Create it
    with `start`, `start_dispatcher` or `start_worker`.

    The servers listen on every interface (TF 2.21 binds "0.0.0.0:<port>" in
    core/data/service/server_lib.cc, and neither DispatcherConfig nor WorkerConfig picks another
    address); they advertise `host` only.
    """

    def __init__(
        self,
        dispatcher: tf.data.experimental.service.DispatchServer | None,
        workers: list[tf.data.experimental.service.WorkerServer],
        *,
        address: str,
        worker_addresses: list[str],
    ):
        self._dispatcher = dispatcher
        self._workers = workers
        self._stopped = False
        self.address = address
        self.worker_addresses = worker_addresses

    def join(self) -> None:
        """Blocks until the dispatcher (a worker alone: the worker) stops, e.g. through `stop`
        from another thread."""
        (self._dispatcher or self._workers[0]).join()

    def stop(self) -> None:
        """Stops the workers, then the dispatcher; later calls do nothing."""
        if self._stopped:
            return
        self._stopped = True
        for worker in self._workers:
            worker.stop()
        if self._dispatcher is not None:
            self._dispatcher.stop()


def start(
    port: int, num_workers: int, *, host: str = "127.0.0.1", worker_ports: list[int] | None = None
) -> ServiceCluster:
    """Starts a dispatcher on `port` and `num_workers` workers registered with it.

    Args:
      port: the dispatcher's port.
      num_workers: how many worker servers to start in this process.
      host: the host name or IP that the dispatcher and workers are reached at.
      worker_ports: one port per worker; None picks unused ports.

    Returns:
      The running cluster; call `stop` when done.

    Raises:
      InputConfigError: on invalid options, or when something listens on `port` already (gRPC
        shares ports, so a second dispatcher there would start silently).
    """
    if num_workers < 1:
        raise InputConfigError(
            f"num_workers={num_workers}: a service needs workers; pass 1 or more."
        )
    _check_host(host)
    if worker_ports is None:
        worker_ports = [portpicker.pick_unused_port() for _ in range(num_workers)]
    if len(worker_ports) != num_workers:
        raise InputConfigError(
            f"worker_ports={worker_ports}: {len(worker_ports)} port(s) for "
            f"num_workers={num_workers}; pass one port per worker or None."
        )
    for index, worker_port in enumerate(worker_ports):
        _check_port(f"worker_ports[{index}]", worker_port)
    cluster = start_dispatcher(port, host=host)
    try:
        for worker_port in worker_ports:
            worker = start_worker(worker_port, f"{host}:{port}", f"{host}:{worker_port}")
            cluster._workers.extend(worker._workers)  # pylint: disable=protected-access
            cluster.worker_addresses.extend(worker.worker_addresses)
    except Exception:
        cluster.stop()
        raise
    return cluster


def start_dispatcher(port: int, *, host: str = "127.0.0.1") -> ServiceCluster:
    """Starts a dispatcher alone on `port`, advertised as `host`; workers register later.

    Raises:
      InputConfigError: an invalid port or host, or something listens on `port` already.
    """
    _check_port("port", port)
    _check_host(host)
    _check_port_free(port)
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(
        service.DispatcherConfig(port=port, protocol=SERVICE_PROTOCOL)
    )
    return ServiceCluster(
        dispatcher, [], address=f"{SERVICE_PROTOCOL}://{host}:{port}", worker_addresses=[]
    )


def start_worker(port: int, dispatcher_address: str, worker_address: str) -> ServiceCluster:
    """Starts one worker on `port` that registers with the dispatcher at `dispatcher_address`
    ("host:port") and tells consumers to reach it at `worker_address` ("host:port").

    TF retries the registration without a deadline (WorkerConfig's dispatcher_timeout_ms does
    not bound it), so a worker may start before its dispatcher.

    Raises:
      InputConfigError: an invalid port.
    """
    _check_port("port", port)
    service = tf.data.experimental.service
    worker = service.WorkerServer(
        service.WorkerConfig(
            dispatcher_address=dispatcher_address,
            worker_address=worker_address,
            port=port,
            protocol=SERVICE_PROTOCOL,
        )
    )
    return ServiceCluster(
        None,
        [worker],
        address=f"{SERVICE_PROTOCOL}://{dispatcher_address}",
        worker_addresses=[worker_address],
    )


def _check_host(host: str) -> None:
    if not re.fullmatch(HOST_PATTERN, host):
        raise InputConfigError(f"host={host!r}: not a host name or IP; pass e.g. 127.0.0.1.")


def _check_port(field: str, port: int) -> None:
    if not 1 <= port <= 65535:
        raise InputConfigError(f"{field}={port}: not a TCP port; pass 1..65535.")


def _check_port_free(port: int) -> None:
    # SO_REUSEADDR: a recently stopped server's connections in TIME_WAIT do not count as in use.
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as error:
            raise InputConfigError(
                f"port={port}: in use ({error.strerror}); stop what listens "
                "there or pick another port."
            ) from None
