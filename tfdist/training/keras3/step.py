"""Keras 3 models (`--keras=3`) trained under every strategy by tfdist's own distributed step.

Keras 3's `fit` on TensorFlow 2.21 (keras 3.15) fails under multi-worker mirrored
(keras-team/keras#20585), does not support parameter server (keras-team/keras#18624), and under
mirrored breaks with `steps_per_execution > 1` and gives NaN with mixed_float16 loss scaling.
So tfdist runs the step itself (`Steps`), on the model's `compute_loss` and `compute_metrics`
and the optimizer's `apply`: in each replica the forward pass and `compute_loss` (Keras divides
it by the replicas), then the gradient path of `tfdist.optim.gradient_path` that tf-keras models
take too (loss scaling, the all-reduce, clipping, noise, accumulation), which hands the summed
gradients to the optimizer's `apply`. `tfdist.training.keras3.runner` runs the steps over the
data, and `tfdist.training.keras3.fit` trains a model with them, epoch by epoch.

Three Keras 3 internals are relied on, for the release `keras_flavour.KERAS3_CHECKED` names (the
guard refuses others): `_symbolic_build` creates the model's, metrics' and loss's variables before
the first step, from the data's shapes (tfdist builds the optimizer: `_build`); `apply`'s own sum
over the replicas is switched off on the optimizer tfdist trains with (`_skip_keras_all_reduce`),
since the path has summed already; and the update count and the metrics add atomically
(`_add_atomically`). A variable that `--variable_partition` split over the ps tasks is
differentiated and updated shard by shard (`tfdist.training.keras3.shards`).
"""

import keras
import tensorflow as tf

from tfdist import input_pipelines
from tfdist.optim.gradient_path import GradientPath
from tfdist.runtime.setup import Plan
from tfdist.training import guards as fit_guards
from tfdist.training import model as training_model
from tfdist.training.keras3 import shards as keras3_shards


def _skip_keras_all_reduce(optimizer: keras.optimizers.Optimizer) -> None:
    """Makes `optimizer.apply` take the gradients as already summed over the replicas."""
    # pylint: disable-next=protected-access
    optimizer._all_reduce_sum_gradients = lambda grads_and_vars: grads_and_vars


def _add_atomically(variables) -> None:
    """Makes `assign_add` on each Keras 3 variable one atomic add. Keras 3 adds by reading and
    assigning, which loses additions when parameter-server workers update the same variable at
    once: measured on 2 workers, 148 of 156 optimizer updates counted (the count drives the
    learning-rate schedule), and a validation loss halved (a metric's total lost a batch its
    count kept)."""
    for variable in variables:
        variable.assign_add = lambda delta, variable=variable: variable.value.assign_add(
            tf.cast(delta, variable.value.dtype)
        )


def _build(
    model: keras.Model, optimizer: keras.optimizers.Optimizer, data_spec
) -> list[keras.Variable]:
    """Creates the variables of `model`, its metrics and loss from `data_spec`, then those of
    `optimizer` (the model's, or the one it wraps) for the variables tfdist's step updates,
    which it returns: `keras3_shards.trainable_shards`. Call in the strategy's scope.

    Keras' `_symbolic_build` would build the model's optimizer on the model's own variables,
    whole ones where the partitioner split them, so it is shown the optimizer as built."""
    _, labels, _ = keras.utils.unpack_x_y_sample_weight(data_spec)
    if labels is None and model.loss is not None:  # Features only, for a compiled loss.
        raise ValueError(fit_guards.NO_LOSS)
    compiled = model.optimizer
    unbuilt = not compiled.built
    compiled.built = True
    try:
        # pylint: disable-next=protected-access
        model._symbolic_build(data_batch=data_spec)
    finally:
        compiled.built = not unbuilt
    keras3_shards.make_savable(model)
    variables = keras3_shards.trainable_shards(model)
    optimizer.build(variables)
    if not compiled.built:  # A loss-scale wrapper makes its own variables too.
        compiled.build(variables)
    return variables


class Steps:
    """The distributed training and evaluation steps of one compiled Keras 3 model."""

    def __init__(self, plan: Plan, model: keras.Model, element_spec):
        self.strategy, self.model = plan.strategy, model
        self.optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
        # tfdist's optimizer carries its path; a model compiled with the user's own optimizer
        # gets the run's.
        self.path = getattr(self.optimizer, "gradient_path", None) or GradientPath(
            training_model.gradient_transforms(plan)
        )
        self.preprocess_dtype = (
            plan.placement.compute_dtype
            if plan.placement is not None and plan.placement.on_device
            else None
        )
        self.augmentation = plan.config.input.augmentation  # The recipe the host cropped for.
        with self.strategy.scope():
            # What is differentiated and updated: a variable the partitioner split, shard by
            # shard (`tfdist.training.keras3.shards`).
            self.variables = _build(model, self.optimizer, self._model_spec(element_spec))
            self.constrained = keras3_shards.constrained(model)
            self.loss_metric = keras.metrics.Mean(name="loss")
            self.path.build([variable.value for variable in self.variables])
        _skip_keras_all_reduce(self.optimizer)
        # pylint: disable-next=protected-access
        _add_atomically(
            [self.optimizer._iterations, *model.metrics_variables, *self.loss_metric.variables]
        )

    def _model_spec(self, element_spec):
        """The batches' spec as the model sees them (float images with device
        preprocessing)."""
        if self.preprocess_dtype is None:
            return element_spec
        features, *rest = element_spec
        return (tf.TensorSpec(features.shape, self.preprocess_dtype), *rest)

    def _features(self, features, *, training: bool):
        if self.preprocess_dtype is None:
            return features
        return input_pipelines.device_preprocess(
            features,
            training=training,
            compute_dtype=self.preprocess_dtype,
            augmentation=self.augmentation,
        )

    def _forward(self, data, *, training: bool):
        """The replica's loss (its share of the global mean) and predictions; updates the
        metrics."""
        features, labels, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        features = self._features(features, training=training)
        predictions = self.model(features, training=training)
        loss = self.model.compute_loss(
            x=features, y=labels, y_pred=predictions, sample_weight=sample_weight, training=training
        )
        batch = tf.shape(tf.nest.flatten(predictions)[0])[0]
        self.loss_metric.update_state(
            loss * self.strategy.num_replicas_in_sync, sample_weight=batch
        )
        self.model.compute_metrics(features, labels, predictions, sample_weight)
        return loss

    def train_replica(self, data) -> None:
        """One training step on this replica's batch (replica context): the forward pass, then
        the gradient path, which hands the summed gradients to the optimizer's `apply`."""
        with tf.GradientTape() as tape:
            loss = self.path.scale_loss(self._forward(data, training=True))
        grads = self.path.reduce(
            tape.gradient(loss, self.variables), updates=self.optimizer.iterations
        )
        self.path.apply(grads, self._update, updates=self.optimizer.iterations)

    def _update(self, grads: list) -> None:
        """The optimizer's update of the variables by their summed `grads` (in a replica), then
        each split variable's constraint on the whole variable, as Keras applies it."""
        self.optimizer.apply(grads, self.variables)
        for variable in self.constrained:
            variable.assign(variable.constraint(variable))

    def evaluate_replica(self, data) -> None:
        """One evaluation step on this replica's batch: updates the loss and metrics."""
        self._forward(data, training=False)

    def logs(self, prefix: str = "") -> dict[str, float]:
        """The metrics' values over the batches since the last reset, across replicas."""
        results = {
            name: value for name, value in self.model.get_metrics_result().items() if name != "loss"
        }
        results = {"loss": self.loss_metric.result(), **results}
        return {prefix + name: float(value) for name, value in results.items()}

    def reset_metrics(self) -> None:
        self.loss_metric.reset_state()
        self.model.reset_metrics()
