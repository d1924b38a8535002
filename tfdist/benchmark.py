"""`tfdist benchmark`: throughput, scaling efficiency, input-bound ratio and toolkit overhead.

Each configuration (replica count x synthetic or real data) runs in a fresh process
(`tfdist.benchmark_child`), since the number of logical CPU devices is fixed when TensorFlow
starts. Per configuration:

  examples_per_sec      global batch / step time: median over the timed steps, with min, max
  step_time_s           median, min and max of the timed steps
  scaling_efficiency    throughput(N) / (N x throughput(1)), same data (needs 1 in --replicas)
  input_bound_ratio     throughput(real) / throughput(synthetic), same replicas
  overhead_ratio        synthetic only: tfdist's median step time / a plain Keras script's
                        (tf-keras, or Keras 3's own fit under --keras=3), both timed in the
                        same process, alternating
  noise_scale           with --measure_noise_scale, on 2+ replicas: the gradient noise scale
                        B_simple after the timed steps (`tfdist.noise_scale`)
  noise_scale_overhead  its cost: median step time with the measurement / without, alternating
                        in the same process
"""

import json
import os
import statistics
import subprocess
import sys
from typing import Sequence

from tfdist import plotting
from tfdist import summary as run_summary
from tfdist.config import ConfigError

DATA_KINDS = ("synthetic", "real")
_CHILD_TIMEOUT_S = 3600


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _child_args(train_args: list[str], replicas: int, data: str, num_gpus: int) -> list[str]:
    """`tfdist train` flags of one configuration: N replicas on GPUs or split CPUs."""
    args = list(train_args)
    if not any(arg.startswith("--strategy=") for arg in args):
        args.append("--strategy=mirrored")
    args.append(f"--num_gpus={replicas}" if num_gpus else f"--num_cpu_devices={replicas}")
    if data == "synthetic":
        args.append("--dataset=synthetic")
    return args


def _single_machine_env() -> dict[str, str]:
    """The benchmark runs on this machine alone: no TF_CONFIG for the children."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    env.setdefault("TF_USE_LEGACY_KERAS", "1")
    return env


def _measure(train_args: list[str], *, warmup_steps: int, timed_steps: int,
             overhead_rounds: int) -> dict:
    spec = {"train_args": train_args, "warmup_steps": warmup_steps,
            "timed_steps": timed_steps, "overhead_rounds": overhead_rounds}
    result = subprocess.run([sys.executable, "-m", "tfdist.benchmark_child", json.dumps(spec)],
                            capture_output=True, text=True, timeout=_CHILD_TIMEOUT_S,
                            check=False, env=_single_machine_env())
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConfigError(f"benchmark configuration `tfdist train {' '.join(train_args)}` "
                          f"failed: {last}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _figures(measured: dict, data: str) -> dict:
    batch = measured["global_batch_size"]
    steps = measured["tfdist"]
    step_time = _spread(steps)
    figures = {"global_batch_size": batch,
               "examples_per_sec": {"median": batch / step_time["median"],
                                    "min": batch / step_time["max"],
                                    "max": batch / step_time["min"]},
               "step_time_s": step_time}
    if data == "synthetic" and measured["plain"]:
        figures["overhead_ratio"] = statistics.median(steps) / statistics.median(
            measured["plain"])
    if "noise_scale" in measured:
        figures["noise_scale"] = measured["noise_scale"]
        figures["noise_scale_overhead"] = statistics.median(steps) / statistics.median(
            measured["without_noise_scale"])
    return figures


def _add_ratios(results: list[dict]) -> None:
    """Fills scaling_efficiency and input_bound_ratio from the measured throughputs."""
    rate = {(entry["replicas"], entry["data"]): entry["examples_per_sec"]["median"]
            for entry in results}
    for entry in results:
        one = rate.get((1, entry["data"]))
        if one:
            entry["scaling_efficiency"] = (entry["examples_per_sec"]["median"] /
                                           (entry["replicas"] * one))
        synthetic, real = (rate.get((entry["replicas"], kind)) for kind in DATA_KINDS)
        if synthetic and real:
            entry["input_bound_ratio"] = real / synthetic


def _table(results: list[dict]) -> str:
    noise = any("noise_scale" in entry for entry in results)
    header = (f"{'replicas':>8} {'data':>9} {'examples/s':>11} {'min':>9} {'max':>9} "
              f"{'step ms':>8} {'efficiency':>10} {'input-bound':>11} {'overhead':>8}" +
              (f" {'B_simple':>9} {'its cost':>8}" if noise else ""))
    lines = [header]
    for entry in results:
        rate, step = entry["examples_per_sec"], entry["step_time_s"]["median"]
        optional = [f"{entry[key]:.3f}" if key in entry else "-"
                    for key in ("scaling_efficiency", "input_bound_ratio", "overhead_ratio",
                                "noise_scale_overhead")]
        line = (f"{entry['replicas']:>8} {entry['data']:>9} {rate['median']:>11.1f} "
                f"{rate['min']:>9.1f} {rate['max']:>9.1f} {step * 1000:>8.1f} "
                f"{optional[0]:>10} {optional[1]:>11} {optional[2]:>8}")
        if noise:
            measured = entry.get("noise_scale")
            line += f" {'-' if measured is None else f'{measured:.4g}':>9} {optional[3]:>8}"
        lines.append(line)
    return "\n".join(lines)


def plot(results: list[dict], path: str) -> None:
    """Throughput and scaling efficiency against replicas, one line per data kind."""
    pyplot = plotting.pyplot(path)
    figure, (throughput, efficiency) = pyplot.subplots(1, 2, figsize=(10, 4))
    for kind in DATA_KINDS:
        entries = [entry for entry in results if entry["data"] == kind]
        if not entries:
            continue
        replicas = [entry["replicas"] for entry in entries]
        throughput.plot(replicas, [entry["examples_per_sec"]["median"] for entry in entries],
                        marker="o", label=kind)
        if all("scaling_efficiency" in entry for entry in entries):
            efficiency.plot(replicas, [entry["scaling_efficiency"] for entry in entries],
                            marker="o", label=kind)
    throughput.set(xlabel="replicas", ylabel="examples/s", title="throughput")
    efficiency.set(xlabel="replicas", ylabel="throughput(N) / (N x throughput(1))",
                   title="scaling efficiency", ylim=(0, 1.2))
    for axes in (throughput, efficiency):
        axes.grid(alpha=0.3)
        axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(train_args: list[str], *, replicas: list[int], data: list[str], warmup_steps: int,
         timed_steps: int, overhead_rounds: int, json_path: str | None, plot_path: str | None,
         num_gpus: int) -> int:
    """Runs the sweep, prints a progress line per configuration and the table; returns 0."""
    if plot_path:
        plotting.pyplot(plot_path)  # Before a sweep of minutes, not after it.
    configurations = [(count, kind) for count in replicas for kind in data]
    results, trainable_parameters = [], None
    for number, (count, kind) in enumerate(configurations, 1):
        measured = _measure(_child_args(train_args, count, kind, num_gpus),
                            warmup_steps=warmup_steps, timed_steps=timed_steps,
                            overhead_rounds=overhead_rounds if kind == "synthetic" else 0)
        entry = {"replicas": count, "data": kind, **_figures(measured, kind)}
        trainable_parameters = measured["trainable_parameters"]
        results.append(entry)
        print(f"tfdist benchmark: [{number}/{len(configurations)}] replicas={count} data={kind}: "
              f"{entry['examples_per_sec']['median']:.1f} examples/s, step "
              f"{entry['step_time_s']['median'] * 1000:.1f} ms", file=sys.stderr, flush=True)
    _add_ratios(results)
    print(_table(results))
    if json_path:
        run_summary.write_json(json_path, {"configurations": results,
                                           "train_args": train_args,
                                           "trainable_parameters": trainable_parameters,
                                           "warmup_steps": warmup_steps,
                                           "timed_steps": timed_steps})
    if plot_path:
        plot(results, plot_path)
    return 0
