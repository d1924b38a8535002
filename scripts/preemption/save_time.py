"""How long a backup save takes as the model grows: what a preemption's grace period must cover.

    python scripts/preemption/save_time.py [--parameters=1e6,25e6,100e6] [--runs=3]
        [--model_dir=/tmp/save_time] [--json=PATH]

Each run trains a tf-keras MLP of about N parameters (3 square Dense layers and a head) with
Adam (its two slots: the backup holds 3 floats a parameter) through `tfdist.fit` with
`--model_dir`, 3 epochs of 1 step, so the run makes 3 backups (one an epoch) and a final save;
the figure per run is the slowest of them (`summary["backup_save_s"]`), the size the backup's
bytes on disk. Prints, per size, the minimum, median and maximum over the runs and the write
rate they imply (bytes over the median), and what a model of 1B parameters would need at that
rate.
"""

import argparse
import json
import math
import os
import shutil
import statistics

import tfdist

_LAYERS = 4
_EXAMPLES = 64


def _dataset_fn(width: int):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        features = tf.random.stateless_normal((_EXAMPLES, width), seed=(1, 2))
        labels = tf.zeros((_EXAMPLES,), tf.int32)
        batch = context.get_per_replica_batch_size(8)
        return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(batch)

    return make


def _model_fn(width: int):
    def build():
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        layers = [tf.keras.layers.Input((width,))]
        layers += [tf.keras.layers.Dense(width, activation="relu") for _ in range(_LAYERS - 1)]
        return tf.keras.Sequential([*layers, tf.keras.layers.Dense(2)])

    return build


def _bytes(directory: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(directory)
        for name in names
    )


def one_run(parameters: float, model_dir: str) -> dict:
    """The slowest save of one 3-epoch run of a model of about `parameters` parameters."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    width = int(math.sqrt(parameters / (_LAYERS - 1)))  # The last layer is width x 2.
    shutil.rmtree(model_dir, ignore_errors=True)
    config = tfdist.RunConfig(
        input=tfdist.InputConfig(global_batch_size=8),
        train=tfdist.TrainConfig(epochs=3, steps_per_epoch=1, model_dir=model_dir),
        optimizer=tfdist.OptimizerConfig(optimizer="adam", learning_rate=1e-4),
    )
    plan = tfdist.setup(config)
    summary = tfdist.fit(
        plan,
        _model_fn(width),
        _dataset_fn(width),
        validation_data=None,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    backup_bytes = _bytes(os.path.join(model_dir, "backup"))
    tf.keras.backend.clear_session()
    return {
        "parameters": summary["trainable_parameters"],
        "slowest_save_s": summary["backup_save_s"],
        "backup_bytes": backup_bytes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parameters", default="1e6,25e6,100e6")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model_dir", default="/tmp/save_time")
    parser.add_argument("--json")
    args = parser.parse_args()
    results = []
    for parameters in (float(size) for size in args.parameters.split(",")):
        runs = [one_run(parameters, args.model_dir) for _ in range(args.runs)]
        seconds = [run["slowest_save_s"] for run in runs]
        median = statistics.median(seconds)
        rate = runs[0]["backup_bytes"] / median
        result = {
            "parameters": runs[0]["parameters"],
            "backup_bytes": runs[0]["backup_bytes"],
            "save_s": {"min": min(seconds), "median": median, "max": max(seconds)},
            "bytes_per_s": rate,
            "runs": runs,
        }
        results.append(result)
        size_gb = runs[0]["backup_bytes"] / 1e9
        print(
            f"{result['parameters'] / 1e6:.1f}M parameters, backup {size_gb:.2f} GB: slowest "
            f"save per run {min(seconds):.2f} / {median:.2f} / {max(seconds):.2f} s (min / "
            f"median / max of {args.runs}), {rate / 1e9:.2f} GB/s",
            flush=True,
        )
    shutil.rmtree(args.model_dir, ignore_errors=True)
    largest = results[-1]
    billion_s = 1e9 * largest["backup_bytes"] / largest["parameters"] / largest["bytes_per_s"]
    print(
        f"1B parameters at {largest['bytes_per_s'] / 1e9:.2f} GB/s: about {billion_s:.0f} s a save"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"sizes": results, "one_billion_save_s": billion_s}, out, indent=2)


if __name__ == "__main__":
    main()
