"""The gradient path: what happens to gradients between backprop and the update, written once for
every tfdist step (tf-keras' `fit`, tfdist's Keras 3 step, `CustomLoop.minimize`):

1. loss scaling (mixed_float16): the loss times a dynamic scale before backprop;
2. all-reduce over the replicas, optionally in a narrower dtype on the wire (Horovod's fp16
   compression: cast, sum, cast back; measured 2.5-3.8x faster on 127.0.0.1, docs/PERFORMANCE.md);
3. the loss scale divided out;
4. the gradient noise scale measured (`tfdist.optim.noise_scale`), before clipping and noise;
5. clipping to a global norm;
6. Gaussian noise of variance eta / (1 + t) ** gamma, t the optimizer's update count
   (Neelakantan et al. 2015), drawn from a stateless generator seeded by the step, so every
   replica adds the same noise and mirrored variables stay identical;
7. the update: skipped when a loss-scaled step's gradients are not finite (the scale halves; it
   doubles after `LOSS_SCALE_GROWTH_STEPS` finite steps, as Keras' LossScaleOptimizer does), else
   applied, or accumulated over K micro-batches whose mean is applied once (weight decay with it:
   the optimizer applies it once per update).

Steps 1-6 run in each replica (`scale_loss`, `reduce`); 7 decides in cross-replica context
(`apply`), where a `tf.cond` may hold the update. With K > 1, steps 1-6 apply to each
micro-batch; the noise is drawn K times larger in variance, so that the mean of K draws has the
variance above. The optimizer only updates variables: `apply` hands it summed gradients through
a function of the caller's (tf-keras' `apply_gradients(..., skip_gradients_aggregation=True)`,
Keras 3's `apply`).
"""

import dataclasses
import functools

import tensorflow as tf

from tfdist.optim.noise_scale import NoiseScale
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.strategies import WireDtype

INITIAL_LOSS_SCALE = 2.0**15
LOSS_SCALE_GROWTH_STEPS = 2000  # Finite steps in a row before the scale doubles.
_NOISE_SEED_STRIDE = 1_000_003  # Keeps per-variable noise seeds apart.
# One copy of a variable, written by the update alone (counters, the loss scale, accumulators).
_ONE_COPY = {
    "trainable": False,
    "synchronization": tf.VariableSynchronization.ON_WRITE,
    "aggregation": tf.VariableAggregation.ONLY_FIRST_REPLICA,
}


@dataclasses.dataclass(frozen=True)
class GradientTransforms:
    """Options for the steps above; the defaults change nothing."""

    wire_dtype: WireDtype = WireDtype.FLOAT32
    clip_norm: float | None = None
    noise_eta: float = 0.0
    noise_gamma: float = 0.55
    accum_steps: int = 1
    seed: int = 0
    noise_scale_batch: int = 0  # The global batch of one (micro-)batch; 0: not measured.
    loss_scaling: bool = False

    @classmethod
    def of(
        cls,
        config: OptimizerConfig,
        *,
        wire_dtype: WireDtype,
        seed: int,
        global_batch_size: int,
        loss_scaling: bool,
    ) -> "GradientTransforms":
        """`config`'s clipping, noise, accumulation and noise-scale measurement (of batches of
        `global_batch_size`), with the all-reduce in `wire_dtype`."""
        return cls(
            wire_dtype=wire_dtype,
            clip_norm=config.clip_norm,
            noise_eta=config.gradient_noise_eta,
            noise_gamma=config.gradient_noise_gamma,
            accum_steps=config.grad_accum_steps,
            seed=seed,
            noise_scale_batch=global_batch_size if config.measure_noise_scale else 0,
            loss_scaling=loss_scaling,
        )


def all_reduce(wire_dtype: WireDtype, grads: list) -> list:
    """Sums `grads` over the replicas in `wire_dtype`, returning them in their own dtypes (call
    in a replica context); in float32, sparse gradients (`tf.IndexedSlices`, an embedding's)
    stay sparse."""
    context = tf.distribute.get_replica_context()
    if wire_dtype is WireDtype.FLOAT32:
        return context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    wire = [tf.cast(tf.convert_to_tensor(grad), wire_dtype.value) for grad in grads]
    summed = context.all_reduce(tf.distribute.ReduceOp.SUM, wire)
    return [tf.cast(total, grad.dtype) for total, grad in zip(summed, grads)]


def _values(grad) -> tf.Tensor:
    """The values of a gradient, dense or sparse."""
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def _times(grad, factor: tf.Tensor):
    """`grad` (dense or sparse) times the scalar `factor`, in the gradient's dtype."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(
            grad.values * tf.cast(factor, grad.values.dtype), grad.indices, grad.dense_shape
        )
    return grad * tf.cast(factor, grad.dtype)


def add_noise(
    grads: list[tf.Tensor], transforms: GradientTransforms, *, updates: tf.Tensor, draw: tf.Tensor
) -> list[tf.Tensor]:
    """`grads` plus Gaussian noise of variance eta / (1 + updates) ** gamma (times the
    accumulation steps: see above), drawn from a stateless generator seeded by `draw` (an int64
    step count), so that every replica adds the same noise."""
    variance = (
        transforms.noise_eta
        * transforms.accum_steps
        / (1.0 + tf.cast(updates, tf.float32)) ** transforms.noise_gamma
    )
    noisy = []
    for index, grad in enumerate(grads):
        seed = tf.stack(
            [
                tf.constant(transforms.seed * _NOISE_SEED_STRIDE + index, tf.int64),
                tf.cast(draw, tf.int64),
            ]
        )
        noise = tf.random.stateless_normal(tf.shape(grad), seed, dtype=tf.float32)
        noisy.append(grad + tf.cast(tf.sqrt(variance) * noise, grad.dtype))
    return noisy


class GradientPath(tf.Module):
    """The path of `transforms` for one model's trainable variables.

    Create it in the strategy's scope; its variables (loss scale, micro-batch count,
    accumulators, noise-scale averages) are made on the first step, as an optimizer's are, and
    are checkpointed with whatever tracks the path. Call `scale_loss` and `reduce` in each
    replica, then `apply` there too.
    """

    def __init__(self, transforms: GradientTransforms):
        super().__init__(name="gradient_path")
        self.transforms = transforms
        self.built = False
        self._rider = None  # What `carry` adds to the gradients' all-reduce.

    def carry(self, rider) -> None:
        """Sums `rider` over the replicas in every step's gradient all-reduce, at no cost of its
        own: its `local()` (a float32 scalar, this replica's) is summed with the gradients and
        the sum handed to its `take_sum(total)`. A preemption notice's agreement rides so
        (`tfdist.training.preemption`); not checkpointed."""
        self._rider = self._no_dependency(rider)

    def build(self, variables: list) -> None:
        """Makes the path's variables for the model's trainable `variables` (once; call in the
        strategy's scope, or in a replica under `tf.init_scope`)."""
        if self.built:
            return
        transforms = self.transforms
        if transforms.loss_scaling:
            self.loss_scale = tf.Variable(INITIAL_LOSS_SCALE, name="loss_scale", **_ONE_COPY)
            self.finite_steps = tf.Variable(0, dtype=tf.int64, name="finite_steps", **_ONE_COPY)
        if transforms.accum_steps > 1:
            self.micro_batches = tf.Variable(0, dtype=tf.int64, name="micro_batches", **_ONE_COPY)
            self.accumulators = [self._accumulator(variable) for variable in variables]
        if transforms.noise_scale_batch:
            self.noise_scale = NoiseScale()
        self.built = True

    @property
    def _needs_dense(self) -> bool:
        """Whether a step reads every value of a gradient (a sparse one is made dense then)."""
        transforms = self.transforms
        return bool(
            transforms.clip_norm
            or transforms.noise_eta
            or transforms.noise_scale_batch
            or transforms.accum_steps > 1
        )

    @staticmethod
    def _accumulator(variable) -> tf.Variable:
        strategy = tf.distribute.get_strategy()
        with strategy.extended.colocate_vars_with(variable):
            return tf.Variable(
                tf.zeros(variable.shape, variable.dtype), name="accumulated_mean", **_ONE_COPY
            )

    def scale_loss(self, loss: tf.Tensor) -> tf.Tensor:
        """Step 1: `loss` times the loss scale (record it on the gradient tape)."""
        if not self.transforms.loss_scaling:
            return loss
        return loss * tf.cast(self.loss_scale, loss.dtype)

    def reduce(self, grads: list, *, updates: tf.Tensor) -> list:
        """Steps 2-6 in a replica: this replica's gradients of the scaled loss (None where a
        variable has none) summed over the replicas, unscaled, measured, clipped and noised.
        `updates` is the optimizer's update count (the noise anneals with it)."""
        transforms = self.transforms
        present = [index for index, grad in enumerate(grads) if grad is not None]
        local = [grads[index] for index in present]
        if self._needs_dense:
            local = [tf.convert_to_tensor(grad) for grad in local]
        summed = self._all_reduce_with_rider(local)
        if transforms.loss_scaling:
            summed = self._unscaled(summed)
        if transforms.noise_scale_batch:
            self._measure_noise_scale(
                self._unscaled(local) if transforms.loss_scaling else local, summed, present
            )
        if transforms.clip_norm:
            summed, _ = tf.clip_by_global_norm(summed, transforms.clip_norm)
        if transforms.noise_eta:
            # One draw per step: each update, or each micro-batch when accumulating.
            draw = self.micro_batches if transforms.accum_steps > 1 else updates
            summed = add_noise(summed, transforms, updates=updates, draw=draw)
        reduced = list(grads)
        for index, value in zip(present, summed):
            reduced[index] = value
        return reduced

    def _all_reduce_with_rider(self, local: list) -> list:
        """`local` summed over the replicas, the rider's value with them (see `carry`)."""
        if self._rider is None:
            return all_reduce(self.transforms.wire_dtype, local)
        summed = all_reduce(self.transforms.wire_dtype, [*local, self._rider.local()])
        self._rider.take_sum(summed.pop())
        return summed

    def _unscaled(self, grads: list) -> list:
        return [_times(grad, 1.0 / self.loss_scale) for grad in grads]

    def _measure_noise_scale(self, local: list, summed: list, present: list[int]) -> None:
        """2+ replicas: this replica's gradient against the all-reduced one. One replica: each
        micro-batch's against the update's mean."""
        batch, steps = self.transforms.noise_scale_batch, self.transforms.accum_steps
        if tf.distribute.get_replica_context().num_replicas_in_sync > 1:
            self.noise_scale.observe_replicas(local, summed, global_batch=batch)
            return
        self.noise_scale.observe_micro_batch(
            summed,
            [self.accumulators[index] for index in present],
            last=(self.micro_batches + 1) % steps == 0,
            global_batch=batch,
            accum_steps=steps,
        )

    def apply(self, grads: list, apply_fn, *, updates: tf.Variable) -> None:
        """Step 7 in a replica: hands the reduced `grads` to `apply_fn` (the optimizer's update
        of the model's variables, called in a replica), unless the loss scale skips the step
        (`updates` then counts it, as Keras' LossScaleOptimizer does) or micro-batches are still
        accumulating."""
        if not self.transforms.loss_scaling and self.transforms.accum_steps == 1:
            apply_fn(grads)
            return
        finite = tf.reduce_all(
            [tf.reduce_all(tf.math.is_finite(_values(grad))) for grad in grads if grad is not None]
        )
        # The functions go in the merge function, not its arguments, which merge_call gathers
        # per replica.
        tf.distribute.get_replica_context().merge_call(
            functools.partial(self._update, apply_fn=apply_fn, updates=updates),
            args=(grads, finite),
        )

    def _update(
        self,
        strategy: tf.distribute.Strategy,
        grads: list,
        finite,
        *,
        apply_fn,
        updates: tf.Variable,
    ) -> None:
        """Step 7 in cross-replica context."""
        if not self.transforms.loss_scaling:
            self._accumulate_or_apply(strategy, grads, apply_fn)
            return
        finite = tf.reduce_all(strategy.experimental_local_results(finite))

        def on_finite():
            self._accumulate_or_apply(strategy, grads, apply_fn)
            grow = self.finite_steps + 1 >= LOSS_SCALE_GROWTH_STEPS
            self.loss_scale.assign(tf.where(grow, self.loss_scale * 2.0, self.loss_scale))
            self.finite_steps.assign(
                tf.where(grow, tf.constant(0, tf.int64), self.finite_steps + 1)
            )
            return tf.constant(True)

        def on_non_finite():
            self.loss_scale.assign(tf.maximum(self.loss_scale / 2.0, 1.0))
            self.finite_steps.assign(0)
            updates.assign_add(1)
            return tf.constant(False)

        tf.cond(finite, on_finite, on_non_finite)

    def _accumulate_or_apply(self, strategy: tf.distribute.Strategy, grads: list, apply_fn) -> None:
        steps = self.transforms.accum_steps
        if steps == 1:
            strategy.extended.call_for_each_replica(apply_fn, args=(grads,))
            return
        for grad, accumulator in zip(grads, self.accumulators):
            if grad is not None:
                strategy.extended.update(
                    accumulator,
                    lambda total, grad: total.assign_add(grad / steps),
                    args=(grad,),
                    group=False,
                )
        micro_batches = self.micro_batches.assign_add(1)

        means = [
            accumulator if grad is not None else None
            for grad, accumulator in zip(grads, self.accumulators)
        ]

        def apply():
            strategy.extended.call_for_each_replica(apply_fn, args=(means,))
            for accumulator in self.accumulators:
                accumulator.assign(tf.zeros_like(accumulator))
            return tf.constant(True)

        tf.cond(micro_batches % steps == 0, apply, lambda: tf.constant(False))

    def noise_scale_so_far(self) -> dict[str, float | None] | None:
        """What the noise-scale measurement found so far (`NoiseScale.result`); None when it is
        not measured or no step has run."""
        if not (self.transforms.noise_scale_batch and self.built):
            return None
        return self.noise_scale.result()


def gradient_noise_scale(optimizer) -> dict[str, float | None] | None:
    """The gradient noise scale an optimizer tfdist built has measured so far
    (`NoiseScale.result`), through a loss-scale wrapper; None when it does not measure
    (`--measure_noise_scale`) or has not stepped yet."""
    path = _path_of(optimizer)
    return path.noise_scale_so_far() if path is not None else None


def measures_noise_scale(optimizer) -> bool:
    """Whether `optimizer` (through a loss-scale wrapper) measures the gradient noise scale."""
    path = _path_of(optimizer)
    return path is not None and bool(path.transforms.noise_scale_batch)


def _path_of(optimizer) -> GradientPath | None:
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return getattr(inner, "gradient_path", None)
