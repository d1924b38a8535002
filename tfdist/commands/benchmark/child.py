"""One `tfdist benchmark` configuration in a process of its own (the replica count is set
before TensorFlow starts), timing one round whenever its parent asks: per-step times of
tfdist's `fit`, and with `--overhead` those of a plain Keras script (tf-keras, or Keras 3's own
fit under `--keras=3`) in the same strategy's scope and with no strategy at all, alternating in
the same process.

With `--measure_noise_scale` (on 2+ replicas or micro-batches) each round also times tfdist's
`fit` without the measurement, so its cost is timed in the same process.

Run by `tfdist benchmark` (`rounds`) as `python -m tfdist.commands.benchmark.child SPEC_JSON`,
where SPEC_JSON is
{"train_args": [tfdist train flags], "warmup_steps": W, "timed_steps": T, "overhead": true|false}.
Its standard output carries only this protocol, one JSON line per message (anything else the
process prints goes to standard error):
  - once set up: {"global_batch_size": N, "num_replicas": R};
  - for each line `round` on standard input, that round's timed step seconds:
    {"tfdist": [...], "trainable_parameters": P}, with "plain" and "no_strategy" (with
    overhead; the latter at one replica's batch), and when measured "noise_scale" (B_simple
    after the round) and "without_noise_scale": [...].
It exits when its standard input closes.
"""

import contextlib
import dataclasses
import json
import os
import sys
import time

from tfdist.commands import flags as flags_lib
from tfdist.commands.app import USER_ERRORS
from tfdist.errors import EXIT_USAGE
from tfdist.commands import train_flags
from tfdist.runtime.tf_import import import_tensorflow

import_tensorflow(show_logs=False)
# pylint: disable=wrong-import-position
import tensorflow as tf
import tf_keras

from tfdist import strategies
from tfdist.input_pipelines import sources
from tfdist.runtime import keras_flavour
from tfdist.runtime.setup import setup
from tfdist.training import from_config as train_command
from tfdist.training import models


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
    # A call runs --steps_per_execution steps, and the timer sees the calls.
    per_call = plan.config.train.steps_per_execution
    seconds = [call_s / per_call for call_s in timer.seconds for _ in range(per_call)]
    assert len(seconds) == steps, (len(seconds), steps)
    return seconds, summary


def _without_noise_scale(config):
    """`config` with the noise-scale measurement off."""
    return dataclasses.replace(
        config, optimizer=dataclasses.replace(config.optimizer, measure_noise_scale=False)
    )


def _measures_noise_scale(config) -> bool:
    """`--measure_noise_scale` where it has two batch sizes to compare (not on 1 replica
    without micro-batches, which a sweep from 1 replica includes)."""
    return config.optimizer.measure_noise_scale and (
        strategies.num_replica_devices(config.strategy) > 1 or config.optimizer.grad_accum_steps > 1
    )


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
        model = models.build(
            config.train.model, info.image_shape, info.num_classes, config.train.keras
        )
        model.compile(
            optimizer=keras.optimizers.Adam(config.optimizer.learning_rate),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
    timer = StepTimer()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    return timer.seconds


class Configuration:
    """One configuration, set up once, timed round by round."""

    def __init__(self, spec: dict):
        flags_lib.parse("train", ["tfdist", *spec["train_args"]])
        self._steps = spec["warmup_steps"] + spec["timed_steps"]
        self._timed = slice(spec["warmup_steps"], None)
        self._overhead = spec["overhead"]
        config = train_flags.run_config(None)
        self._config = dataclasses.replace(
            config,
            train=dataclasses.replace(
                config.train,
                epochs=1,
                steps_per_epoch=self._steps,
                model_dir=None,
                metrics_json=None,
            ),
        )
        self._measuring = _measures_noise_scale(self._config)
        self._plan = setup(self._config if self._measuring else _without_noise_scale(self._config))

    def description(self) -> dict:
        return {
            "global_batch_size": self._plan.global_batch_size,
            "num_replicas": self._plan.num_replicas,
        }

    def round(self) -> dict:
        """Times one round; see the module docstring."""
        plan, config, timed = self._plan, self._config, self._timed
        seconds, summary = _tfdist_steps(plan, self._steps)
        result = {"tfdist": seconds[timed], "trainable_parameters": summary["trainable_parameters"]}
        if self._measuring:
            result["noise_scale"] = summary["history"].get("noise_scale", [None])[-1]
            result["without_noise_scale"] = _tfdist_steps(
                dataclasses.replace(plan, config=_without_noise_scale(config)), self._steps
            )[0][timed]
        if self._overhead:
            result["plain"] = _plain_steps(
                config, plan.strategy, self._steps, plan.global_batch_size
            )[timed]
            result["no_strategy"] = _plain_steps(
                config, None, self._steps, plan.per_replica_batch_size
            )[timed]
        return result


def set_up(spec: dict) -> tuple[Configuration | None, dict]:
    """`spec`'s configuration and its first message: its description, or the one line in
    which `tfdist train` refuses it (`refused`, with its `exit_status`)."""
    try:
        configuration = Configuration(spec)
    except USER_ERRORS as error:
        refused = flags_lib.as_flags(str(error))
        return None, {"refused": refused, "exit_status": getattr(error, "exit_status", EXIT_USAGE)}
    return configuration, configuration.description()


def serve(spec: dict) -> None:
    """Sets `spec`'s configuration up and times a round per `round` line on standard input."""
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # Stray prints stay off the protocol.

    def send(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    configuration, first = set_up(spec)
    send(first)
    if configuration is None:
        return
    for line in sys.stdin:
        if line.strip() != "round":
            raise ValueError(f"benchmark child: unknown request {line.strip()!r}")
        send(configuration.round())


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
