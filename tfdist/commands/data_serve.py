"""`tfdist data serve`: a tf.data service dispatcher and its workers, until interrupted."""

import signal
import threading

from tfdist import input_pipelines
from tfdist.cluster import network


def main(port: int, num_workers: int) -> int:
    """Starts the dispatcher on `port` and `num_workers` workers on 127.0.0.1, prints the address
    to pass as --tf_data_service and what the servers expose, and serves until SIGINT or SIGTERM;
    returns 0."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    cluster = input_pipelines.start_service(port, num_workers)
    try:
        print(f"tfdist data serve: dispatcher at {cluster.address} with {num_workers} worker(s) "
              f"({', '.join(cluster.worker_addresses)}); train with "
              f"--tf_data_service={cluster.address}; "
              f"{_exposure([cluster.address, *cluster.worker_addresses])}; Ctrl-C stops",
              flush=True)
        stop.wait()
    finally:
        cluster.stop()
    return 0


def _exposure(addresses: list[str]) -> str:
    """What the servers at `addresses` expose: TensorFlow binds every interface, whatever host
    they advertise, and the service must stay reachable from trainers, so it runs on this
    machine's network (not in a namespace of its own, as `tfdist launch`'s tasks do)."""
    ports = [int(address.rpartition(":")[2]) for address in addresses]
    interfaces = network.exposed_interfaces()
    fix = "; firewall them on an untrusted network" if interfaces else ""
    return network.exposure(ports, interfaces) + fix
