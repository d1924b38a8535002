"""Parameter-server `worker` and `ps` tasks under `tfdist train`: serve until the chief is done.

The chief (the coordinator) listens on its TF_CONFIG address while it trains. A server task
probes that address every few seconds: once the chief has answered and then stops answering, the
job is over and the task exits 0, instead of serving forever.
"""

import time

import strategies
from strategies import ClusterConfig
from tfdist.config import ConfigError
from tfdist.probe import answers

PROBE_EVERY_S = 2.0
GONE_AFTER_MISSES = 3
FIRST_CONTACT_TIMEOUT_S = 600.0


def serve(cluster: ClusterConfig) -> int:
    """Runs this task's server until the chief has come and gone; returns 0.

    Raises:
      ConfigError: the chief never answered within `FIRST_CONTACT_TIMEOUT_S`.
    """
    server = strategies.start_server(cluster)
    chief = cluster.jobs["chief"][0]
    task = f"{cluster.task.type.value}:{cluster.task.index}"
    print(f"tfdist: {task} serving at {cluster.task_address} until the chief at {chief} "
          "finishes", flush=True)
    started, seen, misses = time.monotonic(), False, 0
    while True:
        if answers(chief):
            seen, misses = True, 0
        elif seen:
            misses += 1
            if misses >= GONE_AFTER_MISSES:
                print(f"tfdist: {task}: the chief at {chief} has finished; stopping", flush=True)
                del server
                return 0
        elif time.monotonic() - started > FIRST_CONTACT_TIMEOUT_S:
            raise ConfigError(f"chief at {chief} did not answer within "
                              f"{FIRST_CONTACT_TIMEOUT_S:g} s; start the chief task (or check "
                              "TF_CONFIG with `tfdist doctor`).")
        time.sleep(PROBE_EVERY_S)
