"""What `tfdist plan` predicts from: the workload (one replica's step time, its batch, the
gradient bytes) from a `tfdist benchmark --json` file, from flags, or (gradients only) from
counting `--model`'s trainable parameters; the cluster from the link presets and flags; and what
the cost model (`tfdist.cluster.cost_model`) makes of them: a table per node count and advice.
A flag given on the command line beats the benchmark's figure, which beats the default."""

import dataclasses
import json
import math
from collections.abc import Callable
from collections.abc import Sequence

from tfdist.cluster import cost_model
from tfdist.commands import flags as flags_lib
from tfdist.input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from tfdist.input_pipelines.config import MAX_IMAGE_SIZE
from tfdist.input_pipelines.config import MAX_NUM_CLASSES
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import ModelName
from tfdist.runtime.config import Precision
from tfdist.runtime.config import check_image_size

MIB = 1024 * 1024
MAX_PARAMETERS = 1 << 44  # About 1.8e13: ten times the largest published models.
MAX_JSON_DIGITS = 32  # Of a number in a JSON file: 17 significant digits, zeros and an exponent.
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
        if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= highest:
            raise ValueError(text)
        return int(text)

    return convert


def _is_count(value, highest: int, *, zero: bool = False) -> bool:
    """Whether `value` (from JSON) is an integer in [1, highest], or 0 when `zero`."""
    return (
        isinstance(value, int) and not isinstance(value, bool) and ((1 - zero) <= value <= highest)
    )


def _train_flags(train_args: list[str], path: str, fix: str) -> dict:
    """The train flags of a benchmark that `plan` takes (model, image_size, num_classes,
    mixed_precision), checked.

    Raises:
      ConfigError: a value those flags do not take.
    """
    convert = {
        "model": str,
        "image_size": _count_up_to(MAX_IMAGE_SIZE),
        "num_classes": _count_up_to(MAX_NUM_CLASSES),
        "mixed_precision": lambda value: Precision(value).value,
    }
    found = {}
    for arg in train_args:
        name, _, value = arg[2:].partition("=")
        if name in convert:
            try:
                found[name] = convert[name](value)
            except ValueError:
                raise ConfigError(
                    f"from_benchmark={path!r} has the train flag {arg!r}, which "
                    f"tfdist train does not take; {fix}."
                ) from None
    return found


def read_json(name: str, path: str, what: str, fix: str):
    """The JSON value in the file `path` that --`name` gives: a regular file of UTF-8 text, of
    bounded size (`flags.read_text`), whose numbers are finite, of at most MAX_JSON_DIGITS
    digits (checked as text, before any is converted).

    Raises:
      ConfigError: a file that cannot be read or is not JSON, in one line that ends in `fix`;
        `what` says what the file should have been.
    """
    try:
        return json.loads(
            flags_lib.read_text(path),
            parse_int=_bounded(int),
            parse_float=_bounded(float),
            parse_constant=_refuse_constant,
        )
    except _OutOfBounds as number:
        raise ConfigError(
            f"{name}={path!r}: it holds the number {number}, which is not a "
            f"finite number of at most {MAX_JSON_DIGITS} digits; {fix}."
        ) from None
    except ValueError as error:  # JSONDecodeError too.
        reason = "it is not JSON" if isinstance(error, json.JSONDecodeError) else error
        raise ConfigError(f"{name}={path!r}: {reason}; {fix}.") from None
    except RecursionError:
        raise ConfigError(
            f"{name}={path!r}: it is nested too deeply to be {what}; {fix}."
        ) from None


class _OutOfBounds(Exception):
    """A number of a JSON file that no tfdist figure can be; its text (shortened)."""


def _bounded(convert):
    """A json parse hook: `convert(text)` once the text has at most MAX_JSON_DIGITS digits
    and converts to a finite number."""

    def parse(text: str):
        value = convert(text) if sum(char.isdigit() for char in text) <= MAX_JSON_DIGITS else None
        if value is None or not math.isfinite(value):
            raise _OutOfBounds(text if len(text) <= 24 else f"{text[:20]}...")
        return value

    return parse


def _refuse_constant(text: str):
    raise _OutOfBounds(text)  # NaN, Infinity, -Infinity: not JSON, though Python writes them.


def read_benchmark(path: str) -> dict:
    """The figures `plan` takes from a `tfdist benchmark --json` file: compute_s, batch,
    trainable_parameters (None from a file of an older tfdist), and the train flags it takes.

    Raises:
      ConfigError: a file that cannot be read, is not such a JSON, or has no 1-replica
        synthetic configuration.
    """
    fix = "give a file `tfdist benchmark --replicas=1 --data=synthetic --json=FILE` wrote"
    report = read_json("from_benchmark", path, "a benchmark report", fix)
    try:
        single = next(
            entry
            for entry in report["configurations"]
            if entry["replicas"] == 1 and entry["data"] == "synthetic"
        )
        step_s = float(single["step_time_s"]["median"])
        batch = single.get("global_batch_size") or 0
        train_args = [str(arg) for arg in report.get("train_args", []) if str(arg).startswith("--")]
    except (KeyError, TypeError, ValueError, StopIteration, AttributeError):
        raise ConfigError(
            f"from_benchmark={path!r} has no 1-replica synthetic configuration; {fix}."
        ) from None
    parameters = report.get("trainable_parameters")
    counts = _is_count(batch, MAX_GLOBAL_BATCH_SIZE, zero=True) and (
        parameters is None or _is_count(parameters, MAX_PARAMETERS)
    )
    if not (math.isfinite(step_s) and step_s > 0 and counts):
        raise ConfigError(
            f"from_benchmark={path!r} holds a step time, batch or parameter count "
            f"that is not a positive number (a batch of at most "
            f"{MAX_GLOBAL_BATCH_SIZE:,}, at most {MAX_PARAMETERS:.0e} parameters); "
            f"{fix}."
        )
    return {
        "compute_s": step_s,
        "batch": batch or None,
        "trainable_parameters": parameters,
        "flags": _train_flags(train_args, path, fix),
    }


def _count_parameters(model: str, image_size: int, num_classes: int, request) -> int:
    """`model`'s trainable parameters, built on the CPU (TensorFlow starts here, quietly unless
    --tf_logs)."""
    # pylint: disable=import-outside-toplevel
    from tfdist.runtime import tf_import

    keras = int(request.keras)
    tf_import.import_tensorflow(request.tf_logs, keras)
    import tensorflow as tf
    from tfdist.training import models

    with tf.device("/cpu:0"):
        built = models.build(model, (image_size, image_size, 3), num_classes, keras)
    return sum(math.prod(weight.shape) for weight in built.trainable_weights)


def _link(
    presets: dict, name: str, gbps: float | None, latency_us: float | None
) -> cost_model.Link:
    preset = presets[name]
    return dataclasses.replace(
        preset, gbit_per_s=gbps or preset.gbit_per_s, latency_us=latency_us or preset.latency_us
    )


def inputs(request, host) -> Inputs:
    """The workload and cluster of `request`, with the host's input rates `host` (an
    `input_rates.HostRates`): flags given on the command line before the benchmark's figures,
    before defaults.

    Raises:
      ConfigError: a figure missing from every source, --gpudirect_rdma over a TCP link,
        --allreduce with parameter servers, input rates measured at another image size.
    """
    given, sources = request.given, {}
    benchmark = read_benchmark(request.from_benchmark) if request.from_benchmark else {}
    measured = benchmark.get("flags", {})

    def pick(name: str, from_benchmark, default=None):
        if name in given or from_benchmark is None:
            sources[name] = "flag" if name in given else "default"
            return getattr(request, name) if name in given else default
        sources[name] = "benchmark"
        return from_benchmark

    model = pick("model", measured.get("model"), request.model)
    image_size = pick(
        "image_size",
        measured.get("image_size"),
        request.image_size or _BUILT_IN_IMAGE_SIZE.get(model, 32),
    )
    num_classes = pick("num_classes", measured.get("num_classes"), request.num_classes or 10)
    check_image_size(model, image_size)
    if host.image_size not in (None, image_size):
        raise ConfigError(
            f"input_benchmark={request.input_benchmark!r} measured "
            f"{host.image_size}x{host.image_size} images, this plan "
            f"{image_size}x{image_size}: pass --image_size={host.image_size}, or "
            f"measure at {image_size} (benchmark_input.py --image_size)."
        )
    sources.update({name: source for name, source in host.sources.items() if source != "default"})
    precision = Precision(
        pick("mixed_precision", measured.get("mixed_precision"), request.mixed_precision)
    )
    batch = pick("per_replica_batch_size", benchmark.get("batch"))
    measured_ms = benchmark["compute_s"] * 1000 if benchmark else None
    if measured_ms and batch and benchmark["batch"]:  # Per-example compute held constant.
        measured_ms *= batch / benchmark["batch"]
    compute_ms = pick("compute_ms", measured_ms)
    missing = [
        name
        for name, value in (("compute_ms", compute_ms), ("per_replica_batch_size", batch))
        if value is None
    ]
    if missing:
        raise ConfigError(
            f"plan needs {' and '.join('--' + name for name in missing)}: pass "
            f"{'it' if len(missing) == 1 else 'them'}, or from_benchmark=FILE from "
            "`tfdist benchmark --replicas=1 --data=synthetic --json=FILE`."
        )
    parameters = benchmark.get("trainable_parameters")
    if request.gradient_mib is not None:
        gradient_bytes, sources["gradient_mib"] = request.gradient_mib * MIB, "flag"
    elif parameters and "model" not in given:
        gradient_bytes, sources["gradient_mib"] = 4 * parameters, "benchmark"
    else:
        gradient_bytes = 4 * _count_parameters(model, image_size, num_classes, request)
        sources["gradient_mib"] = f"{model}'s trainable parameters"
    inter = _link(
        cost_model.INTER_NODE_LINKS,
        request.inter_link,
        request.inter_gbps,
        request.inter_latency_us,
    )
    if request.num_ps and "allreduce" in given:
        raise ConfigError(
            f"allreduce={request.allreduce} with num_ps={request.num_ps}: "
            "parameter servers take the gradients instead of an all-reduce; drop "
            "--allreduce or --num_ps."
        )
    if request.gpudirect_rdma and not inter.rdma:
        rdma = ", ".join(name for name, link in cost_model.INTER_NODE_LINKS.items() if link.rdma)
        raise ConfigError(
            f"gpudirect_rdma=True with inter_link={inter.name}: GPUDirect RDMA "
            f"needs an RDMA link ({rdma}); drop --gpudirect_rdma or pick one."
        )
    workload = cost_model.Workload(
        compute_s=compute_ms / 1000,
        per_replica_batch=batch,
        gradient_bytes=gradient_bytes,
        backward_fraction=request.backward_fraction,
        overlap=request.overlap,
        example_pixels=image_size * image_size * 3,
        compute_dtype_bytes=4 if precision is Precision.FLOAT32 else 2,
        host_examples_per_core=host.rates["host_examples_per_core"] or math.inf,
        decode_examples_per_core=host.rates["decode_examples_per_core"] or math.inf,
    )
    cluster = cost_model.Cluster(
        nodes=1,
        gpus_per_node=request.gpus_per_node,
        intra=_link(
            cost_model.INTRA_NODE_LINKS,
            request.intra_link,
            request.intra_gbps,
            request.intra_latency_us,
        ),
        inter=inter,
        gpudirect_rdma=request.gpudirect_rdma,
        allreduce=request.allreduce,
        wire_dtype=request.allreduce_dtype.value,
        num_ps=request.num_ps,
        host_cores_per_node=request.host_cores_per_node,
        host_pcie=cost_model.INTRA_NODE_LINKS[request.host_pcie],
        inter_stack_gbps=request.inter_stack_gbps or math.inf,
    )
    described = (
        model
        if benchmark or sources["model"] != "default" or "parameters" in sources["gradient_mib"]
        else "workload"
    )
    return Inputs(workload, cluster, sources, described)


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
