"""Measures tfdist's training input pipeline against a naive one and the I/O floor, in one run.

All three read the built-in dataset's training files (prepared first if needed) and are timed
over the same number of examples after the same warm-up, on this machine:

  naive       the pipeline as first written in TF's tf.data performance guide: one sequential
              reader, a per-example map (parse, decode the raw bytes, augment with tf.image's
              per-image ops, normalise), batch; no interleave, no parallel map, no prefetch.
  tfdist      tfdist's training pipeline with augmentation on the host (`--preprocess_on=host`).
  parse_only  the I/O floor: the same files read by tfdist's parallel interleave and parsed, but
              nothing decoded or augmented.

Each pipeline is timed in a fresh child process, one after the other, so that none inherits
another's threads or memory (measured: tfdist's pipeline ran 30% slower right after the naive one
in the same process). Prints examples/s of each, tfdist/naive and tfdist/parse_only, and with
--json=PATH writes naive_eps, tfdist_eps, parse_only_eps, speedup_vs_naive,
fraction_of_parse_only. --stages also times tfdist's pipeline cut after each of its steps and
writes what each adds per example under "stages".

    python scripts/benchmark_input.py [--json=PATH] [--examples=N] [--data_dir=DIR] [--stages]
"""

import argparse
import functools
import json
import os
import subprocess
import sys
import time

import tfdist  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfdist.tf_import import import_tensorflow

import_tensorflow(show_logs=False)
# pylint: disable=wrong-import-position
import tensorflow as tf

from input_pipelines import InputConfig
from input_pipelines import Placement
from input_pipelines import PreprocessOn
from input_pipelines import ReadOptions
from input_pipelines import pipeline
from input_pipelines import preprocessing
from input_pipelines import sources

_GLOBAL_BATCH_SIZE = 128
_WARMUP_BATCHES = 10
_SINGLE_PIPELINE = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                              num_replicas_in_sync=1)


def _naive(source: sources.Source) -> tf.data.Dataset:
    """One reader, per-example map with the same augmentation, batch; nothing overlapped."""
    def parse_and_preprocess(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        features = tf.io.parse_single_example(record, source.features)
        image = tf.reshape(tf.io.decode_raw(features[source.image_key], tf.uint8),
                           source.raw_image_shape)
        image = tf.image.random_crop(
            tf.image.resize_with_crop_or_pad(image, 32 + 2 * preprocessing.CROP_PADDING,
                                             32 + 2 * preprocessing.CROP_PADDING), [32, 32, 3])
        image = tf.image.random_flip_left_right(image)
        image = tf.image.random_brightness(tf.cast(image, tf.float32),
                                           255 * preprocessing.MAX_BRIGHTNESS_DELTA)
        image = tf.clip_by_value(image, 0.0, 255.0) / 127.5 - 1.0
        return image, features[source.label_key]

    dataset = tf.data.TFRecordDataset(list(source.files[sources.TRAIN]))
    return dataset.map(parse_and_preprocess).repeat().batch(_GLOBAL_BATCH_SIZE)


def _stage(config: InputConfig, source: sources.Source, last: str, *,
           shuffle: bool = True) -> tf.data.Dataset:
    """tfdist's training pipeline up to and including stage `last` (see `STAGES`); with
    `shuffle=False` no example shuffle (the file order is shuffled either way)."""
    files = source.files[sources.TRAIN]
    plan = pipeline.shard_plan(config, len(files), _SINGLE_PIPELINE, training=True)
    records = pipeline.read_records(config, files, plan, shuffle_seed=config.seed)
    if shuffle and last != "read":
        records = records.shuffle(config.shuffle_buffer_size, seed=config.seed)
    batches = records.repeat().batch(_GLOBAL_BATCH_SIZE, drop_remainder=True)
    work = {"parse": lambda serialized: tf.io.parse_example(serialized, source.features),
            "decode": lambda serialized: pipeline.parse_and_decode(source, serialized)}.get(last)
    if work:
        batches = batches.map(work, num_parallel_calls=tf.data.AUTOTUNE)
    return batches.with_options(pipeline.options(config)).prefetch(tf.data.AUTOTUNE)


def _tfdist(config: InputConfig) -> tf.data.Dataset:
    read = ReadOptions(split=sources.TRAIN, training=True, placement=Placement(PreprocessOn.HOST))
    return pipeline.examples(config, read, _SINGLE_PIPELINE, announce=False).prefetch(
        tf.data.AUTOTUNE)


def _examples_per_sec(dataset: tf.data.Dataset, num_examples: int) -> float:
    """Examples/s of iterating `dataset` (batches of `_GLOBAL_BATCH_SIZE`) after a warm-up."""
    iterator = iter(dataset)
    for _ in range(_WARMUP_BATCHES):
        next(iterator)
    num_batches = num_examples // _GLOBAL_BATCH_SIZE
    start = time.perf_counter()
    for _ in range(num_batches):
        next(iterator)
    return num_batches * _GLOBAL_BATCH_SIZE / (time.perf_counter() - start)


# With --stages: tfdist's training pipeline cut after each of its steps, in order; the last
# step (augment and normalise on the host) makes it the whole `tfdist` pipeline.
STAGES = ("read", "shuffle", "parse", "decode")
_PIPELINES = {
    "naive": lambda config, source: _naive(source),
    "tfdist": lambda config, source: _tfdist(config),
    # tfdist's reading (parallel interleave, batched parse), no shuffle, decode or augmentation.
    "parse_only": functools.partial(_stage, last="parse", shuffle=False),
    **{f"stage_{name}": functools.partial(_stage, last=name) for name in STAGES},
}
_CHILD_TIMEOUT_S = 600


def _measure_in_child(pipeline_name: str, args: argparse.Namespace) -> float:
    """Runs this script with --pipeline=NAME in a fresh process; returns its examples/s."""
    command = [sys.executable, __file__, f"--pipeline={pipeline_name}",
               f"--examples={args.examples}"]
    if args.data_dir:
        command.append(f"--data_dir={args.data_dir}")
    output = subprocess.run(command, check=True, capture_output=True, text=True,
                            timeout=_CHILD_TIMEOUT_S).stdout
    return float(output.strip().splitlines()[-1])


def _stages(args: argparse.Namespace, tfdist_eps: float) -> dict:
    """Examples/s after each step and the microseconds per example each step adds."""
    rates = {name: _measure_in_child(f"stage_{name}", args) for name in STAGES}
    rates["augment_normalise"] = tfdist_eps
    stages, before = {}, 0.0
    for name, rate in rates.items():
        cost = 1e6 / rate
        stages[name] = {"eps": round(rate), "added_us_per_example": round(cost - before, 2)}
        before = cost
        print(f"  + {name:18s} {rate:>10,.0f} examples/s  {stages[name]['added_us_per_example']:+6.2f}"
              " us/example")
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures to this path")
    parser.add_argument("--examples", type=int, default=200_000,
                        help="examples to time per pipeline (default: 20 epochs, 1-2 s at tfdist's rate)")
    parser.add_argument("--data_dir", help="TFDS data dir of the built-in dataset")
    parser.add_argument("--stages", action="store_true",
                        help="also time tfdist's pipeline cut after each step (read, shuffle, "
                             "parse, decode; then augment and normalise) and the cost per "
                             "example each step adds")
    parser.add_argument("--pipeline", choices=sorted(_PIPELINES),
                        help="time only this pipeline, here, and print its examples/s")
    args = parser.parse_args()
    config = InputConfig(data_dir=args.data_dir, global_batch_size=_GLOBAL_BATCH_SIZE)
    source = sources.source(config)  # Prepares the dataset before any timing.
    if args.pipeline:
        print(_examples_per_sec(_PIPELINES[args.pipeline](config, source), args.examples))
        return
    figures = {f"{name}_eps": _measure_in_child(name, args) for name in _PIPELINES}
    figures["speedup_vs_naive"] = figures["tfdist_eps"] / figures["naive_eps"]
    figures["fraction_of_parse_only"] = figures["tfdist_eps"] / figures["parse_only_eps"]
    for name in ("naive_eps", "tfdist_eps", "parse_only_eps"):
        print(f"{name}: {figures[name]:,.0f} examples/s")
    print(f"tfdist/naive (b/a): {figures['speedup_vs_naive']:.2f}x; tfdist/parse_only (b/c): "
          f"{figures['fraction_of_parse_only']:.2f}")
    stages = _stages(args, figures["tfdist_eps"]) if args.stages else None
    if args.json:
        with open(args.json, "w", encoding="utf-8") as json_file:
            json.dump({"cpu_count": os.cpu_count(), "examples": args.examples,
                       "global_batch_size": _GLOBAL_BATCH_SIZE,
                       **{name: round(value, 2) for name, value in figures.items()},
                       **({"stages": stages} if stages else {})},
                      json_file, indent=2)


if __name__ == "__main__":
    main()
