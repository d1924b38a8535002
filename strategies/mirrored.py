"""MirroredStrategy: one worker, one replica per local device, synchronous all-reduce."""

import functools

import tensorflow as tf

from .config import AllReduce
from .config import StrategyConfig
from .config import StrategyConfigError
from .devices import is_gpu


def _cross_device_ops(
    config: StrategyConfig, devices: list[str]
) -> tf.distribute.CrossDeviceOps | None:
    """Returns the all-reduce `config` asks for; None lets TensorFlow choose. Logical GPUs of
    one physical GPU get hierarchical copy: NCCL, TensorFlow's choice for GPUs, needs distinct
    ones."""
    if config.all_reduce is AllReduce.AUTO:
        return tf.distribute.HierarchicalCopyAllReduce() if config.num_logical_gpus > 1 else None
    if config.all_reduce is AllReduce.REDUCTION_TO_ONE_DEVICE:
        return tf.distribute.ReductionToOneDevice()
    if not all(is_gpu(device) for device in devices):
        raise StrategyConfigError(
            f"all_reduce={config.all_reduce.value} needs GPUs, but the replicas are on "
            f"{', '.join(devices)}; use all_reduce=auto or reduction_to_one_device."
        )
    if config.all_reduce is AllReduce.NCCL:
        return tf.distribute.NcclAllReduce(num_packs=config.num_packs)
    return tf.distribute.HierarchicalCopyAllReduce(num_packs=config.num_packs)


def build(config: StrategyConfig, devices: list[str]) -> tf.distribute.MirroredStrategy:
    """Returns a MirroredStrategy over `devices` with the configured all-reduce: the same one
    for the same config and devices within a process.

    Two MirroredStrategy objects in one process number their collectives from the same keys,
    so the second one's all-reduce can meet the first one's instance of another shape
    ("Shape mismatch in the collective instance", measured with TF 2.21 on 2 logical CPUs).
    Reusing the strategy keeps the numbering going (a notebook or test that sets up twice).
    """
    return _build(config, tuple(devices))


@functools.lru_cache(maxsize=None)
def _build(config: StrategyConfig, devices: tuple[str, ...]) -> tf.distribute.MirroredStrategy:
    return tf.distribute.MirroredStrategy(
        devices=list(devices), cross_device_ops=_cross_device_ops(config, list(devices))
    )
