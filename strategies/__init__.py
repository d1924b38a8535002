"""tf.distribute strategies built from a typed config, and TF_CONFIG parsing.

A library of its own (installed as `tfdist.strategies`): it imports nothing else of tfdist, and
nothing here imports TensorFlow at import time, so the CLI can validate input before paying for
it. The Keras flavour TensorFlow loads is tfdist's to choose, when `tfdist` is imported
(`tfdist.runtime.keras_env`).
"""

from .cluster import ClusterConfig
from .cluster import ClusterConfigError
from .cluster import Task
from .cluster import TaskType
from .cluster import from_environment
from .cluster import make_cluster
from .cluster import parse_tf_config
from .config import AllReduce
from .config import Collective
from .config import StrategyConfig
from .config import StrategyConfigError
from .config import StrategyKind
from .config import VariablePartition
from .config import WireDtype
from .selection import resolve_kind


def build(config: StrategyConfig, cluster: ClusterConfig | None = None):
    """Returns the `tf.distribute.Strategy` that `config` describes (never None).

    Args:
        config: which strategy and its options.
        cluster: this job's cluster (from `from_environment()` or `make_cluster`), or None for a
            single-process job.

    Raises:
        StrategyConfigError: the config does not fit the cluster or the machine.
    """
    from . import factory  # pylint: disable=import-outside-toplevel
    return factory.build(config, cluster)


def configure_local_devices(config: StrategyConfig) -> None:
    """Splits the host CPU into `config.num_cpu_devices` logical devices; before any op runs."""
    from . import devices  # pylint: disable=import-outside-toplevel
    devices.configure(config)


def start_server(cluster: ClusterConfig):
    """Starts the `tf.distribute.Server` a parameter-server worker or ps task runs."""
    from . import server  # pylint: disable=import-outside-toplevel
    return server.start_server(cluster)


def kind_of(strategy) -> StrategyKind:
    """Returns which `StrategyKind` a built strategy is (e.g. what `auto` resolved to)."""
    from . import factory  # pylint: disable=import-outside-toplevel
    return factory.kind_of(strategy)


def replica_devices_of(strategy) -> tuple[str, ...]:
    """Returns the devices a built strategy's replicas run on (one_device's default strategy
    included, which lists none itself)."""
    from . import one_device  # pylint: disable=import-outside-toplevel
    return one_device.replica_devices(strategy)


def num_visible_gpus() -> int:
    """Returns how many GPUs this machine shows TensorFlow."""
    from . import devices  # pylint: disable=import-outside-toplevel
    return len(devices.physical_gpus())


def is_gpu(device: str) -> bool:
    """Returns whether the device `device` names is a GPU."""
    from . import devices  # pylint: disable=import-outside-toplevel
    return devices.is_gpu(device)


def num_replica_devices(config: StrategyConfig) -> int:
    """Returns how many replicas this process can hold under `config`: GPUs, else logical CPUs."""
    from . import devices  # pylint: disable=import-outside-toplevel
    return devices.num_replica_devices(config)
