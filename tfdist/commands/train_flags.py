"""The train flags: every option of `tfdist train`, which users' absl programs take too
(`tfdist.define_flags`), and their conversion into one immutable `RunConfig` once argv is parsed.

Defined when this module is imported, each a `FlagHolder` in the group of the config it feeds
(strategy, input, training, optimizer, the Slurm cluster, --tf_logs). Pure Python: TensorFlow is
imported after parsing.
"""

from absl import flags

from tfdist.commands import flags as flags_lib
from tfdist.commands.flags import define_float
from tfdist.commands.flags import define_integer
from tfdist.input_pipelines import AutoShard
from tfdist.input_pipelines import DATASET_FORMS
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import PreprocessOn
from tfdist.input_pipelines import ServiceMode
from tfdist.input_pipelines.config import Augment
from tfdist.input_pipelines.config import MAX_BUFFER_SIZE
from tfdist.input_pipelines.config import MAX_CROP_ASPECT
from tfdist.input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from tfdist.input_pipelines.config import MAX_IMAGE_SIZE
from tfdist.input_pipelines.config import MAX_NUM_CLASSES
from tfdist.input_pipelines.config import MAX_SEED
from tfdist.input_pipelines.config import MAX_THREADS
from tfdist.runtime import keras_env
from tfdist.runtime import tf_import
from tfdist.runtime.config import DEFAULT_LARS_EXCLUDE
from tfdist.runtime.config import KERAS_VERSIONS
from tfdist.runtime.config import LarsMode
from tfdist.runtime.config import LrScaling
from tfdist.runtime.config import LrSchedule
from tfdist.runtime.config import MAX_COUNT
from tfdist.runtime.config import ModelName
from tfdist.runtime.config import OptimizerConfig
from tfdist.runtime.config import OptimizerName
from tfdist.runtime.config import Precision
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.strategies import AllReduce
from tfdist.strategies import ClusterConfig
from tfdist.strategies import Collective
from tfdist.strategies import StrategyConfig
from tfdist.strategies import StrategyKind
from tfdist.strategies import WireDtype
from tfdist.strategies import from_environment
from tfdist.strategies import jobset
from tfdist.strategies.config import MAX_GPU_MEMORY_MIB
from tfdist.strategies.config import MAX_PACK_MIB
from tfdist.strategies.config import MAX_REPLICA_DEVICES

FLAGS = flags.FLAGS

STRATEGY = flags_lib.group(
    flags_lib.define_enum("strategy", StrategyKind("auto"), StrategyKind,
                      "tf.distribute strategy; auto picks parameter_server when TF_CONFIG has ps "
                      "tasks, multi_worker_mirrored with several workers, mirrored with several "
                      "local devices, else one_device."),
    define_integer("num_gpus", None, "GPUs per worker; unset uses every visible GPU.",
                   lower_bound=0, upper_bound=MAX_REPLICA_DEVICES),
    define_integer("num_cpu_devices", 1,
                   "Split the host CPU into N logical devices, so N replicas run on a "
                   "CPU-only machine (mirrored).",
                   lower_bound=1, upper_bound=MAX_REPLICA_DEVICES),
    define_integer("num_logical_gpus", 1,
                   "Split the first GPU into N logical GPUs, so N replicas run on one GPU "
                   "(mirrored; all-reduce by hierarchical copy, as NCCL needs distinct "
                   "GPUs).", lower_bound=1, upper_bound=MAX_REPLICA_DEVICES),
    define_integer("logical_gpu_memory_mib", 8192,
                   "Memory of each logical GPU of --num_logical_gpus, in MiB.",
                   lower_bound=1, upper_bound=MAX_GPU_MEMORY_MIB),
    flags_lib.define_enum("all_reduce", AllReduce("auto"), AllReduce,
                      "Mirrored cross-device all-reduce."),
    define_integer("num_packs", 1, "Gradient packs for nccl/hierarchical_copy all-reduce.",
                   lower_bound=1, upper_bound=MAX_REPLICA_DEVICES),
    flags_lib.define_enum("collective", Collective("auto"), Collective,
                      "Multi-worker collective implementation."),
    flags_lib.define_duration("collective_timeout_s", None,
                     "Fail a multi-worker collective that takes longer than this, instead of "
                     "hanging on a lost peer; unset waits forever."),
    flags.DEFINE_string("variable_partition", "none",
                        "Parameter-server variable sharding: none, min_size:<bytes> or "
                        "max_shards:<n>."),
    flags_lib.define_enum("allreduce_dtype", WireDtype("float32"), WireDtype,
                      "Cast gradients to this dtype for the all-reduce between replicas and back "
                      "after it (mirrored strategies): bfloat16 or float16 halve the bytes on the "
                      "wire (docs/PERFORMANCE.md)."),
    define_integer("allreduce_pack_mib", 0,
                   "Multi-worker: all-reduce gradients in packs of this many MiB; 0 lets "
                   "TensorFlow choose.", lower_bound=0, upper_bound=MAX_PACK_MIB))
# The records and their batching: what `tfdist data check` reads too.
SOURCE = flags_lib.group(
    flags.DEFINE_string("dataset", "shapes",
                        f"Training data, one of {DATASET_FORMS}|python:MODULE:FUNCTION: shapes is "
                        "the built-in 10-class image dataset, generated locally on first use; "
                        "synthetic is one random batch repeated (compute throughput only); "
                        "tfrecord:<glob> reads image/encoded and image/class/label ({split} in "
                        "the glob becomes train and validation); python:MODULE:FUNCTION is a "
                        "dataset function of yours (docs/library.md); anything else is a "
                        "prepared TFDS dataset."),
    flags.DEFINE_string("data_dir", None,
                        "Where prepared datasets live; unset uses $TFDS_DATA_DIR or "
                        "~/tensorflow_datasets."),
    flags.DEFINE_bool("download", False,
                      "Let TFDS download and prepare a dataset that is not prepared (needs "
                      "network)."),
    define_integer("num_classes", None, "Classes of a tfrecord: or synthetic dataset.",
                   lower_bound=1, upper_bound=MAX_NUM_CLASSES),
    define_integer("label_offset", 0, "Subtracted from every label of a tfrecord: dataset; "
                   "1 reads ImageNet's, labelled 1..1000.", lower_bound=0,
                   upper_bound=MAX_NUM_CLASSES),
    define_integer("image_size", None,
                   "Resize images to this square size; unset keeps a TFDS dataset's size, "
                   "224 for tfrecord:, 32 for synthetic.",
                   lower_bound=1, upper_bound=MAX_IMAGE_SIZE),
    define_integer("global_batch_size", 128,
                   "Examples per step over all replicas; must divide by the replica count. "
                   "Or give --per_replica_batch_size instead (not both).",
                   lower_bound=1, upper_bound=MAX_GLOBAL_BATCH_SIZE),
    define_integer("shuffle_buffer_size", 10_000,
                   "Examples in the training shuffle buffer.",
                   lower_bound=1, upper_bound=MAX_BUFFER_SIZE),
    flags_lib.define_enum("autoshard", AutoShard("auto"), AutoShard,
                      "How input pipelines divide the data: file (whole files each), data (every "
                      "N-th example), off (all read everything), auto (file when there are "
                      "enough files, else data)."),
    flags.DEFINE_bool("cache", False, "Keep the records in memory after the first epoch."),
    flags.DEFINE_bool("deterministic", None,
                      "Produce input in a fixed order (--nodeterministic trades order for "
                      "speed); unset keeps tf.data's default."),
    define_integer("datasets_num_private_threads", None,
                   "Give each input pipeline a private thread pool of this size.",
                   lower_bound=1, upper_bound=MAX_THREADS),
    flags.DEFINE_bool("skip_corrupt_records", False,
                      "Skip the rest of a damaged TFRecord file (logged and counted) instead of "
                      "failing."))
INPUT = {**SOURCE, **flags_lib.group(
    flags_lib.define_enum("preprocess_on", PreprocessOn("auto"), PreprocessOn,
                      "Where augmentation, normalisation and the cast run: host (tf.data), device "
                      "(inside each replica's step; the host only decodes and batches uint8), "
                      "auto (device when there are GPUs)."),
    flags_lib.define_enum("augment", Augment("auto"), Augment, "Training augmentation: imagenet "
                      "(random-resized crop in the JPEG decode, flip; evaluation: 0.875 centre "
                      "crop), small (4 px shift, flip, brightness), none; auto: imagenet for "
                      "tfrecord: and TFDS datasets given --image_size, else small."),
    flags_lib.define_measure("crop_area_min", "augment=imagenet: the least fraction of an "
                             "image's area a random crop covers (the most is 1); unset: 0.08, "
                             "the published 90-epoch setting; 0.35 learned better in short "
                             "runs at low resolution (docs/PERFORMANCE.md, \"Accuracy\").",
                             0.01, 1),
    flags_lib.define_measure("crop_aspect_max", "augment=imagenet: random crops' width/height "
                             "lies in [1/this, this]; unset: 4/3.", 1, MAX_CROP_ASPECT),
    flags.DEFINE_string("tf_data_service", None,
                        "grpc://host:port of a tf.data service dispatcher (see `tfdist data "
                        "serve`) to run the input pipeline on."),
    flags_lib.define_enum("tf_data_service_mode", ServiceMode("distributed_epoch"), ServiceMode,
                      "distributed_epoch: service workers split each epoch, every example once; "
                      "parallel_epochs: every service worker produces the whole epoch."))}
EPOCHS = define_integer("epochs", 3, "Training epochs.",
                        lower_bound=1, upper_bound=MAX_COUNT)
# Also `tfdist plan`'s, in the same sense: one flag, as absl flags are global.
PER_REPLICA_BATCH_SIZE = define_integer(
    "per_replica_batch_size", None,
    "Examples per replica per step. train, benchmark: the batch instead of --global_batch_size "
    "(not both), which is then N x the replicas in sync, known once the strategy is built "
    "(e.g. 64 on 2 workers of 1 GPU: 128); plan: the batch of one replica's step.",
    lower_bound=1, upper_bound=MAX_GLOBAL_BATCH_SIZE)
SEED = define_integer("seed", 0, "Seeds Python, NumPy, TensorFlow and input shuffling.",
                      lower_bound=0, upper_bound=MAX_SEED)
KERAS = flags.DEFINE_enum(
    "keras", str(keras_env.environment_choice()), KERAS_VERSIONS,
    "The Keras models are written in: 2 (tf-keras) or 3 (`import keras`); the default follows "
    "TF_USE_LEGACY_KERAS (unset: 2). launch: the Keras `tf.keras` is in every task; doctor: "
    "check this task for it.")
TRAIN = flags_lib.group(
    flags.DEFINE_string("model", ModelName.SMALL_CNN.value,
                        f"Model to train: a built-in one "
                        f"({', '.join([name.value for name in ModelName])}) or "
                        "MODULE:FUNCTION, a model function of yours, imported when training "
                        "starts (docs/library.md)."),
    EPOCHS,
    define_integer("steps_per_epoch", None,
                   "Steps per epoch; unset covers the training split once.",
                   lower_bound=1, upper_bound=MAX_COUNT),
    PER_REPLICA_BATCH_SIZE,
    define_integer("validation_steps", None,
                   "Validation steps per epoch; unset reads the whole validation split.",
                   lower_bound=1, upper_bound=MAX_COUNT),
    define_integer("steps_per_execution", 1,
                   "Steps run per tf.function call; more cuts Python overhead per step.",
                   lower_bound=1, upper_bound=MAX_COUNT),
    flags_lib.define_enum("mixed_precision", Precision("float32"), Precision,
                      "Dtype policy; mixed_float16 adds dynamic loss scaling."),
    flags.DEFINE_string("model_dir", None,
                        "Where checkpoints and TensorBoard logs go; unset keeps nothing."),
    flags.DEFINE_string("backup_every", "epoch",
                        "With --model_dir: back up training state every epoch or every N steps, "
                        "so a restarted job resumes where it stopped."),
    flags.DEFINE_string("metrics_json", None, "Write the run summary as JSON to this path."),
    SEED,
    KERAS)
# OptimizerConfig's fields (docs/large_batch.md).
OPTIMIZER = flags_lib.group(
    flags_lib.define_enum("optimizer", OptimizerName("adam"), OptimizerName, "Optimizer."),
    define_float("learning_rate", 3e-3,
                 "Base learning rate: the rate at --base_batch_size, where warmup starts."),
    define_float("momentum", 0.9, "Momentum of momentum, nesterov and lars."),
    define_float("weight_decay", 0.0,
                 "Weight decay: decoupled for sgd/momentum/nesterov/adam/adamw/rmsprop, in the "
                 "update for lars."),
    flags_lib.define_enum("lr_scaling", LrScaling("none"), LrScaling,
                      "Scale the peak rate with global batch / --base_batch_size: linear, or its "
                      "square root."),
    define_integer("base_batch_size", 256, "The global batch --learning_rate is meant for.",
                   lower_bound=1, upper_bound=MAX_GLOBAL_BATCH_SIZE),
    define_float("warmup_epochs", 0.0,
                 "Rise linearly from --learning_rate to the scaled peak over these epochs."),
    flags_lib.define_enum("lr_schedule", LrSchedule("constant"), LrSchedule,
                      "Decay after warmup: constant, cosine to 0 at the end, or step."),
    flags.DEFINE_list("lr_step_boundaries", [],
                      "lr_schedule=step: epochs (from the start) at which the rate is multiplied "
                      "by --lr_step_factor, e.g. 30,60,80."),
    define_float("lr_step_factor", 0.1, "lr_schedule=step: factor at each boundary."),
    define_float("clip_norm", None,
                 "Clip the all-reduced gradients to this global norm; unset does not clip."),
    define_integer("grad_accum_steps", 1,
                   "Apply one update per N micro-batches, with their mean gradient (an "
                   "effective global batch N times larger).",
                   lower_bound=1, upper_bound=MAX_COUNT),
    define_float("gradient_noise_eta", 0.0,
                 "Add Gaussian noise of variance eta / (1 + t)^gamma to the all-reduced "
                 "gradients (t = updates so far); 0 adds none."),
    define_float("gradient_noise_gamma", 0.55, "Annealing exponent of --gradient_noise_eta."),
    flags.DEFINE_boolean("measure_noise_scale", False,
                         "Measure the gradient noise scale B_simple (about the critical batch "
                         "size) from the replicas' own gradients, or from the micro-batches with "
                         "--grad_accum_steps > 1; logged per epoch and kept in the metrics "
                         "JSON as noise_scale (docs/large_batch.md)."),
    define_float("lars_eeta", 0.001, "lars: trust coefficient."),
    flags_lib.define_enum("lars_mode", LarsMode("scale"), LarsMode,
                      "lars: scale the rate by the trust ratio, or clip the ratio at 1 (LARC)."),
    flags.DEFINE_list("lars_exclude", list(DEFAULT_LARS_EXCLUDE),
                      "lars: variables whose name matches one of these regular expressions get "
                      "trust 1 and no weight decay."))
CLUSTER_RESOLVER = flags.DEFINE_enum(
    "cluster_resolver", "auto", ["auto", "tf_config", "jobset", "slurm"],
    "Where this task finds its cluster. auto: TF_CONFIG when set, else the JobSet pod's "
    "environment that `tfdist manifest --format=jobset` sets up, else none (one process); "
    "tf_config: TF_CONFIG only; jobset: the JobSet pod's environment (every task at its JobSet "
    "DNS name); slurm: the Slurm job step (each task started by srun; with --slurm_port_base, "
    "--num_ps and --chief as `tfdist manifest --format=slurm` writes them).")
SLURM_PORT_BASE = define_integer(
    "slurm_port_base", 8888,
    "cluster_resolver=slurm: port of the first task on each Slurm node; the n-th uses base + n.",
    lower_bound=1, upper_bound=65535)
NUM_PS = define_integer(
    "num_ps", 0, "Parameter-server (ps) tasks: of the Slurm job (cluster_resolver=slurm), or "
                 "that `tfdist launch` starts or `tfdist manifest` describes; plan: exchange "
                 "through N ps tasks instead of all-reduce.",
    lower_bound=0, upper_bound=flags_lib.MAX_TASKS)
CHIEF = flags.DEFINE_bool(
    "chief", False, "A chief task (the parameter-server coordinator): in the Slurm job "
                    "(cluster_resolver=slurm), or that `tfdist launch` starts or `tfdist "
                    "manifest` describes.")
SLURM = flags_lib.group(SLURM_PORT_BASE, NUM_PS, CHIEF)  # Only with --cluster_resolver=slurm.
TF_LOGS = flags.DEFINE_bool("tf_logs", False,
                             "Show TensorFlow's start-up and C++ logs (hidden by default).")


flags_lib.register("train", STRATEGY, INPUT, TRAIN, OPTIMIZER, flags_lib.group(CLUSTER_RESOLVER),
                   SLURM, flags_lib.group(TF_LOGS))


@flags.multi_flags_validator(
    [CLUSTER_RESOLVER.name, *SLURM],
    message="given without --cluster_resolver=slurm, whose cluster they describe; add it, or drop "
            "them (TF_CONFIG describes the cluster otherwise)")
def _slurm_flags_need_the_slurm_resolver(values: dict) -> bool:
    """--slurm_port_base, --num_ps and --chief describe a Slurm job, in the commands that take
    --cluster_resolver (launch and manifest take the last two for their own clusters)."""
    if CLUSTER_RESOLVER.name not in flags_lib.COMMAND_FLAGS[flags_lib.parsing_for()]:
        return True
    return values[CLUSTER_RESOLVER.name] == "slurm" or not any(
        holder.present for holder in SLURM.values())


_BATCH = (SOURCE["global_batch_size"], PER_REPLICA_BATCH_SIZE)  # Give one, or neither.


@flags.multi_flags_validator(
    [holder.name for holder in _BATCH],
    message="both set the batch; give one: --per_replica_batch_size=N (the global batch is N x "
            "the replicas) or --global_batch_size=N (split over the replicas)")
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
    values = {name: holder.value for name, holder in INPUT.items()
              if name in takes and not (per_replica and name == "global_batch_size")}
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
        values["lr_step_boundaries"] = tuple(float(epoch)
                                             for epoch in values["lr_step_boundaries"])
    except ValueError:
        raise flags_lib.UsageError(
            f"lr_step_boundaries={','.join(values['lr_step_boundaries'])!r} is not a list of "
            "epochs; write e.g. --lr_step_boundaries=30,60.") from None
    values["lars_exclude"] = tuple(values["lars_exclude"])
    return OptimizerConfig(**values)


def run_config(cluster: ClusterConfig | None) -> RunConfig:
    """The parsed train flags as one immutable `RunConfig`, once `flags_lib.parse` or a user
    program's `app.run` has parsed argv."""
    return RunConfig(
        strategy=strategy_config(),
        input=input_config(),
        train=TrainConfig(**{**{name: holder.value for name, holder in TRAIN.items()},
                             PER_REPLICA_BATCH_SIZE.name: per_replica_batch_size()}),
        optimizer=optimizer_config(),
        cluster=cluster,
        show_tf_logs=TF_LOGS.value)


def cluster() -> ClusterConfig | None:
    """This task's cluster, as --cluster_resolver says (`cluster_and_source`)."""
    return cluster_and_source()[0]


def cluster_and_source() -> tuple[ClusterConfig | None, list[str]]:
    """This task's cluster, and where it came from, in lines: TF_CONFIG, the JobSet pod's
    environment (each variable and the field it came from), or the Slurm job step with
    --cluster_resolver=slurm (TensorFlow's resolver: TensorFlow is imported then).

    Raises:
      ClusterConfigError: the chosen source is missing or invalid, in one line.
    """
    resolver = CLUSTER_RESOLVER.value
    if resolver == "slurm":
        tf_import.import_tensorflow(show_tf_logs())
        from tfdist.strategies import slurm  # pylint: disable=import-outside-toplevel
        found = slurm.cluster_from_slurm(port_base=SLURM_PORT_BASE.value, num_ps=NUM_PS.value,
                                         chief=CHIEF.value)
        return found, ["the Slurm job step (--cluster_resolver=slurm)"]
    if resolver != "jobset":
        found = from_environment()
        if found is not None or resolver == "tf_config" or not jobset.is_jobset_pod():
            return found, ["TF_CONFIG", *_ignored_jobset_variables(found)]
    pod = jobset.from_environment()
    why = ("--cluster_resolver=jobset" if resolver == "jobset" else
           f"--cluster_resolver=auto: TF_CONFIG is unset and {jobset.ENV_LAYOUT} is set")
    return pod.cluster(), [f"the JobSet pod's environment ({why})",
                           *(f"  {source}" for source in pod.sources)]


def _ignored_jobset_variables(found: ClusterConfig | None) -> list[str]:
    """The line naming a JobSet pod's variables that TF_CONFIG's cluster `found` overrides."""
    names = jobset.variables_set()
    return [f"  ignored: the JobSet pod's {', '.join(names)} (TF_CONFIG comes first; "
            "--cluster_resolver=jobset reads them instead)"] if found is not None and names else []


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
