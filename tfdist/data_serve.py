"""`tfdist data serve`: a tf.data service dispatcher and its workers, until interrupted."""

import signal
import threading

import input_pipelines


def main(port: int, num_workers: int) -> int:
    """Starts the dispatcher on `port` and `num_workers` workers on 127.0.0.1, prints the address
    to pass as --tf_data_service, and serves until SIGINT or SIGTERM; returns 0."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    cluster = input_pipelines.start_service(port, num_workers)
    try:
        print(f"tfdist data serve: dispatcher at {cluster.address} with {num_workers} worker(s) "
              f"({', '.join(cluster.worker_addresses)}); train with "
              f"--tf_data_service={cluster.address}; Ctrl-C stops", flush=True)
        stop.wait()
    finally:
        cluster.stop()
    return 0
