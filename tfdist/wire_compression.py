"""Gradient compression for the wire: all-reduce gradients in a narrower dtype.

As Horovod's fp16 compression: each replica casts its gradients to bfloat16 or float16, the
replicas sum them in that dtype, and each casts the sum back to the variable's dtype before the
update. Half the bytes cross the wire; measured on 127.0.0.1, a 64 MiB all-reduce between two
workers took 3.5x less time (docs/PERFORMANCE.md). The cost is precision: bfloat16 keeps
float32's range with 8 bits of mantissa; float16 keeps 11 bits but overflows above 65504.
"""

import functools

import tensorflow as tf

from strategies import WireDtype


def _all_reduce_in(wire_dtype: tf.DType, grads_and_vars):
    """Sums gradients over the replicas in `wire_dtype`; None gradients stay None."""
    grads_and_vars = list(grads_and_vars)
    present = [(grad, var) for grad, var in grads_and_vars if grad is not None]
    if not present:
        return grads_and_vars
    wire = [tf.cast(grad, wire_dtype) for grad, _ in present]
    summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, wire)
    reduced = iter([tf.cast(total, grad.dtype) for total, (grad, _) in zip(summed, present)])
    return [(None, var) if grad is None else (next(reduced), var) for grad, var in grads_and_vars]


@functools.cache
def compressing(optimizer_class: type, wire_dtype: WireDtype) -> type:
    """`optimizer_class` whose gradient all-reduce runs in `wire_dtype` (a tf-keras optimizer:
    `aggregate_gradients` is its documented hook, also used under a LossScaleOptimizer)."""
    dtype = tf.as_dtype(wire_dtype.value)

    class Compressing(optimizer_class):  # pylint: disable=too-few-public-methods
        def aggregate_gradients(self, grads_and_vars):
            return _all_reduce_in(dtype, grads_and_vars)

    Compressing.__name__ = Compressing.__qualname__ = optimizer_class.__name__
    return Compressing

