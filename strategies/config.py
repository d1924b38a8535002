"""`StrategyConfig`: which tf.distribute strategy to build, and its options. Pure Python."""

import dataclasses
import enum
import math
from typing import TypeVar

from .messages import MAX_SHOWN  # noqa: F401
from .messages import cut  # noqa: F401
from .messages import problem
from .messages import shown  # noqa: F401


# Upper bounds, beyond which TensorFlow or the OS fails (e.g. an OverflowError for 10**20
# logical CPUs); 512 logical CPU devices were measured to start in 1.4 s.
MAX_REPLICA_DEVICES = 1024
MAX_PACK_MIB = 1 << 20  # 1 TiB.
MAX_GPU_MEMORY_MIB = 1 << 24  # 16 TiB: more than any GPU holds.
MAX_TIMEOUT_S = 30 * 24 * 3600.0
MAX_PARTITION_BYTES = 1 << 40
MAX_SHARDS = 1 << 16


def option(
    default,
    help: str | None = None,
    *,  # pylint: disable=redefined-builtin
    bounds: tuple[int, int] | None = None,
    fix: str | None = None,
) -> dataclasses.Field:
    """A config field that carries, once, what its `tfdist train` flag is made of: its default,
    `help`, integer `bounds` [lowest, highest] (which the config checks too) and the `fix` that
    ends a bad value's error (`fix_of`)."""
    metadata = {"help": help, "bounds": bounds, "fix": fix}
    return dataclasses.field(
        default=default,
        metadata={key: value for key, value in metadata.items() if value is not None},
    )


def fix_of(field: dataclasses.Field) -> str:
    """How to fix a bad value of `field`: its `fix`, else its default as an example."""
    return field.metadata.get("fix", f"e.g. {field.default}")


class StrategyConfigError(ValueError):
    """A strategy option is invalid; the message is one line: field, value, fix."""


class StrategyKind(str, enum.Enum):
    """The strategies `--strategy` names; `auto` picks one from the cluster and devices."""

    AUTO = "auto"
    ONE_DEVICE = "one_device"
    MIRRORED = "mirrored"
    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"
    PARAMETER_SERVER = "parameter_server"


class AllReduce(str, enum.Enum):
    """Cross-device reduction of MirroredStrategy (one worker, several devices)."""

    AUTO = "auto"
    NCCL = "nccl"
    HIERARCHICAL_COPY = "hierarchical_copy"
    REDUCTION_TO_ONE_DEVICE = "reduction_to_one_device"


class Collective(str, enum.Enum):
    """Collective implementation of MultiWorkerMirroredStrategy."""

    AUTO = "auto"
    RING = "ring"
    NCCL = "nccl"


class WireDtype(str, enum.Enum):
    """The dtype gradients cross the wire in when replicas all-reduce them."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"


_Enum = TypeVar("_Enum", bound=enum.Enum)


def coerce_enum(
    field: str,
    value: "str | _Enum",
    enum_type: type[_Enum],
    error: type[ValueError] = StrategyConfigError,
) -> _Enum:
    """Returns `value` as a member of `enum_type`, or raises `error` in one line naming `field`."""
    try:
        return enum_type(value)
    except ValueError:
        choices = "|".join(member.value for member in enum_type)
        raise error(
            problem(field, "is not a known value", f"use one of {choices}", value=value)
        ) from None


@dataclasses.dataclass(frozen=True)
class VariablePartition:
    """How ParameterServerStrategy splits large variables across ps tasks.

    Written as `none`, `min_size:<bytes>` (shards of at least that many bytes, at most one per ps
    task) or `max_shards:<n>` (at most n shards of at least 256 KiB each).
    """

    kind: str = "none"
    value: int = 0

    @classmethod
    def parse(cls, text: str) -> "VariablePartition":
        """Parses the flag form; raises StrategyConfigError naming `variable_partition`."""
        if text == "none":
            return cls()
        kind, _, number = text.partition(":")
        limit = {"min_size": MAX_PARTITION_BYTES, "max_shards": MAX_SHARDS}.get(kind)
        if limit and number.isascii() and number.isdigit() and 0 < int(number) <= limit:
            return cls(kind, int(number))
        raise StrategyConfigError(
            f"variable_partition={text!r} is not understood; use none, min_size:<bytes> "
            f"(e.g. min_size:262144, at most {MAX_PARTITION_BYTES}) or max_shards:<n> (e.g. "
            f"max_shards:4, at most {MAX_SHARDS})."
        )

    def __str__(self) -> str:
        return self.kind if self.kind == "none" else f"{self.kind}:{self.value}"


def check_int(
    field: str,
    value: int,
    lowest: int,
    highest: int,
    fix: str,
    error: type[ValueError] = StrategyConfigError,
) -> None:
    """Raises `error` naming `field` unless `value` is an integer in [lowest, highest]."""
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= highest:
        raise error(
            problem(field, f"is not an integer from {lowest} to {highest}", fix, value=value)
        )


def check_bounds(config, error: type[ValueError] = StrategyConfigError) -> None:
    """`check_int` on each field of the dataclass `config` that has bounds (`option`); None
    passes where it is the default."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if "bounds" in field.metadata and not (value is None and field.default is None):
            check_int(field.name, value, *field.metadata["bounds"], fix_of(field), error=error)


def coerce_enums(config, error: type[ValueError] = StrategyConfigError) -> None:
    """Sets each field of the frozen dataclass `config` whose type is an enum to its member
    (`coerce_enum`: a value such as "mirrored" becomes StrategyKind.MIRRORED)."""
    for field in dataclasses.fields(config):
        if isinstance(field.type, type) and issubclass(field.type, enum.Enum):
            object.__setattr__(
                config,
                field.name,
                coerce_enum(field.name, getattr(config, field.name), field.type, error=error),
            )


def is_duration(value: float) -> bool:
    """Whether `value` is a finite number of seconds in (0, MAX_TIMEOUT_S]."""
    return isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S


def check_seconds(
    field: str, value: float, fix: str, error: type[ValueError] = StrategyConfigError
) -> None:
    """Raises `error` naming `field` unless `value` is a duration (`is_duration`)."""
    if not is_duration(value):
        raise error(
            problem(
                field,
                f"is not a number of seconds above 0 and at most {MAX_TIMEOUT_S:.0f} (30 days)",
                fix,
                value=value,
            )
        )


@dataclasses.dataclass(frozen=True)
class StrategyConfig:
    """Options for `strategies.build`. Each field is the `tfdist train` flag of its name and
    carries that flag's help, default and bounds (`option`).

    Example:
      >>> StrategyConfig(strategy="multi_worker_mirrored", collective="nccl",
      ...                allreduce_dtype="bfloat16", collective_timeout_s=300)
    """

    strategy: StrategyKind = option(
        StrategyKind.AUTO,
        "tf.distribute strategy; auto picks parameter_server when TF_CONFIG "
        "has ps tasks, multi_worker_mirrored with several workers, mirrored with several local "
        "devices, else one_device.",
    )
    num_gpus: int | None = option(
        None,
        "GPUs per worker; unset uses every visible GPU.",
        bounds=(0, MAX_REPLICA_DEVICES),
        fix="pass 0 for CPU only, or leave it unset to use every visible GPU",
    )
    num_cpu_devices: int = option(
        1,
        "Split the host CPU into N logical devices, so N replicas run on a CPU-only machine "
        "(mirrored).",
        bounds=(1, MAX_REPLICA_DEVICES),
        fix="e.g. 2 for two CPU replicas",
    )
    num_logical_gpus: int = option(
        1,
        "Split the first GPU into N logical GPUs, so N replicas run on one GPU (mirrored; "
        "all-reduce by hierarchical copy, as NCCL needs distinct GPUs).",
        bounds=(1, MAX_REPLICA_DEVICES),
        fix="e.g. 2 for two replicas on one GPU",
    )
    logical_gpu_memory_mib: int = option(
        8192,
        "Memory of each logical GPU of --num_logical_gpus, in MiB.",
        bounds=(1, MAX_GPU_MEMORY_MIB),
        fix="e.g. 8192, with num_logical_gpus x that within the GPU's memory",
    )
    all_reduce: AllReduce = option(AllReduce.AUTO, "Mirrored cross-device all-reduce.")
    num_packs: int = option(
        1,
        "Gradient packs for nccl/hierarchical_copy all-reduce.",
        bounds=(1, MAX_REPLICA_DEVICES),
        fix="e.g. 1 or 2",
    )
    collective: Collective = option(Collective.AUTO, "Multi-worker collective implementation.")
    collective_timeout_s: float | None = option(
        None,
        "Fail a multi-worker call of the step function (--steps_per_execution steps) that "
        "takes longer than this, and a join of peers, instead of waiting for ever on a lost "
        "or hung peer; unset waits forever.",
    )
    variable_partition: VariablePartition = option(
        VariablePartition(),
        "Parameter-server variable sharding: none, min_size:<bytes> or max_shards:<n>.",
    )
    allreduce_dtype: WireDtype = option(
        WireDtype.FLOAT32,
        "Cast gradients to this dtype for the all-reduce between replicas "
        "and back after it (mirrored strategies): bfloat16 or float16 halve the bytes on the "
        "wire (docs/PERFORMANCE.md).",
    )
    allreduce_pack_mib: int = option(
        0,
        "Multi-worker: all-reduce gradients in packs of this many MiB; 0 lets TensorFlow choose.",
        bounds=(0, MAX_PACK_MIB),
        fix="pass a size in MiB, or 0 to let TensorFlow choose",
    )

    def __post_init__(self):
        coerce_enums(self)
        if isinstance(self.variable_partition, str):
            object.__setattr__(
                self, "variable_partition", VariablePartition.parse(self.variable_partition)
            )
        self._check_counts()
        self._check_options_fit_strategy()

    def _check_counts(self) -> None:
        check_bounds(self)
        if self.collective_timeout_s is not None:
            check_seconds(
                "collective_timeout_s",
                self.collective_timeout_s,
                "e.g. 300, or leave it unset for no timeout",
            )
        if self.num_cpu_devices > 1 and self.num_gpus:
            raise StrategyConfigError(
                f"num_cpu_devices={self.num_cpu_devices} with num_gpus={self.num_gpus}: replicas "
                "run on GPUs or on split CPUs, not both; set one of them."
            )
        if self.num_logical_gpus > 1 and (
            self.num_cpu_devices > 1 or self.num_gpus not in (None, 1)
        ):
            other = (
                f"num_cpu_devices={self.num_cpu_devices}"
                if self.num_cpu_devices > 1
                else f"num_gpus={self.num_gpus}"
            )
            raise StrategyConfigError(
                f"num_logical_gpus={self.num_logical_gpus} with {other}: logical GPUs split one "
                "GPU; drop one of them."
            )

    def _check_options_fit_strategy(self) -> None:
        if self.num_logical_gpus > 1 and self.all_reduce is AllReduce.NCCL:
            raise StrategyConfigError(
                f"all_reduce=nccl with num_logical_gpus={self.num_logical_gpus}: NCCL needs "
                "distinct physical GPUs; use all_reduce=auto or hierarchical_copy."
            )
        if self.num_packs != 1 and self.all_reduce not in (
            AllReduce.NCCL,
            AllReduce.HIERARCHICAL_COPY,
        ):
            raise StrategyConfigError(
                f"num_packs={self.num_packs} applies to all_reduce=nccl or hierarchical_copy, "
                f"not {self.all_reduce.value}; set all_reduce or drop num_packs."
            )
        ignored = [] if self.strategy is StrategyKind.AUTO else self.ignored_by(self.strategy)
        if ignored:
            raise StrategyConfigError(f"{ignored[0]}; drop it or pick that strategy.")

    def ignored_by(self, kind: StrategyKind) -> list[str]:
        """The options set here that strategy `kind` does not use, each as "option=value
        applies to strategy=..., not <kind>". With `strategy=auto` they are only known once
        auto has picked a strategy; an explicit strategy rejects them up front."""
        applies = {
            "all_reduce": (self.all_reduce is not AllReduce.AUTO, (StrategyKind.MIRRORED,)),
            "collective": (
                self.collective is not Collective.AUTO,
                (StrategyKind.MULTI_WORKER_MIRRORED,),
            ),
            "variable_partition": (
                self.variable_partition.kind != "none",
                (StrategyKind.PARAMETER_SERVER,),
            ),
            "num_cpu_devices": (self.num_cpu_devices > 1, (StrategyKind.MIRRORED,)),
            "num_logical_gpus": (self.num_logical_gpus > 1, (StrategyKind.MIRRORED,)),
            "allreduce_dtype": (
                self.allreduce_dtype is not WireDtype.FLOAT32,
                (StrategyKind.MIRRORED, StrategyKind.MULTI_WORKER_MIRRORED),
            ),
            "allreduce_pack_mib": (
                bool(self.allreduce_pack_mib),
                (StrategyKind.MULTI_WORKER_MIRRORED,),
            ),
        }
        return [
            f"{field}={_shown(getattr(self, field))} applies to strategy="
            f"{' or '.join(kind.value for kind in kinds)}, not {kind.value}"
            for field, (is_set, kinds) in applies.items()
            if is_set and kind not in kinds
        ]


def _shown(value) -> str:
    return value.value if isinstance(value, enum.Enum) else str(value)
