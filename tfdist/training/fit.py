"""`fit`: a user's model and data trained under the plan's strategy with Keras `model.fit`, or,
on a serving or evaluating task, that task's part of the run.

The right input path per strategy (`distribute_datasets_from_function`, or DatasetCreator under
parameter server), tfdist's optimizer recipe and loss scaling for an uncompiled model, backup
and restore, chief-only checkpoints, TensorBoard, throughput, and the run summary.
"""

import contextlib
import math
import os
import re
import sys
import time
from typing import Callable, Sequence

import tensorflow as tf
import tf_keras

from tfdist import input_pipelines
from tfdist import strategies
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import Records
from tfdist.strategies import StrategyKind
from tfdist.training import evaluator
from tfdist.training import guards as fit_guards
from tfdist.optim import gradients
from tfdist.runtime import keras_flavour
from tfdist.training import models
from tfdist.optim import recipe as optim
from tfdist.runtime import paths
from tfdist.runtime import precision
from tfdist.training import ps_task
from tfdist.training import summary as run_summary
from tfdist.training.callbacks import BackupAndRestore
from tfdist.training.callbacks import EpochHistory
from tfdist.training.callbacks import NoiseScaleLog
from tfdist.training.callbacks import ThroughputTimer
from tfdist.runtime.config import ConfigError
from tfdist.runtime.setup import Plan
from tfdist.runtime.setup import Role
from tfdist.runtime.setup import require_plan

CHECKPOINTS_DIR = "checkpoints"  # Under --model_dir: one weights checkpoint per epoch.
CHECKPOINT_PREFIX = "epoch-"
HISTORY_JSON = "history.json"  # Under --model_dir: every epoch's metrics, across restarts.
# What `fit` takes as data: tfdist's pipeline for an input config, the user's records and
# parse_fn through it, or the user's own dataset function (InputContext -> tf.data.Dataset).
DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]
Data = InputConfig | Records | DatasetFn
_SHARD_NAME = re.compile(r"(?P<name>.+)/part_(?P<part>[0-9]+)(:[0-9]+)?")
DEFAULT = "default"  # `validation_data`: the validation split of an input config's dataset.
# Keras' words for a batch that does not fit the model (raised while tracing the first step).
_MISFIT_WORDS = ("is incompatible with the layer", "expects", "are incompatible",
                 "Incompatible shapes", "Missing data for input")
_KERAS_NO_BATCH = "Empty logs"  # Keras' words for an epoch whose first step found no batch.


class ResultNotSaved(ConfigError):
    """The run trained, but `--metrics_json` could not be written; `summary` holds the result."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary


def _input_options(plan: Plan) -> tf.distribute.InputOptions:
    """How the strategy hands batches to its replicas.

    GPUs: the default, batches prefetched onto each device. CPU replicas take batches from the
    host pipeline as they are. Mirrored CPU replicas each read their own pipeline (PER_REPLICA):
    measured on the default job over 2 CPU replicas, 2x the examples/s of the strategy's shared
    multi-device iterator, and `fit` returns 0.05 s after its last epoch instead of 21-90 s (with
    TF 2.21 that iterator's teardown waits out a tf.data autotuner's sleep). Other strategies
    skip the per-device prefetch buffer, which copies nothing on a CPU. (one_device on a machine
    without GPUs runs under the default strategy, which takes the dataset as it is, with no
    such wait: `strategies.one_device`.)
    """
    if any("GPU" in device for device in strategies.replica_devices_of(plan.strategy)):
        return tf.distribute.InputOptions()
    if plan.kind is StrategyKind.MIRRORED:
        return tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            experimental_fetch_to_device=False)
    return tf.distribute.InputOptions(experimental_fetch_to_device=False,
                                      experimental_per_replica_buffer_size=0)


def _distribute(plan: Plan, dataset_fn: DatasetFn):
    """Per-worker datasets: Keras' coordinator path under PS, else the strategy's own."""
    if plan.kind is StrategyKind.PARAMETER_SERVER:
        return tf_keras.utils.experimental.DatasetCreator(dataset_fn)
    return plan.strategy.distribute_datasets_from_function(dataset_fn,
                                                           options=_input_options(plan))


def dataset_fn(plan: Plan, data: Data, split: str, *, training: bool) -> DatasetFn:
    """The dataset function that reads `data`'s `split` for this plan.

    Example (a custom loop):
      >>> train = tfdist.dataset_fn(plan, tfdist.Records("data/train-*.tfrecord", parse),
      ...                           "train", training=True)
      >>> batches = plan.strategy.distribute_datasets_from_function(train)
    """
    require_plan(plan)
    if isinstance(data, (InputConfig, Records)):
        read = input_pipelines.ReadOptions(
            split=split, training=training, placement=plan.placement,
            independent_order=plan.kind is StrategyKind.PARAMETER_SERVER)
        if isinstance(data, Records):
            return input_pipelines.records_dataset_fn(data, plan.config.input, read)
        return input_pipelines.dataset_fn(data, read)
    if not callable(data):
        raise ConfigError(f"{split} data is a {type(data).__name__}; pass a dataset function "
                          "(InputContext -> tf.data.Dataset), a tfdist.Records or an "
                          "InputConfig.")
    return fit_guards.returning_dataset(data, f"{split} data")


def dataset_info(plan: Plan, data: InputConfig) -> input_pipelines.DatasetInfo:
    """`data`'s dataset info: the plan's, when it is the run's own input."""
    if data == plan.config.input and plan.dataset_info is not None:
        return plan.dataset_info
    return input_pipelines.prepare(data)


def _validation_steps(plan: Plan, data: Data, steps: int | None = None) -> int:
    """`steps`, else `--validation_steps`, else one pass over the validation data (its last
    partial batch too) when its size is known."""
    steps = steps or plan.config.train.validation_steps
    if steps:
        return steps
    if isinstance(data, InputConfig):
        examples = dataset_info(plan, data).num_examples["validation"]
        return math.ceil(examples / plan.global_batch_size)
    if isinstance(data, Records) and data.num_examples:
        return math.ceil(data.num_examples / plan.global_batch_size)
    if callable(data) and not isinstance(data, Records):
        # One pipeline of one replica: its batches are global batches.
        batches = int(data(tf.distribute.InputContext()).cardinality())
        if batches > 0:
            return batches
    raise ConfigError("validation_steps: tfdist cannot tell where your validation data ends; "
                      "pass fit(validation_steps=N) or --validation_steps=N.")


def _validation_data(plan: Plan, train_data: Data, validation_data: Data | None | str):
    """The validation data `fit` reads: `DEFAULT` is the validation split of an input config's
    dataset, when it has one, and none for the user's own data."""
    if validation_data != DEFAULT:
        return validation_data
    if isinstance(train_data, InputConfig) and \
            "validation" in dataset_info(plan, train_data).num_examples:
        return train_data
    return None


def _with_device_preprocessing(plan: Plan, model: tf_keras.Model,
                               data: Data) -> tf_keras.Model:
    """`model` behind an input of the dtype an image pipeline delivers: with preprocessing on
    the device, uint8 images go through the preprocessing layer first (run in each replica's
    step, on its device)."""
    if not (isinstance(data, InputConfig) and plan.placement.on_device):
        return model
    images = tf_keras.Input(dataset_info(plan, data).image_shape, dtype="uint8", name="image")
    return tf_keras.Model(images, model(input_pipelines.device_preprocessing()(images)),
                          name=model.name)


def tfdist_optimizer(plan: Plan) -> tf_keras.optimizers.Optimizer:
    """The optimizer recipe of `plan.config.optimizer`, with loss scaling under float16."""
    config = plan.config
    optimizer = optim.build_optimizer(config.optimizer, plan.global_batch_size,
                                      plan.steps_per_epoch, config.train.epochs,
                                      allreduce_dtype=config.strategy.allreduce_dtype,
                                      seed=config.train.seed)
    return precision.wrap_optimizer(optimizer, config.train.mixed_precision)


def check_compile_arguments(keras_module, loss, metrics) -> None:
    """Raises ConfigError when an uncompiled model comes without a loss to compile it with, or
    with a loss or metric name that `keras_module` (tf_keras or Keras 3) does not know."""
    if loss is None:
        raise ConfigError("loss: the model is not compiled; pass fit(..., loss=..., "
                          "metrics=[...]), or compile the model yourself.")
    fit_guards.check_compile_names(keras_module, loss, metrics)


def _compile(plan: Plan, model: tf_keras.Model, loss, metrics) -> None:
    """Compiles an uncompiled `model` with `loss`, `metrics` and tfdist's optimizer."""
    if model.compiled_loss is not None:  # Keras adds loss scaling under mixed_float16.
        return
    check_compile_arguments(tf_keras, loss, metrics)
    model.compile(optimizer=tfdist_optimizer(plan), loss=loss, metrics=metrics,
                  steps_per_execution=plan.config.train.steps_per_execution)


def build_model(plan: Plan, model, *, data: Data, loss=None, metrics=None) -> tf_keras.Model:
    """The model `fit` trains: `model` (built in `plan.strategy.scope()`), or what the function
    `model` returns when called there with no arguments; compiled as `fit` says."""
    with strategy_scope(plan):
        model = _with_device_preprocessing(plan, checked_model(plan, model), data)
        _compile(plan, model, loss, metrics)
    _log_sharding(plan, model)
    return model


def strategy_scope(plan: Plan):
    """The plan's strategy's scope; none without a strategy (the evaluator)."""
    return plan.strategy.scope() if plan.strategy is not None else contextlib.nullcontext()


def checked_model(plan: Plan, model):
    """`model`, or what the function `model` returns (call in `strategy_scope`), once it is
    a model of the plan's Keras with float32 outputs, built in the scope."""
    if isinstance(model, tf_keras.Model) or keras_flavour.is_keras3(model):
        _check_built_in_scope(plan, model)
        return model
    if not callable(model):
        raise ConfigError(f"model is a {type(model).__name__}; pass a Keras model or a function "
                          "that builds one.")
    return models.check_model(model(), f"model function {fit_guards.name_of(model)}",
                              plan.config.train.keras)


def _check_built_in_scope(plan: Plan, model) -> None:
    """Raises ConfigError unless `model` is a model of the plan's Keras, built in the plan's
    strategy's scope."""
    models.check_model(model, "model", plan.config.train.keras)
    if plan.strategy is None:
        return
    # A Keras 3 variable holds its tf.Variable as `value`.
    variables = [variable.value for variable in model.variables] \
        if plan.config.train.keras == 3 else model.variables
    if not all(plan.strategy.extended.variable_created_in_scope(variable)
               for variable in variables):
        raise ConfigError(f"model {model.name!r} was built outside plan.strategy.scope(); pass a "
                          "function that builds it (fit calls it in the scope), or build it "
                          "inside `with plan.strategy.scope():`.")


def _ps_task(device: str) -> str:
    """"ps:1" from "/job:ps/replica:0/task:1/device:CPU:0"."""
    fields = dict(part.split(":", 1) for part in device.split("/") if ":" in part)
    return f"{fields.get('job', '?')}:{fields.get('task', '?')}"


def _log_sharding(plan: Plan, model: tf_keras.Model) -> None:
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
        row, placed, size = 0, [], 0
        for _, shard in sorted(parts, key=lambda part: part[0]):
            placed.append(f"rows {row}-{row + shard.shape[0] - 1} on {_ps_task(shard.device)}")
            row += shard.shape[0]
            size += shard.shape.num_elements() * shard.dtype.size
        print(f"tfdist: variable {name} {row}x{'x'.join(map(str, parts[0][1].shape[1:]))} "
              f"({size / 2**20:.1f} MiB) in {len(parts)} shards: {', '.join(placed)}",
              file=sys.stderr, flush=True)


def _describe(data: Data) -> str:
    """A name for the summary's `dataset`."""
    if isinstance(data, InputConfig):
        return data.dataset
    if isinstance(data, Records):
        return f"records:{data.files if isinstance(data.files, str) else len(data.files)}"
    return fit_guards.name_of(data)


def _output_callbacks(model_dir: str | None,
                      backup_every: str) -> list[tf_keras.callbacks.Callback]:
    """Backup and restore, per-epoch checkpoints and TensorBoard logs; tf-keras keeps
    non-chief copies temporary."""
    if not model_dir:
        return []
    return [
        BackupAndRestore(
            os.path.join(model_dir, "backup"),
            save_freq="epoch" if backup_every == "epoch" else int(backup_every)),
        tf_keras.callbacks.ModelCheckpoint(
            os.path.join(model_dir, CHECKPOINTS_DIR, CHECKPOINT_PREFIX + "{epoch:03d}"),
            save_weights_only=True),
        tf_keras.callbacks.TensorBoard(os.path.join(model_dir, "logs")),
    ]


def _explain(plan: Plan, data: Data, error: Exception) -> None:
    """Raises the one-line error naming the damaged file or record behind `error`, if any."""
    if isinstance(data, InputConfig):
        input_pipelines.explain_input_error(data, error)
    elif isinstance(data, Records):
        input_pipelines.explain_records_error(data, "train", error)


def _misfit(error: ValueError) -> str | None:
    """Keras' line saying a batch does not fit the model, if that is what `error` is."""
    for line in str(error).splitlines():
        if any(words in line for words in _MISFIT_WORDS):
            return line.strip()
    return None


@contextlib.contextmanager
def _explained(plan: Plan, train_data: Data, model):
    """Turns a damaged record, a batch that does not fit the model or a step that fails on it,
    and training data with no batch or that runs out into one line."""
    try:
        yield
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError,
            tf.errors.UnimplementedError) as error:  # The last: e.g. a cast from strings.
        _explain(plan, train_data, error)
        raise fit_guards.step_failure(error, model.name) from error
    except tf.errors.OutOfRangeError as error:
        raise fit_guards.ran_out() from error
    except ValueError as error:
        if _KERAS_NO_BATCH in str(error):
            raise fit_guards.no_batch(model.name) from error
        line = _misfit(error)
        if line is None:
            raise
        raise ConfigError(f"train_data: its batches do not fit model {model.name!r} ({line}); "
                          "make the dataset yield what the model takes.") from None


def _keras3_fit(plan: Plan, model, train_data: Data, validation_data, validation_steps,
                loss, metrics, callbacks):
    """(the model, the summary's training part) for a Keras 3 model, trained by tfdist's own
    step (`tfdist.training.keras3.step`)."""
    from tfdist.training.keras3 import step as keras3_training  # pylint: disable=import-outside-toplevel  (Keras 3)
    keras_model = keras3_training.build_model(plan, model, loss=loss, metrics=metrics)
    validation = None
    if validation_data is not None:
        validation = (dataset_fn(plan, validation_data, "validation", training=False),
                      _validation_steps(plan, validation_data, validation_steps))
    model_dir = plan.config.train.model_dir
    with _explained(plan, train_data, keras_model):
        trained = keras3_training.fit(
            plan, keras_model, dataset_fn(plan, train_data, "train", training=True),
            validation, options=_input_options(plan),
            history_path=model_dir and os.path.join(model_dir, HISTORY_JSON),
            callbacks=callbacks)
    return keras_model, trained


def _noise_scale_log(plan: Plan, model: tf_keras.Model) -> list[NoiseScaleLog]:
    """The noise-scale log under `--measure_noise_scale`, once `model`'s optimizer measures."""
    if not plan.config.optimizer.measure_noise_scale:
        return []
    if not gradients.measures_noise_scale(model.optimizer):
        raise ConfigError(f"measure_noise_scale: model {model.name!r} came compiled with its own "
                          "optimizer, which does not measure it; pass the model uncompiled "
                          "(fit(..., loss=..., metrics=[...])) to train with tfdist's.")
    return [NoiseScaleLog(lambda: gradients.gradient_noise_scale(model.optimizer),
                          global_batch_size=plan.global_batch_size *
                          plan.config.optimizer.grad_accum_steps)]


def finite_loss(plan: Plan) -> fit_guards.FiniteLoss:
    """The divergence check; multi-worker mirrored workers judge by the weights they share."""
    return fit_guards.FiniteLoss(plan.config.optimizer.learning_rate, weights_every_epoch=(
        plan.num_workers > 1 and plan.kind is StrategyKind.MULTI_WORKER_MIRRORED))


def _keras_fit(plan: Plan, model: tf_keras.Model, train_data: Data, validation_data,
               validation_steps: int | None,
               callbacks: Sequence[tf_keras.callbacks.Callback]) -> dict:
    """`model.fit` with tfdist's callbacks; returns the summary's training part."""
    config = plan.config
    timer = ThroughputTimer(global_batch_size=plan.global_batch_size,
                            steps_per_epoch=plan.steps_per_epoch)
    model_dir = config.train.model_dir
    epochs = EpochHistory(model_dir and os.path.join(model_dir, HISTORY_JSON),
                          writes=plan.writes_results)
    train_batches = fit_guards.BatchCounts(dataset_fn(plan, train_data, "train", training=True))
    train = _distribute(plan, train_batches)
    fit_guards.require_enough(train_batches, steps_per_epoch=plan.steps_per_epoch,
                              epochs=config.train.epochs,
                              new_iterator_each_epoch=isinstance(train, tf.data.Dataset))
    validation = {}
    if validation_data is not None:
        validation = {"validation_data": _distribute(plan, dataset_fn(
                          plan, validation_data, "validation", training=False)),
                      "validation_steps": _validation_steps(plan, validation_data,
                                                            validation_steps)}
    with _explained(plan, train_data, model):
        model.fit(train, epochs=config.train.epochs, steps_per_epoch=plan.steps_per_epoch,
                  callbacks=[timer, finite_loss(plan),
                             *_noise_scale_log(plan, model), epochs, *callbacks,
                             *_output_callbacks(model_dir, config.train.backup_every)],
                  verbose=2, **validation)
    history = epochs.history()
    return {"final": {name: values[-1] for name, values in history.items()},
            "history": history, "examples_per_sec": timer.examples_per_sec(),
            "epoch_train_s": timer.epoch_train_s,
            "resumed_from_epoch": epochs.resumed_from_epoch}


def _summary(plan: Plan, model: tf_keras.Model, data: Data, trained: dict) -> dict:
    config = plan.config
    return {
        "strategy": plan.kind.value,
        "task": plan.task,
        "role": plan.role.value,
        "num_replicas": plan.num_replicas,
        "num_workers": plan.num_workers,
        "global_batch_size": plan.global_batch_size,
        "per_replica_batch_size": plan.per_replica_batch_size,
        "mixed_precision": config.train.mixed_precision.value,
        "dataset": _describe(data),
        "model": model.name,
        "trainable_parameters": sum(math.prod(weight.shape)
                                    for weight in model.trainable_weights),
        "epochs": config.train.epochs,
        "steps_per_epoch": plan.steps_per_epoch,
        "steps": plan.steps_per_epoch * config.train.epochs,
        **trained,
        "wall_s": time.perf_counter() - plan.started_s,
    }


def _write_summary(plan: Plan, summary: dict) -> None:
    path = plan.config.train.metrics_json
    if not (path and plan.writes_results):
        return
    try:
        run_summary.write_json(path, summary)
    except OSError as error:
        raise ResultNotSaved(f"metrics_json={path!r}: could not write the summary "
                             f"({error.strerror}); free the disk or pass another path (the "
                             "summary line is above).", summary) from None


def _check_steps_match(plan: Plan, train_data: Data) -> None:
    """The plan's steps per epoch must describe the data being trained on."""
    if plan.dataset_info is not None and train_data != plan.config.input:
        raise ConfigError(
            f"steps_per_epoch: the plan took {plan.steps_per_epoch} from {plan.steps_from}, but "
            "fit got other training data; pass train_examples= to tfdist.setup, or "
            "--steps_per_epoch=N.")


def fit(plan: Plan, model, train_data: Data | None = None,
        validation_data: Data | None | str = DEFAULT, *, validation_steps: int | None = None,
        loss=None, metrics=None,
        callbacks: Sequence[tf_keras.callbacks.Callback] = ()) -> dict:
    """This task's part of the run `plan` describes; on a training task, trains `model`.

    On a parameter-server `worker` or `ps` task, serves until the chief has finished; on the
    `evaluator` task, evaluates each checkpoint the chief writes on `validation_data`. So one
    program runs unchanged as every task of a cluster (`tfdist launch`, a TFJob, Slurm).

    Args:
      plan: from `tfdist.setup`.
      model: a Keras model of the flavour `--keras` names (tf-keras, or Keras 3 trained by
        tfdist's own step: `tfdist.training.keras3.step`) built in `plan.strategy.scope()`, or a
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

    Returns:
      The run summary `tfdist train` prints and writes to `--metrics_json` (the chief writes
      it); on serving and evaluating tasks, {"task", "role"} (and the evaluator's results).

    Example:
      >>> plan = tfdist.setup(tfdist.config_from_flags(), train_examples=60_000)
      >>> summary = tfdist.fit(plan, build_model, train_dataset_fn,
      ...                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    Raises:
      ConfigError (and the packages' config errors), one line each: a model or data that does
      not fit, a damaged record file, a metrics JSON that cannot be written (ResultNotSaved).
    """
    require_plan(plan)
    train_data = plan.config.input if train_data is None else train_data
    callbacks = fit_guards.check_arguments(validation_steps, callbacks)
    if plan.role is Role.SERVE:
        ps_task.serve(plan.config.cluster)
        return {"task": plan.task, "role": plan.role.value}
    validation_data = _validation_data(plan, train_data, validation_data)
    if plan.role is Role.EVALUATE:
        return _evaluate(plan, model, validation_data, validation_steps, loss, metrics)
    _check_steps_match(plan, train_data)
    with contextlib.ExitStack() as stack:
        if plan.config.train.model_dir and plan.writes_results:
            stack.enter_context(paths.owned_model_dir(plan.config.train.model_dir))
        if plan.config.train.keras == 3:
            keras_model, trained = _keras3_fit(plan, model, train_data, validation_data,
                                               validation_steps, loss, metrics, callbacks)
        else:
            keras_model = build_model(plan, model, data=train_data, loss=loss, metrics=metrics)
            trained = _keras_fit(plan, keras_model, train_data, validation_data,
                                 validation_steps, callbacks)
        summary = _summary(plan, keras_model, train_data, trained)
        _write_summary(plan, summary)
    return summary


def _evaluate(plan: Plan, model, validation_data, validation_steps, loss, metrics) -> dict:
    """The evaluator task: each checkpoint of `--model_dir` on `validation_data`."""
    if validation_data is None:
        raise ConfigError("the evaluator task has no validation data: pass validation_data to "
                          "fit (or a dataset with a validation split), or launch without "
                          "--evaluator.")
    data = dataset_fn(plan, validation_data, "validation", training=False)
    if plan.config.train.keras == 3:
        # pylint: disable-next=import-outside-toplevel
        from tfdist.training.keras3 import evaluator as keras3_evaluator
        from tfdist.training.keras3 import step as keras3_training
        keras_model = keras3_training.build_model(plan, model, loss=loss, metrics=metrics)
        evaluate_checkpoints = keras3_evaluator.evaluate_checkpoints
    else:
        keras_model = build_model(plan, model, data=validation_data, loss=loss, metrics=metrics)
        evaluate_checkpoints = evaluator.evaluate_checkpoints
    results = evaluate_checkpoints(
        plan.config, keras_model, data(tf.distribute.InputContext()),
        steps=_validation_steps(plan, validation_data, validation_steps),
        checkpoint_dir=os.path.join(plan.config.train.model_dir or "", CHECKPOINTS_DIR))
    return {"task": plan.task, "role": plan.role.value, "evaluations": results}
