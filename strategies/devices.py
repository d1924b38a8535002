"""The devices this process trains on: GPUs, or the host CPU split into logical devices."""

import tensorflow as tf

from .config import StrategyConfig
from .config import StrategyConfigError


def _split(field: str, count: int, device, wanted: list) -> None:
    """Splits the physical `device` into `wanted` logical devices, unless it already is."""
    current = tf.config.get_logical_device_configuration(device)
    if current is not None and len(current) == len(wanted):
        return
    try:
        tf.config.set_logical_device_configuration(device, wanted)
    except RuntimeError:
        raise StrategyConfigError(
            f"{field}={count} came too late: TensorFlow has already started; call "
            "strategies.configure_local_devices(config) before any op runs."
        ) from None


def physical_gpus() -> list:
    """The GPUs this machine shows TensorFlow (`tf.config.PhysicalDevice`s): the one place that
    asks, so that every answer to "are there GPUs here" agrees."""
    return tf.config.list_physical_devices("GPU")


def is_gpu(device: str) -> bool:
    """Whether the device `device` names ("/job:worker/replica:0/task:1/device:GPU:0") is a
    GPU: the one place that reads a device name's type."""
    return tf.DeviceSpec.from_string(device).device_type == "GPU"


def configure(config: StrategyConfig) -> None:
    """Splits the host CPU into `config.num_cpu_devices` logical devices, or the first GPU into
    `config.num_logical_gpus` (idempotent).

    Must run before TensorFlow executes its first op; later, the runtime's devices are fixed.
    """
    if config.num_cpu_devices > 1:
        _split(
            "num_cpu_devices",
            config.num_cpu_devices,
            tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration()] * config.num_cpu_devices,
        )
    if config.num_logical_gpus > 1:
        gpus = physical_gpus()
        if not gpus:
            raise StrategyConfigError(
                f"num_logical_gpus={config.num_logical_gpus} needs a GPU, and this machine shows "
                f"none; use num_cpu_devices={config.num_logical_gpus} to split the CPU instead."
            )
        memory = tf.config.LogicalDeviceConfiguration(memory_limit=config.logical_gpu_memory_mib)
        _split(
            "num_logical_gpus", config.num_logical_gpus, gpus[0], [memory] * config.num_logical_gpus
        )


def num_gpus(config: StrategyConfig) -> int:
    """Returns how many GPUs this process uses: its logical GPUs when it splits one, else
    `num_gpus` of the visible ones, or all."""
    if config.num_logical_gpus > 1:
        return config.num_logical_gpus
    visible = len(physical_gpus())
    wanted = visible if config.num_gpus is None else config.num_gpus
    if wanted > visible:
        raise StrategyConfigError(
            f"num_gpus={wanted} but this machine shows {visible} GPU(s); lower num_gpus or "
            "leave it unset to use every visible GPU."
        )
    return wanted


def num_replica_devices(config: StrategyConfig) -> int:
    """Returns how many replicas this process can hold: its GPUs, else its logical CPUs."""
    return num_gpus(config) or config.num_cpu_devices


def replica_devices(config: StrategyConfig) -> list[str]:
    """Returns the devices of this process's replicas: the chosen GPUs, else the logical CPUs."""
    configure(config)
    device_type = "GPU" if num_gpus(config) else "CPU"
    return [f"/device:{device_type}:{index}" for index in range(num_replica_devices(config))]
