"""`fit`: a user's model and data trained under the plan's strategy, or, on a serving or
evaluating task, that task's part of the run; and the run summary.

The Keras the run trains with (`--keras`, checked in `tfdist.setup`) is reached through one seam,
`flavour`: tf-keras models train with Keras' `fit` and tfdist's step (`tfdist.training.keras2`),
Keras 3 models with tfdist's own distributed loop (`tfdist.training.keras3`). Both share the
rest of this room (data, model checks, guards, callbacks), which never imports either.
"""

import contextlib
import importlib
import math
import os
import shutil
import time
from typing import Sequence

import tensorflow as tf

from tfdist import errors
from tfdist.runtime import notice as process_notice
from tfdist.runtime import output_files
from tfdist.runtime.config import ConfigError
from tfdist.runtime.model_dir import EVALUATOR
from tfdist.runtime.model_dir import ModelDir
from tfdist.runtime.setup import Plan
from tfdist.runtime.setup import Role
from tfdist.runtime.setup import require_plan
from tfdist.training import data
from tfdist.training import guards
from tfdist.training import input_checks
from tfdist.training import preemption
from tfdist.training import ps_task
from tfdist.training import summary as run_summary
from tfdist.training.summary import Summary
from tfdist.training.resume import backup_position
from tfdist.training.resume import by_metric
from tfdist.training.resume import is_finished
from tfdist.training.resume import latest_backup
from tfdist.training.resume import recorded_epochs
from tfdist.training.resume import recorded_finish
from tfdist.training.resume import say_finished
from tfdist.training.resume import unrestorable
from tfdist.training.data import DEFAULT
from tfdist.training.data import Data

# The flavour packages by `--keras`; each has `train`, `build_model` and `evaluate_checkpoints`.
_FLAVOURS = {2: "tfdist.training.keras2", 3: "tfdist.training.keras3"}


def flavour(plan: Plan):
    """The package that trains models of the plan's Keras (imported on first use: a tf-keras
    run never loads Keras 3)."""
    return importlib.import_module(_FLAVOURS[plan.config.train.keras])


def fit(
    plan: Plan,
    model,
    train_data: Data | None = None,
    validation_data: Data | None | str = DEFAULT,
    *,
    validation_steps: int | None = None,
    loss=None,
    metrics=None,
    callbacks: Sequence = (),
    check_input: bool = True,
) -> Summary:
    """This task's part of the run `plan` describes; on a training task, trains `model`.

    On a parameter-server `worker` or `ps` task, serves until the chief has finished; on the
    `evaluator` task, evaluates each checkpoint the chief writes on `validation_data`. So one
    program runs unchanged as every task of a cluster (`tfdist launch`, a TFJob, Slurm).

    Args:
      plan: from `tfdist.setup`.
      model: a Keras model of the flavour `--keras` names (tf-keras, or Keras 3 trained by
        tfdist's own step: `tfdist.training.keras3`) built in `plan.strategy.scope()`, or a
        function of no arguments that builds one (called in the scope: the safe choice on
        every task).
      train_data: a dataset function (InputContext -> tf.data.Dataset of per-replica
        (features, labels) batches), a `tfdist.Records` (your files and parse_fn through
        tfdist's pipeline), or an `InputConfig`; None reads `plan.config.input`.
      validation_data: the same kinds, or None; by default the validation split of an
        input config's dataset (none for your own data).
      validation_steps: batches per validation; by default `--validation_steps`, else one
        pass (needed for your own data under parameter server).
      loss, metrics: compile an uncompiled model with these and tfdist's optimizer recipe
        (`--optimizer`, schedule, warmup, LARS, clipping, accumulation; loss scaling under
        mixed_float16). A compiled model keeps its own.
      callbacks: added to tfdist's (backup and restore, per-epoch checkpoints and TensorBoard
        under `--model_dir`, throughput); under `--keras=3` they see the train's, epochs' and
        batches' (one per `steps_per_execution` call) beginnings and ends.
      check_input: whether to refuse, before the first step, a dataset function of yours that
        reads the same first batch on different workers (it does not shard) or batches larger
        than the per-replica batch (`tfdist.training.input_checks`); False skips both.

    Returns:
      A `Summary`: the run summary (a dict), whose line it prints on stdout (as `tfdist train`
      shows it) and which it writes to `--metrics_json` (the chief writes it), with the trained
      model as `.model`; on serving and evaluating tasks, {"task", "role"} (and the
      evaluator's results) and no model. A rerun of a finished run (its model dir's backup at
      `--epochs` epochs) trains nothing and says so in a line: its model comes restored to the
      final state, its summary from the recorded history, with "finished_before": True.

    Example:
      >>> plan = tfdist.setup(tfdist.config_from_flags(), train_examples=60_000)
      >>> summary = tfdist.fit(plan, build_model, train_dataset_fn,
      ...                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
      >>> summary.model.save("model.keras")

    Raises:
      tfdist.errors.UsageError (ConfigError, the packages' config errors), one line each: a
        model or data that does not fit, a damaged record file.
      tfdist.errors.RunFailure, one line: divergence (Diverged), a full disk (DiskFull), a
        lost peer (LostPeer), a metrics JSON that cannot be written (ResultNotSaved).
    """
    require_plan(plan)
    train_data = plan.config.input if train_data is None else train_data
    callbacks = guards.check_arguments(validation_steps, callbacks)
    guards.check_flag("check_input", check_input)
    if plan.role is Role.SERVE:
        return Summary(ps_task.serve(plan))
    validation_data = data.validation_data(plan, train_data, validation_data)
    if plan.role is Role.EVALUATE:
        return Summary(_evaluate(plan, model, validation_data, validation_steps, loss, metrics))
    data.check_steps_match(plan, train_data)
    if check_input and data.is_dataset_function(train_data):
        input_checks.check(
            plan, data.dataset_fn(plan, train_data, "train", training=True), "train_data"
        )
    with contextlib.ExitStack() as stack:
        if plan.model_dir is not None and plan.writes_results:
            stack.enter_context(plan.model_dir.owned())
        start = None  # Where a backup left in --model_dir resumes: (epoch, step).
        if plan.model_dir is not None:  # Every worker, as each restores the chief's backup.
            start = backup_position(plan.model_dir.backup, plan.steps_per_epoch)
            finish = recorded_finish(plan.model_dir.history_json)
            if is_finished(start, plan.config.train.epochs, finish, plan.model_dir.root):
                return _finished_before(plan, model, train_data, loss, metrics, finish[0])
            preemption.note_cluster_shape(plan, start)
            stack.enter_context(_full_disk_is_one_line(plan.model_dir))
        keras_model, trained = flavour(plan).train(
            plan,
            model,
            train_data,
            validation_data,
            validation_steps,
            loss=loss,
            metrics=metrics,
            callbacks=callbacks,
            start=start,
        )
        summary = _summary(plan, keras_model, train_data, trained)
        print(run_summary.format_line(summary), flush=True)
        if summary.get("backup_save_s") and plan.writes_results:
            slowest = summary["backup_save_s"]
            preemption.say_save_time(
                f"the slowest backup save took {slowest:.2f} s (of this run's attempts)",
                slowest,
                plan.config.train.grace_s,
            )
        _write_summary(plan, summary)
    epochs_done = max(map(len, summary["history"].values()), default=plan.config.train.epochs)
    process_notice.current().finished(f"at epoch {epochs_done}")
    return summary


def _finished_before(
    plan: Plan, model, train_data: Data, loss, metrics, epochs_done: int
) -> Summary:
    """A rerun of the run its model dir records as finished after `epochs_done` epochs: nothing
    trained, the model restored to the final state, one line that says so."""
    keras_model = flavour(plan).build_model(
        plan, model, data=train_data, loss=loss, metrics=metrics
    )
    latest = latest_backup(plan.model_dir.backup)
    try:
        tf.train.Checkpoint(model=keras_model).read(latest).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as error:  # Another model's.
        raise unrestorable(plan.model_dir.root, "the finished run", latest, error) from None
    say_finished(epochs_done, plan.model_dir.root)
    history = by_metric(recorded_epochs(plan.model_dir.history_json))
    trained = {
        "final": {name: values[-1] for name, values in history.items()},
        "history": history,
        "finished_before": True,
        **dict.fromkeys(("examples_per_sec", "resumed_from_epoch", "backup_save_s")),
        "epoch_train_s": [],
    }
    process_notice.current().finished(f"at epoch {epochs_done}")
    return _summary(plan, keras_model, train_data, trained)


_FULL_DISK_WORDS = ("No space left on device", "Disk quota exceeded")


@contextlib.contextmanager
def _full_disk_is_one_line(model_dir: ModelDir):
    """A save into a full `model_dir` as one line, its partial files removed: TensorFlow writes
    a checkpoint into PREFIX_temp/ and only then replaces the last complete one, which stays."""
    try:
        yield
    except (tf.errors.OpError, OSError) as error:
        message = getattr(error, "message", None) or str(error)
        full = next((words for words in _FULL_DISK_WORDS if words in message), None)
        if full is None:
            raise
        for directory, subdirectories, _ in os.walk(model_dir.root):
            for partial in [name for name in subdirectories if name.endswith("_temp")]:
                shutil.rmtree(os.path.join(directory, partial), ignore_errors=True)
                subdirectories.remove(partial)
        raise errors.DiskFull(
            f"model_dir={model_dir.root!r}: saving into it failed ({full}); the "
            "last complete backup and checkpoints are kept: free space there and "
            "run again to resume, or pass another model_dir=DIR."
        ) from None


def _evaluate(plan: Plan, model, validation_data, validation_steps, loss, metrics) -> dict:
    """The evaluator task: each checkpoint of `--model_dir` on `validation_data`."""
    if validation_data is None:
        raise ConfigError(
            "the evaluator task has no validation data: pass validation_data to "
            "fit (or a dataset with a validation split), or launch without "
            "an evaluator task."
        )
    keras = flavour(plan)
    keras_model = keras.build_model(plan, model, data=validation_data, loss=loss, metrics=metrics)
    read = data.dataset_fn(plan, validation_data, "validation", training=False)
    with plan.model_dir.owned(EVALUATOR):
        results = keras.evaluate_checkpoints(
            plan.config,
            keras_model,
            read(tf.distribute.InputContext()),
            steps=data.validation_steps(plan, validation_data, validation_steps),
            model_dir=plan.model_dir,
        )
    return {"task": plan.task, "role": plan.role.value, "evaluations": results}


def _summary(plan: Plan, model, train_data: Data, trained: dict) -> Summary:
    """The run summary: the plan's facts, the model's, and what `trained` reports; `model`
    with it."""
    config = plan.config
    fields = {
        "strategy": plan.kind.value,
        "task": plan.task,
        "role": plan.role.value,
        "num_replicas": plan.num_replicas,
        "num_workers": plan.num_workers,
        "global_batch_size": plan.global_batch_size,
        "per_replica_batch_size": plan.per_replica_batch_size,
        "mixed_precision": config.train.mixed_precision.value,
        "dataset": data.describe(train_data),
        "model": model.name,
        "trainable_parameters": sum(math.prod(weight.shape) for weight in model.trainable_weights),
        "epochs": config.train.epochs,
        "steps_per_epoch": plan.steps_per_epoch,
        "steps": plan.steps_per_epoch * config.train.epochs,
        **trained,
        "wall_s": time.perf_counter() - plan.started_s,
    }
    return Summary(fields, model)


def _write_summary(plan: Plan, summary: dict) -> None:
    path = plan.config.train.metrics_json
    if not (path and plan.writes_results):
        return
    try:
        output_files.write_json("metrics_json", path, summary)
    except output_files.OutputFileError as error:
        raise errors.ResultNotSaved(f"{error} (The summary line is above.)", summary) from None
