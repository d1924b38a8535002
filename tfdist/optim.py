"""Optimizers by name."""

import tf_keras

from tfdist.config import OptimizerName

_MOMENTUM = 0.9


def build(name: OptimizerName, learning_rate: float) -> tf_keras.optimizers.Optimizer:
    """Returns a fresh optimizer; call inside `strategy.scope()`."""
    optimizers = tf_keras.optimizers
    if name is OptimizerName.SGD:
        return optimizers.SGD(learning_rate)
    if name is OptimizerName.MOMENTUM:
        return optimizers.SGD(learning_rate, momentum=_MOMENTUM)
    if name is OptimizerName.ADAM:
        return optimizers.Adam(learning_rate)
    return optimizers.RMSprop(learning_rate)
