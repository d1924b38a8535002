"""What `tfdist plan` predicts from: the workload (one replica's step time, its batch, the
gradient bytes) from a `tfdist benchmark --json` file, from flags, or (gradients only) from
counting `--model`'s trainable parameters; and the cluster from the link presets and flags.
A flag given on the command line beats the benchmark's figure, which beats the default. What
the cost model makes of them, plan prints with `forecast`."""

import dataclasses
import math

from tfdist.cluster import cost_model
from tfdist.commands.cost_plan import json_input
from tfdist.input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from tfdist.input_pipelines.config import MAX_IMAGE_SIZE
from tfdist.input_pipelines.config import MAX_NUM_CLASSES
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import ModelName
from tfdist.runtime.config import Precision
from tfdist.runtime.config import check_image_size

MIB = 1024 * 1024
MAX_PARAMETERS = 1 << 44  # About 1.8e13: ten times the largest published models.
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


def read_benchmark(path: str) -> dict:
    """The figures `plan` takes from a `tfdist benchmark --json` file: compute_s, batch,
    trainable_parameters (None from a file of an older tfdist), and the train flags it takes.

    Raises:
      ConfigError: a file that cannot be read, is not such a JSON, or has no 1-replica
        synthetic configuration.
    """
    fix = "give a file `tfdist benchmark --replicas=1 --data=synthetic --json=FILE` wrote"
    report = json_input.read_json("from_benchmark", path, "a benchmark report", fix)
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
