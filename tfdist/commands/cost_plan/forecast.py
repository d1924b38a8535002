"""What `tfdist plan` prints from its inputs (`workload.Inputs`): the line that describes
them, the cost model's predictions (`tfdist.cluster.cost_model`) at each node count as a
table, and the advice drawn from the same model."""

import dataclasses
import math
from collections.abc import Callable
from collections.abc import Sequence

from tfdist.cluster import cost_model
from tfdist.commands.cost_plan.workload import MIB
from tfdist.commands.cost_plan.workload import Inputs


def predictions(plan_inputs: Inputs, nodes: list[int], **changes) -> list[dict]:
    """The model's figures at each node count, with `changes` to the shared cluster."""
    cluster = dataclasses.replace(plan_inputs.cluster, **changes)
    return [
        cost_model.predict(plan_inputs.workload, dataclasses.replace(cluster, nodes=count))
        for count in nodes
    ]


def _cores(value: float) -> str:
    return "-" if math.isnan(value) or value == 0 else f"{value:.1f}"


# A column a table can add: its header, and its cell of a row.
Column = tuple[str, Callable[[dict], str]]


def table(rows: list[dict], extra: Sequence[Column] = ()) -> str:
    """The figures as a Markdown table, times in ms, with the `extra` columns last."""
    lines = [
        "| nodes | GPUs | global batch | compute ms | exchange ms | exposed ms | input ms | "
        "step ms | examples/s | efficiency | host cores/node (host, device prep) | "
        "host->device MB/s per GPU (host, device prep) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines = [
        lines[0] + "".join(f" {header} |" for header, _ in extra),
        lines[1] + " ---: |" * len(extra),
    ]
    for row in rows:
        cores, copied = row["host_cores_needed"], row["host_to_device_bytes_per_s"]
        lines.append(
            f"| {row['nodes']} | {row['gpus']} | {row['global_batch']} | "
            f"{row['compute_s'] * 1000:.1f} | {row['exchange_s'] * 1000:.1f} | "
            f"{row['exposed_exchange_s'] * 1000:.1f} | {row['input_s'] * 1000:.1f} | "
            f"{row['step_s'] * 1000:.1f} | {row['examples_per_s']:,.0f} | "
            f"{row['scaling_efficiency']:.2f} | {_cores(cores['host'])}, "
            f"{_cores(cores['device'])} | {copied['host'] / 1e6:,.1f}, "
            f"{copied['device'] / 1e6:,.1f} |" + "".join(f" {cell(row)} |" for _, cell in extra)
        )
    return "\n".join(lines)


def _efficiencies(rows: list[dict]) -> str:
    return " and ".join(f"{row['scaling_efficiency']:.2f}" for row in rows)


def _alternatives(cluster: cost_model.Cluster):
    """(what, cluster changes) of each exchange setting `cluster` does not use yet and a user
    can choose."""
    if cluster.wire_dtype == "float32":
        yield "bfloat16 on the wire (--allreduce_dtype=bfloat16)", {"wire_dtype": "bfloat16"}
    if cluster.allreduce == "ring" and not cluster.num_ps:
        yield (
            "hierarchical all-reduce (NCCL's between nodes: --collective=nccl)",
            {"allreduce": "hierarchical"},
        )
    if cluster.inter.rdma and not cluster.gpudirect_rdma:
        yield "GPUDirect RDMA", {"gpudirect_rdma": True}


def advice(plan_inputs: Inputs, nodes: list[int]) -> list[str]:
    """One or two lines drawn from the model: scale up or out, and what the exchange settings
    this run does not use would bring."""
    cluster = plan_inputs.cluster
    gpus = cluster.gpus_per_node
    one_node = predictions(plan_inputs, [1])[0]
    out = sorted({2, max(nodes)}) if max(nodes) > 1 else []
    if not out:
        return [
            f"one node of {gpus} GPUs on {cluster.intra.name} reaches "
            f"{one_node['scaling_efficiency']:.2f}; give --nodes to see scaling out."
        ]
    rows = predictions(plan_inputs, out)
    where = " and ".join(f"{count} nodes" for count in out)
    scale = (
        f"scale up first: {gpus} GPUs on {cluster.intra.name} reach "
        f"{one_node['scaling_efficiency']:.2f}, {where} over {cluster.inter.name} "
        f"{_efficiencies(rows)}"
        if one_node["scaling_efficiency"] - rows[-1]["scaling_efficiency"] > 0.02
        else f"scaling out costs little here: {gpus} GPUs on one node reach "
        f"{one_node['scaling_efficiency']:.2f}, {where} {_efficiencies(rows)}"
    )
    lines = [scale + "."]
    best = max(
        (
            (name, predictions(plan_inputs, out, **changes))
            for name, changes in _alternatives(cluster)
        ),
        key=lambda option: option[1][-1]["scaling_efficiency"],
        default=None,
    )
    if best and best[1][-1]["scaling_efficiency"] - rows[-1]["scaling_efficiency"] > 0.01:
        lines.append(f"{best[0]} brings {where} to {_efficiencies(best[1])}.")
    return lines


def _stack(gbps: float) -> str:
    return "" if math.isinf(gbps) else f", its stack {gbps:g} Gbit/s"


def describe(plan_inputs: Inputs) -> str:
    workload, cluster = plan_inputs.workload, plan_inputs.cluster
    where = ", ".join(
        f"{name} from {source}"
        for name, source in plan_inputs.sources.items()
        if source != "default"
    )
    exchange = (
        f"parameter server, {cluster.num_ps} ps task(s)"
        if cluster.num_ps
        else f"{cluster.allreduce} all-reduce in {cluster.wire_dtype}"
    )
    return (
        f"tfdist plan: {plan_inputs.model}, {workload.per_replica_batch} examples per "
        f"replica, step {workload.compute_s * 1000:.1f} ms, gradients "
        f"{workload.gradient_bytes / MIB:.1f} MiB; {cluster.gpus_per_node} GPUs per node on "
        f"{cluster.intra.name} ({cluster.intra.gbit_per_s:g} Gbit/s), nodes on "
        f"{cluster.inter.name} ({cluster.inter.gbit_per_s:g} Gbit/s"
        f"{', GPUDirect RDMA' if cluster.gpudirect_rdma else ''}"
        f"{_stack(cluster.inter_stack_gbps)}); {exchange}; overlap "
        f"{workload.overlap:g}" + (f" ({where})" if where else "")
    )
