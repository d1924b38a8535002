"""`tfdist plan`: what a job's step would cost on clusters this machine is not, from what this
machine measured, by the cost model of `tfdist.cluster.cost_model` (docs/PLANNING.md).

Prints a description of the workload and cluster, a table per node count and advice drawn from
the same model (`workload`, `forecast`); `--json` and `--plot` write the figures.
"""

import dataclasses
import math
import sys

from absl import flags

from tfdist.cluster import cost_model
from tfdist.commands import cli_flags
from tfdist.commands import flags as flags_lib
from tfdist.commands.benchmark import plotting
from tfdist.commands import train_flags
from tfdist.commands.cost_plan import forecast
from tfdist.commands.cost_plan import input_rates
from tfdist.commands.cost_plan import scaling
from tfdist.commands.cost_plan import workload
from tfdist.input_pipelines.config import MAX_THREADS
from tfdist.runtime import output_files
from tfdist.runtime import paths
from tfdist.runtime import plugins
from tfdist.runtime.config import Precision
from tfdist.strategies import WireDtype
from tfdist.strategies.config import MAX_REPLICA_DEVICES

_INTRA, _INTER = list(cost_model.INTRA_NODE_LINKS), list(cost_model.INTER_NODE_LINKS)
_OVERLAP = flags_lib.define_float(
    "overlap",
    0.0,
    "plan: the share of the backward pass the gradient exchange runs "
    "behind, 0 (after the whole backward pass: TensorFlow's one pack) to 1.",
)
_BACKWARD = flags_lib.define_float(
    "backward_fraction", 2 / 3, "plan: the backward pass's share of the step's compute time."
)
for _holder in (_OVERLAP, _BACKWARD):
    flags.register_validator(_holder, lambda value: 0 <= value <= 1, message="must lie in [0, 1]")
_OWN = flags_lib.group(
    flags.DEFINE_string(
        "from_benchmark",
        None,
        "plan: a `tfdist benchmark --json` file (with 1 in --replicas): its "
        "1-replica synthetic step time, batch, trainable parameters and "
        "train flags are the workload; flags given here override them (the "
        "step time scales with --per_replica_batch_size).",
    ),
    flags_lib.define_measure(
        "compute_ms",
        "plan: one replica's step time (forward and backward) "
        "at --per_replica_batch_size on its own device, in ms.",
        1e-3,
        1e9,
    ),
    train_flags.PER_REPLICA_BATCH_SIZE,  # The train flag: one definition, the same meaning.
    flags_lib.define_measure(
        "gradient_mib",
        "plan: float32 gradient MiB per step; unset counts "
        "--model's trainable parameters (or takes the benchmark's).",
        1e-6,
        2.0**30,
    ),
    flags_lib.define_integer(
        "gpus_per_node",
        8,
        "plan: GPUs in each node.",
        lower_bound=1,
        upper_bound=MAX_REPLICA_DEVICES,
    ),
    flags.DEFINE_list(
        "nodes", ["1", "2", "4", "8", "16", "32", "64"], "plan: node counts to predict."
    ),
    flags.DEFINE_enum(
        "intra_link",
        "nvlink3",
        _INTRA,
        "plan: the link between GPUs inside a node (docs/PLANNING.md).",
    ),
    flags.DEFINE_enum(
        "inter_link", "roce25", _INTER, "plan: each node's network link (docs/PLANNING.md)."
    ),
    flags.DEFINE_bool(
        "gpudirect_rdma",
        False,
        "plan: GPUs reach the network without host memory (needs an RDMA link: roce25 or ib_*).",
    ),
    flags.DEFINE_enum(
        "host_pcie",
        "pcie4",
        ["pcie3", "pcie4", "pcie5"],
        "plan: the GPUs' link to host memory, which traffic between nodes "
        "crosses twice without --gpudirect_rdma.",
    ),
    flags_lib.define_measure("intra_gbps", "plan: override --intra_link's Gbit/s.", 1e-3, 1e6),
    flags_lib.define_measure(
        "intra_latency_us", "plan: override --intra_link's latency in µs.", 1e-3, 1e9
    ),
    flags_lib.define_measure("inter_gbps", "plan: override --inter_link's Gbit/s.", 1e-3, 1e6),
    flags_lib.define_measure(
        "inter_latency_us", "plan: override --inter_link's latency in µs.", 1e-3, 1e9
    ),
    flags_lib.define_measure(
        "inter_stack_gbps",
        "plan: Gbit/s one node's network stack moves "
        "of an all-reduce where no link limits it (TensorFlow's gRPC ring: "
        "a 2-process all-reduce over loopback, "
        "scripts/planning/check_plan_local.py); "
        "its cost adds to the link's. Unset: unlimited.",
        1e-3,
        1e6,
    ),
    flags.DEFINE_enum(
        "allreduce",
        "ring",
        ["ring", "hierarchical"],
        "plan: one ring through every GPU, or reduce inside nodes, all-reduce "
        "between them, broadcast inside them.",
    ),
    _OVERLAP,
    _BACKWARD,
    flags_lib.define_integer(
        "host_cores_per_node",
        None,
        "plan: host cores for the input pipeline on each node; unset: as "
        "many as it needs (the table says how many).",
        lower_bound=1,
        upper_bound=MAX_THREADS,
    ),
    flags_lib.define_measure(
        "host_examples_per_core",
        "plan: examples/s one host core's pipeline "
        "delivers with preprocessing on the host "
        "(scripts/input_pipeline/benchmark_input.py).",
        1e-3,
        1e9,
    ),
    flags_lib.define_measure(
        "decode_examples_per_core",
        "plan: the same with preprocessing on the device (the host only decodes and batches).",
        1e-3,
        1e9,
    ),
    flags.DEFINE_string(
        "input_benchmark",
        None,
        "plan: a `scripts/input_pipeline/benchmark_input.py --json` file: its "
        "host_examples_per_core and decode_examples_per_core (images per "
        "CPU-second, measured on your files with --dataset=tfrecord:GLOB) are "
        "the host's rates; the two flags override them.",
    ),
    flags.DEFINE_string(
        "noise_scale_json",
        None,
        "plan: a `tfdist train --measure_noise_scale --metrics_json` file: the "
        "median of its noise_scale history (B_simple) estimates the critical "
        "batch, and the plan adds the steps and time to the target and where "
        "more replicas stop paying (docs/PLANNING.md).",
    ),
    flags_lib.define_measure(
        "critical_batch",
        "plan: the critical batch B_crit in examples, instead of --noise_scale_json's estimate.",
        1e-3,
        scaling.MAX_NOISE_SCALE,
    ),
)
flags_lib.register(
    "plan",
    _OWN,
    flags_lib.group(
        cli_flags.JSON,
        cli_flags.PLOT,
        train_flags.TRAIN["model"],
        train_flags.SOURCE["image_size"],
        train_flags.SOURCE["num_classes"],
        train_flags.TRAIN["mixed_precision"],
        train_flags.STRATEGY["allreduce_dtype"],
        train_flags.NUM_PS,
        train_flags.KERAS,
        train_flags.TF_LOGS,
    ),
)


@dataclasses.dataclass(frozen=True)
class PlanRequest:
    """What `tfdist plan` was asked: its flags by name (`nodes` as integers), and `given`, the
    names of those set on the command line (they override a benchmark's figures)."""

    from_benchmark: str | None
    compute_ms: float | None
    per_replica_batch_size: int | None
    gradient_mib: float | None
    gpus_per_node: int
    nodes: list[int]
    intra_link: str
    inter_link: str
    gpudirect_rdma: bool
    host_pcie: str
    intra_gbps: float | None
    intra_latency_us: float | None
    inter_gbps: float | None
    inter_latency_us: float | None
    inter_stack_gbps: float | None
    allreduce: str
    overlap: float
    backward_fraction: float
    host_cores_per_node: int | None
    host_examples_per_core: float | None
    decode_examples_per_core: float | None
    input_benchmark: str | None
    noise_scale_json: str | None
    critical_batch: float | None
    json: str | None
    plot: str | None
    model: str
    image_size: int | None
    num_classes: int | None
    mixed_precision: Precision
    allreduce_dtype: WireDtype
    num_ps: int
    keras: str
    tf_logs: bool
    given: frozenset[str]


def request_from_flags() -> PlanRequest:
    """The parsed flags of `tfdist plan`.

    Raises:
      UsageError: a node count that is not an integer from 1 to 4096.
    """
    holders = flags_lib.COMMAND_FLAGS["plan"]
    values = {name: holder.value for name, holder in holders.items()}
    nodes = flags_lib.counts(values["nodes"], flags_lib.MAX_TASKS)
    if nodes is None:
        raise flags_lib.UsageError(
            f"nodes={','.join(values['nodes'])!r} is not a list of "
            f"integers from 1 to {flags_lib.MAX_TASKS}; write e.g. "
            "--nodes=1,2,4,8."
        )
    return PlanRequest(
        **{**values, "nodes": nodes},
        given=frozenset(name for name, holder in holders.items() if holder.present),
    )


def _plot(rows: list[dict], path: str) -> None:
    pyplot = plotting.pyplot(path)
    figure, (efficiency, times) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    gpus = [row["gpus"] for row in rows]
    efficiency.plot(gpus, [row["scaling_efficiency"] for row in rows], marker="o")
    efficiency.set(
        xscale="log",
        xlabel="GPUs",
        ylabel="scaling efficiency",
        ylim=(0, 1.05),
        title="predicted scaling efficiency",
    )
    labels = [str(count) for count in gpus]
    bottom = [0.0] * len(rows)
    for key, name in (("compute_s", "compute"), ("exposed_exchange_s", "exposed exchange")):
        heights = [row[key] * 1000 for row in rows]
        times.bar(labels, heights, bottom=bottom, label=name)
        bottom = [low + high for low, high in zip(bottom, heights)]
    times.plot(
        labels,
        [row["input_s"] * 1000 for row in rows],
        "k--",
        marker="x",
        label="input (overlapped)",
    )
    highest = max(max(bottom), *(row["input_s"] * 1000 for row in rows))
    times.set(xlabel="GPUs", ylabel="ms per step", title="step time", ylim=(0, highest * 1.4))
    for axes in (efficiency, times):
        axes.grid(alpha=0.3)
    times.legend(loc="upper left")
    figure.tight_layout()
    plotting.save(figure, path)


def _finite(value):
    """`value` with infinities (an unlimited input pipeline) as None, for JSON."""
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return None if isinstance(value, float) and math.isinf(value) else value


def main() -> int:
    """Prints the description, table and advice; writes --json and --plot. Returns 0."""
    request = request_from_flags()
    plugins.check_findable(dataset="", model=request.model)
    paths.check_output_file("json", request.json)
    paths.check_output_file("plot", request.plot)
    if request.plot:
        plotting.pyplot(request.plot)  # Missing matplotlib, before any figure.
    plan_inputs = workload.inputs(request, input_rates.from_request(request))
    critical = scaling.from_request(request)
    rows = forecast.predictions(plan_inputs, request.nodes)
    lines = forecast.advice(plan_inputs, request.nodes)
    print(forecast.describe(plan_inputs))
    report = {}
    if critical is not None:
        batch = plan_inputs.workload.per_replica_batch
        rows = scaling.with_steps(rows, critical, batch)
        lines.append(scaling.advice(rows, critical, batch, plan_inputs.cluster.gpus_per_node))
        report["critical_batch"] = scaling.summary(rows, critical, batch)
        print(f"tfdist plan: {scaling.describe(critical)}")
    print(forecast.table(rows, scaling.COLUMNS if critical is not None else ()))
    for line in lines:
        print(f"tfdist plan: {line}")
    if request.json:
        output_files.write_json(
            "json",
            request.json,
            _finite(
                {
                    "workload": dataclasses.asdict(plan_inputs.workload),
                    "cluster": dataclasses.asdict(plan_inputs.cluster),
                    "sources": plan_inputs.sources,
                    "model": plan_inputs.model,
                    "configurations": rows,
                    "advice": lines,
                    **report,
                }
            ),
        )
    if request.plot:
        _plot(rows, request.plot)
    sys.stdout.flush()
    return 0
