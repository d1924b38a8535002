"""Parameter-server `worker` and `ps` tasks (`Role.SERVE`): serve until the chief is done,
then exit 0 instead of serving forever (`tfdist.cluster.liveness`)."""

from tfdist import strategies
from tfdist.cluster.liveness import ChiefWatch
from tfdist.cluster.liveness import PROBE_EVERY_S
from tfdist.cluster.liveness import chief_address
from tfdist.runtime.config import ConfigError
from tfdist.strategies import ClusterConfig

FIRST_CONTACT_TIMEOUT_S = 600.0


def serve(cluster: ClusterConfig) -> int:
    """Runs this task's server until the chief has come and gone; returns 0.

    Raises:
      ConfigError: the chief never answered within `FIRST_CONTACT_TIMEOUT_S`.
    """
    server = strategies.start_server(cluster)
    chief = chief_address(cluster)
    task = f"{cluster.task.type.value}:{cluster.task.index}"
    print(f"tfdist: {task} serving at {cluster.task_address} until the chief at {chief} "
          "finishes", flush=True)
    watch = ChiefWatch(chief).start()
    while not watch.wait_finished(PROBE_EVERY_S):
        if watch.unseen_for_s() > FIRST_CONTACT_TIMEOUT_S:
            raise ConfigError(f"chief at {chief} did not answer within "
                              f"{FIRST_CONTACT_TIMEOUT_S:g} s; start the chief task (or check "
                              "TF_CONFIG with `tfdist doctor`).")
    print(f"tfdist: {task}: the chief at {chief} has finished; stopping", flush=True)
    del server
    return 0
