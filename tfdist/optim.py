"""Optimizers by name."""

import tf_keras

from strategies import WireDtype
from tfdist import wire_compression
from tfdist.config import OptimizerName

_MOMENTUM = 0.9


def build(name: OptimizerName, learning_rate: float, *,
          allreduce_dtype: WireDtype = WireDtype.FLOAT32) -> tf_keras.optimizers.Optimizer:
    """Returns a fresh optimizer whose gradient all-reduce runs in `allreduce_dtype`; call
    inside `strategy.scope()`."""
    optimizers = tf_keras.optimizers
    optimizer_class, options = {
        OptimizerName.SGD: (optimizers.SGD, {}),
        OptimizerName.MOMENTUM: (optimizers.SGD, {"momentum": _MOMENTUM}),
        OptimizerName.ADAM: (optimizers.Adam, {}),
        OptimizerName.RMSPROP: (optimizers.RMSprop, {}),
    }[name]
    if allreduce_dtype is not WireDtype.FLOAT32:
        optimizer_class = wire_compression.compressing(optimizer_class, allreduce_dtype)
    return optimizer_class(learning_rate, **options)
