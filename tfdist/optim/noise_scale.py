"""The gradient noise scale B_simple = tr(Σ) / |G|² (McCandlish et al. 2018, "An empirical model
of large-batch training"): Σ is the covariance of one example's gradient, G the true gradient.
Below about B_simple examples per step a larger batch buys proportionally fewer steps; far
above it, almost none (the critical batch size is of its order).

Two estimates of one step's gradient, over B_small and B_big examples, give unbiased estimates
of both (the paper's appendix A.1):

    |G|²  ≈ (B_big |G_big|² - B_small |G_small|²) / (B_big - B_small)
    tr(Σ) ≈ (|G_small|² - |G_big|²) / (1 / B_small - 1 / B_big)

Data parallelism supplies both almost free. With R ≥ 2 replicas, a replica's own gradient
(before the all-reduce, times R since Keras divides each replica's loss by R) is a gradient over
the per-replica batch, and the all-reduced sum one over the global batch. With one replica and
K > 1 micro-batches per update, each micro-batch's gradient is the small one and their mean the
big one. Each estimate is smoothed by a bias-corrected exponential moving average (`DECAY` per
step; the single estimates are very noisy) and B_simple is the ratio of the averages. Steps
whose gradients are not finite (an overflowing float16 step) are left out; tf-keras' loss-scale
optimizer hands on gradients with the loss scale already divided out.

Each replica keeps its own averages in sync-on-read variables, as Keras' metrics do: the
estimates are linear in the squared norms, so the mean of the replicas' averages, read at the
end of an epoch, is the average over all replicas' estimates, with no communication per step.
"""

import tensorflow as tf

DECAY = 0.99  # Per step: the averages span about the last 100 steps.


def estimates(small_sq, big_sq, small_batch: float, big_batch: float):
    """(|G|², tr(Σ)): unbiased estimates from the squared norms of gradients over
    `small_batch` and `big_batch` examples (NumPy or TensorFlow values)."""
    gradient_sq = (big_batch * big_sq - small_batch * small_sq) / (big_batch - small_batch)
    trace = (small_sq - big_sq) / (1.0 / small_batch - 1.0 / big_batch)
    return gradient_sq, trace


def squared_norm(grads) -> tf.Tensor:
    """Σ |g|² over `grads`, in float32."""
    return tf.add_n([tf.reduce_sum(tf.square(tf.cast(grad, tf.float32))) for grad in grads])


class NoiseScale(tf.Module):
    """Moving averages of the |G|² and tr(Σ) estimates; create in the strategy's scope.

    Example (eager, no strategy):
      >>> scale = NoiseScale()
      >>> scale.observe(small_sq=2.0, big_sq=1.1, small_batch=32, big_batch=64)
      >>> scale.result()
      {'noise_scale': 288.0..., 'gradient_sq': 0.2..., 'trace': 57.6...}
    """

    def __init__(self):
        super().__init__(name="noise_scale")

        def average(name: str) -> tf.Variable:
            return tf.Variable(
                0.0,
                name=name,
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.MEAN,
            )

        self.gradient_sq, self.trace, self.weight = (
            average(name) for name in ("gradient_sq", "trace", "weight")
        )
        # With micro-batches: the sum of this update's micro-batch |G_small|² so far.
        self.pending_small_sq = average("pending_small_sq")

    def observe(self, *, small_sq, big_sq, small_batch: float, big_batch: float) -> None:
        """Folds one step's squared norms into the averages (this replica's copies), unless
        either is not finite."""
        gradient_sq, trace = estimates(small_sq, big_sq, small_batch, big_batch)
        finite = tf.math.is_finite(gradient_sq) & tf.math.is_finite(trace)
        for variable, value in (
            (self.gradient_sq, gradient_sq),
            (self.trace, trace),
            (self.weight, 1.0),
        ):
            averaged = DECAY * variable + (1.0 - DECAY) * tf.cast(value, tf.float32)
            variable.assign(tf.where(finite, averaged, variable))

    def observe_replicas(self, local: list, reduced: list, *, global_batch: int) -> None:
        """One step's estimates from this replica's gradients (`local`, Keras' share: 1 /
        replicas of its batch's mean gradient) and their all-reduced sum (replica context)."""
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        self.observe(
            small_sq=replicas**2 * squared_norm(local),
            big_sq=squared_norm(reduced),
            small_batch=global_batch / replicas,
            big_batch=global_batch,
        )

    def observe_micro_batch(
        self, grads: list, accumulated: list, *, last, global_batch: int, accum_steps: int
    ) -> None:
        """Holds one micro-batch's |G_small|² (`grads`, all-reduced); on the `last` micro-batch
        of an update, observes them against the update's mean gradient (`accumulated`: the
        earlier micro-batches' gradients / `accum_steps`, summed)."""
        small_sq = squared_norm(grads)

        def observe():
            mean = [total + grad / accum_steps for total, grad in zip(accumulated, grads)]
            self.observe(
                small_sq=(self.pending_small_sq + small_sq) / accum_steps,
                big_sq=squared_norm(mean),
                small_batch=global_batch,
                big_batch=global_batch * accum_steps,
            )
            self.pending_small_sq.assign(0.0)
            return tf.constant(True)

        def hold():
            self.pending_small_sq.assign_add(small_sq)
            return tf.constant(False)

        tf.cond(last, observe, hold)

    def result(self) -> dict[str, float | None] | None:
        """{"noise_scale": B_simple, "gradient_sq": |G|², "trace": tr(Σ)} from the averages so
        far (read in cross-replica context: the mean over replicas), or None before any step.
        B_simple is None while the |G|² estimate is not positive: so far the gradient is all
        noise, as far as the averages can tell."""
        weight = float(self.weight.read_value())
        if weight == 0.0:
            return None
        gradient_sq = float(self.gradient_sq.read_value()) / weight
        trace = float(self.trace.read_value()) / weight
        return {
            "noise_scale": trace / gradient_sq if gradient_sq > 0 else None,
            "gradient_sq": gradient_sq,
            "trace": trace,
        }
