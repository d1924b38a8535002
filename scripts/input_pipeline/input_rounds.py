"""What benchmark_input.py does with its children: runs each pipeline in a fresh child
process (benchmark_input.py --pipeline=NAME) in every round, and makes the figures of the rounds:
each pipeline's median, each ratio of tfdist's figures to another pipeline's as the median of the
rounds' ratios with its [min, max], and with --stages the cost each step of tfdist's pipeline
adds."""

import argparse
import json
import os
import statistics
import subprocess
import sys

from input_timing import JPEG_PIPELINES
from tfdist.input_pipelines import BASELINE_STAGES as STAGES

# With --dataset: the ratios of tfdist's figures to each of the others'.
JPEG_RATIOS = {
    "speedup_vs_naive": "naive",
    "fraction_of_best_practice": "best_practice",
    "fraction_of_decode_only": "decode_only",
}
_CHILD_TIMEOUT_S = 600
# The script each child runs, with --pipeline or --trace_here.
_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchmark_input.py")


def _mode_flags(args: argparse.Namespace) -> list[str]:
    """The flags a child needs to build the pipelines of this run and time them as it does."""
    if args.dataset:
        return [
            f"--dataset={args.dataset}",
            f"--num_classes={args.num_classes}",
            f"--image_size={args.image_size}",
            f"--global_batch_size={args.global_batch_size}",
            f"--seconds={args.seconds}",
            f"--augment={args.augment}",
        ]
    return [f"--examples={args.examples}"] + (
        [f"--data_dir={args.data_dir}"] if args.data_dir else []
    )


def child_output(args: argparse.Namespace, *flags: str) -> str:
    """Runs benchmark_input.py in a fresh process with this run's flags and `flags`; returns
    its last line of output."""
    command = [sys.executable, _SCRIPT, *_mode_flags(args), *flags]
    output = subprocess.run(
        command, check=True, capture_output=True, text=True, timeout=_CHILD_TIMEOUT_S
    ).stdout
    return output.strip().splitlines()[-1]


def measure_in_child(pipeline_name: str, args: argparse.Namespace) -> float:
    """Examples/s of `pipeline_name`, timed in a fresh process."""
    return float(child_output(args, f"--pipeline={pipeline_name}"))


def stage_costs(figures: dict) -> dict:
    """Median examples/s after each step and the microseconds per example each step adds."""
    rates = {name: figures[f"stage_{name}_eps"] for name in STAGES}
    rates["augment_normalise"] = figures["tfdist_eps"]
    stages, before = {}, 0.0
    for name, rate in rates.items():
        cost = 1e6 / rate
        stages[name] = {"eps": round(rate), "added_us_per_example": round(cost - before, 2)}
        before = cost
        added = stages[name]["added_us_per_example"]
        print(f"  + {name:18s} {rate:>10,.0f} examples/s  {added:+6.2f} us/example")
    return stages


def builtin_rounds(args: argparse.Namespace) -> dict:
    """Each pipeline's (and with --stages each stage's) median examples/s over `args.rounds`
    rounds, and each ratio as the median of the rounds' ratios with its [min, max]."""
    names = ["naive", "tfdist", "parse_only"] + (
        [f"stage_{name}" for name in STAGES] if args.stages else []
    )
    measured = [{name: measure_in_child(name, args) for name in names} for _ in range(args.rounds)]
    figures = {
        f"{name}_eps": round(statistics.median(round_[name] for round_ in measured), 2)
        for name in measured[0]
    }
    for ratio, baseline in (
        ("speedup_vs_naive", "naive"),
        ("fraction_of_parse_only", "parse_only"),
    ):
        figures[ratio], figures[f"{ratio}_spread"] = _median_and_spread(
            [round_["tfdist"] / round_[baseline] for round_ in measured]
        )
    figures["rounds_eps"] = [
        {name: round(rate) for name, rate in round_.items()} for round_ in measured
    ]
    return figures


def _median_and_spread(values: list[float]) -> tuple[float, list[float]]:
    return round(statistics.median(values), 3), [round(min(values), 3), round(max(values), 3)]


def jpeg_rounds(args: argparse.Namespace) -> dict:
    """Each JPEG pipeline's median images/s and images per CPU-second over `args.rounds`
    rounds, each timed in a fresh process; each ratio of tfdist's figures to another
    pipeline's as the median of the rounds' ratios, with its [min, max]."""
    measured = [
        {name: json.loads(child_output(args, f"--pipeline={name}")) for name in JPEG_PIPELINES}
        for _ in range(args.rounds)
    ]
    figures = {
        rate: {
            name: round(statistics.median(round_[name][rate] for round_ in measured), 1)
            for name in JPEG_PIPELINES
        }
        for rate in ("images_per_s", "images_per_cpu_s")
    }
    for ratio, baseline in JPEG_RATIOS.items():
        for prefix, rate in (("", "images_per_s"), ("per_cpu_", "images_per_cpu_s")):
            figures[prefix + ratio], figures[f"{prefix}{ratio}_spread"] = _median_and_spread(
                [round_["tfdist"][rate] / round_[baseline][rate] for round_ in measured]
            )
    figures["host_examples_per_core"] = figures["images_per_cpu_s"]["tfdist"]
    figures["decode_examples_per_core"] = figures["images_per_cpu_s"]["tfdist_device"]
    figures["rounds_measured"] = [
        {
            name: {
                key: round(value, 1) if key.startswith("images_per") else value
                for key, value in rates.items()
            }
            for name, rates in round_.items()
        }
        for round_ in measured
    ]
    return figures
