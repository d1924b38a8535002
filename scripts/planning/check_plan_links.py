"""`tfdist plan` against links this script controls: the predicted step of multi-worker ring
all-reduce and of parameter-server training against the measured one, on emulated hosts whose
links are shaped to a bandwidth.

Hosts are network namespaces on one bridge, as `tfdist rehearse` emulates them
(`tfdist.cluster.rehearsal.hosts`); every host's link is limited to the rate in each direction by
Linux's token-bucket filter (`tc ... tbf`, on the host's eth0 and on its bridge port; sizes in
`hosts.tbf_sizes`). Bandwidth only: netem, which could add delay, is not in these kernels, so a
message's latency is the stack's own.

The workload is a wide MLP (32x32x3 inputs, one hidden layer of --width units, 10 classes:
about 16 MB of float32 gradients at the default width), plain SGD, synthetic data: the
gradient bytes are large and the compute small. Per cell (hosts x link rate x exchange):

  measured   `tfdist train` with one task per emulated host, TF_CONFIG by the hosts' addresses:
             multi_worker_mirrored over N workers (--allreduce_dtype float32 or bfloat16), or
             parameter_server with N workers, K ps tasks (each variable split in K,
             --variable_partition=max_shards:K) and the coordinator on hosts of their own.
             Step = N x per-replica batch / examples/s of the second epoch (for the parameter
             server, whose workers step on their own, the synchronous equivalent).
  compute    N independent 1-worker multi_worker_mirrored jobs at once, no network (the slowest
             counts): the step as the cluster's workers compute it, sharing this machine's
             cores as they do, with no exchange.
  predicted  `tfdist plan --gpus_per_node=1 --nodes=1,N --inter_link=eth10 --inter_gbps=RATE
             --inter_latency_us=--latency_us` with that compute, the per-replica batch, the
             gradient MiB from the run's trainable parameters, and the cell's dtype or
             --num_ps. Its advice for the float32 ring ("bfloat16 on the wire brings N nodes to
             E") is checked against the measured bfloat16 cell: compute / measured step.

Prints a table and writes --json (every figure) and --plot. Linux, as root (namespaces, tc).

    python scripts/planning/check_plan_links.py [--hosts=2,4] [--gbps=0.1,1,10]
        [--exchanges=ring-float32,ring-bfloat16,ps-1,ps-2] [--json=PATH] [--plot=PATH]
    python scripts/planning/check_plan_links.py --replan=PATH [--json=PATH] [--plot=PATH]
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import plan_links_runs
from tfdist.cluster.rehearsal import hosts as hosts_lib
from tfdist.runtime.output_files import write_json

_MIB = 1024 * 1024
# The latency of one message of TensorFlow's gRPC ring on this machine: a 2-process all-reduce
# of 4 KiB (docs/results/plan_local.json, scripts/planning/check_plan_local.py). tbf adds none.
_LATENCY_US = 1279.0
# The rate of the same 2-process all-reduce (64 MiB) over loopback: TensorFlow's gRPC ring
# where no link limits it, the host's stack alone.
_STACK_GBPS = 1.32
EXCHANGES = ("ring-float32", "ring-bfloat16", "ps-1", "ps-2")


def plan(
    exchange: str,
    workers: int,
    gbps: float,
    compute_s: float,
    batch: int,
    gradient_mib: float,
    latency_us: float,
    stack_gbps: float,
) -> dict:
    """`tfdist plan`'s prediction for the cell: its JSON's N-node configuration and advice,
    and the command."""
    kind, _, setting = exchange.partition("-")
    cell = [f"--allreduce_dtype={setting}"] if kind == "ring" else [f"--num_ps={setting}"]
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "plan.json")
        argv = [
            "plan",
            f"--compute_ms={compute_s * 1000:.2f}",
            f"--per_replica_batch_size={batch}",
            f"--gradient_mib={gradient_mib:.4f}",
            "--gpus_per_node=1",
            f"--nodes=1,{workers}",
            "--inter_link=eth10",
            f"--inter_gbps={gbps:g}",
            f"--inter_latency_us={latency_us:g}",
            f"--inter_stack_gbps={stack_gbps:g}",
            *cell,
        ]
        subprocess.run(
            [sys.executable, "-m", "tfdist", *argv, f"--json={path}"],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=120,
        )
        with open(path, encoding="utf-8") as plan_file:
            report = json.load(plan_file)
    row = report["configurations"][-1]
    return {
        "step_s": row["step_s"],
        "exchange_s": row["exchange_s"],
        "scaling_efficiency": row["scaling_efficiency"],
        "advice": report["advice"],
        "command": "tfdist " + " ".join(argv),
    }


def _steps(predicted_s: float, exchange: str, workers: int, epoch_s: float, most: int) -> int:
    """Steps per epoch for about `epoch_s` of training (the parameter server counts each
    worker's step), at least 4 per worker."""
    per_worker = workers if exchange.startswith("ps") else 1
    return per_worker * min(most, max(4, math.ceil(epoch_s / predicted_s)))


def advised_efficiency(advice: list[str], workers: int) -> float | None:
    """E from the plan's line "bfloat16 on the wire ... brings ... N nodes to ... E", for
    `workers` nodes (the last figure), or None when the plan gives no such line."""
    for line in advice:
        if line.startswith("bfloat16 on the wire") and f"{workers} nodes" in line:
            return float(line.rstrip(".").split()[-1])
    return None


def _table(rows: list[dict]) -> str:
    lines = [
        "| hosts | Gbit/s | exchange | compute ms | predicted exchange ms | predicted ms | "
        "measured ms | predicted / measured |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['hosts']} | {row['gbps']:g} | {row['exchange']} | "
            f"{row['compute_s'] * 1000:.0f} | {row['predicted_exchange_s'] * 1000:.0f} | "
            f"{row['predicted_s'] * 1000:.0f} | {row['measured_s'] * 1000:.0f} | "
            f"{row['ratio']:.2f} |"
        )
    return "\n".join(lines)


def _plot(rows: list[dict], path: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel

    figure, axes = pyplot.subplots(figsize=(6.5, 5.5))
    markers = dict(zip(EXCHANGES, "osD^"))
    for exchange in EXCHANGES:
        for hosts, color in ((2, "tab:blue"), (4, "tab:orange")):
            cells = [row for row in rows if row["exchange"] == exchange and row["hosts"] == hosts]
            if cells:
                axes.scatter(
                    [row["measured_s"] * 1000 for row in cells],
                    [row["predicted_s"] * 1000 for row in cells],
                    color=color,
                    marker=markers[exchange],
                    label=f"{hosts} hosts, {exchange}",
                )
    low = min(min(row["measured_s"], row["predicted_s"]) for row in rows) * 1000 / 1.5
    high = max(max(row["measured_s"], row["predicted_s"]) for row in rows) * 1000 * 1.5
    line = [low, high]
    axes.plot(line, line, "k-", linewidth=0.8, label="predicted = measured")
    axes.fill_between(
        line,
        [v * 0.75 for v in line],
        [v * 1.25 for v in line],
        color="grey",
        alpha=0.2,
        label="within 25%",
    )
    axes.set(
        xscale="log",
        yscale="log",
        xlim=line,
        ylim=line,
        xlabel="measured step, ms",
        ylabel="tfdist plan's step, ms",
        title="tfdist plan against shaped links",
    )
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def _counts(text: str) -> list[int]:
    return [int(count) for count in text.split(",")]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--hosts", type=_counts, default=[2, 4])
    parser.add_argument(
        "--gbps",
        type=lambda text: [float(rate) for rate in text.split(",")],
        default=[0.1, 1.0, 10.0],
    )
    parser.add_argument("--exchanges", type=lambda text: text.split(","), default=list(EXCHANGES))
    parser.add_argument("--width", type=int, default=1280, help="the MLP's hidden units")
    parser.add_argument("--per_replica_batch", type=int, default=32)
    parser.add_argument(
        "--latency_us",
        type=float,
        default=_LATENCY_US,
        help="plan's --inter_latency_us (default: TensorFlow's gRPC ring "
        "message on this machine, docs/results/plan_local.json)",
    )
    parser.add_argument(
        "--stack_gbps",
        type=float,
        default=_STACK_GBPS,
        help="plan's --inter_stack_gbps "
        "(default: TensorFlow's gRPC ring between 2 processes on this "
        "machine, docs/results/plan_local.json)",
    )
    parser.add_argument(
        "--epoch_s", type=float, default=8.0, help="about how long each timed epoch runs"
    )
    parser.add_argument("--most_steps", type=int, default=60)
    parser.add_argument(
        "--compute_steps", type=int, default=20, help="steps per epoch of the compute runs"
    )
    parser.add_argument(
        "--replan",
        metavar="JSON",
        help="measure nothing: predict the cells of this earlier --json again, "
        "with the cost model as it is now",
    )
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--plot", help="write predicted against measured to this PNG")
    arguments = parser.parse_args()
    unknown = set(arguments.exchanges) - set(EXCHANGES)
    if unknown:
        parser.error(f"exchanges={','.join(sorted(unknown))}: not among {','.join(EXCHANGES)}")
    return arguments


def run_cells(arguments: argparse.Namespace) -> list[dict]:
    """Every cell's figures, host count by host count, each on hosts made for it (and removed
    after, also on failure)."""
    rows = []
    for workers in arguments.hosts:
        computed = {}
        for wire in sorted(
            {
                exchange.partition("-")[2] if exchange.startswith("ring") else "float32"
                for exchange in arguments.exchanges
            }
        ):
            computed[wire] = plan_links_runs.compute_step(
                workers, arguments.per_replica_batch, arguments.width, arguments.compute_steps, wire
            )
            print(
                f"{workers} hosts: compute {computed[wire][0] * 1000:.1f} ms ({wire} on the wire)",
                flush=True,
            )
        parameters = next(iter(computed.values()))[1]
        names = [(f"h{index}",) for index in range(workers + 3)]
        with hosts_lib.Hosts(names) as made:
            for gbps in arguments.gbps:
                made.shape(gbps)
                for exchange in arguments.exchanges:
                    wire = exchange.partition("-")[2] if exchange.startswith("ring") else "float32"
                    compute_s = computed[wire][0]
                    predicted = plan(
                        exchange,
                        workers,
                        gbps,
                        compute_s,
                        arguments.per_replica_batch,
                        4 * parameters / _MIB,
                        arguments.latency_us,
                        arguments.stack_gbps,
                    )
                    steps = _steps(
                        predicted["step_s"],
                        exchange,
                        workers,
                        arguments.epoch_s,
                        arguments.most_steps,
                    )
                    measured = plan_links_runs.measured_step(
                        made, exchange, workers, arguments.per_replica_batch, arguments.width, steps
                    )
                    rows.append(
                        {
                            "hosts": workers,
                            "gbps": gbps,
                            "exchange": exchange,
                            "compute_s": compute_s,
                            "predicted_exchange_s": predicted["exchange_s"],
                            "predicted_s": predicted["step_s"],
                            "measured_s": measured["step_s"],
                            "ratio": predicted["step_s"] / measured["step_s"],
                            "predicted_efficiency": predicted["scaling_efficiency"],
                            "measured_efficiency": compute_s / measured["step_s"],
                            "advice": predicted["advice"],
                            "plan_command": predicted["command"],
                            "measured": measured,
                            "trainable_parameters": parameters,
                        }
                    )
                    print(
                        f"{workers} hosts, {gbps:g} Gbit/s, {exchange}: predicted "
                        f"{predicted['step_s'] * 1000:.0f} ms, measured "
                        f"{measured['step_s'] * 1000:.0f} ms: {rows[-1]['ratio']:.2f}",
                        flush=True,
                    )
    return rows


def advice_checks(rows: list[dict]) -> list[dict]:
    """For each float32 ring cell whose plan advises bfloat16 on the wire: the efficiency it
    promises against the measured bfloat16 cell's."""
    checks = []
    for row in rows:
        if row["exchange"] != "ring-float32":
            continue
        promised = advised_efficiency(row["advice"], row["hosts"])
        twin = next(
            (
                other
                for other in rows
                if other["exchange"] == "ring-bfloat16"
                and (other["hosts"], other["gbps"]) == (row["hosts"], row["gbps"])
            ),
            None,
        )
        if promised is None or twin is None:
            continue
        checks.append(
            {
                "hosts": row["hosts"],
                "gbps": row["gbps"],
                "advised": promised,
                "measured": row["compute_s"] / twin["measured_s"],
                "measured_float32": row["measured_efficiency"],
            }
        )
    return checks


def replan(path: str, stack_gbps: float) -> tuple[list[dict], dict]:
    """The cells of an earlier run's --json with `tfdist plan`'s predictions made again (by
    the model as it is now: the measurements stand), and that run's settings."""
    with open(path, encoding="utf-8") as earlier:
        report = json.load(earlier)
    for row in report["rows"]:
        predicted = plan(
            row["exchange"],
            row["hosts"],
            row["gbps"],
            row["compute_s"],
            report["per_replica_batch"],
            4 * row["trainable_parameters"] / _MIB,
            report["latency_us"],
            stack_gbps,
        )
        row.update(
            {
                "predicted_exchange_s": predicted["exchange_s"],
                "predicted_s": predicted["step_s"],
                "ratio": predicted["step_s"] / row["measured_s"],
                "predicted_efficiency": predicted["scaling_efficiency"],
                "advice": predicted["advice"],
                "plan_command": predicted["command"],
            }
        )
    return report["rows"], report


def main() -> None:
    arguments = _arguments()
    if arguments.replan:
        rows, earlier = replan(arguments.replan, arguments.stack_gbps)
        for name in ("width", "per_replica_batch", "latency_us"):
            setattr(arguments, name, earlier[name])
        arguments.gbps = sorted({row["gbps"] for row in rows})
    else:
        hosts_lib.clean_stale()
        rows = run_cells(arguments)
    checks = advice_checks(rows)
    print("\n" + _table(rows))
    for check in checks:
        print(
            f"{check['hosts']} hosts at {check['gbps']:g} Gbit/s: plan says bfloat16 on the "
            f"wire brings them to {check['advised']:.2f}; measured {check['measured']:.2f} "
            f"(float32 {check['measured_float32']:.2f})"
        )
    if arguments.json:
        write_json(
            "json",
            arguments.json,
            {
                "width": arguments.width,
                "per_replica_batch": arguments.per_replica_batch,
                "latency_us": arguments.latency_us,
                "stack_gbps": arguments.stack_gbps,
                "rows": rows,
                "advice_checks": checks,
                "tbf_sizes": {f"{gbps:g}": hosts_lib.tbf_sizes(gbps) for gbps in arguments.gbps},
            },
        )
    if arguments.plot:
        _plot(rows, arguments.plot)


if __name__ == "__main__":
    main()
