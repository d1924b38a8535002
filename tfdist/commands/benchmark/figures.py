"""The figures of `tfdist benchmark` from its configurations' rounds, and their table and plot.

A round's figure is the median of its timed steps; each figure below is the median over rounds
with its spread (min, max; for a ratio `<ratio>_spread`), and each ratio the median of its
per-round ratios, so that
both sides of a ratio come from the same round. A ratio whose spread is wider than its distance
from 1 is named after the table: that difference is noise.

  examples_per_sec      global batch / step time
  step_time_s           median, min and max of the rounds' median step times
  scaling_efficiency    throughput(N) / (N x throughput(1)), same data and round (needs 1 in
                        --replicas)
  input_bound_ratio     throughput(real) / throughput(synthetic), same replicas and round
  overhead_ratio        synthetic only: tfdist's median step time / a plain Keras script's
                        in the same strategy's scope (tf-keras, or Keras 3's own fit under
                        --keras=3), both timed in the same process, alternating
  overhead_vs_no_strategy
                        the same against the plain script with no strategy at all, at one
                        replica's batch: on N replicas, the cost per replica (1.0 when N
                        devices each do one replica's step in the time of one, as GPUs can;
                        about N on CPU replicas that share the same cores)
  noise_scale           with --measure_noise_scale, on 2+ replicas: the gradient noise scale
                        B_simple after the timed steps (`tfdist.optim.noise_scale`)
  noise_scale_overhead  its cost: median step time with the measurement / without, alternating
                        in the same process
  overhead_vs_mirrored  with --overhead on synthetic data (the report's "multi_worker_mirrored"):
                        the step time of a 1-worker multi_worker_mirrored run / that of mirrored
                        on the same single device (CPU:0, or GPU:0), each in a process of its
                        own, both timed in every round: the strategy's tax where no other
                        worker exists
"""

import statistics
from typing import Sequence

from tfdist.commands.benchmark import plotting

DATA_KINDS = ("synthetic", "real")


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _ratio(numerators: Sequence[float], denominators: Sequence[float]) -> tuple[float, list]:
    """Median ratio of paired per-round figures, and [min, max] over the rounds."""
    ratios = [top / bottom for top, bottom in zip(numerators, denominators)]
    return statistics.median(ratios), [min(ratios), max(ratios)]


def _round_medians(rounds: list[list[float]]) -> list[float]:
    return [statistics.median(steps) for steps in rounds]


def figures(measured: dict, data: str) -> dict:
    """Throughput and step time as the median of the rounds' medians with [min, max] over the
    rounds; each ratio the median of its per-round ratios, with `<ratio>_spread`."""
    batch = measured["global_batch_size"]
    steps = _round_medians(measured["tfdist"])
    step_time = _spread(steps)
    figures = {
        "global_batch_size": batch,
        "rounds": len(steps),
        "examples_per_sec": {
            "median": batch / step_time["median"],
            "min": batch / step_time["max"],
            "max": batch / step_time["min"],
        },
        "rounds_examples_per_sec": [batch / step for step in steps],
        "step_time_s": step_time,
    }
    baselines = {"overhead_ratio": "plain", "overhead_vs_no_strategy": "no_strategy"}
    if "noise_scale" in measured:
        figures["noise_scale"] = measured["noise_scale"]
        baselines["noise_scale_overhead"] = "without_noise_scale"
    for key, baseline in baselines.items():
        if measured.get(baseline) and (data == "synthetic" or key == "noise_scale_overhead"):
            figures[key], figures[f"{key}_spread"] = _ratio(
                steps, _round_medians(measured[baseline])
            )
    return figures


def add_ratios(results: list[dict]) -> None:
    """Fills scaling_efficiency and input_bound_ratio from the throughputs of the same rounds:
    the median of the per-round ratios, with their [min, max]."""
    rates = {
        (entry["replicas"], entry["data"]): entry["rounds_examples_per_sec"] for entry in results
    }
    for entry in results:
        own, one = entry["rounds_examples_per_sec"], rates.get((1, entry["data"]))
        count = entry["replicas"]
        if count == 1:  # The reference: 1.0 by definition.
            entry["scaling_efficiency"], entry["scaling_efficiency_spread"] = 1.0, [1.0, 1.0]
        elif one:
            entry["scaling_efficiency"], entry["scaling_efficiency_spread"] = _ratio(
                own, [count * rate for rate in one]
            )
        synthetic, real = (rates.get((entry["replicas"], kind)) for kind in DATA_KINDS)
        if synthetic and real:
            entry["input_bound_ratio"], entry["input_bound_ratio_spread"] = _ratio(real, synthetic)


def multi_worker_tax(mirrored: dict, multi_worker: dict) -> dict:
    """The multi_worker_mirrored report: both runs' step times (median over rounds, with their
    spread) and `overhead_vs_mirrored`, the median of the per-round ratios."""
    steps = {
        name: _round_medians(measured["tfdist"])
        for name, measured in (("mirrored", mirrored), ("multi_worker", multi_worker))
    }
    ratio, spread = _ratio(steps["multi_worker"], steps["mirrored"])
    return {
        "workers": 1,
        "replicas": 1,
        "data": "synthetic",
        "global_batch_size": multi_worker["global_batch_size"],
        "rounds": len(steps["multi_worker"]),
        "step_time_s": _spread(steps["multi_worker"]),
        "mirrored_step_time_s": _spread(steps["mirrored"]),
        "overhead_vs_mirrored": ratio,
        "overhead_vs_mirrored_spread": spread,
    }


def tax_line(tax: dict, device: str) -> str:
    """The multi_worker_mirrored report in one line, for after the table."""
    return (
        f"multi_worker_mirrored, 1 worker on {device}, synthetic data: "
        f"{tax['step_time_s']['median'] * 1000:.1f} ms a step against mirrored's "
        f"{tax['mirrored_step_time_s']['median'] * 1000:.1f} ms on the same device: "
        f"overhead_vs_mirrored {_cell(tax, 'overhead_vs_mirrored')}"
    )


_RATIOS = (
    "scaling_efficiency",
    "input_bound_ratio",
    "overhead_ratio",
    "overhead_vs_no_strategy",
    "noise_scale_overhead",
)


def _cell(entry: dict, key: str) -> str:
    """A ratio and half its spread over rounds: `1.034±.021`."""
    if key not in entry:
        return "-"
    low, high = entry[f"{key}_spread"]
    return f"{entry[key]:.3f}" + (
        f"±{(high - low) / 2:.3f}".replace("0.", ".", 1) if high > low else ""
    )


def noisy_figures(results: list[dict], tax: dict | None = None) -> list[str]:
    """One line per ratio whose spread over rounds is wider than its distance from 1, the
    effect it claims (overhead, lost efficiency, input cost); `tax` is the
    multi_worker_mirrored report, if any."""
    named = [
        (f"replicas={entry['replicas']} data={entry['data']}", entry, key)
        for entry in results
        for key in _RATIOS
    ]
    if tax:
        named.append(("multi_worker_mirrored", tax, "overhead_vs_mirrored"))
    lines = []
    for label, entry, key in named:
        if key not in entry or entry["rounds"] < 2:
            continue
        low, high = entry[f"{key}_spread"]
        if (high - low) / 2 > abs(entry[key] - 1):
            lines.append(
                f"tfdist benchmark: {label}: {key} {entry[key]:.3f} spans "
                f"{low:.3f}-{high:.3f} over {entry['rounds']} rounds, wider than its "
                f"distance from 1: within noise here (more --rounds or --timed_steps "
                f"narrow it)."
            )
    return lines


def table(results: list[dict]) -> str:
    noise = any("noise_scale" in entry for entry in results)
    header = (
        f"{'replicas':>8} {'data':>9} {'examples/s':>11} {'min':>9} {'max':>9} "
        f"{'step ms':>8} {'efficiency':>11} {'input-bound':>11} {'overhead':>11} "
        f"{'vs none':>11}" + (f" {'B_simple':>9} {'its cost':>11}" if noise else "")
    )
    lines = [header]
    for entry in results:
        rate, step = entry["examples_per_sec"], entry["step_time_s"]["median"]
        cells = [_cell(entry, key) for key in _RATIOS]
        line = (
            f"{entry['replicas']:>8} {entry['data']:>9} {rate['median']:>11.1f} "
            f"{rate['min']:>9.1f} {rate['max']:>9.1f} {step * 1000:>8.1f} "
            + " ".join(f"{cell:>11}" for cell in cells[:4])
        )
        if noise:
            measured = entry.get("noise_scale")
            line += f" {'-' if measured is None else f'{measured:.4g}':>9} {cells[4]:>11}"
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
        throughput.plot(
            replicas,
            [entry["examples_per_sec"]["median"] for entry in entries],
            marker="o",
            label=kind,
        )
        if all("scaling_efficiency" in entry for entry in entries):
            efficiency.plot(
                replicas, [entry["scaling_efficiency"] for entry in entries], marker="o", label=kind
            )
    throughput.set(xlabel="replicas", ylabel="examples/s", title="throughput")
    efficiency.set(
        xlabel="replicas",
        ylabel="throughput(N) / (N x throughput(1))",
        title="scaling efficiency",
        ylim=(0, 1.2),
    )
    for axes in (throughput, efficiency):
        axes.grid(alpha=0.3)
        axes.legend()
    figure.tight_layout()
    plotting.save(figure, path)
