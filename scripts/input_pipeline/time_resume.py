"""How long a resumed run's input pipeline takes to its first batch, and what counting an epoch
costs: by reading it (the baseline) or from the files' framing (what a resume does).

    python scripts/input_pipeline/time_resume.py --out_dir=DIR [--files=32]
        [--records_per_file=4000] [--record_bytes=8192] [--rounds=3] [--json=PATH]

Writes DIR/train-NNN.tfrecord once (random bytes; reused when DIR holds them with these flags),
then, each round: an epoch counted by reading it and from the framing, and a `tfdist.Records`
pipeline (global batch 64, one pipeline, `deterministic`) started after 0 steps, 2 epochs,
2.5 epochs and 2.99 epochs, timed to its first batch. Prints the medians.
"""

import argparse
import json
import os
import statistics
import time

from tfdist.runtime.tf_import import import_tensorflow  # tfdist first: tf-keras is selected.

import_tensorflow(show_logs=False)

import tensorflow as tf  # noqa: E402

from tfdist import input_pipelines  # noqa: E402
from tfdist.input_pipelines import pipeline  # noqa: E402
from tfdist.input_pipelines import records  # noqa: E402
from tfdist.input_pipelines import sharding  # noqa: E402

_BATCH = 64


def _write(args: argparse.Namespace) -> list[str]:
    stamp = os.path.join(args.out_dir, "flags.json")
    wanted = json.dumps([args.files, args.records_per_file, args.record_bytes])
    paths = [
        os.path.join(args.out_dir, f"train-{index:03d}.tfrecord") for index in range(args.files)
    ]
    if os.path.exists(stamp) and open(stamp).read() == wanted:
        return paths
    os.makedirs(args.out_dir, exist_ok=True)
    payload = os.urandom(args.record_bytes)
    for path in paths:
        with tf.io.TFRecordWriter(path) as writer:
            for position in range(args.records_per_file):
                writer.write(position.to_bytes(8, "little") + payload)
    with open(stamp, "w") as flags:
        flags.write(wanted)
    return paths


def _parse(batch: tf.Tensor):
    ids = tf.io.decode_raw(tf.strings.substr(batch, 0, 8), tf.int64)[:, 0]
    return ids, ids


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--files", type=int, default=32)
    parser.add_argument("--records_per_file", type=int, default=4000)
    parser.add_argument("--record_bytes", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    paths = tuple(_write(args))
    config = input_pipelines.InputConfig(global_batch_size=_BATCH, seed=7, deterministic=True)
    plan = sharding.plan(config.autoshard, num_files=len(paths), num_pipelines=1, pipeline_id=0)
    epoch_steps = len(paths) * args.records_per_file // _BATCH
    starts = {"start": 0, "2 epochs": 2 * epoch_steps, "2.5 epochs": int(2.5 * epoch_steps)}
    starts["2.99 epochs"] = int(2.99 * epoch_steps)
    data = input_pipelines.Records(paths, _parse)
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        one_epoch = pipeline.read_records(config, paths, plan, shuffle_seed=None)
        times.setdefault("count by reading", []).append(_timed(lambda: records.count(one_epoch)))
        times.setdefault("count from framing", []).append(
            _timed(lambda: records.framed_counts(paths))
        )
        for name, steps_done in starts.items():
            read = input_pipelines.ReadOptions(split="train", training=True, steps_done=steps_done)
            batches = input_pipelines.records_dataset_fn(data, config, read)
            first = _timed(lambda: next(iter(batches(tf.distribute.InputContext()))))
            times.setdefault(f"first batch after {name} ({steps_done} steps)", []).append(first)
    medians = {name: statistics.median(values) for name, values in times.items()}
    size_gb = len(paths) * args.records_per_file * (args.record_bytes + 24) / 1e9
    print(f"{len(paths)} files, {len(paths) * args.records_per_file} records, {size_gb:.2f} GB")
    for name, values in times.items():
        print(f"{name}: median {medians[name]:.2f} s ({', '.join(f'{v:.2f}' for v in values)})")
    ratio = medians["count by reading"] / medians["count from framing"]
    print(f"counting an epoch from the framing: {ratio:.1f}x faster than reading it")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {"flags": vars(args), "seconds": times, "framing_speedup": ratio}, out, indent=1
            )


if __name__ == "__main__":
    main()
