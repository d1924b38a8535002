"""OneDeviceStrategy: one replica on the first GPU, else on the CPU."""

import tensorflow as tf


def build(devices: list[str]) -> tf.distribute.OneDeviceStrategy:
    """Returns a strategy that places the single replica on `devices[0]`."""
    return tf.distribute.OneDeviceStrategy(devices[0])
