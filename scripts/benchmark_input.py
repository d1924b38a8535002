"""Measures tfdist's training input pipeline against a naive one and the I/O floor, in one run.

All three read the built-in dataset's training files (prepared first if needed) and are timed
over the same number of examples after the same warm-up, on this machine:

  naive       the pipeline as first written in TF's tf.data performance guide: one sequential
              reader, a per-example map (parse, decode the raw bytes, augment with tf.image's
              per-image ops, normalise), batch; no interleave, no parallel map, no prefetch.
  tfdist      tfdist's training pipeline with augmentation on the host (`--preprocess_on=host`).
  parse_only  the I/O floor: the same files read by tfdist's parallel interleave, batched and
              parsed as tfdist's pipeline does (several batches per map call), but nothing
              decoded or augmented.

(`tfdist.input_pipelines.baseline_pipeline` builds each.)

Each pipeline is timed in a fresh child process, so that none inherits another's threads or
memory (measured: tfdist's pipeline ran 30% slower right after the naive one in the same
process). A round times each pipeline once, one after the other; --rounds repeats that, and each
figure is the median over rounds: examples/s of each pipeline, and the ratios tfdist/naive and
tfdist/parse_only as the median of the rounds' ratios, with their [min, max] over the rounds
(a 2-core machine's speed drifts from one child to the next: measured, parse_only alone ranged
214k-337k examples/s over 15 children). --json=PATH writes naive_eps, tfdist_eps,
parse_only_eps, speedup_vs_naive, fraction_of_parse_only and `<ratio>_spread`. --stages also
times, in every round, tfdist's pipeline cut after each of its steps and writes what each adds
per example (from the medians) under "stages". --trace also runs tfdist's pipeline under
TensorFlow's profiler and writes, under "trace", the trace time of each tf.data transformation
and each op per example (`input_pipelines.profile_stages`).

    python scripts/benchmark_input.py [--json=PATH] [--rounds=5] [--examples=N]
        [--data_dir=DIR] [--stages] [--trace]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import tfdist  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfdist.runtime.tf_import import import_tensorflow

import_tensorflow(show_logs=False)
# pylint: disable=wrong-import-position
import tensorflow as tf

from tfdist import input_pipelines
from tfdist.input_pipelines import BASELINE_STAGES as STAGES
from tfdist.input_pipelines import InputConfig
from tfdist.runtime.output_files import write_json

_GLOBAL_BATCH_SIZE = 128
_WARMUP_BATCHES = 10


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
# step (augment and normalise on the host) makes it the whole `tfdist` pipeline. parse_only is
# tfdist's reading (parallel interleave, batched parse), no shuffle, decode or augmentation.
_PIPELINES = {
    "naive": lambda config: input_pipelines.baseline_pipeline(config, "naive"),
    "tfdist": lambda config: input_pipelines.baseline_pipeline(config, "tfdist"),
    "parse_only": lambda config: input_pipelines.baseline_pipeline(config, "parse",
                                                                   shuffle=False),
    **{f"stage_{name}": (lambda config, name=name: input_pipelines.baseline_pipeline(config, name))
       for name in STAGES},
}
_CHILD_TIMEOUT_S = 600
_TRACE_BATCHES = 200
_TRACE_MIN_US = 0.1  # Stages under this many microseconds per example are left out.


def _child_output(args: argparse.Namespace, *flags: str) -> str:
    """Runs this script in a fresh process with `flags`; returns its last line of output."""
    command = [sys.executable, __file__, f"--examples={args.examples}", *flags]
    if args.data_dir:
        command.append(f"--data_dir={args.data_dir}")
    output = subprocess.run(command, check=True, capture_output=True, text=True,
                            timeout=_CHILD_TIMEOUT_S).stdout
    return output.strip().splitlines()[-1]


def _measure_in_child(pipeline_name: str, args: argparse.Namespace) -> float:
    """Examples/s of `pipeline_name`, timed in a fresh process."""
    return float(_child_output(args, f"--pipeline={pipeline_name}"))


def _stages(figures: dict) -> dict:
    """Median examples/s after each step and the microseconds per example each step adds."""
    rates = {name: figures[f"stage_{name}_eps"] for name in STAGES}
    rates["augment_normalise"] = figures["tfdist_eps"]
    stages, before = {}, 0.0
    for name, rate in rates.items():
        cost = 1e6 / rate
        stages[name] = {"eps": round(rate), "added_us_per_example": round(cost - before, 2)}
        before = cost
        print(f"  + {name:18s} {rate:>10,.0f} examples/s  {stages[name]['added_us_per_example']:+6.2f}"
              " us/example")
    return stages


def _trace(config: InputConfig) -> dict:
    """tfdist's pipeline under the profiler: trace microseconds per example of each stage."""
    profile = input_pipelines.profile_stages(
        input_pipelines.baseline_pipeline(config, "tfdist"), num_elements=_TRACE_BATCHES,
        warmup_elements=_WARMUP_BATCHES)
    examples = profile.num_elements * _GLOBAL_BATCH_SIZE
    per_example = {stage: round(1e6 * seconds / examples, 2)
                   for stage, seconds in profile.stage_s.items()}
    return {"examples": examples, "wall_us_per_example": round(1e6 * profile.wall_s / examples, 2),
            "stage_us_per_example": {stage: value for stage, value in per_example.items()
                                     if value >= _TRACE_MIN_US}}


def _rounds(args: argparse.Namespace) -> dict:
    """Each pipeline's (and with --stages each stage's) median examples/s over `args.rounds`
    rounds, and each ratio as the median of the rounds' ratios with its [min, max]."""
    names = ["naive", "tfdist", "parse_only"] + (
        [f"stage_{name}" for name in STAGES] if args.stages else [])
    measured = [{name: _measure_in_child(name, args) for name in names}
                for _ in range(args.rounds)]
    figures = {f"{name}_eps": statistics.median(round_[name] for round_ in measured)
               for name in measured[0]}
    for ratio, baseline in (("speedup_vs_naive", "naive"),
                            ("fraction_of_parse_only", "parse_only")):
        values = [round_["tfdist"] / round_[baseline] for round_ in measured]
        figures[ratio] = statistics.median(values)
        figures[f"{ratio}_spread"] = [round(min(values), 3), round(max(values), 3)]
    figures["rounds_eps"] = [{name: round(rate) for name, rate in round_.items()}
                             for round_ in measured]
    return figures


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures to this path")
    parser.add_argument("--rounds", type=_positive, default=5,
                        help="rounds of the three pipelines; figures are medians over rounds")
    parser.add_argument("--examples", type=_positive, default=400_000,
                        help="examples to time per pipeline (default: 40 epochs, 2-3 s at "
                             "tfdist's rate)")
    parser.add_argument("--data_dir", help="TFDS data dir of the built-in dataset")
    parser.add_argument("--stages", action="store_true",
                        help="also time tfdist's pipeline cut after each step (read, shuffle, "
                             "parse, decode; then augment and normalise) and the cost per "
                             "example each step adds")
    parser.add_argument("--trace", action="store_true",
                        help="also profile tfdist's pipeline: trace time per example of each "
                             "tf.data transformation and op")
    parser.add_argument("--pipeline", choices=sorted(_PIPELINES),
                        help="time only this pipeline, here, and print its examples/s")
    parser.add_argument("--trace_here", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    config = InputConfig(data_dir=args.data_dir, global_batch_size=_GLOBAL_BATCH_SIZE)
    input_pipelines.prepare(config)  # Before any timing.
    if args.trace_here:
        print(json.dumps(_trace(config)))
        return
    if args.pipeline:
        print(_examples_per_sec(_PIPELINES[args.pipeline](config), args.examples))
        return
    figures = _rounds(args)
    for name in ("naive_eps", "tfdist_eps", "parse_only_eps"):
        print(f"{name}: {figures[name]:,.0f} examples/s (median of {args.rounds} rounds)")
    for ratio, label in (("speedup_vs_naive", "tfdist/naive"),
                         ("fraction_of_parse_only", "tfdist/parse_only")):
        low, high = figures[f"{ratio}_spread"]
        print(f"{label}: {figures[ratio]:.2f} (rounds {low:.2f}-{high:.2f})")
    stages = _stages(figures) if args.stages else None
    trace = json.loads(_child_output(args, "--trace_here")) if args.trace else None
    if trace:
        print(f"trace of tfdist's pipeline, {trace['wall_us_per_example']:.2f} us/example of wall "
              "time under the profiler; each stage's trace time per example:")
        for stage, value in trace["stage_us_per_example"].items():
            print(f"  {stage:36s} {value:6.2f} us/example")
    if args.json:
        write_json("json", args.json, {
            "cpu_count": os.cpu_count(), "examples": args.examples, "rounds": args.rounds,
            "global_batch_size": _GLOBAL_BATCH_SIZE,
            **{name: round(value, 2) if isinstance(value, float) else value
               for name, value in figures.items()},
            **({"stages": stages} if stages else {}), **({"trace": trace} if trace else {})})


if __name__ == "__main__":
    main()
