"""`tfdist plan`: what a job's step would cost on clusters this machine is not, from what this
machine measured, by the cost model of `tfdist.cluster.cost_model` (docs/PLANNING.md).

The workload (one replica's step time, its batch, the gradient bytes) comes from a `tfdist
benchmark --json` file, from flags, or (gradients only) from counting `--model`'s trainable
parameters. Prints a table per node count, then advice drawn from the same model; `--json`
and `--plot` write the figures.
"""

import dataclasses
import json
import math
import sys

from tfdist.input_pipelines.config import MAX_IMAGE_SIZE
from tfdist.input_pipelines.config import MAX_NUM_CLASSES
from tfdist.cluster import cost_model
from tfdist.commands import plotting
from tfdist.training import summary as run_summary
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import ModelName
from tfdist.runtime.config import Precision

MIB = 1024 * 1024
_BUILT_IN_IMAGE_SIZE = {ModelName.RESNET50.value: 224}  # Others take the built-in 32x32 data.


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The workload, the cluster every node count shares, where each figure came from, and
    the model it describes ("workload" when given by figures alone)."""
    workload: cost_model.Workload
    cluster: cost_model.Cluster
    sources: dict[str, str]
    model: str


def _count_up_to(highest: int):
    """A converter of text to an integer in [1, highest]; ValueError otherwise."""
    def convert(text: str) -> int:
        if not text.isdigit() or not 0 < int(text) <= highest:
            raise ValueError(text)
        return int(text)
    return convert


def _train_flags(train_args: list[str], path: str, fix: str) -> dict:
    """The train flags of a benchmark that `plan` takes (model, image_size, num_classes,
    mixed_precision), checked.

    Raises:
      ConfigError: a value those flags do not take.
    """
    convert = {"model": str, "image_size": _count_up_to(MAX_IMAGE_SIZE),
               "num_classes": _count_up_to(MAX_NUM_CLASSES),
               "mixed_precision": lambda value: Precision(value).value}
    found = {}
    for arg in train_args:
        name, _, value = arg[2:].partition("=")
        if name in convert:
            try:
                found[name] = convert[name](value)
            except ValueError:
                raise ConfigError(f"from_benchmark={path!r} has the train flag {arg!r}, which "
                                  f"tfdist train does not take; {fix}.") from None
    return found


def read_benchmark(path: str) -> dict:
    """The figures `plan` takes from a `tfdist benchmark --json` file: compute_s, batch,
    trainable_parameters (None from a file of an older tfdist), and the train flags it takes.

    Raises:
      ConfigError: a file that cannot be read, is not such a JSON, or has no 1-replica
        synthetic configuration.
    """
    fix = "give a file `tfdist benchmark --replicas=1 --data=synthetic --json=FILE` wrote"
    try:
        with open(path, encoding="utf-8") as file:
            report = json.load(file)
    except OSError as error:
        raise ConfigError(f"from_benchmark={path!r} cannot be read ({error.strerror}); "
                          f"{fix}.") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ConfigError(f"from_benchmark={path!r} is not JSON; {fix}.") from None
    try:
        single = next(entry for entry in report["configurations"]
                      if entry["replicas"] == 1 and entry["data"] == "synthetic")
        step_s = float(single["step_time_s"]["median"])
        batch = int(single.get("global_batch_size") or 0)
        train_args = [str(arg) for arg in report.get("train_args", [])
                      if str(arg).startswith("--")]
    except (KeyError, TypeError, ValueError, StopIteration, AttributeError):
        raise ConfigError(f"from_benchmark={path!r} has no 1-replica synthetic configuration; "
                          f"{fix}.") from None
    parameters = report.get("trainable_parameters")
    if not (math.isfinite(step_s) and step_s > 0) or batch < 0 or (
            parameters is not None and not (isinstance(parameters, int) and parameters > 0)):
        raise ConfigError(f"from_benchmark={path!r} holds a step time, batch or parameter count "
                          f"that is not a positive number; {fix}.")
    return {"compute_s": step_s, "batch": batch or None, "trainable_parameters": parameters,
            "flags": _train_flags(train_args, path, fix)}


def _count_parameters(model: str, image_size: int, num_classes: int, options: dict) -> int:
    """`model`'s trainable parameters, built on the CPU (TensorFlow starts here, quietly unless
    --tf_logs)."""
    # pylint: disable=import-outside-toplevel
    from tfdist.runtime.tf_import import import_tensorflow
    keras = int(options["keras"])
    import_tensorflow(options["tf_logs"], keras)
    import tensorflow as tf
    from tfdist.training import models
    with tf.device("/cpu:0"):
        built = models.build(model, (image_size, image_size, 3), num_classes, keras)
    return sum(math.prod(weight.shape) for weight in built.trainable_weights)


def _link(presets: dict, name: str, gbps: float | None, latency_us: float | None
          ) -> cost_model.Link:
    preset = presets[name]
    return dataclasses.replace(preset, gbit_per_s=gbps or preset.gbit_per_s,
                               latency_us=latency_us or preset.latency_us)


def inputs(options: dict) -> Inputs:
    """The workload and cluster of `options` (`flags.plan_options()`), flags given on the
    command line before the benchmark's figures, before defaults.

    Raises:
      ConfigError: a figure missing from every source, --gpudirect_rdma over a TCP link.
    """
    given, sources = options["given"], {}
    benchmark = read_benchmark(options["from_benchmark"]) if options["from_benchmark"] else {}
    measured = benchmark.get("flags", {})

    def pick(name: str, from_benchmark, default=None):
        if name in given or from_benchmark is None:
            sources[name] = "flag" if name in given else "default"
            return options[name] if name in given else default
        sources[name] = "benchmark"
        return from_benchmark

    model = pick("model", measured.get("model"), options["model"])
    image_size = pick("image_size", measured.get("image_size"),
                      options["image_size"] or _BUILT_IN_IMAGE_SIZE.get(model, 32))
    num_classes = pick("num_classes", measured.get("num_classes"), options["num_classes"] or 10)
    precision = pick("mixed_precision", measured.get("mixed_precision"),
                     options["mixed_precision"])
    batch = pick("per_replica_batch_size", benchmark.get("batch"))
    measured_ms = benchmark["compute_s"] * 1000 if benchmark else None
    if measured_ms and batch and benchmark["batch"]:  # Per-example compute held constant.
        measured_ms *= batch / benchmark["batch"]
    compute_ms = pick("compute_ms", measured_ms)
    missing = [name for name, value in (("compute_ms", compute_ms),
                                        ("per_replica_batch_size", batch)) if value is None]
    if missing:
        raise ConfigError(f"plan needs {' and '.join('--' + name for name in missing)}: pass "
                          f"{'it' if len(missing) == 1 else 'them'}, or from_benchmark=FILE from "
                          "`tfdist benchmark --replicas=1 --data=synthetic --json=FILE`.")
    parameters = benchmark.get("trainable_parameters")
    if options["gradient_mib"] is not None:
        gradient_bytes, sources["gradient_mib"] = options["gradient_mib"] * MIB, "flag"
    elif parameters and "model" not in given:
        gradient_bytes, sources["gradient_mib"] = 4 * parameters, "benchmark"
    else:
        gradient_bytes = 4 * _count_parameters(model, image_size, num_classes, options)
        sources["gradient_mib"] = f"{model}'s trainable parameters"
    inter = _link(cost_model.INTER_NODE_LINKS, options["inter_link"], options["inter_gbps"],
                  options["inter_latency_us"])
    if options["gpudirect_rdma"] and not inter.rdma:
        rdma = ", ".join(name for name, link in cost_model.INTER_NODE_LINKS.items() if link.rdma)
        raise ConfigError(f"gpudirect_rdma=True with inter_link={inter.name}: GPUDirect RDMA "
                          f"needs an RDMA link ({rdma}); drop --gpudirect_rdma or pick one.")
    workload = cost_model.Workload(
        compute_s=compute_ms / 1000, per_replica_batch=batch, gradient_bytes=gradient_bytes,
        backward_fraction=options["backward_fraction"], overlap=options["overlap"],
        example_pixels=image_size * image_size * 3,
        compute_dtype_bytes=4 if precision == Precision.FLOAT32.value else 2,
        host_examples_per_core=options["host_examples_per_core"] or math.inf,
        decode_examples_per_core=options["decode_examples_per_core"] or math.inf)
    cluster = cost_model.Cluster(
        nodes=1, gpus_per_node=options["gpus_per_node"],
        intra=_link(cost_model.INTRA_NODE_LINKS, options["intra_link"], options["intra_gbps"],
                    options["intra_latency_us"]),
        inter=inter, gpudirect_rdma=options["gpudirect_rdma"], allreduce=options["allreduce"],
        wire_dtype=options["allreduce_dtype"], num_ps=options["num_ps"],
        host_cores_per_node=options["host_cores_per_node"],
        host_pcie=cost_model.INTRA_NODE_LINKS[options["host_pcie"]])
    described = model if benchmark or sources["model"] != "default" or "parameters" in sources[
        "gradient_mib"] else "workload"
    return Inputs(workload, cluster, sources, described)


def predictions(plan_inputs: Inputs, nodes: list[int], **changes) -> list[dict]:
    """The model's figures at each node count, with `changes` to the shared cluster."""
    cluster = dataclasses.replace(plan_inputs.cluster, **changes)
    return [cost_model.predict(plan_inputs.workload, dataclasses.replace(cluster, nodes=count))
            for count in nodes]


def _cores(value: float) -> str:
    return "-" if math.isnan(value) or value == 0 else f"{value:.1f}"


def table(rows: list[dict]) -> str:
    """The figures as a Markdown table, times in ms."""
    lines = ["| nodes | GPUs | global batch | compute ms | exchange ms | exposed ms | input ms | "
             "step ms | examples/s | efficiency | host cores/node (host, device prep) | "
             "host->device MB/s per GPU (host, device prep) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
             "---: |"]
    for row in rows:
        cores, copied = row["host_cores_needed"], row["host_to_device_bytes_per_s"]
        lines.append(
            f"| {row['nodes']} | {row['gpus']} | {row['global_batch']} | "
            f"{row['compute_s'] * 1000:.1f} | {row['exchange_s'] * 1000:.1f} | "
            f"{row['exposed_exchange_s'] * 1000:.1f} | {row['input_s'] * 1000:.1f} | "
            f"{row['step_s'] * 1000:.1f} | {row['examples_per_s']:,.0f} | "
            f"{row['scaling_efficiency']:.2f} | {_cores(cores['host'])}, "
            f"{_cores(cores['device'])} | {copied['host'] / 1e6:,.1f}, "
            f"{copied['device'] / 1e6:,.1f} |")
    return "\n".join(lines)


def _efficiencies(rows: list[dict]) -> str:
    return " and ".join(f"{row['scaling_efficiency']:.2f}" for row in rows)


def _alternatives(cluster: cost_model.Cluster):
    """(what, cluster changes) of each exchange setting `cluster` does not use yet and a user
    can choose."""
    if cluster.wire_dtype == "float32":
        yield "bfloat16 on the wire (--allreduce_dtype=bfloat16)", {"wire_dtype": "bfloat16"}
    if cluster.allreduce == "ring" and not cluster.num_ps:
        yield ("hierarchical all-reduce (NCCL's between nodes: --collective=nccl)",
               {"allreduce": "hierarchical"})
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
        return [f"one node of {gpus} GPUs on {cluster.intra.name} reaches "
                f"{one_node['scaling_efficiency']:.2f}; give --nodes to see scaling out."]
    rows = predictions(plan_inputs, out)
    where = " and ".join(f"{count} nodes" for count in out)
    scale = (f"scale up first: {gpus} GPUs on {cluster.intra.name} reach "
             f"{one_node['scaling_efficiency']:.2f}, {where} over {cluster.inter.name} "
             f"{_efficiencies(rows)}"
             if one_node["scaling_efficiency"] - rows[-1]["scaling_efficiency"] > 0.02 else
             f"scaling out costs little here: {gpus} GPUs on one node reach "
             f"{one_node['scaling_efficiency']:.2f}, {where} {_efficiencies(rows)}")
    lines = [scale + "."]
    best = max(((name, predictions(plan_inputs, out, **changes))
                for name, changes in _alternatives(cluster)),
               key=lambda option: option[1][-1]["scaling_efficiency"], default=None)
    if best and best[1][-1]["scaling_efficiency"] - rows[-1]["scaling_efficiency"] > 0.01:
        lines.append(f"{best[0]} brings {where} to {_efficiencies(best[1])}.")
    return lines


def _plot(rows: list[dict], path: str) -> None:
    pyplot = plotting.pyplot(path)
    figure, (efficiency, times) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    gpus = [row["gpus"] for row in rows]
    efficiency.plot(gpus, [row["scaling_efficiency"] for row in rows], marker="o")
    efficiency.set(xscale="log", xlabel="GPUs", ylabel="scaling efficiency", ylim=(0, 1.05),
                   title="predicted scaling efficiency")
    labels = [str(count) for count in gpus]
    bottom = [0.0] * len(rows)
    for key, name in (("compute_s", "compute"), ("exposed_exchange_s", "exposed exchange")):
        heights = [row[key] * 1000 for row in rows]
        times.bar(labels, heights, bottom=bottom, label=name)
        bottom = [low + high for low, high in zip(bottom, heights)]
    times.plot(labels, [row["input_s"] * 1000 for row in rows], "k--", marker="x",
               label="input (overlapped)")
    highest = max(max(bottom), *(row["input_s"] * 1000 for row in rows))
    times.set(xlabel="GPUs", ylabel="ms per step", title="step time", ylim=(0, highest * 1.4))
    for axes in (efficiency, times):
        axes.grid(alpha=0.3)
    times.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def _describe(plan_inputs: Inputs) -> str:
    workload, cluster = plan_inputs.workload, plan_inputs.cluster
    where = ", ".join(f"{name} from {source}" for name, source in plan_inputs.sources.items()
                      if source != "default")
    exchange = (f"parameter server, {cluster.num_ps} ps task(s)" if cluster.num_ps else
                f"{cluster.allreduce} all-reduce in {cluster.wire_dtype}")
    return (f"tfdist plan: {plan_inputs.model}, {workload.per_replica_batch} examples per "
            f"replica, step {workload.compute_s * 1000:.1f} ms, gradients "
            f"{workload.gradient_bytes / MIB:.1f} MiB; {cluster.gpus_per_node} GPUs per node on "
            f"{cluster.intra.name} ({cluster.intra.gbit_per_s:g} Gbit/s), nodes on "
            f"{cluster.inter.name} ({cluster.inter.gbit_per_s:g} Gbit/s"
            f"{', GPUDirect RDMA' if cluster.gpudirect_rdma else ''}); {exchange}; overlap "
            f"{workload.overlap:g}" + (f" ({where})" if where else ""))


def _finite(value):
    """`value` with infinities (an unlimited input pipeline) as None, for JSON."""
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return None if isinstance(value, float) and math.isinf(value) else value


def main(options: dict) -> int:
    """Prints the description, table and advice; writes --json and --plot. Returns 0."""
    if options["plot"]:
        plotting.pyplot(options["plot"])  # Missing matplotlib, before any figure.
    plan_inputs = inputs(options)
    rows = predictions(plan_inputs, options["nodes"])
    lines = advice(plan_inputs, options["nodes"])
    print(_describe(plan_inputs))
    print(table(rows))
    for line in lines:
        print(f"tfdist plan: {line}")
    if options["json"]:
        run_summary.write_json(options["json"], _finite({
            "workload": dataclasses.asdict(plan_inputs.workload),
            "cluster": dataclasses.asdict(plan_inputs.cluster), "sources": plan_inputs.sources,
            "model": plan_inputs.model, "configurations": rows, "advice": lines}))
    if options["plot"]:
        _plot(rows, options["plot"])
    sys.stdout.flush()
    return 0
