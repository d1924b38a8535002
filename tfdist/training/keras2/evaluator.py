"""The `evaluator` task for tf-keras models (`tfdist.fit` on it): evaluates each new checkpoint
the chief writes.

tf-keras' `SidecarEvaluator` loads every new checkpoint in `--model_dir`/checkpoints and
evaluates it on the whole validation split, on this task alone (no strategy). It stops after
the last epoch's checkpoint, or when the chief has finished (or died) and no new checkpoint
comes. Each result is printed and recorded in `--model_dir`/evaluations.json; TensorBoard logs
go to `--model_dir`/logs/evaluator (`tfdist.runtime.model_dir`).
"""

import os
import sys

import tensorflow as tf
import tf_keras

from tfdist.cluster.liveness import ChiefWatch
from tfdist.cluster.liveness import chief_address
from tfdist.runtime import keras_flavour
from tfdist.runtime import output_files
from tfdist.runtime.config import RunConfig
from tfdist.runtime.model_dir import ModelDir


class _Evaluator(tf_keras.utils.SidecarEvaluator):
    """Stops waiting for checkpoints once the chief has finished: without this hook the
    evaluator waits forever after a chief that died before its last epoch."""

    def __init__(self, *args, watch: ChiefWatch, **kwargs):
        keras_flavour.require_checked_tf_keras(
            "the evaluator's stop once the chief is gone", "run without --evaluator"
        )
        super().__init__(*args, **kwargs)
        self._watch = watch

    def _timeout_fn(self) -> bool:  # Called after 30 s without a new checkpoint.
        return self._watch.finished


class _Record(tf_keras.callbacks.Callback):
    """Prints each evaluation and rewrites `path` with all results so far, by checkpoint."""

    def __init__(self, checkpoint_dir: str, path: str):
        super().__init__()
        self._checkpoint_dir, self._path = checkpoint_dir, path
        self._checkpoint = ""
        self.results: dict[str, dict[str, float]] = {}

    def on_test_begin(self, logs=None):
        self._checkpoint = os.path.basename(tf.train.latest_checkpoint(self._checkpoint_dir))

    def on_test_end(self, logs=None):
        result = {name: float(value) for name, value in (logs or {}).items()}
        self.results[self._checkpoint] = result
        output_files.write_record(self._path, self.results)
        shown = " ".join(f"{name}={value:.4f}" for name, value in result.items())
        print(f"tfdist evaluator: {self._checkpoint}: {shown}", flush=True)


def evaluate_checkpoints(
    config: RunConfig,
    model: tf_keras.Model,
    data: tf.data.Dataset,
    *,
    steps: int | None,
    model_dir: ModelDir,
) -> dict[str, dict[str, float]]:
    """Evaluates `model` (compiled) on `data` with each new checkpoint the chief writes under
    `model_dir` until the last epoch's; returns the results by checkpoint (`tfdist.setup`
    requires a model dir for the evaluator task)."""
    chief = chief_address(config.cluster)
    print(
        f"tfdist: evaluator evaluating each new checkpoint in {model_dir.checkpoints} until "
        f"epoch {config.train.epochs} or until the chief at {chief} finishes",
        file=sys.stderr,
        flush=True,
    )
    record = _Record(model_dir.checkpoints, model_dir.evaluations_json)
    _Evaluator(
        model,
        data,
        model_dir.checkpoints,
        steps=steps,
        max_evaluations=config.train.epochs,
        callbacks=[record, tf_keras.callbacks.TensorBoard(model_dir.logs("evaluator"))],
        watch=ChiefWatch(chief).start(),
    ).start()
    print(f"tfdist: evaluator done after {len(record.results)} evaluation(s)", flush=True)
    return record.results
