"""Keras 3 models (`--keras=3`) trained under every strategy by tfdist's own distributed step.

Keras 3's `fit` on TensorFlow 2.21 (keras 3.15) fails under multi-worker mirrored
(keras-team/keras#20585), does not support parameter server (keras-team/keras#18624), and under
mirrored breaks with `steps_per_execution > 1` and gives NaN with mixed_float16 loss scaling.
So tfdist runs the step itself, on the model's `compute_loss` and `compute_metrics` and the
optimizer's `apply`. One training step:

1. each replica: the forward pass, `compute_loss` (Keras divides it by the replicas), times the
   loss scale under mixed_float16, and the gradients;
2. in each replica, summed over the replicas in the all-reduce dtype, unscaled, clipped and
   noised (`tfdist.optim.gradients`);
3. the update: the optimizer's `apply` in each replica; with loss scaling or accumulation the
   decision is taken once, in cross-replica context, as tf-keras' LossScaleOptimizer does (a
   non-finite gradient skips the update and halves the scale; K micro-batches are averaged
   into one update).

Three Keras 3 internals are relied on, for the release `keras_flavour.KERAS3_CHECKED` names (the
guard refuses others): `_symbolic_build` creates the metrics' and optimizer's variables before
the first step, from the data's shapes; and `apply`'s own sum over the replicas is switched off
on the optimizer tfdist trains with (`_skip_keras_all_reduce`), since step 2 has summed already;
and the update count and the metrics add atomically (`_add_atomically`).

Under parameter server a ClusterCoordinator schedules `steps_per_execution` steps at a time on
the workers. With `--model_dir`: a backup of the model, optimizer, loss scale and epochs done
at the end of every epoch, in `backup/` (other workers write a temporary copy, since every
worker must take part in saving), restored when a run restarts and deleted when it finishes;
and each epoch's weights in `checkpoints/epoch-NNN` for the evaluator (`tfdist.training.keras3.evaluator`).
"""

import os
import shutil
import sys
from typing import Sequence

import keras
import tensorflow as tf

from tfdist import input_pipelines
from tfdist.strategies import StrategyKind
from tfdist.strategies import WireDtype
from tfdist.training import guards as fit_guards
from tfdist.optim import gradients
from tfdist.training.keras3 import optim as keras3_optim
from tfdist.optim import recipe as optim
from tfdist.training import fit as training
from tfdist.training.callbacks import EpochHistory
from tfdist.training.callbacks import NoiseScaleLog
from tfdist.training.callbacks import ThroughputTimer
from tfdist.optim.noise_scale import NoiseScale
from tfdist.runtime.config import Precision
from tfdist.runtime.setup import Plan

BACKUP_DIR = "backup"  # Under --model_dir, as tf-keras' backup.
INITIAL_LOSS_SCALE = 2.0 ** 15
LOSS_SCALE_GROWTH_STEPS = 2000  # Finite steps before the scale doubles.
_ONE_COPY = {"trainable": False, "synchronization": tf.VariableSynchronization.ON_WRITE,
             "aggregation": tf.VariableAggregation.ONLY_FIRST_REPLICA}


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
            tf.cast(delta, variable.value.dtype))


def build_model(plan: Plan, model, *, loss, metrics) -> keras.Model:
    """The Keras 3 model to train: `model` (built in `plan.strategy.scope()`) or what the
    function `model` returns when called there; compiled with tfdist's optimizer recipe,
    `loss` and `metrics` unless it is compiled already."""
    config = plan.config
    with training.strategy_scope(plan):
        model = training.checked_model(plan, model)
        if not model.compiled:
            training.check_compile_arguments(keras, loss, metrics)
            model.compile(optimizer=keras3_optim.build_optimizer(
                config.optimizer, plan.global_batch_size, plan.steps_per_epoch,
                config.train.epochs), loss=loss, metrics=metrics)
    return model


class _LossScale:
    """Dynamic loss scaling, as tf-keras' LossScaleOptimizer: starts at 2**15, halves on a
    step with non-finite gradients (whose update is skipped), doubles after
    `LOSS_SCALE_GROWTH_STEPS` finite steps in a row. Create in the strategy's scope."""

    def __init__(self):
        self.scale = tf.Variable(INITIAL_LOSS_SCALE, name="loss_scale", **_ONE_COPY)
        self.finite_steps = tf.Variable(0, dtype=tf.int64, name="finite_steps", **_ONE_COPY)

    def after_finite_step(self) -> None:
        """Cross-replica context."""
        grow = self.finite_steps + 1 >= LOSS_SCALE_GROWTH_STEPS
        self.scale.assign(tf.where(grow, self.scale * 2.0, self.scale))
        self.finite_steps.assign(tf.where(grow, tf.constant(0, tf.int64),
                                          self.finite_steps + 1))

    def after_non_finite_step(self) -> None:
        """Cross-replica context."""
        self.scale.assign(tf.maximum(self.scale / 2.0, 1.0))
        self.finite_steps.assign(0)


class _Steps:
    """The distributed training and evaluation steps of one compiled Keras 3 model."""

    def __init__(self, plan: Plan, model: keras.Model, element_spec):
        config = plan.config
        self.strategy, self.model = plan.strategy, model
        self.optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
        self.transforms = optim.gradient_transforms(
            config.optimizer, config.strategy.allreduce_dtype, config.train.seed,
            global_batch_size=plan.global_batch_size)
        self.preprocess_dtype = plan.placement.compute_dtype \
            if plan.placement is not None and plan.placement.on_device else None
        with self.strategy.scope():
            # pylint: disable-next=protected-access
            model._symbolic_build(data_batch=self._model_spec(element_spec))
            self.optimizer.build(model.trainable_variables)
            self.loss_metric = keras.metrics.Mean(name="loss")
            self.loss_scale = _LossScale() \
                if config.train.mixed_precision is Precision.MIXED_FLOAT16 else None
            self.micro_batches = tf.Variable(0, dtype=tf.int64, name="micro_batches",
                                             **_ONE_COPY)
            self.accumulators = [self._accumulator(variable)
                                 for variable in model.trainable_variables] \
                if self.transforms.accum_steps > 1 else []
            self.noise_scale = NoiseScale() if self.transforms.noise_scale_batch else None
        _skip_keras_all_reduce(self.optimizer)
        # pylint: disable-next=protected-access
        _add_atomically([self.optimizer._iterations, *model.metrics_variables,
                         *self.loss_metric.variables])

    def _accumulator(self, variable) -> tf.Variable:
        with self.strategy.extended.colocate_vars_with(variable.value):
            return tf.Variable(tf.zeros(variable.shape, variable.dtype), name="accumulated_mean",
                               **_ONE_COPY)

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
        return input_pipelines.device_preprocess(features, training=training,
                                                 compute_dtype=self.preprocess_dtype)

    def _forward(self, data, *, training: bool):
        """The replica's loss (its share of the global mean) and predictions; updates the
        metrics."""
        features, labels, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        features = self._features(features, training=training)
        predictions = self.model(features, training=training)
        loss = self.model.compute_loss(x=features, y=labels, y_pred=predictions,
                                       sample_weight=sample_weight, training=training)
        batch = tf.shape(tf.nest.flatten(predictions)[0])[0]
        self.loss_metric.update_state(loss * self.strategy.num_replicas_in_sync,
                                      sample_weight=batch)
        self.model.compute_metrics(features, labels, predictions, sample_weight)
        return loss

    def train_replica(self, data) -> None:
        """One training step on this replica's batch (replica context)."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss = self._forward(data, training=True)
            if self.loss_scale is not None:
                loss = loss * tf.cast(self.loss_scale.scale, loss.dtype)
        grads = self._summed(tape.gradient(loss, variables))
        if self.loss_scale is None and self.transforms.accum_steps == 1:
            self.optimizer.apply(grads, variables)
            return
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(grad)))
                                for grad in grads if grad is not None])
        tf.distribute.get_replica_context().merge_call(self._update, args=(grads, finite))

    def _summed(self, grads: list) -> list:
        """Step 2: the gradients summed over the replicas, unscaled, clipped and noised."""
        present = [index for index, grad in enumerate(grads) if grad is not None]
        values = local = [grads[index] for index in present]
        if self.transforms.wire_dtype is WireDtype.FLOAT32:
            values = tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, values)
        else:
            values = gradients.all_reduce(tf.as_dtype(self.transforms.wire_dtype.value),
                                          [tf.convert_to_tensor(value) for value in values])
        if self.loss_scale is not None:
            values = self._unscaled(values)
        if self.noise_scale is not None:
            local = self._unscaled(local) if self.loss_scale is not None else local
            self._measure_noise_scale(local, values, present)
        if self.transforms.clip_norm:
            values, _ = tf.clip_by_global_norm(values, self.transforms.clip_norm)
        if self.transforms.noise_eta:
            draw = self.micro_batches if self.transforms.accum_steps > 1 else \
                self.optimizer.iterations
            values = gradients.add_noise(values, self.transforms,
                                         updates=self.optimizer.iterations, draw=draw)
        summed = list(grads)
        for index, value in zip(present, values):
            summed[index] = value
        return summed

    def _unscaled(self, values: list) -> list:
        return [value / tf.cast(self.loss_scale.scale, value.dtype) for value in values]

    def _measure_noise_scale(self, local: list, summed: list, present: list[int]) -> None:
        """As `tfdist.optim.gradients` measures it for tf-keras optimizers (replica context)."""
        local = [tf.convert_to_tensor(value) for value in local]
        batch = self.transforms.noise_scale_batch
        if self.strategy.num_replicas_in_sync > 1:
            self.noise_scale.observe_replicas(local, summed, global_batch=batch)
            return
        steps = self.transforms.accum_steps
        self.noise_scale.observe_micro_batch(
            summed, [self.accumulators[index] for index in present],
            last=(self.micro_batches + 1) % steps == 0, global_batch=batch, accum_steps=steps)

    def _update(self, strategy: tf.distribute.Strategy, grads: list, finite) -> None:
        """Step 3 with loss scaling or accumulation (cross-replica context)."""
        finite = tf.reduce_all(strategy.experimental_local_results(finite))

        def on_finite():
            self._accumulate_or_apply(strategy, grads)
            if self.loss_scale is not None:
                self.loss_scale.after_finite_step()
            return tf.constant(True)

        def on_non_finite():
            self.loss_scale.after_non_finite_step()
            return tf.constant(False)

        if self.loss_scale is None:
            on_finite()
        else:
            tf.cond(finite, on_finite, on_non_finite)

    def _accumulate_or_apply(self, strategy: tf.distribute.Strategy, grads: list) -> None:
        variables = self.model.trainable_variables
        steps = self.transforms.accum_steps
        if steps == 1:
            strategy.extended.call_for_each_replica(self.optimizer.apply,
                                                    args=(grads, variables))
            return
        for grad, accumulator in zip(grads, self.accumulators):
            if grad is not None:
                strategy.extended.update(
                    accumulator, lambda total, grad: total.assign_add(grad / steps),
                    args=(grad,), group=False)
        micro_batches = self.micro_batches.assign_add(1)

        def apply():
            strategy.extended.call_for_each_replica(
                self.optimizer.apply, args=(list(self.accumulators), variables))
            for accumulator in self.accumulators:
                accumulator.assign(tf.zeros_like(accumulator))
            return tf.constant(True)

        tf.cond(micro_batches % steps == 0, apply, lambda: tf.constant(False))

    def evaluate_replica(self, data) -> None:
        """One evaluation step on this replica's batch: updates the loss and metrics."""
        self._forward(data, training=False)

    def logs(self, prefix: str = "") -> dict[str, float]:
        """The metrics' values over the batches since the last reset, across replicas."""
        results = {name: value for name, value in self.model.get_metrics_result().items()
                   if name != "loss"}
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
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(
            self.strategy) if plan.kind is StrategyKind.PARAMETER_SERVER else None
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

    def dataset(self, dataset_fn: training.DatasetFn):
        """The distributed dataset of `dataset_fn`: per worker under parameter server."""
        def noting_spec(context: tf.distribute.InputContext) -> tf.data.Dataset:
            dataset = dataset_fn(context)
            self.element_spec = self.element_spec or dataset.element_spec
            return dataset

        if self.coordinator is None:
            return self.strategy.distribute_datasets_from_function(noting_spec,
                                                                   options=self.options)
        return self.coordinator.create_per_worker_dataset(
            lambda: self.strategy.distribute_datasets_from_function(noting_spec))

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
        self.model_dir = plan.config.train.model_dir
        with plan.strategy.scope():
            self.epochs_done = tf.Variable(0, dtype=tf.int64, name="epochs_done", **_ONE_COPY)
        state = {"model": steps.model, "optimizer": steps.optimizer,
                 "epochs_done": self.epochs_done}
        if steps.loss_scale is not None:
            state.update(loss_scale=steps.loss_scale.scale,
                         finite_steps=steps.loss_scale.finite_steps)
        if steps.accumulators:
            state.update(micro_batches=steps.micro_batches,
                         accumulators=list(steps.accumulators))
        self._backup = tf.train.Checkpoint(**state)
        self._weights = tf.train.Checkpoint(model=steps.model)

    def _directory(self, name: str) -> str:
        """`name` under --model_dir for the task that writes results; a temporary directory
        beside it for the other workers."""
        directory = os.path.join(self.model_dir, name)
        if self.plan.writes_results:
            return directory
        return f"{directory}-{self.plan.task.replace(':', '-')}.tmp"

    def restore(self) -> int:
        """Restores the backup an earlier run left, if any; returns the epochs it had done."""
        if not self.model_dir:
            return 0
        latest = tf.train.latest_checkpoint(os.path.join(self.model_dir, BACKUP_DIR))
        if latest:
            self._backup.restore(latest).assert_existing_objects_matched()
        return int(self.epochs_done.numpy())

    def save(self, epochs_done: int) -> None:
        """Backs up after `epochs_done` epochs and keeps that epoch's weights (every worker
        calls it; only the results writer's copy stays)."""
        if not self.model_dir:
            return
        self.epochs_done.assign(epochs_done)
        backup = tf.train.CheckpointManager(self._backup, self._directory(BACKUP_DIR),
                                            max_to_keep=1)
        backup.save(checkpoint_number=epochs_done)
        weights = self._directory(training.CHECKPOINTS_DIR)
        self._weights.write(os.path.join(
            weights, f"{training.CHECKPOINT_PREFIX}{epochs_done:03d}"))
        if not self.plan.writes_results:
            shutil.rmtree(backup.directory, ignore_errors=True)
            shutil.rmtree(weights, ignore_errors=True)

    def finished(self) -> None:
        """The run is complete: a restart starts afresh (as tf-keras' BackupAndRestore)."""
        if self.model_dir and self.plan.writes_results:
            shutil.rmtree(os.path.join(self.model_dir, BACKUP_DIR), ignore_errors=True)


def fit(plan: Plan, model: keras.Model, train_fn: training.DatasetFn, validation: tuple | None, *,
        options: tf.distribute.InputOptions, history_path: str | None,
        callbacks: Sequence[keras.callbacks.Callback] = ()) -> dict:
    """Trains the compiled Keras 3 `model` on `train_fn`'s data, validating each epoch on
    `validation` ((dataset function, steps) or None); returns the summary's training part,
    as `tfdist.fit` does for tf-keras models. `callbacks` see the train's, epochs' and
    `steps_per_execution` batches' beginnings and ends."""
    config = plan.config
    runner = _Runner(plan, options)
    train_batches = fit_guards.BatchCounts(train_fn)
    train_iterator = iter(runner.dataset(train_batches))
    fit_guards.require_enough(train_batches, steps_per_epoch=plan.steps_per_epoch,
                              epochs=config.train.epochs, new_iterator_each_epoch=False)
    validation_data = validation and runner.dataset(validation[0])
    steps = _Steps(plan, model, runner.element_spec)
    runner.bind(steps)
    checkpoints = _Checkpoints(plan, steps)
    timer = ThroughputTimer(global_batch_size=plan.global_batch_size,
                            steps_per_epoch=plan.steps_per_epoch)
    history = EpochHistory(history_path, writes=plan.writes_results)
    finite_loss = training.finite_loss(plan)
    finite_loss.set_model(model)
    update_batch = plan.global_batch_size * config.optimizer.grad_accum_steps
    noise_logs = [NoiseScaleLog(steps.noise_scale.result, global_batch_size=update_batch)] \
        if steps.noise_scale else []
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
    print(f"tfdist: Keras 3 step: {int(steps.optimizer.iterations.numpy())} optimizer updates",
          file=sys.stderr, flush=True)
    epochs = history.history()
    return {"final": {name: values[-1] for name, values in epochs.items()},
            "history": epochs, "examples_per_sec": timer.examples_per_sec(),
            "epoch_train_s": timer.epoch_train_s,
            "resumed_from_epoch": history.resumed_from_epoch}
