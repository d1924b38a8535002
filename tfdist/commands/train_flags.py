"""The train flags: every option of `tfdist train`, which users' absl programs take too
(`tfdist.define_flags`), and their conversion into one immutable `RunConfig` once argv is parsed.

Defined when this module is imported, each a `FlagHolder` in the group of the config it feeds
(strategy, input, training, optimizer, the Slurm cluster, --tf_logs). Pure Python: TensorFlow is
imported after parsing.
"""

import dataclasses
import math
import os
import sys

from absl import flags

from tfdist.cluster import GRACE_ENV
from tfdist.commands import flags as flags_lib
from tfdist.commands.flags import define_integer
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines.config import CROP_AREA_RANGE
from tfdist.input_pipelines.config import MAX_CROP_ASPECT
from tfdist.runtime import keras_env
from tfdist.runtime.config import KERAS_VERSIONS
from tfdist.runtime.config import ConfigError
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.strategies import ClusterConfig
from tfdist.strategies import StrategyConfig
from tfdist.strategies import from_environment
from tfdist.strategies import jobset
from tfdist.strategies import slurm

FLAGS = flags.FLAGS

STRATEGY = flags_lib.from_fields(
    StrategyConfig,
    "strategy",
    "num_gpus",
    "num_cpu_devices",
    "num_logical_gpus",
    "logical_gpu_memory_mib",
    "all_reduce",
    "num_packs",
    "collective",
    flags_lib.define_field(
        StrategyConfig, "collective_timeout_s", define=flags_lib.define_duration
    ),
    "variable_partition",
    "allreduce_dtype",
    "allreduce_pack_mib",
)
# The records and their batching: what `tfdist data check` reads too.
SOURCE = flags_lib.from_fields(
    InputConfig,
    "dataset",
    "data_dir",
    "download",
    "num_classes",
    "label_offset",
    "image_size",
    "global_batch_size",
    "shuffle_buffer_size",
    "autoshard",
    "cache",
    flags_lib.define_field(
        InputConfig,
        "deterministic",
        help="Two runs of one seed and cluster shape end with identical weights: TensorFlow's "
        "op determinism (tf.config.experimental.enable_op_determinism; on GPUs some kernels "
        "are slower), and input: "
        + next(f for f in dataclasses.fields(InputConfig) if f.name == "deterministic").metadata[
            "help"
        ],
    ),
    "datasets_num_private_threads",
    "skip_corrupt_records",
)
INPUT = {
    **SOURCE,
    **flags_lib.from_fields(
        InputConfig,
        "preprocess_on",
        "augment",
        flags_lib.define_measure(
            "crop_area_min",
            "augment=imagenet: the least fraction of an "
            "image's area a random crop covers (the most is 1); unset: "
            f"{CROP_AREA_RANGE[0]:g}, the published 90-epoch setting; 0.35 "
            "learned better in short runs at low resolution "
            '(docs/PERFORMANCE.md, "Accuracy").',
            0.01,
            1,
        ),
        flags_lib.define_measure(
            "crop_aspect_max",
            "augment=imagenet: random crops' width/height lies in [1/this, this]; unset: 4/3.",
            1,
            MAX_CROP_ASPECT,
        ),
        "tf_data_service",
        "tf_data_service_mode",
    ),
}
# Also `tfdist plan`'s, in the same sense: one flag, as absl flags are global.
PER_REPLICA_BATCH_SIZE = flags_lib.define_field(
    TrainConfig,
    "per_replica_batch_size",
    help="Examples per replica per step. train, benchmark: the batch instead of "
    "--global_batch_size (not both), which is then N x the replicas in sync, known once the "
    "strategy is built (e.g. 64 on 2 workers of 1 GPU: 128); plan: the batch of one "
    "replica's step.",
)
KERAS = flags.DEFINE_enum(
    "keras",
    str(keras_env.environment_choice()),
    KERAS_VERSIONS,
    "The Keras models are written in: 2 (tf-keras) or 3 (`import keras`); the default follows "
    "TF_USE_LEGACY_KERAS (unset: 2). launch: the Keras `tf.keras` is in every task; doctor: "
    "check this task for it.",
)
TRAIN = flags_lib.from_fields(
    TrainConfig,
    "model",
    "epochs",
    "steps_per_epoch",
    PER_REPLICA_BATCH_SIZE,
    "validation_steps",
    "steps_per_execution",
    "mixed_precision",
    "model_dir",
    "backup_every",
    "metrics_json",
    "preemption_signal",
    "seed",
    KERAS,
)
SEED = TRAIN["seed"]  # Also InputConfig's, and `data check`'s.
# OptimizerConfig's fields (docs/large_batch.md).
OPTIMIZER = flags_lib.from_fields(
    OptimizerConfig,
    "optimizer",
    "learning_rate",
    "momentum",
    "weight_decay",
    "lr_scaling",
    "base_batch_size",
    "warmup_epochs",
    "lr_schedule",
    "lr_step_boundaries",
    "lr_step_factor",
    "clip_norm",
    "grad_accum_steps",
    "gradient_noise_eta",
    "gradient_noise_gamma",
    "measure_noise_scale",
    "lars_eeta",
    "lars_mode",
    "lars_exclude",
)
CLUSTER_RESOLVER = flags.DEFINE_enum(
    "cluster_resolver",
    "auto",
    ["auto", "tf_config", "jobset", "slurm"],
    "Where this task finds its cluster. auto: TF_CONFIG when set, else the JobSet pod's "
    "environment that `tfdist manifest --format=jobset` sets up, else a Slurm job step of more "
    "than one task (`srun -n2 ...`), else none (one process); tf_config: TF_CONFIG only; jobset: "
    "the JobSet pod's environment (every task at its JobSet DNS name); slurm: the Slurm job "
    "step (with --slurm_port_base, --num_ps and --chief as `tfdist manifest` writes them).",
)
SLURM_PORT_BASE = define_integer(
    "slurm_port_base",
    8888,
    "A Slurm step without ports srun reserved (--resv-ports): the n-th task on a node "
    "listens on base + 1000 n + SLURM_JOB_ID mod 1000.",
    lower_bound=1,
    upper_bound=65535,
)
NUM_PS = define_integer(
    "num_ps",
    0,
    "Parameter-server (ps) tasks: of the Slurm job (cluster_resolver=slurm), or "
    "that `tfdist launch` starts or `tfdist manifest` describes; plan: exchange "
    "through N ps tasks instead of all-reduce.",
    lower_bound=0,
    upper_bound=flags_lib.MAX_TASKS,
)
CHIEF = flags.DEFINE_bool(
    "chief",
    False,
    "A chief task (the parameter-server coordinator): in the Slurm job "
    "(cluster_resolver=slurm), or that `tfdist launch` starts or `tfdist "
    "manifest` describes.",
)
SLURM = flags_lib.group(SLURM_PORT_BASE, NUM_PS, CHIEF)  # Only for a Slurm step's cluster.
TF_LOGS = flags_lib.define_field(RunConfig, "show_tf_logs", name="tf_logs")


flags_lib.register(
    "train",
    STRATEGY,
    INPUT,
    TRAIN,
    OPTIMIZER,
    flags_lib.group(CLUSTER_RESOLVER),
    SLURM,
    flags_lib.group(TF_LOGS),
)


_SLURM_FIX = "use --cluster_resolver=slurm or auto (inside srun), or drop them"


@flags.multi_flags_validator(
    [CLUSTER_RESOLVER.name, *SLURM], message=f"they describe a Slurm job step; {_SLURM_FIX}"
)
def _slurm_flags_need_a_slurm_resolver(values: dict) -> bool:
    """--slurm_port_base, --num_ps and --chief describe a Slurm job (launch and manifest take
    the last two for their own clusters); `cluster_and_source` refuses them where auto finds
    another cluster."""
    if CLUSTER_RESOLVER.name not in flags_lib.COMMAND_FLAGS[flags_lib.parsing_for()]:
        return True
    return values[CLUSTER_RESOLVER.name] in ("slurm", "auto") or not _slurm_flags_given()


def _slurm_flags_given() -> list[str]:
    return [f"--{holder.name}" for holder in SLURM.values() if holder.present]


_BATCH = (SOURCE["global_batch_size"], PER_REPLICA_BATCH_SIZE)  # Give one, or neither.


@flags.multi_flags_validator(
    [holder.name for holder in _BATCH],
    message="both set the batch; give one: --per_replica_batch_size=N (the global batch is N x "
    "the replicas) or --global_batch_size=N (split over the replicas)",
)
def _one_batch_flag(values: dict) -> bool:
    """--global_batch_size and --per_replica_batch_size are not both on the command line, in
    the commands that take both (`plan` takes only the second)."""
    del values  # Whether they were given counts: a program's default yields to either.
    takes = flags_lib.COMMAND_FLAGS[flags_lib.parsing_for()]
    return not all(holder.name in takes and holder.present for holder in _BATCH)


def per_replica_batch_size() -> int | None:
    """The parsed per-replica batch, or None when the batch is global: --global_batch_size on
    the command line beats a per-replica default a program set, and --per_replica_batch_size
    (given, or a program's default) beats the global default."""
    return None if SOURCE["global_batch_size"].present else PER_REPLICA_BATCH_SIZE.value


def strategy_config() -> StrategyConfig:
    """The parsed strategy flags as a `StrategyConfig`."""
    return StrategyConfig(**{name: holder.value for name, holder in STRATEGY.items()})


def input_config(command: str = "train") -> InputConfig:
    """The parsed input flags that `command` takes, as an `InputConfig`; its global batch left
    at the default when the batch is per replica (`setup` derives it)."""
    takes = flags_lib.COMMAND_FLAGS[command]
    per_replica = PER_REPLICA_BATCH_SIZE.name in takes and per_replica_batch_size() is not None
    values = {
        name: holder.value
        for name, holder in INPUT.items()
        if name in takes and not (per_replica and name == "global_batch_size")
    }
    area_min, aspect_max = values.pop("crop_area_min", None), values.pop("crop_aspect_max", None)
    if area_min is not None:
        values["crop_area_range"] = (area_min, 1.0)
    if aspect_max is not None:
        values["crop_aspect_range"] = (1 / aspect_max, aspect_max)
    return InputConfig(seed=SEED.value, **values)


def optimizer_config() -> OptimizerConfig:
    """The parsed optimizer flags as an `OptimizerConfig`.

    Raises:
      UsageError: step boundaries that are not numbers.
    """
    values = {name: holder.value for name, holder in OPTIMIZER.items()}
    try:
        values["lr_step_boundaries"] = tuple(float(epoch) for epoch in values["lr_step_boundaries"])
    except ValueError:
        raise flags_lib.UsageError(
            f"lr_step_boundaries={','.join(values['lr_step_boundaries'])!r} is not a list of "
            "epochs; write e.g. --lr_step_boundaries=30,60."
        ) from None
    values["lars_exclude"] = tuple(values["lars_exclude"])
    return OptimizerConfig(**values)


def run_config(cluster: ClusterConfig | None) -> RunConfig:
    """The parsed train flags as one immutable `RunConfig`, once `flags_lib.parse` or a user
    program's `app.run` has parsed argv."""
    return RunConfig(
        strategy=strategy_config(),
        input=input_config(),
        train=TrainConfig(
            **{
                **{name: holder.value for name, holder in TRAIN.items()},
                PER_REPLICA_BATCH_SIZE.name: per_replica_batch_size(),
            },
            grace_s=engine_grace_s(),
        ),
        optimizer=optimizer_config(),
        cluster=cluster,
        show_tf_logs=TF_LOGS.value,
    )


def engine_grace_s() -> float | None:
    """The grace period the engine that started this task gives it (GRACE_ENV: `tfdist launch`,
    its JobSet and Slurm scripts and `tfdist ray` set it); None when it says none.

    Raises:
      ConfigError: the variable is set to something else than seconds above 0.
    """
    value = os.environ.get(GRACE_ENV)
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(
            f"{GRACE_ENV}={value!r} is not a number of seconds above 0; set it to the seconds "
            "this task's engine gives from a preemption notice to SIGKILL, e.g. 30, or unset it."
        )
    return seconds


def cluster() -> ClusterConfig | None:
    """This task's cluster, as --cluster_resolver says (`cluster_and_source`); a Slurm step's
    says so in one line on stderr (where it came from, the task, its job and its ports)."""
    found, source = cluster_and_source()
    if found is not None and found.origin is not None:
        task = f"{found.task.type.value}:{found.task.index} at {found.task_address}"
        print(f"tfdist: {task}: the cluster of {source[0]}; {found.origin.ports}", file=sys.stderr)
    return found


def cluster_and_source() -> tuple[ClusterConfig | None, list[str]]:
    """This task's cluster, and where it came from, in lines: TF_CONFIG, the JobSet pod's
    environment (each variable and its field), or the Slurm job step (`strategies.slurm`).

    Raises:
      ClusterConfigError: the chosen source is missing or invalid, in one line.
      UsageError: --slurm_port_base, --num_ps or --chief where the cluster is not a Slurm step's.
    """
    resolver, tasks = CLUSTER_RESOLVER.value, slurm.step_tasks()
    if resolver == "slurm":
        return _slurm_step("--cluster_resolver=slurm")
    if resolver != "jobset":
        found = from_environment()
        if found is None and resolver == "auto" and not jobset.is_jobset_pod() and tasks > 1:
            why = f"--cluster_resolver=auto: TF_CONFIG is unset and SLURM_STEP_NUM_TASKS={tasks}"
            return _slurm_step(why)
        if found is not None or resolver == "tf_config" or not jobset.is_jobset_pod():
            _refuse_slurm_flags("TF_CONFIG's" if found is not None else "none (one process)")
            return found, ["TF_CONFIG", *_ignored_jobset_variables(found)]
    _refuse_slurm_flags("the JobSet pod's")
    pod = jobset.from_environment()
    why = (
        "--cluster_resolver=jobset"
        if resolver == "jobset"
        else f"--cluster_resolver=auto: TF_CONFIG is unset and {jobset.ENV_LAYOUT} is set"
    )
    return pod.cluster(), [
        f"the JobSet pod's environment ({why})",
        *(f"  {source}" for source in pod.sources),
    ]


def _slurm_step(why: str) -> tuple[ClusterConfig, list[str]]:
    """The Slurm job step's cluster (the Slurm flags' layout), and where it came from (`why`)."""
    found = slurm.cluster_from_slurm(SLURM_PORT_BASE.value, num_ps=NUM_PS.value, chief=CHIEF.value)
    return found, [f"the Slurm job step ({why})", f"  {found.origin.job}; {found.origin.ports}"]


def _refuse_slurm_flags(source: str) -> None:
    """UsageError where the Slurm cluster's flags were given but the cluster is `source`'s."""
    if _slurm_flags_given():
        raise flags_lib.UsageError(
            f"{', '.join(_slurm_flags_given())} given, but this task's cluster is {source}, not "
            f"a Slurm job step's (--cluster_resolver={CLUSTER_RESOLVER.value}); {_SLURM_FIX}."
        )


def _ignored_jobset_variables(found: ClusterConfig | None) -> list[str]:
    """The line naming a JobSet pod's variables that TF_CONFIG's cluster `found` overrides."""
    names = jobset.variables_set() if found is not None else []
    why = "(TF_CONFIG comes first; --cluster_resolver=jobset reads them instead)"
    return [f"  ignored: the JobSet pod's {', '.join(names)} {why}"] if names else []


def check_train_args(args: list[str]) -> None:
    """Parses `args` as `tfdist train` flags and builds their config, for commands that pass
    train flags on (manifest, launch); FLAGS hold the train flags afterwards.

    Raises:
      UsageError, ConfigError and the other config errors: the first bad train flag.
    """
    try:
        flags_lib.parse("train", ["tfdist", *args])
    except flags.Error as error:
        raise flags_lib.UsageError(f"train flags after `--`: {error}") from None
    run_config(None)


def keras() -> int:
    """The parsed --keras."""
    return int(KERAS.value)


def show_tf_logs() -> bool:
    """`--tf_logs`; False before argv is parsed (a library caller's program without flags)."""
    return FLAGS.is_parsed() and TF_LOGS.value
