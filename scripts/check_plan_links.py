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

    python scripts/check_plan_links.py [--hosts=2,4] [--gbps=0.1,1,10]
        [--exchanges=ring-float32,ring-bfloat16,ps-1,ps-2] [--json=PATH] [--plot=PATH]
    python scripts/check_plan_links.py --replan=PATH [--json=PATH] [--plot=PATH]
"""

import argparse
import concurrent.futures
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from tfdist.cluster.rehearsal import hosts as hosts_lib
from tfdist.runtime.output_files import write_json

_SCRIPTS = os.path.dirname(os.path.abspath(__file__))
_PORT = 2222
_MIB = 1024 * 1024
# The latency of one message of TensorFlow's gRPC ring on this machine: a 2-process all-reduce
# of 4 KiB (docs/plan_local.json, scripts/check_plan_local.py). tbf adds none.
_LATENCY_US = 1279.0
# The rate of the same 2-process all-reduce (64 MiB) over loopback: TensorFlow's gRPC ring
# where no link limits it, the host's stack alone.
_STACK_GBPS = 1.32
EXCHANGES = ("ring-float32", "ring-bfloat16", "ps-1", "ps-2")
_TASK_TIMEOUT_S = 900


def wide_mlp(*, input_shape: tuple[int, int, int], num_classes: int):
    """`--model=check_plan_links:wide_mlp`: flatten, one hidden layer of $PLAN_LINKS_WIDTH
    units (default 1280), softmax; built in the strategy's scope by `tfdist train`."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    width = int(os.environ.get("PLAN_LINKS_WIDTH", "1280"))
    layers = tf.keras.layers
    return tf.keras.Sequential([
        layers.Input(input_shape), layers.Flatten(),
        layers.Dense(width, activation="relu"), layers.Dense(num_classes),
        layers.Activation("softmax", dtype="float32")], name="wide_mlp")


def _train_flags(batch: int, steps: int, metrics_path: str) -> list[str]:
    return ["--model=check_plan_links:wide_mlp",
            "--dataset=synthetic", f"--per_replica_batch_size={batch}", "--optimizer=sgd",
            "--epochs=2", f"--steps_per_epoch={steps}", "--validation_steps=1",
            f"--metrics_json={metrics_path}"]


def _environment(width: int, tf_config: dict | None) -> dict:
    env = dict(os.environ, PLAN_LINKS_WIDTH=str(width), TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(filter(None, (_SCRIPTS, os.environ.get("PYTHONPATH")))))
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


class Tasks:
    """Processes of one measurement, each with its own log; `stop` kills those still running
    (their process groups), and `failure` names the first that failed with its log's tail."""

    def __init__(self, scratch: str):
        self._scratch = scratch
        self._running: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict) -> subprocess.Popen:
        with open(os.path.join(self._scratch, f"{name}.log"), "w", encoding="utf-8") as log:
            process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self._running.append((name, process))
        return process

    def wait(self, names: list[str], timeout_s: float) -> None:
        """Waits for the tasks `names` to exit 0; SystemExit with a log's tail otherwise."""
        deadline = time.monotonic() + timeout_s
        waited = {name: process for name, process in self._running if name in names}
        while waited:
            for name, process in list(waited.items()):
                status = process.poll()
                if status is None:
                    continue
                if status:
                    raise SystemExit(self.failure(name, f"exit status {status}"))
                del waited[name]
            if time.monotonic() > deadline:
                raise SystemExit(self.failure(next(iter(waited)), f"no end in {timeout_s:g} s"))
            time.sleep(0.2)

    def failure(self, name: str, why: str) -> str:
        with open(os.path.join(self._scratch, f"{name}.log"), encoding="utf-8") as log:
            tail = log.read()[-3000:]
        return f"check_plan_links: task {name} failed ({why}):\n{tail}"

    def stop(self) -> None:
        for _, process in self._running:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 9)
            process.wait(timeout=30)
        self._running = []


def _metrics(path: str) -> dict:
    with open(path, encoding="utf-8") as metrics_file:
        return json.load(metrics_file)


def compute_step(hosts: int, batch: int, width: int, steps: int, wire: str) -> tuple[float, int]:
    """(seconds per step of the slowest, trainable parameters) of `hosts` independent 1-worker
    multi_worker_mirrored jobs run at once on this machine, with `wire` on the wire."""
    with tempfile.TemporaryDirectory() as scratch:
        tasks = Tasks(scratch)
        try:
            for index in range(hosts):
                argv = [sys.executable, "-m", "tfdist", "train", "--strategy=multi_worker_mirrored",
                        f"--allreduce_dtype={wire}",
                        *_train_flags(batch, steps, os.path.join(scratch, f"{index}.json"))]
                tasks.start(f"compute-{index}", argv, _environment(width, None))
            tasks.wait([f"compute-{index}" for index in range(hosts)], _TASK_TIMEOUT_S)
        finally:
            tasks.stop()
        runs = [_metrics(os.path.join(scratch, f"{index}.json")) for index in range(hosts)]
    return (max(batch / run["examples_per_sec"] for run in runs),
            runs[0]["trainable_parameters"])


def _layout(made: hosts_lib.Hosts, workers: int, num_ps: int) -> dict[str, hosts_lib.Host]:
    """Task name ("worker-0", "ps-1", "chief-0") -> its host: workers first, then ps tasks, the
    coordinator last."""
    names = [f"worker-{index}" for index in range(workers)]
    if num_ps:
        names += [f"ps-{index}" for index in range(num_ps)] + ["chief-0"]
    return dict(zip(names, made.hosts))


def measured_step(made: hosts_lib.Hosts, exchange: str, workers: int, batch: int, width: int,
                  steps: int) -> dict:
    """One cell's `tfdist train` on the emulated hosts: its step (seconds, the synchronous
    equivalent under parameter server) and the run's metrics."""
    kind, _, setting = exchange.partition("-")
    num_ps = int(setting) if kind == "ps" else 0
    layout = _layout(made, workers, num_ps)
    cluster = {}
    for task, host in layout.items():
        cluster.setdefault(task.split("-")[0], []).append(f"{host.address}:{_PORT}")
    if kind == "ring":
        flags = ["--strategy=multi_worker_mirrored", f"--allreduce_dtype={setting}",
                 "--collective_timeout_s=600"]
        primary = "worker-0"
    else:
        flags = ["--strategy=parameter_server"] + (
            [f"--variable_partition=max_shards:{num_ps}"] if num_ps > 1 else [])
        primary = "chief-0"
    with tempfile.TemporaryDirectory() as scratch:
        tasks = Tasks(scratch)
        try:
            for task, host in layout.items():
                job, index = task.split("-")
                tf_config = {"cluster": cluster, "task": {"type": job, "index": int(index)}}
                argv = [*host.enter(), "--", sys.executable, "-m", "tfdist", "train", *flags,
                        *_train_flags(batch, steps, os.path.join(scratch, f"{task}.json"))]
                tasks.start(task, argv, _environment(width, tf_config))
            done = [task for task in layout if task.startswith("worker")] if kind == "ring" \
                else [primary]
            tasks.wait(done, _TASK_TIMEOUT_S)
        finally:
            tasks.stop()
        metrics = _metrics(os.path.join(scratch, f"{primary}.json"))
    return {"step_s": workers * batch / metrics["examples_per_sec"],
            "examples_per_sec": metrics["examples_per_sec"],
            "epoch_train_s": metrics.get("epoch_train_s"), "steps_per_epoch": steps}


def plan(exchange: str, workers: int, gbps: float, compute_s: float, batch: int,
         gradient_mib: float, latency_us: float) -> dict:
    """`tfdist plan`'s prediction for the cell: its JSON's N-node configuration and advice,
    and the command."""
    kind, _, setting = exchange.partition("-")
    cell = [f"--allreduce_dtype={setting}"] if kind == "ring" else [f"--num_ps={setting}"]
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "plan.json")
        argv = ["plan", f"--compute_ms={compute_s * 1000:.2f}",
                f"--per_replica_batch_size={batch}", f"--gradient_mib={gradient_mib:.4f}",
                "--gpus_per_node=1", f"--nodes=1,{workers}", "--inter_link=eth10",
                f"--inter_gbps={gbps:g}", f"--inter_latency_us={latency_us:g}", *cell]
        subprocess.run([sys.executable, "-m", "tfdist", *argv, f"--json={path}"], check=True,
                       stdout=subprocess.DEVNULL, timeout=120)
        with open(path, encoding="utf-8") as plan_file:
            report = json.load(plan_file)
    row = report["configurations"][-1]
    return {"step_s": row["step_s"], "exchange_s": row["exchange_s"],
            "scaling_efficiency": row["scaling_efficiency"], "advice": report["advice"],
            "command": "tfdist " + " ".join(argv)}


def through_stack(gbps: float, stack_gbps: float) -> float:
    """The rate of a link whose bytes also pass through a host stack of `stack_gbps` that does
    not overlap with the wire (TensorFlow's gRPC ring: serialise, send, parse, reduce)."""
    return 1 / (1 / gbps + 1 / stack_gbps)


def _with_stack(row: dict, batch: int, latency_us: float, stack_gbps: float) -> None:
    """Adds to a ring cell `tfdist plan`'s step when told the link and the stack in series as
    --inter_gbps (`through_stack`)."""
    if not row["exchange"].startswith("ring"):
        return
    predicted = plan(row["exchange"], row["hosts"], through_stack(row["gbps"], stack_gbps),
                     row["compute_s"], batch, 4 * row["trainable_parameters"] / _MIB,
                     latency_us)
    row.update({"stack_gbps": stack_gbps, "predicted_with_stack_s": predicted["step_s"],
                "ratio_with_stack": predicted["step_s"] / row["measured_s"]})


def _steps(predicted_s: float, exchange: str, workers: int, epoch_s: float,
           most: int) -> int:
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
    lines = ["| hosts | Gbit/s | exchange | compute ms | predicted exchange ms | predicted ms | "
             "measured ms | predicted / measured | with the stack: predicted ms, ratio |",
             "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        stack = (f"{row['predicted_with_stack_s'] * 1000:.0f}, {row['ratio_with_stack']:.2f}"
                 if "ratio_with_stack" in row else "-")
        lines.append(f"| {row['hosts']} | {row['gbps']:g} | {row['exchange']} | "
                     f"{row['compute_s'] * 1000:.0f} | {row['predicted_exchange_s'] * 1000:.0f} | "
                     f"{row['predicted_s'] * 1000:.0f} | {row['measured_s'] * 1000:.0f} | "
                     f"{row['ratio']:.2f} | {stack} |")
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
                axes.scatter([row["measured_s"] * 1000 for row in cells],
                             [row["predicted_s"] * 1000 for row in cells], color=color,
                             marker=markers[exchange], label=f"{hosts} hosts, {exchange}")
                stacked = [row for row in cells if "predicted_with_stack_s" in row]
                axes.scatter([row["measured_s"] * 1000 for row in stacked],
                             [row["predicted_with_stack_s"] * 1000 for row in stacked],
                             facecolors="none", edgecolors=color, marker=markers[exchange])
    low = min(min(row["measured_s"], row["predicted_s"]) for row in rows) * 1000 / 1.5
    high = max(max(row["measured_s"], row["predicted_s"]) for row in rows) * 1000 * 1.5
    line = [low, high]
    axes.plot(line, line, "k-", linewidth=0.8, label="predicted = measured")
    axes.fill_between(line, [v * 0.75 for v in line], [v * 1.25 for v in line], color="grey",
                      alpha=0.2, label="within 25%")
    axes.set(xscale="log", yscale="log", xlim=line, ylim=line, xlabel="measured step, ms",
             ylabel="tfdist plan's step, ms",
             title="tfdist plan against shaped links\n(hollow: ring, told the stack's rate too)")
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def _counts(text: str) -> list[int]:
    return [int(count) for count in text.split(",")]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--hosts", type=_counts, default=[2, 4])
    parser.add_argument("--gbps", type=lambda text: [float(rate) for rate in text.split(",")],
                        default=[0.1, 1.0, 10.0])
    parser.add_argument("--exchanges", type=lambda text: text.split(","),
                        default=list(EXCHANGES))
    parser.add_argument("--width", type=int, default=1280, help="the MLP's hidden units")
    parser.add_argument("--per_replica_batch", type=int, default=32)
    parser.add_argument("--latency_us", type=float, default=_LATENCY_US,
                        help="plan's --inter_latency_us (default: TensorFlow's gRPC ring "
                             "message on this machine, docs/plan_local.json)")
    parser.add_argument("--stack_gbps", type=float, default=_STACK_GBPS,
                        help="the host stack's rate for the second prediction of ring cells "
                             "(default: TensorFlow's gRPC ring between 2 processes on this "
                             "machine, docs/plan_local.json)")
    parser.add_argument("--epoch_s", type=float, default=8.0,
                        help="about how long each timed epoch runs")
    parser.add_argument("--most_steps", type=int, default=60)
    parser.add_argument("--compute_steps", type=int, default=20,
                        help="steps per epoch of the compute runs")
    parser.add_argument("--replan", metavar="JSON",
                        help="measure nothing: predict the cells of this earlier --json again, "
                             "with the cost model as it is now")
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
        for wire in sorted({exchange.partition("-")[2] if exchange.startswith("ring")
                            else "float32" for exchange in arguments.exchanges}):
            computed[wire] = compute_step(workers, arguments.per_replica_batch, arguments.width,
                                          arguments.compute_steps, wire)
            print(f"{workers} hosts: compute {computed[wire][0] * 1000:.1f} ms ({wire} on the "
                  "wire)", flush=True)
        parameters = next(iter(computed.values()))[1]
        names = [(f"h{index}",) for index in range(workers + 3)]
        with hosts_lib.Hosts(names) as made:
            for gbps in arguments.gbps:
                made.shape(gbps)
                for exchange in arguments.exchanges:
                    wire = exchange.partition("-")[2] if exchange.startswith("ring") else "float32"
                    compute_s = computed[wire][0]
                    predicted = plan(exchange, workers, gbps, compute_s,
                                     arguments.per_replica_batch, 4 * parameters / _MIB,
                                     arguments.latency_us)
                    steps = _steps(predicted["step_s"], exchange, workers, arguments.epoch_s,
                                   arguments.most_steps)
                    measured = measured_step(made, exchange, workers, arguments.per_replica_batch,
                                             arguments.width, steps)
                    rows.append({
                        "hosts": workers, "gbps": gbps, "exchange": exchange,
                        "compute_s": compute_s, "predicted_exchange_s": predicted["exchange_s"],
                        "predicted_s": predicted["step_s"], "measured_s": measured["step_s"],
                        "ratio": predicted["step_s"] / measured["step_s"],
                        "predicted_efficiency": predicted["scaling_efficiency"],
                        "measured_efficiency": compute_s / measured["step_s"],
                        "advice": predicted["advice"], "plan_command": predicted["command"],
                        "measured": measured, "trainable_parameters": parameters})
                    _with_stack(rows[-1], arguments.per_replica_batch, arguments.latency_us,
                                arguments.stack_gbps)
                    print(f"{workers} hosts, {gbps:g} Gbit/s, {exchange}: predicted "
                          f"{predicted['step_s'] * 1000:.0f} ms, measured "
                          f"{measured['step_s'] * 1000:.0f} ms: {rows[-1]['ratio']:.2f}",
                          flush=True)
    return rows


def advice_checks(rows: list[dict]) -> list[dict]:
    """For each float32 ring cell whose plan advises bfloat16 on the wire: the efficiency it
    promises against the measured bfloat16 cell's."""
    checks = []
    for row in rows:
        if row["exchange"] != "ring-float32":
            continue
        promised = advised_efficiency(row["advice"], row["hosts"])
        twin = next((other for other in rows if other["exchange"] == "ring-bfloat16" and
                     (other["hosts"], other["gbps"]) == (row["hosts"], row["gbps"])), None)
        if promised is None or twin is None:
            continue
        checks.append({"hosts": row["hosts"], "gbps": row["gbps"], "advised": promised,
                       "measured": row["compute_s"] / twin["measured_s"],
                       "measured_float32": row["measured_efficiency"]})
    return checks


def replan(path: str, stack_gbps: float) -> tuple[list[dict], dict]:
    """The cells of an earlier run's --json with `tfdist plan`'s predictions made again (by
    the model as it is now: the measurements stand), and that run's settings."""
    with open(path, encoding="utf-8") as earlier:
        report = json.load(earlier)
    for row in report["rows"]:
        predicted = plan(row["exchange"], row["hosts"], row["gbps"], row["compute_s"],
                         report["per_replica_batch"], 4 * row["trainable_parameters"] / _MIB,
                         report["latency_us"])
        row.update({"predicted_exchange_s": predicted["exchange_s"],
                    "predicted_s": predicted["step_s"],
                    "ratio": predicted["step_s"] / row["measured_s"],
                    "predicted_efficiency": predicted["scaling_efficiency"],
                    "advice": predicted["advice"], "plan_command": predicted["command"]})
        _with_stack(row, report["per_replica_batch"], report["latency_us"], stack_gbps)
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
        print(f"{check['hosts']} hosts at {check['gbps']:g} Gbit/s: plan says bfloat16 on the "
              f"wire brings them to {check['advised']:.2f}; measured {check['measured']:.2f} "
              f"(float32 {check['measured_float32']:.2f})")
    if arguments.json:
        write_json("json", arguments.json, {
            "width": arguments.width, "per_replica_batch": arguments.per_replica_batch,
            "latency_us": arguments.latency_us, "rows": rows, "advice_checks": checks,
            "tbf_sizes": {f"{gbps:g}": hosts_lib.tbf_sizes(gbps) for gbps in arguments.gbps}})
    if arguments.plot:
        _plot(rows, arguments.plot)


if __name__ == "__main__":
    main()
