"""Keras 3 models (`--keras=3`) trained under every strategy by tfdist's own distributed step.

Keras 3's `fit` on TensorFlow 2.21 (keras 3.15) fails under multi-worker mirrored
(keras-team/keras#20585), does not support parameter server (keras-team/keras#18624), and under
mirrored breaks with `steps_per_execution > 1` and gives NaN with mixed_float16 loss scaling.
So tfdist runs the step itself, on the model's `compute_loss` and `compute_metrics` and the
optimizer's `apply`: in each replica the forward pass and `compute_loss` (Keras divides it by
the replicas), then the gradient path of `tfdist.optim.gradient_path` that tf-keras models take
too (loss scaling, the all-reduce, clipping, noise, accumulation), which hands the summed
gradients to the optimizer's `apply`.

Three Keras 3 internals are relied on, for the release `keras_flavour.KERAS3_CHECKED` names (the
guard refuses others): `_symbolic_build` creates the model's, metrics' and loss's variables before
the first step, from the data's shapes (tfdist builds the optimizer: `_build`); `apply`'s own sum
over the replicas is switched off on the optimizer tfdist trains with (`_skip_keras_all_reduce`),
since the path has summed already; and the update count and the metrics add atomically
(`_add_atomically`).

Under parameter server a ClusterCoordinator schedules `steps_per_execution` steps at a time on
the workers; a variable that `--variable_partition` split over the ps tasks is differentiated
and updated shard by shard (`tfdist.training.keras3.shards`). With `--model_dir`: a backup of
the model, optimizer, gradient path (loss scale, accumulators) and epochs done at the end of
every epoch, in `backup/` (other workers write a temporary copy, since every worker must take
part in saving), restored when a run restarts and deleted when it finishes; and each epoch's
weights in `checkpoints/epoch-NNN` for the evaluator (`tfdist.training.keras3.evaluator`).
"""

import os
import shutil
import sys
from typing import Sequence

import keras
import tensorflow as tf

from tfdist import input_pipelines
from tfdist.optim.gradient_path import GradientPath
from tfdist.runtime.setup import Plan
from tfdist.strategies import StrategyKind
from tfdist.training import data as training_data
from tfdist.training import guards as fit_guards
from tfdist.training import model as training_model
from tfdist.training.callbacks import EpochHistory
from tfdist.training.callbacks import NoiseScaleLog
from tfdist.training.callbacks import ThroughputTimer
from tfdist.training.data import Data
from tfdist.training.data import DatasetFn
from tfdist.training.keras3 import optim as keras3_optim
from tfdist.training.keras3 import shards as keras3_shards

_ONE_COPY = {
    "trainable": False,
    "synchronization": tf.VariableSynchronization.ON_WRITE,
    "aggregation": tf.VariableAggregation.ONLY_FIRST_REPLICA,
}


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


def build_model(plan: Plan, model, *, data: Data, loss, metrics) -> keras.Model:
    """The Keras 3 model to train: `model` (built in `plan.strategy.scope()`) or what the
    function `model` returns when called there; compiled with tfdist's optimizer recipe,
    `loss` and `metrics` unless it is compiled already. (Device preprocessing of `data`'s
    images runs in tfdist's step, so the model takes them as it is.)"""
    del data
    config = plan.config
    with training_model.strategy_scope(plan):
        model = training_model.checked_model(plan, model)
        if not model.compiled:
            training_model.check_compile_arguments(keras, loss, metrics)
            model.compile(
                optimizer=keras3_optim.build_optimizer(
                    config.optimizer,
                    update_batch_size=plan.update_batch_size,
                    updates_per_epoch=plan.updates_per_epoch,
                    epochs=config.train.epochs,
                    transforms=training_model.gradient_transforms(plan),
                ),
                loss=loss,
                metrics=metrics,
            )
    return model


class _Steps:
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


class _Runner:
    """Runs `_Steps` over distributed data: in this process (mirrored strategies), or
    scheduled on the workers by a ClusterCoordinator (parameter server)."""

    def __init__(self, plan: Plan, options: tf.distribute.InputOptions):
        self.plan, self.options = plan, options
        self.strategy = plan.strategy
        self.coordinator = (
            tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
            if plan.kind is StrategyKind.PARAMETER_SERVER
            else None
        )
        self.element_spec = None  # Of the first dataset `dataset` made.
        self._train = self._evaluate = None

    def bind(self, steps: _Steps) -> None:
        """Compiles the loops over `steps`' training and evaluation steps."""
        strategy = self.strategy

        @tf.function
        def train(iterator, count):
            for _ in tf.range(count):
                strategy.run(steps.train_replica, args=(next(iterator),))

        @tf.function
        def evaluate(iterator, count):
            for _ in tf.range(count):
                batch = iterator.get_next_as_optional()
                if not batch.has_value():
                    break
                strategy.run(steps.evaluate_replica, args=(batch.get_value(),))

        self._train, self._evaluate = train, evaluate

    def dataset(self, dataset_fn: DatasetFn):
        """The distributed dataset of `dataset_fn`: per worker under parameter server."""

        def noting_spec(context: tf.distribute.InputContext) -> tf.data.Dataset:
            dataset = dataset_fn(context)
            self.element_spec = self.element_spec or dataset.element_spec
            return dataset

        if self.coordinator is None:
            return self.strategy.distribute_datasets_from_function(
                noting_spec, options=self.options
            )
        return self.coordinator.create_per_worker_dataset(
            lambda: self.strategy.distribute_datasets_from_function(noting_spec)
        )

    def run(self, function, iterator, count: int, callbacks=None) -> None:
        """`count` steps of `function` (train or evaluate), `steps_per_execution` per call,
        each call between `callbacks`' `on_train_batch_begin` and `_end` (under parameter
        server: when it is scheduled)."""
        chunk = self.plan.config.train.steps_per_execution
        for start in range(0, count, chunk):
            steps = min(chunk, count - start)
            if callbacks is not None:
                callbacks.on_train_batch_begin(start)
            args = (iterator, tf.constant(steps, tf.int64))
            if self.coordinator is None:
                function(*args)
            else:
                self.coordinator.schedule(function, args=args)
            if callbacks is not None:
                callbacks.on_train_batch_end(start + steps - 1)
        if self.coordinator is not None:
            self.coordinator.join()

    def train(self, iterator, count: int, callbacks) -> None:
        self.run(self._train, iterator, count, callbacks)

    def evaluate(self, dataset, count: int) -> None:
        self.run(self._evaluate, iter(dataset), count)


class _Checkpoints:
    """The backup (restored on restart) and each epoch's weights, under `--model_dir`."""

    def __init__(self, plan: Plan, steps: _Steps):
        self.plan = plan
        self.model_dir = plan.model_dir
        with plan.strategy.scope():
            self.epochs_done = tf.Variable(0, dtype=tf.int64, name="epochs_done", **_ONE_COPY)
        self._backup = tf.train.Checkpoint(
            model=steps.model,
            optimizer=steps.optimizer,
            gradient_path=steps.path,
            epochs_done=self.epochs_done,
        )
        self._weights = tf.train.Checkpoint(model=steps.model)

    def _directory(self, path: str) -> str:
        """`path` under --model_dir for the task that writes results; a scratch copy for the
        other workers."""
        return path if self.plan.writes_results else self.model_dir.scratch(path, self.plan.task)

    def restore(self) -> int:
        """Restores the backup an earlier run left, if any; returns the epochs it had done."""
        if self.model_dir is None:
            return 0
        latest = tf.train.latest_checkpoint(self.model_dir.backup)
        if latest:
            self._backup.restore(latest).assert_existing_objects_matched()
        return int(self.epochs_done.numpy())

    def save(self, epochs_done: int) -> None:
        """Backs up after `epochs_done` epochs and keeps that epoch's weights (every worker
        calls it; only the results writer's copy stays)."""
        if self.model_dir is None:
            return
        self.epochs_done.assign(epochs_done)
        backup = tf.train.CheckpointManager(
            self._backup, self._directory(self.model_dir.backup), max_to_keep=1
        )
        backup.save(checkpoint_number=epochs_done)
        weights = self._directory(self.model_dir.checkpoints)
        self._weights.write(
            os.path.join(weights, os.path.basename(self.model_dir.checkpoint(epochs_done)))
        )
        if not self.plan.writes_results:
            shutil.rmtree(backup.directory, ignore_errors=True)
            shutil.rmtree(weights, ignore_errors=True)

    def finished(self) -> None:
        """The run is complete: a restart starts afresh (as tf-keras' BackupAndRestore)."""
        if self.model_dir is not None and self.plan.writes_results:
            shutil.rmtree(self.model_dir.backup, ignore_errors=True)


def train(
    plan: Plan,
    model,
    train_data: Data,
    validation_data: Data | None,
    validation_steps: int | None,
    *,
    loss,
    metrics,
    callbacks: Sequence[keras.callbacks.Callback],
) -> tuple[keras.Model, dict]:
    """(the model, the summary's training part) for a Keras 3 model: built as `build_model`
    says and trained by tfdist's own loop, as `tfdist.fit` trains tf-keras models."""
    model = build_model(plan, model, data=train_data, loss=loss, metrics=metrics)
    validation = None
    if validation_data is not None:
        validation = (
            training_data.dataset_fn(plan, validation_data, "validation", training=False),
            training_data.validation_steps(plan, validation_data, validation_steps),
        )
    with fit_guards.explained(
        model.name, lambda error: training_data.explain(train_data, error), plan.config.cluster
    ):
        trained = _train_loop(
            plan,
            model,
            training_data.dataset_fn(plan, train_data, "train", training=True),
            validation,
            callbacks=callbacks,
        )
    return model, trained


def _train_loop(
    plan: Plan,
    model: keras.Model,
    train_fn: DatasetFn,
    validation: tuple | None,
    *,
    callbacks: Sequence[keras.callbacks.Callback],
) -> dict:
    """Trains the compiled Keras 3 `model` on `train_fn`'s data, validating each epoch on
    `validation` ((dataset function, steps) or None); returns the summary's training part.
    `callbacks` see the train's, epochs' and `steps_per_execution` batches' beginnings and
    ends."""
    config = plan.config
    runner = _Runner(plan, training_data.input_options(plan))
    train_batches = fit_guards.BatchCounts(train_fn)
    train_iterator = iter(runner.dataset(train_batches))
    fit_guards.require_enough(
        train_batches,
        steps_per_epoch=plan.steps_per_epoch,
        epochs=config.train.epochs,
        new_iterator_each_epoch=False,
    )
    validation_data = validation and runner.dataset(validation[0])
    steps = _Steps(plan, model, runner.element_spec)
    keras3_shards.log_placement(model)
    runner.bind(steps)
    checkpoints = _Checkpoints(plan, steps)
    timer = ThroughputTimer(
        global_batch_size=plan.global_batch_size, steps_per_epoch=plan.steps_per_epoch
    )
    history = EpochHistory(
        plan.model_dir and plan.model_dir.history_json, writes=plan.writes_results
    )
    finite_loss = fit_guards.finite_loss(plan)
    finite_loss.set_model(model)
    noise_logs = (
        [NoiseScaleLog(steps.path.noise_scale_so_far, global_batch_size=plan.update_batch_size)]
        if steps.path.transforms.noise_scale_batch
        else []
    )
    user_callbacks = keras.callbacks.CallbackList(list(callbacks), model=model)
    user_callbacks.on_train_begin()
    for epoch in range(checkpoints.restore(), config.train.epochs):
        for callback in (timer, history, user_callbacks):
            callback.on_epoch_begin(epoch)
        steps.reset_metrics()
        runner.train(train_iterator, plan.steps_per_epoch, user_callbacks)
        timer.on_test_begin()
        logs = steps.logs()
        if validation_data is not None:
            steps.reset_metrics()
            runner.evaluate(validation_data, validation[1])
            logs.update(steps.logs("val_"))
        finite_loss.on_epoch_end(epoch, logs)  # Before saving: a diverged epoch is not.
        checkpoints.save(epoch + 1)
        shown = " - ".join(f"{name}: {value:.4f}" for name, value in logs.items())
        print(f"Epoch {epoch + 1}/{config.train.epochs} - {shown}", flush=True)
        for callback in (timer, *noise_logs, history, user_callbacks):
            callback.on_epoch_end(epoch, logs)
    for callback in (*noise_logs, user_callbacks):
        callback.on_train_end()
    checkpoints.finished()
    print(
        f"tfdist: Keras 3 step: {int(steps.optimizer.iterations.numpy())} optimizer updates",
        file=sys.stderr,
        flush=True,
    )
    epochs = history.history()
    return {
        "final": {name: values[-1] for name, values in epochs.items()},
        "history": epochs,
        "examples_per_sec": timer.examples_per_sec(),
        "epoch_train_s": timer.epoch_train_s,
        "resumed_from_epoch": history.resumed_from_epoch,
    }
