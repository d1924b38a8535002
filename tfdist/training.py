"""One `fit` for every strategy: the right input path per strategy, Keras `model.fit` on top."""

import dataclasses
import math
import os
from typing import Sequence

import tensorflow as tf
import tf_keras

import input_pipelines
from input_pipelines.sources import DatasetInfo
from tfdist import models
from tfdist import optim
from tfdist import precision
from tfdist.callbacks import BackupAndRestore
from tfdist.callbacks import EpochHistory
from tfdist.callbacks import ThroughputTimer
from tfdist.config import ConfigError
from tfdist.config import RunConfig

_PS_STRATEGY = tf.distribute.experimental.ParameterServerStrategy
CHECKPOINTS_DIR = "checkpoints"  # Under --model_dir: one weights checkpoint per epoch.
CHECKPOINT_PREFIX = "epoch-"
HISTORY_JSON = "history.json"  # Under --model_dir: every epoch's metrics, across restarts.


@dataclasses.dataclass(frozen=True)
class FitResult:
    """What a fit did: metrics per epoch (earlier attempts' too, when it resumed from a backup)
    and of the last one, steps run, and training throughput of this attempt."""
    final: dict[str, float]
    history: dict[str, list[float | None]]
    steps_per_epoch: int
    steps: int
    examples_per_sec: float
    resumed_from_epoch: int | None = None


def steps_per_epoch(config: RunConfig, info: DatasetInfo) -> int:
    """`--steps_per_epoch`, or one pass over the training split in whole global batches."""
    if config.train.steps_per_epoch:
        return config.train.steps_per_epoch
    num_train = info.num_examples["train"]
    steps = num_train // config.input.global_batch_size
    if steps == 0:
        raise ConfigError(
            f"global_batch_size={config.input.global_batch_size} is larger than the {num_train} "
            "training examples; lower it or set --steps_per_epoch.")
    return steps


def _input_options(strategy: tf.distribute.Strategy) -> tf.distribute.InputOptions:
    """How the strategy hands batches to its replicas.

    GPUs: the default, batches prefetched onto each device. CPU replicas take batches from the
    host pipeline as they are. Mirrored CPU replicas each read their own pipeline (PER_REPLICA):
    measured on the default job over 2 CPU replicas, 2x the examples/s of the strategy's shared
    multi-device iterator, and `fit` returns 0.05 s after its last epoch instead of 21-90 s (with
    TF 2.21 that iterator's teardown waits out a tf.data autotuner's sleep). Other strategies
    skip the per-device prefetch buffer, which copies nothing on a CPU; one_device still shows
    a ~20 s wait after the last epoch (docs/PERFORMANCE.md).
    """
    if any("GPU" in device for device in strategy.extended.worker_devices):
        return tf.distribute.InputOptions()
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            experimental_fetch_to_device=False)
    return tf.distribute.InputOptions(experimental_fetch_to_device=False,
                                      experimental_per_replica_buffer_size=0)


def _is_parameter_server(strategy: tf.distribute.Strategy) -> bool:
    """Under parameter server every worker's input pipeline gets the same `InputContext`."""
    return isinstance(strategy, _PS_STRATEGY)


def _distribute(strategy: tf.distribute.Strategy, dataset_fn):
    """Per-worker datasets: Keras' coordinator path under PS, else the strategy's own."""
    if _is_parameter_server(strategy):
        return tf_keras.utils.experimental.DatasetCreator(dataset_fn)
    return strategy.distribute_datasets_from_function(dataset_fn,
                                                      options=_input_options(strategy))


def validation_steps(config: RunConfig, info: DatasetInfo) -> int:
    """`--validation_steps`, or one pass over the validation split, its last partial batch too."""
    if config.train.validation_steps:
        return config.train.validation_steps
    return math.ceil(info.num_examples["validation"] / config.input.global_batch_size)


def placement_for(config: RunConfig):
    """Where preprocessing runs, given this process's GPUs and the model's compute dtype."""
    return input_pipelines.resolve_placement(
        config.input, num_gpus=len(tf.config.list_logical_devices("GPU")),
        compute_dtype=tf_keras.mixed_precision.global_policy().compute_dtype)


def _with_input(body: tf_keras.Model, info: DatasetInfo, placement) -> tf_keras.Model:
    """`body` behind an input of the dtype the pipeline delivers: uint8 images go through the
    device-preprocessing layer first (run in each replica's step, on its device)."""
    if not placement.on_device:
        return body
    images = tf_keras.Input(info.image_shape, dtype="uint8", name="image")
    return tf_keras.Model(images, body(input_pipelines.device_preprocessing()(images)),
                          name=body.name)


def build_model(config: RunConfig, info: DatasetInfo, placement,
                steps_per_epoch: int) -> tf_keras.Model:
    """Builds and compiles the model; call inside `strategy.scope()`."""
    train = config.train
    model = _with_input(models.build(train.model, info.image_shape, info.num_classes), info,
                        placement)
    optimizer = precision.wrap_optimizer(
        optim.build_optimizer(config.optimizer, config.input.global_batch_size, steps_per_epoch,
                              allreduce_dtype=config.strategy.allreduce_dtype,
                              seed=train.seed),
        train.mixed_precision)
    model.compile(optimizer=optimizer,
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(),
                  metrics=["accuracy"],
                  steps_per_execution=train.steps_per_execution)
    return model


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


def _validation(config: RunConfig, info: DatasetInfo, strategy: tf.distribute.Strategy,
                placement) -> dict:
    """`fit`'s validation arguments: the whole validation split per epoch, or none when the
    dataset has no validation split."""
    if "validation" not in info.num_examples:
        return {}
    return {
        "validation_data": _distribute(strategy, input_pipelines.dataset_fn(
            config.input, "validation", training=False, placement=placement,
            independent_order=_is_parameter_server(strategy))),
        "validation_steps": validation_steps(config, info),
    }


def fit(config: RunConfig, strategy: tf.distribute.Strategy, *, validate: bool = True,
        callbacks: Sequence[tf_keras.callbacks.Callback] = ()) -> FitResult:
    """Trains `config.train.model` on `config.input` under `strategy`, validating each epoch
    when `validate` and the dataset has a validation split; `callbacks` are added to tfdist's.

    Runs in cross-replica context on every worker (mirrored strategies) or on the coordinator
    (parameter server). Prepares the dataset first (generating the built-in one once).

    Raises:
      InputConfigError: the batch does not split over the replicas, a data file is damaged, or
        an image in it does not decode.
    """
    input_pipelines.per_replica_batch_size(config.input.global_batch_size,
                                           strategy.num_replicas_in_sync)
    info = input_pipelines.prepare(config.input)
    placement = placement_for(config)
    steps = steps_per_epoch(config, info)
    with strategy.scope():
        model = build_model(config, info, placement, steps)
    timer = ThroughputTimer(global_batch_size=config.input.global_batch_size,
                            steps_per_epoch=steps)
    model_dir = config.train.model_dir
    epochs = EpochHistory(model_dir and os.path.join(model_dir, HISTORY_JSON),
                          writes=config.writes_results)
    train_fn = input_pipelines.dataset_fn(config.input, "train", training=True,
                                          placement=placement,
                                          independent_order=_is_parameter_server(strategy))
    try:
        model.fit(_distribute(strategy, train_fn),
                  epochs=config.train.epochs,
                  steps_per_epoch=steps,
                  callbacks=[timer, epochs, *callbacks,
                             *_output_callbacks(model_dir, config.train.backup_every)],
                  verbose=2,
                  **(_validation(config, info, strategy, placement) if validate else {}))
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
        input_pipelines.explain_input_error(config.input, error)
        raise
    per_epoch = epochs.history()
    final = {name: values[-1] for name, values in per_epoch.items()}
    return FitResult(final=final, history=per_epoch, steps_per_epoch=steps,
                     steps=steps * config.train.epochs,
                     examples_per_sec=timer.examples_per_sec(),
                     resumed_from_epoch=epochs.resumed_from_epoch)
