"""tf-keras models (`--keras=2`, the default): built or checked in the strategy's scope, compiled
with tfdist's optimizer recipe and step (`step`), and trained by Keras' own `fit` with tfdist's
callbacks (throughput, divergence, the noise scale, history, backup and restore, per-epoch
checkpoints, TensorBoard), on datasets distributed as each strategy takes them."""

import re
from typing import Sequence

import tensorflow as tf
import tf_keras

from tfdist import input_pipelines
from tfdist.input_pipelines import InputConfig
from tfdist.optim import gradient_path
from tfdist.optim import recipe
from tfdist.runtime.config import ConfigError
from tfdist.runtime.setup import Plan
from tfdist.strategies import StrategyKind
from tfdist.training import data as training_data
from tfdist.training import guards
from tfdist.training import model as training_model
from tfdist.training import preemption
from tfdist.training.callbacks import BackupAndRestore
from tfdist.training.callbacks import BoundedSteps
from tfdist.training.callbacks import EpochHistory
from tfdist.training.callbacks import NoiseScaleLog
from tfdist.training.callbacks import Progress
from tfdist.training.callbacks import SaveOnNotice
from tfdist.training.callbacks import ThroughputTimer
from tfdist.training.data import Data
from tfdist.training.data import DatasetFn
from tfdist.training.keras2 import step

_SHARD_NAME = re.compile(r"(?P<name>.+)/part_(?P<part>[0-9]+)(:[0-9]+)?")


def tfdist_optimizer(plan: Plan) -> tf_keras.optimizers.Optimizer:
    """The tf-keras optimizer recipe of `plan.config.optimizer`, with its gradient path."""
    return recipe.build_optimizer(
        plan.config.optimizer,
        update_batch_size=plan.update_batch_size,
        updates_per_epoch=plan.updates_per_epoch,
        epochs=plan.config.train.epochs,
        transforms=training_model.gradient_transforms(plan),
    )


def _with_device_preprocessing(plan: Plan, model: tf_keras.Model, data: Data) -> tf_keras.Model:
    """`model` behind an input of the dtype an image pipeline delivers: with preprocessing on
    the device, uint8 images go through the preprocessing layer first (run in each replica's
    step, on its device), which augments as `data`'s recipe says."""
    if not (isinstance(data, InputConfig) and plan.placement.on_device):
        return model
    images = tf_keras.Input(
        training_data.dataset_info(plan, data).image_shape, dtype="uint8", name="image"
    )
    layer = input_pipelines.device_preprocessing(data.augmentation)
    return tf_keras.Model(images, model(layer(images)), name=model.name)


def _compile(plan: Plan, model: tf_keras.Model, loss, metrics) -> None:
    """Compiles an uncompiled `model` with `loss`, `metrics`, tfdist's optimizer and step."""
    if model.compiled_loss is not None:  # The user's own: Keras' step, loss scaling included.
        return
    training_model.check_compile_arguments(tf_keras, loss, metrics)
    optimizer = tfdist_optimizer(plan)
    model.compile(
        optimizer=optimizer,
        loss=loss,
        metrics=metrics,
        steps_per_execution=plan.config.train.steps_per_execution,
    )
    step.install(model, optimizer)


def build_model(plan: Plan, model, *, data: Data, loss=None, metrics=None) -> tf_keras.Model:
    """The model `fit` trains: `model` (built in `plan.strategy.scope()`), or what the function
    `model` returns when called there with no arguments; compiled as `fit` says."""
    with training_model.strategy_scope(plan):
        model = _with_device_preprocessing(plan, training_model.checked_model(plan, model), data)
        _compile(plan, model, loss, metrics)
    log_sharding(plan, model)
    return model


def log_sharding(plan: Plan, model: tf_keras.Model) -> None:
    """Under parameter server, says which ps task holds which rows of each sharded variable
    (`--variable_partition`), one line per variable; Keras lists the shards as variables
    named `<name>/part_<i>`."""
    if plan.kind is not StrategyKind.PARAMETER_SERVER:
        return
    sharded: dict[str, list] = {}
    for variable in model.variables:
        match = _SHARD_NAME.fullmatch(variable.name)
        if match:
            sharded.setdefault(match["name"], []).append((int(match["part"]), variable))
    for name, parts in sharded.items():
        parts.sort(key=lambda part: part[0])
        training_model.log_shards(name, [shard for _, shard in parts])


def _distribute(plan: Plan, dataset_fn: DatasetFn):
    """Per-worker datasets: Keras' coordinator path under PS, else the strategy's own."""
    if plan.kind is StrategyKind.PARAMETER_SERVER:
        return tf_keras.utils.experimental.DatasetCreator(dataset_fn)
    return plan.strategy.distribute_datasets_from_function(
        dataset_fn, options=training_data.input_options(plan)
    )


def _bounded_steps(plan: Plan) -> list[tf_keras.callbacks.Callback]:
    """`BoundedSteps` where `--collective_timeout_s` bounds a multi-worker task's calls."""
    return [] if plan.collective_deadline is None else [BoundedSteps(plan.collective_deadline)]


def _output_callbacks(
    plan: Plan, backup: BackupAndRestore | None
) -> list[tf_keras.callbacks.Callback]:
    """`backup` (and restore), per-epoch checkpoints and TensorBoard logs under `--model_dir`;
    tf-keras keeps non-chief copies temporary."""
    model_dir = plan.model_dir
    if model_dir is None:
        return []
    return [
        backup,
        tf_keras.callbacks.ModelCheckpoint(
            model_dir.checkpoint("{epoch:03d}"), save_weights_only=True
        ),
        tf_keras.callbacks.TensorBoard(model_dir.logs()),
    ]


def _backup(plan: Plan) -> BackupAndRestore | None:
    """Backup and restore under `--model_dir`, every epoch or every `--backup_every` steps."""
    if plan.model_dir is None:
        return None
    every = plan.config.train.backup_every
    return BackupAndRestore(
        plan.model_dir.backup,
        preemption.SaveClock(plan),
        save_freq=every if every == "epoch" else int(every),
    )


def _noise_scale_log(plan: Plan, model: tf_keras.Model) -> list[NoiseScaleLog]:
    """The noise-scale log under `--measure_noise_scale`, once `model`'s optimizer measures."""
    if not plan.config.optimizer.measure_noise_scale:
        return []
    if not gradient_path.measures_noise_scale(model.optimizer):
        raise ConfigError(
            f"measure_noise_scale: model {model.name!r} came compiled with its own "
            "optimizer, which does not measure it; pass the model uncompiled "
            "(fit(..., loss=..., metrics=[...])) to train with tfdist's."
        )
    return [
        NoiseScaleLog(
            lambda: gradient_path.gradient_noise_scale(model.optimizer),
            global_batch_size=plan.update_batch_size,
        )
    ]


def _check_batch_hooks(plan: Plan, callbacks: Sequence[tf_keras.callbacks.Callback]) -> None:
    """Raises ConfigError for a callback with batch hooks under parameter server, which tf-keras
    refuses (with a traceback) once `fit` has begun: there the coordinator schedules the steps,
    and their logs are not there yet when a hook would run. It takes callbacks that read none."""
    if plan.kind is not StrategyKind.PARAMETER_SERVER:
        return
    for index, callback in enumerate(callbacks):
        hooked = any(
            getattr(callback, f"_implements_{mode}_batch_hooks", lambda: False)()
            for mode in ("train", "test", "predict")
        )
        if hooked and not getattr(callback, "_supports_tf_logs", False):
            raise ConfigError(
                f"callbacks[{index}] ({type(callback).__name__}) has batch hooks, which tf-keras "
                "does not call under strategy=parameter_server (the coordinator schedules the "
                "steps; their logs come later); move that work to its epoch hooks, or, if its "
                "batch hooks read no logs, set self._supports_tf_logs = True in its __init__ after "
                "super().__init__() (they then run as each step is scheduled), or train with "
                "keras=3."
            )


def train(
    plan: Plan,
    model,
    train_data: Data,
    validation_data: Data | None,
    validation_steps: int | None,
    *,
    loss,
    metrics,
    callbacks: Sequence[tf_keras.callbacks.Callback],
    start: tuple[int, int] | None,
) -> tuple[tf_keras.Model, dict]:
    """(the model, the summary's training part): `model.fit` with tfdist's callbacks, from
    `start` ((epoch, step) of a backup it resumes; None: the beginning)."""
    _check_batch_hooks(plan, callbacks)
    model = build_model(plan, model, data=train_data, loss=loss, metrics=metrics)
    config = plan.config
    timer = ThroughputTimer(
        global_batch_size=plan.global_batch_size, steps_per_epoch=plan.steps_per_epoch
    )
    epochs = EpochHistory(
        plan.model_dir and plan.model_dir.history_json,
        writes=plan.writes_results,
        epochs=config.train.epochs,
        start=start,
    )
    train_batches = guards.BatchCounts(training_data.from_start(plan, train_data, start))
    train_set = _distribute(plan, train_batches)
    guards.require_enough(
        train_batches,
        steps_per_epoch=plan.steps_per_epoch,
        epochs=config.train.epochs,
        new_iterator_each_epoch=isinstance(train_set, tf.data.Dataset),
    )
    validation = {}
    if validation_data is not None:
        validation = {
            "validation_data": _distribute(
                plan, training_data.dataset_fn(plan, validation_data, "validation", training=False)
            ),
            "validation_steps": training_data.validation_steps(
                plan, validation_data, validation_steps
            ),
        }
    backup, watch = _backup(plan), preemption.watch(plan)
    model.train_step = watch.around(model.train_step, step.gradient_path_of(model))
    watch.notice.training()
    with guards.explained(
        model.name, lambda error: training_data.explain(train_data, error), plan.config.cluster
    ):
        model.fit(
            train_set,
            epochs=config.train.epochs,
            steps_per_epoch=plan.steps_per_epoch,
            callbacks=[
                *_bounded_steps(plan),
                timer,
                Progress(steps_per_epoch=plan.steps_per_epoch),
                guards.finite_loss(plan),
                *_noise_scale_log(plan, model),
                epochs,
                *callbacks,
                *_output_callbacks(plan, backup),
                SaveOnNotice(watch, backup, steps_per_epoch=plan.steps_per_epoch),
            ],
            verbose=2,
            **validation,
        )
    history = epochs.history()
    return model, {
        "final": {name: values[-1] for name, values in history.items()},
        "history": history,
        "examples_per_sec": timer.examples_per_sec(),
        "epoch_train_s": timer.epoch_train_s,
        "resumed_from_epoch": epochs.resumed_from_epoch,
        "backup_save_s": backup and backup.clock.slowest_s,
    }
