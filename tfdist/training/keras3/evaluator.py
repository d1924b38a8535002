"""The `evaluator` task for Keras 3 models (`--keras=3`): evaluates each epoch's weights the
chief writes (`checkpoints/epoch-NNN`, `tfdist.training.keras3.checkpoints`), in order, on this
task alone.

It stops after the last epoch's checkpoint, or when the chief has finished (or died) and no new
checkpoint is left. Results are printed and recorded as tf-keras' evaluator records them, in
`--model_dir`/evaluations.json by checkpoint.
"""

import os
import sys

import keras
import tensorflow as tf

from tfdist.cluster.liveness import ChiefWatch
from tfdist.cluster.liveness import chief_address
from tfdist.runtime.model_dir import storage
from tfdist.runtime import output_files
from tfdist.runtime.config import RunConfig
from tfdist.runtime.model_dir import CHECKPOINT_PREFIX
from tfdist.runtime.model_dir import ModelDir

POLL_S = 2.0  # Between looks for a new checkpoint.


def _written(checkpoint_dir: str) -> list[str]:
    """The checkpoints complete in `checkpoint_dir` (TensorFlow writes the index last)."""
    return sorted(
        name.removesuffix(".index")
        for name in storage.listdir(checkpoint_dir)
        if name.startswith(CHECKPOINT_PREFIX) and name.endswith(".index")
    )


def evaluate_checkpoints(
    config: RunConfig,
    model: keras.Model,
    data: tf.data.Dataset,
    *,
    steps: int | None,
    model_dir: ModelDir,
) -> dict[str, dict[str, float]]:
    """Evaluates the compiled `model` on `data` with each checkpoint the chief writes under
    `model_dir`, until the last epoch's; returns the results by checkpoint."""
    chief = chief_address(config.cluster)
    checkpoint_dir = model_dir.checkpoints
    last = os.path.basename(model_dir.checkpoint(config.train.epochs))
    print(
        f"tfdist: evaluator evaluating each new checkpoint in {checkpoint_dir} until epoch "
        f"{config.train.epochs} or until the chief at {chief} finishes",
        file=sys.stderr,
        flush=True,
    )
    watch = ChiefWatch(chief).start()
    weights = tf.train.Checkpoint(model=model)
    results: dict[str, dict[str, float]] = {}
    while last not in results:
        new = [name for name in _written(checkpoint_dir) if name not in results]
        if not new and watch.finished:
            break
        for name in new:
            weights.restore(os.path.join(checkpoint_dir, name)).expect_partial()
            result = model.evaluate(data, steps=steps, verbose=0, return_dict=True)
            results[name] = {metric: float(value) for metric, value in result.items()}
            output_files.write_record(model_dir.evaluations_json, results)
            shown = " ".join(f"{metric}={value:.4f}" for metric, value in results[name].items())
            print(f"tfdist evaluator: {name}: {shown}", flush=True)
        if not new:
            watch.wait_finished(POLL_S)
    print(f"tfdist: evaluator done after {len(results)} evaluation(s)", flush=True)
    return results
