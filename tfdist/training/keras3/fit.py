"""Keras 3 models (`--keras=3`): compiled with tfdist's optimizer recipe (`build_model`) and
trained epoch by epoch by tfdist's own distributed step (`tfdist.training.keras3.step`, run by
`tfdist.training.keras3.runner`), with tfdist's callbacks (throughput, divergence, the noise
scale, history) and the backup and per-epoch weights of `tfdist.training.keras3.checkpoints`,
as `tfdist.fit` trains tf-keras models with Keras' own `fit`."""

import sys
from typing import Sequence

import keras

from tfdist.runtime.setup import Plan
from tfdist.training import data as training_data
from tfdist.training import guards as fit_guards
from tfdist.training import model as training_model
from tfdist.training import preemption
from tfdist.training.callbacks import EpochHistory
from tfdist.training.callbacks import NoiseScaleLog
from tfdist.training.callbacks import Progress
from tfdist.training.callbacks import ThroughputTimer
from tfdist.training.data import Data
from tfdist.training.data import DatasetFn
from tfdist.training.keras3 import optim as keras3_optim
from tfdist.training.keras3 import shards as keras3_shards
from tfdist.training.keras3.checkpoints import Checkpoints
from tfdist.training.keras3.runner import Runner
from tfdist.training.keras3.step import Steps


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
    start: tuple[int, int] | None,
) -> tuple[keras.Model, dict]:
    """(the model, the summary's training part) for a Keras 3 model: built as `build_model`
    says and trained by tfdist's own loop, as `tfdist.fit` trains tf-keras models, from
    `start` ((epoch, step) of a backup it resumes; None: the beginning)."""
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
            training_data.from_start(plan, train_data, start),
            validation,
            start=start,
            callbacks=callbacks,
        )
    return model, trained


def _preempted(plan: Plan, checkpoints: Checkpoints, epoch: int, step: int | None) -> Exception:
    """The preemption's line, the state saved after `step` (from 0) of `epoch`; None: at the
    epoch's end, whose backup is saved already."""
    if plan.model_dir is None:
        save = None
    elif step is None:
        save = lambda: None  # noqa: E731
    else:
        save = lambda: checkpoints.save_in_epoch(epoch, step + 1)  # noqa: E731
    return preemption.stopped(epoch, step, save, plan.model_dir and plan.model_dir.root)


def _train_loop(
    plan: Plan,
    model: keras.Model,
    train_fn: DatasetFn,
    validation: tuple | None,
    *,
    start: tuple[int, int] | None,
    callbacks: Sequence[keras.callbacks.Callback],
) -> dict:
    """Trains the compiled Keras 3 `model` on `train_fn`'s data (from `start`, a backup's
    (epoch, step), when it resumes one), validating each epoch on `validation` ((dataset
    function, steps) or None); returns the summary's training part.
    `callbacks` see the train's, epochs' and `steps_per_execution` batches' beginnings and
    ends."""
    config = plan.config
    runner = Runner(plan, training_data.input_options(plan))
    train_batches = fit_guards.BatchCounts(train_fn)
    train_iterator = iter(runner.dataset(train_batches))
    fit_guards.require_enough(
        train_batches,
        steps_per_epoch=plan.steps_per_epoch,
        epochs=config.train.epochs,
        new_iterator_each_epoch=False,
    )
    validation_data = validation and runner.dataset(validation[0])
    steps = Steps(plan, model, runner.element_spec)
    keras3_shards.log_placement(model)
    watch = preemption.watch(plan)
    runner.bind(steps, watch)
    checkpoints = Checkpoints(plan, steps)
    timer = ThroughputTimer(
        global_batch_size=plan.global_batch_size, steps_per_epoch=plan.steps_per_epoch
    )
    history = EpochHistory(
        plan.model_dir and plan.model_dir.history_json,
        writes=plan.writes_results,
        epochs=config.train.epochs,
        start=start,
    )
    finite_loss = fit_guards.finite_loss(plan)
    finite_loss.set_model(model)
    noise_logs = (
        [NoiseScaleLog(steps.path.noise_scale_so_far, global_batch_size=plan.update_batch_size)]
        if steps.path.transforms.noise_scale_batch
        else []
    )
    user_callbacks = keras.callbacks.CallbackList(
        [*callbacks, Progress(steps_per_epoch=plan.steps_per_epoch)], model=model
    )
    user_callbacks.on_train_begin()
    watch.notice.training()
    first_epoch, first_step = checkpoints.restore()
    for epoch in range(first_epoch, config.train.epochs):
        for callback in (timer, history, user_callbacks):
            callback.on_epoch_begin(epoch)
        steps.reset_metrics()
        stopped_after = runner.train(
            train_iterator,
            plan.steps_per_epoch,
            user_callbacks,
            first=first_step if epoch == first_epoch else 0,
            watch=watch,
        )
        if stopped_after is not None and stopped_after + 1 < plan.steps_per_epoch:
            raise _preempted(plan, checkpoints, epoch, stopped_after)
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
        last = epoch + 1 == config.train.epochs  # Then the run is done: it ends as usual.
        if not last and (stopped_after is not None or watch.stops_at_epoch_end()):
            raise _preempted(plan, checkpoints, epoch, None)
    for callback in (*noise_logs, history, user_callbacks):
        callback.on_train_end()
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
        "backup_save_s": plan.model_dir and checkpoints.clock.slowest_s,
    }
