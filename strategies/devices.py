"""The devices this process trains on: GPUs, or the host CPU split into logical devices."""

import tensorflow as tf

from strategies.config import StrategyConfig
from strategies.config import StrategyConfigError


def configure(config: StrategyConfig) -> None:
    """Splits the host CPU into `config.num_cpu_devices` logical devices (idempotent).

    Must run before TensorFlow executes its first op; later, the runtime's devices are fixed.
    """
    if config.num_cpu_devices == 1:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration()] * config.num_cpu_devices
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == len(wanted):
        return
    try:
        tf.config.set_logical_device_configuration(cpu, wanted)
    except RuntimeError:
        raise StrategyConfigError(
            f"num_cpu_devices={config.num_cpu_devices} came too late: TensorFlow has already "
            "started; call strategies.configure_local_devices(config) before any op runs.") from None


def num_gpus(config: StrategyConfig) -> int:
    """Returns how many GPUs this process uses: `num_gpus` of the visible ones, or all."""
    visible = len(tf.config.list_physical_devices("GPU"))
    wanted = visible if config.num_gpus is None else config.num_gpus
    if wanted > visible:
        raise StrategyConfigError(
            f"num_gpus={wanted} but this machine shows {visible} GPU(s); lower num_gpus or "
            "leave it unset to use every visible GPU.")
    return wanted


def num_replica_devices(config: StrategyConfig) -> int:
    """Returns how many replicas this process can hold: its GPUs, else its logical CPUs."""
    return num_gpus(config) or config.num_cpu_devices


def replica_devices(config: StrategyConfig) -> list[str]:
    """Returns the devices of this process's replicas: the chosen GPUs, else the logical CPUs."""
    configure(config)
    device_type = "GPU" if num_gpus(config) else "CPU"
    return [f"/device:{device_type}:{index}" for index in range(num_replica_devices(config))]
