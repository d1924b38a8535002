"""One `tfdist benchmark` configuration, measured in a fresh process (the replica count is set
before TensorFlow starts): per-step times of tfdist's `fit`, and with `--overhead` those of a
plain Keras script (tf-keras, or Keras 3's own fit under `--keras=3`) in the same strategy's
scope and with no strategy at all, alternating in the same process.

With `--measure_noise_scale` (on 2+ replicas or micro-batches) the rounds also alternate
tfdist's `fit` without the measurement, so its cost is timed in the same process.

Run by `tfdist.benchmark` as `python -m tfdist.benchmark_child SPEC_JSON`; prints one JSON line:
{"tfdist": [[step seconds of round 1...], ...], "plain": [[...], ...] and "no_strategy" (with
overhead; the latter at one replica's batch), "global_batch_size": N, "num_replicas": R,
"trainable_parameters": P, and when measured "noise_scale": B_simple after the last round,
"without_noise_scale": [[...], ...]}. SPEC_JSON: {"train_args": [tfdist train flags],
"warmup_steps": W, "timed_steps": T, "rounds": K, "overhead": true|false}.
"""

import contextlib
import dataclasses
import json
import sys
import time

import tfdist  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfdist import flags as tfdist_flags
from tfdist.tf_import import import_tensorflow

import_tensorflow(show_logs=False)
# pylint: disable=wrong-import-position
import tensorflow as tf
import tf_keras

import strategies
from input_pipelines import sources
from tfdist import keras_flavour
from tfdist import models
from tfdist import train_command
from tfdist.plan import setup


class StepTimer(tf_keras.callbacks.Callback):
    """Wall time of every training step (Keras syncs the logs of a callback each step)."""

    def __init__(self):
        super().__init__()
        self._start = 0.0
        self.seconds: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def _tfdist_steps(plan, steps: int) -> tuple[list[float], dict]:
    """tfdist's `fit`, as `tfdist train` calls it, without validation: (step times, its
    summary)."""
    timer = StepTimer()
    summary = train_command.fit(plan, validate=False, callbacks=[timer])
    assert len(timer.seconds) == steps, (len(timer.seconds), steps)
    return timer.seconds, summary


def _without_noise_scale(config):
    """`config` with the noise-scale measurement off."""
    return dataclasses.replace(
        config, optimizer=dataclasses.replace(config.optimizer, measure_noise_scale=False))


def _measures_noise_scale(config) -> bool:
    """`--measure_noise_scale` where it has two batch sizes to compare (not on 1 replica
    without micro-batches, which a sweep from 1 replica includes)."""
    return config.optimizer.measure_noise_scale and (
        strategies.num_replica_devices(config.strategy) > 1 or
        config.optimizer.grad_accum_steps > 1)


def _plain_steps(config, strategy, steps: int, batch: int) -> list[float]:
    """The same model and a synthetic batch of BATCH examples, as TF's distributed-training
    guide writes it: build and compile in `strategy.scope()` (no scope when STRATEGY is None),
    then `model.fit` on a `tf.data.Dataset` (Keras 3's own fit under `--keras=3`)."""
    info = sources.synthetic_info(config.input)
    images = tf.random.uniform((batch, *info.image_shape), -1, 1, seed=config.train.seed)
    labels = tf.random.uniform((batch,), 0, info.num_classes, tf.int64, seed=config.train.seed)
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()
    keras = keras_flavour.api(config.train.keras)
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = models.build(config.train.model, info.image_shape, info.num_classes,
                             config.train.keras)
        model.compile(optimizer=keras.optimizers.Adam(config.optimizer.learning_rate),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    timer = StepTimer()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    return timer.seconds


def measure(spec: dict) -> dict:
    """Times `spec`'s configuration; see the module docstring."""
    tfdist_flags.parse("train", ["tfdist", *spec["train_args"]])
    steps = spec["warmup_steps"] + spec["timed_steps"]
    config = tfdist_flags.run_config(None)
    config = dataclasses.replace(config, train=dataclasses.replace(
        config.train, epochs=1, steps_per_epoch=steps, model_dir=None, metrics_json=None))
    measuring = _measures_noise_scale(config)
    plan = setup(config if measuring else _without_noise_scale(config))
    timed = slice(spec["warmup_steps"], None)
    result = {"global_batch_size": plan.global_batch_size,
              "num_replicas": plan.num_replicas, "tfdist": [], "plain": [],
              "no_strategy": []}
    for _ in range(spec["rounds"]):
        seconds, summary = _tfdist_steps(plan, steps)
        result["trainable_parameters"] = summary["trainable_parameters"]
        result["tfdist"].append(seconds[timed])
        if measuring:
            result["noise_scale"] = summary["history"].get("noise_scale", [None])[-1]
            result.setdefault("without_noise_scale", []).append(
                _tfdist_steps(dataclasses.replace(plan, config=_without_noise_scale(config)),
                              steps)[0][timed])
        if spec["overhead"]:
            result["plain"].append(_plain_steps(config, plan.strategy, steps,
                                                plan.global_batch_size)[timed])
            result["no_strategy"].append(_plain_steps(
                config, None, steps, plan.global_batch_size // plan.num_replicas)[timed])
    return result


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))), flush=True)
