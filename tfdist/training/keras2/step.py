"""tfdist's training step for the tf-keras models it compiles: Keras' own `train_step`, with the
optimizer's `minimize` replaced by the optimizer's gradient path (`tfdist.optim.gradient_path`),
which tfdist's Keras 3 step and `CustomLoop` run too.

Keras' `fit` still drives the step (`steps_per_execution`, callbacks, every strategy); only what
happens between the loss and the update is tfdist's. Under mixed_float16 Keras wraps the
optimizer in its LossScaleOptimizer when compiling; the wrapper then stands by (its scale stays
2**15), since the path scales the loss itself.
"""

import tensorflow as tf
import tf_keras

from tfdist.training import guards


def minimize(
    optimizer: tf_keras.optimizers.Optimizer,
    loss: tf.Tensor,
    tape: tf.GradientTape,
    variables: list,
) -> None:
    """In a replica: the gradients of `loss` (recorded on `tape`, scaled here under loss
    scaling) with respect to `variables`, applied through `apply_gradients`."""
    path = optimizer.gradient_path
    with tf.init_scope():  # As an optimizer builds its slots on its first step.
        path.build(variables)
    with tape:
        scaled = path.scale_loss(loss)
    apply_gradients(optimizer, tape.gradient(scaled, variables), variables)


def apply_gradients(optimizer: tf_keras.optimizers.Optimizer, grads: list, variables: list) -> None:
    """In a replica: this replica's `grads` (of the loss `optimizer.gradient_path` scaled)
    through that path (all-reduce, unscaling, clipping, noise, accumulation, the loss scale's
    skip), then applied to `variables` by `optimizer`."""
    path = optimizer.gradient_path
    with tf.init_scope():
        path.build(variables)
    reduced = path.reduce(grads, updates=optimizer.iterations)

    def apply(summed: list) -> None:
        optimizer.apply_gradients(zip(summed, variables), skip_gradients_aggregation=True)

    path.apply(reduced, apply, updates=optimizer.iterations)


def install(model: tf_keras.Model, optimizer: tf_keras.optimizers.Optimizer) -> None:
    """Makes `model.fit` train with `minimize`; `model` is compiled with `optimizer` (one that
    `tfdist.optim.recipe.build_optimizer` made)."""

    def train_step(data):
        features, labels, sample_weight = tf_keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            loss = model.compute_loss(features, labels, predictions, sample_weight)
        if loss is None:  # Batches without labels, and a model with no loss of its own.
            raise ValueError(guards.NO_LOSS)
        minimize(optimizer, loss, tape, model.trainable_variables)
        return model.compute_metrics(features, labels, predictions, sample_weight)

    train_step.gradient_path = optimizer.gradient_path
    model.train_step = train_step


def gradient_path_of(model: tf_keras.Model):
    """The gradient path `model`'s training step runs once a step: its `GradientPath` when
    `install` gave it tfdist's step, else None (a model compiled with an optimizer of its own)."""
    return getattr(model.train_step, "gradient_path", None)
