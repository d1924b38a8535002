"""What happens to gradients between backprop and the update, in any tf-keras optimizer:

1. all-reduce over the replicas, optionally in a narrower dtype on the wire (Horovod's fp16
   compression: cast, sum, cast back; measured 2.5-3.8x faster on 127.0.0.1, docs/PERFORMANCE.md);
2. clip to a global norm;
3. add Gaussian noise of variance eta / (1 + t) ** gamma, t the optimizer's update count
   (Neelakantan et al. 2015), drawn from a stateless generator seeded by the step, so every
   replica adds the same noise and mirrored variables stay identical;
4. accumulate K micro-batches and apply their mean once (and the weight decay with it).

1-3 run in each replica after the all-reduce, in `aggregate_gradients`, tf-keras' documented
hook, so they see the summed gradients; 4 runs in the cross-replica update
(`_distributed_apply_gradients_fn`, tf-keras 2.21's) where a `tf.cond` may hold the update.
With K > 1, steps 1-3 apply to each micro-batch; the noise is drawn K times larger in
variance, so that the mean of K draws has the variance above.

With `noise_scale_batch` set, `aggregate_gradients` also measures the gradient noise scale
(`tfdist.optim.noise_scale`) from the gradients before and after step 1, before clipping and noise:
read it with `gradient_noise_scale(optimizer)`.
"""

import dataclasses
import functools

import tensorflow as tf

from tfdist.strategies import WireDtype
from tfdist.optim.noise_scale import NoiseScale

_NOISE_SEED_STRIDE = 1_000_003  # Keeps per-variable noise seeds apart.


@dataclasses.dataclass(frozen=True)
class GradientTransforms:
    """Options for steps 1-4 above; the defaults change nothing."""
    wire_dtype: WireDtype = WireDtype.FLOAT32
    clip_norm: float | None = None
    noise_eta: float = 0.0
    noise_gamma: float = 0.55
    accum_steps: int = 1
    seed: int = 0
    noise_scale_batch: int = 0  # The global batch of one (micro-)batch; 0: not measured.


def all_reduce(wire_dtype: tf.DType, grads: list[tf.Tensor]) -> list[tf.Tensor]:
    """Sums `grads` over the replicas in `wire_dtype`, returning them in their own dtypes (call
    in a replica context)."""
    wire = [tf.cast(grad, wire_dtype) for grad in grads]
    summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, wire)
    return [tf.cast(total, grad.dtype) for total, grad in zip(summed, grads)]


def add_noise(grads: list[tf.Tensor], transforms: GradientTransforms, *, updates: tf.Tensor,
              draw: tf.Tensor) -> list[tf.Tensor]:
    """`grads` plus Gaussian noise of variance eta / (1 + updates) ** gamma (times the
    accumulation steps: see above), drawn from a stateless generator seeded by `draw` (an int64
    step count), so that every replica adds the same noise."""
    variance = (transforms.noise_eta * transforms.accum_steps /
                (1.0 + tf.cast(updates, tf.float32)) ** transforms.noise_gamma)
    noisy = []
    for index, grad in enumerate(grads):
        seed = tf.stack([tf.constant(transforms.seed * _NOISE_SEED_STRIDE + index, tf.int64),
                         tf.cast(draw, tf.int64)])
        noise = tf.random.stateless_normal(tf.shape(grad), seed, dtype=tf.float32)
        noisy.append(grad + tf.cast(tf.sqrt(variance) * noise, grad.dtype))
    return noisy


@functools.cache
def with_transforms(optimizer_class: type, transforms: GradientTransforms) -> type:
    """`optimizer_class` (a tf-keras optimizer) with `transforms` applied to its gradients."""
    if transforms == GradientTransforms():
        return optimizer_class
    wire_dtype = tf.as_dtype(transforms.wire_dtype.value)
    accum_steps = transforms.accum_steps

    class Transformed(optimizer_class):
        """`optimizer_class` whose gradients go through `tfdist.optim.gradients`' steps."""
        measures_noise_scale = bool(transforms.noise_scale_batch)

        def build(self, var_list):
            super().build(var_list)
            if transforms.noise_scale_batch and not hasattr(self, "_noise_scale"):
                self._noise_scale = NoiseScale()
            if accum_steps == 1 or getattr(self, "_accumulators", None) is not None:
                return
            self._accumulators = {
                self._var_key(var): self.add_variable_from_reference(var, "accumulated_mean")
                for var in var_list}
            self._micro_batches = self.add_variable((), tf.int64, name="micro_batches")

        def aggregate_gradients(self, grads_and_vars):
            grads_and_vars = list(grads_and_vars)
            with tf.init_scope():  # As apply_gradients does, which runs this first.
                self.build([var for _, var in grads_and_vars])
            present = [index for index, (grad, _) in enumerate(grads_and_vars)
                       if grad is not None]
            grads = [tf.convert_to_tensor(grads_and_vars[index][0]) for index in present]
            if transforms.wire_dtype is WireDtype.FLOAT32:
                reduced = [grad for grad, _ in super().aggregate_gradients(
                    [(grad, grads_and_vars[index][1]) for grad, index in zip(grads, present)])]
            else:
                reduced = all_reduce(wire_dtype, grads)
            if transforms.noise_scale_batch:
                self._measure_noise_scale(grads, reduced,
                                          [grads_and_vars[index][1] for index in present])
            if transforms.clip_norm:
                reduced, _ = tf.clip_by_global_norm(reduced, transforms.clip_norm)
            if transforms.noise_eta:
                reduced = self._add_noise(reduced)
            result = list(grads_and_vars)
            for index, grad in zip(present, reduced):
                result[index] = (grad, grads_and_vars[index][1])
            return result

        def _measure_noise_scale(self, local: list[tf.Tensor], reduced: list[tf.Tensor],
                                 variables: list) -> None:
            """2+ replicas: this replica's gradient against the all-reduced one. One replica:
            each micro-batch's against the update's mean."""
            batch = transforms.noise_scale_batch
            if tf.distribute.get_replica_context().num_replicas_in_sync > 1:
                self._noise_scale.observe_replicas(local, reduced, global_batch=batch)
                return
            self._noise_scale.observe_micro_batch(
                reduced, [self._accumulators[self._var_key(var)] for var in variables],
                last=(self._micro_batches + 1) % accum_steps == 0, global_batch=batch,
                accum_steps=accum_steps)

        def _add_noise(self, grads: list[tf.Tensor]) -> list[tf.Tensor]:
            # One draw per step: each update, or each micro-batch when accumulating.
            draw = self._micro_batches if accum_steps > 1 else tf.cast(self.iterations, tf.int64)
            return add_noise(grads, transforms, updates=self.iterations, draw=draw)

        def _apply_weight_decay(self, variables):
            if accum_steps == 1:
                super()._apply_weight_decay(variables)
            # Else it is applied with the accumulated update, once per K micro-batches.

        def _distributed_apply_gradients_fn(self, distribution, grads_and_vars, **kwargs):
            if accum_steps == 1:
                return super()._distributed_apply_gradients_fn(distribution, grads_and_vars,
                                                               **kwargs)
            grads_and_vars = list(grads_and_vars)
            accumulators = [self._accumulators[self._var_key(var)] for _, var in grads_and_vars]
            for (grad, _), accumulator in zip(grads_and_vars, accumulators):
                distribution.extended.update(
                    accumulator, lambda total, grad: total.assign_add(grad / accum_steps),
                    args=(grad,), group=False)
            micro_batches = self._micro_batches.assign_add(1)

            def update():
                variables = [var for _, var in grads_and_vars]
                self._decay_weights(distribution, variables)
                super(Transformed, self)._distributed_apply_gradients_fn(
                    distribution, list(zip(accumulators, variables)), **kwargs)
                for accumulator in accumulators:
                    distribution.extended.update(
                        accumulator, lambda total: total.assign(tf.zeros_like(total)),
                        group=False)
                return tf.constant(True)

            tf.cond(micro_batches % accum_steps == 0, update, lambda: tf.constant(False))
            return tf.identity(self.iterations)

        def _decay_weights(self, distribution, variables):
            if self.weight_decay is None:
                return
            for var in variables:
                if self._use_weight_decay(var):
                    distribution.extended.update(
                        var, lambda weight: weight.assign_sub(
                            weight * tf.cast(self.weight_decay * self.learning_rate,
                                             weight.dtype)),
                        group=False)

    Transformed.__name__ = Transformed.__qualname__ = optimizer_class.__name__
    return Transformed


def gradient_noise_scale(optimizer) -> dict[str, float | None] | None:
    """The gradient noise scale `optimizer` measured so far (`NoiseScale.result`), through a
    loss-scale wrapper; None when it does not measure or has not stepped yet."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    tracker = getattr(inner, "_noise_scale", None)
    return tracker.result() if tracker is not None else None


def measures_noise_scale(optimizer) -> bool:
    """Whether `optimizer` (through a loss-scale wrapper) measures the gradient noise scale."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return getattr(type(inner), "measures_noise_scale", False)
