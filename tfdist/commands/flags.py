"""Every command-line flag of tfdist, and their conversion into configs.

The only module that defines or reads absl flags. Each flag is held as a `FlagHolder`, grouped by
the config it feeds. Two kinds:

- Train flags (strategy, input, training, optimizer, precision, output, the Slurm cluster and
  --tf_logs) are defined when this module is imported, so a user's own absl program takes them:
  `adopt_train_flags` lists them in its `--help`, and `run_config` turns them into a `RunConfig`
  once `app.run` has parsed argv.
- The flags of tfdist's other commands (benchmark, plan, data check and serve, launch, manifest,
  doctor)
  are defined by `define_cli_flags`, which only `tfdist`'s `main` calls: names such as --name,
  --port or --format would collide with a user's own flags.

`main` parses once, then hands the resulting immutable configs to the rest of the code. Pure
Python: TensorFlow is imported after parsing.
"""

import math
import re
import sys

from absl import flags
from absl import logging  # noqa: F401  (defines --log_dir, which launch uses)

from tfdist.input_pipelines import DATASET_FORMS
from tfdist.input_pipelines import AutoShard
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import PreprocessOn
from tfdist.input_pipelines import ServiceMode
from tfdist.input_pipelines.config import MAX_BUFFER_SIZE
from tfdist.input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from tfdist.input_pipelines.config import MAX_IMAGE_SIZE
from tfdist.input_pipelines.config import MAX_NUM_CLASSES
from tfdist.input_pipelines.config import MAX_SEED
from tfdist.input_pipelines.config import MAX_THREADS
from tfdist.input_pipelines.config import PYTHON_PREFIX
from tfdist.strategies import AllReduce
from tfdist.strategies import ClusterConfig
from tfdist.strategies import Collective
from tfdist.strategies import StrategyConfig
from tfdist.strategies import StrategyKind
from tfdist.strategies import WireDtype
from tfdist.strategies.config import MAX_GPU_MEMORY_MIB
from tfdist.strategies.config import MAX_PACK_MIB
from tfdist.strategies.config import MAX_REPLICA_DEVICES
from tfdist.strategies.config import MAX_TIMEOUT_S
from tfdist.strategies.config import is_duration
from tfdist.runtime import keras_env
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import KERAS_VERSIONS
from tfdist.runtime.config import ModelName
from tfdist.runtime.config import Precision
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.cluster.launcher import LaunchConfig
from tfdist.cluster.launcher import Network
from tfdist.cluster import cost_model
from tfdist.runtime.config import DEFAULT_LARS_EXCLUDE
from tfdist.runtime.config import LarsMode
from tfdist.runtime.config import LrScaling
from tfdist.runtime.config import LrSchedule
from tfdist.runtime.config import MAX_COUNT
from tfdist.runtime.config import OptimizerConfig
from tfdist.runtime.config import OptimizerName

FLAGS = flags.FLAGS
_Holders = dict[str, flags.FlagHolder]  # A group of flags by name, in the order help lists them.
_MAX_TASKS = 4096  # Tasks of one job in flags; `launch` also checks what this machine can run.


class UsageError(ValueError):
    """A flag was given to a command that does not take it, or a stray argument."""


def _choices(enum_type) -> list[str]:
    """The values of `enum_type`'s members, as DEFINE_enum takes them."""
    return [member.value for member in enum_type]


def _group(*holders: flags.FlagHolder) -> _Holders:
    """`holders` by flag name, in order."""
    return {holder.name: holder for holder in holders}


def _values(holders: _Holders) -> dict:
    """The parsed values of `holders`, by flag name."""
    return {name: holder.value for name, holder in holders.items()}


def _is_finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)


def _is_duration(value: float | None) -> bool:
    return value is None or is_duration(value)


def _define_float(name: str, default: float | None, text: str) -> flags.FlagHolder:
    """A float flag that must be finite: NaN passes absl's bounds (every comparison with it is
    false)."""
    holder = flags.DEFINE_float(name, default, text)
    flags.register_validator(holder, _is_finite, message="must be a finite number")
    return holder


def _define_duration(name: str, default: float | None, text: str) -> flags.FlagHolder:
    """A float flag of seconds, above 0 and at most MAX_TIMEOUT_S."""
    holder = _define_float(name, default, text)
    flags.register_validator(holder, _is_duration,
                             message=f"must be a number of seconds above 0 and at most "
                                     f"{MAX_TIMEOUT_S:.0f} (30 days)")
    return holder


# Train flags: defined on import, for `tfdist train` and users' programs alike.
_STRATEGY = _group(
    flags.DEFINE_enum("strategy", "auto", _choices(StrategyKind),
                      "tf.distribute strategy; auto picks parameter_server when TF_CONFIG has ps "
                      "tasks, multi_worker_mirrored with several workers, mirrored with several "
                      "local devices, else one_device."),
    flags.DEFINE_integer("num_gpus", None, "GPUs per worker; unset uses every visible GPU.",
                         lower_bound=0, upper_bound=MAX_REPLICA_DEVICES),
    flags.DEFINE_integer("num_cpu_devices", 1,
                         "Split the host CPU into N logical devices, so N replicas run on a "
                         "CPU-only machine (mirrored).",
                         lower_bound=1, upper_bound=MAX_REPLICA_DEVICES),
    flags.DEFINE_integer("num_logical_gpus", 1,
                         "Split the first GPU into N logical GPUs, so N replicas run on one GPU "
                         "(mirrored; all-reduce by hierarchical copy, as NCCL needs distinct "
                         "GPUs).", lower_bound=1, upper_bound=MAX_REPLICA_DEVICES),
    flags.DEFINE_integer("logical_gpu_memory_mib", 8192,
                         "Memory of each logical GPU of --num_logical_gpus, in MiB.",
                         lower_bound=1, upper_bound=MAX_GPU_MEMORY_MIB),
    flags.DEFINE_enum("all_reduce", "auto", _choices(AllReduce),
                      "Mirrored cross-device all-reduce."),
    flags.DEFINE_integer("num_packs", 1, "Gradient packs for nccl/hierarchical_copy all-reduce.",
                         lower_bound=1, upper_bound=MAX_REPLICA_DEVICES),
    flags.DEFINE_enum("collective", "auto", _choices(Collective),
                      "Multi-worker collective implementation."),
    _define_duration("collective_timeout_s", None,
                     "Fail a multi-worker collective that takes longer than this, instead of "
                     "hanging on a lost peer; unset waits forever."),
    flags.DEFINE_string("variable_partition", "none",
                        "Parameter-server variable sharding: none, min_size:<bytes> or "
                        "max_shards:<n>."),
    flags.DEFINE_enum("allreduce_dtype", "float32", _choices(WireDtype),
                      "Cast gradients to this dtype for the all-reduce between replicas and back "
                      "after it (mirrored strategies): bfloat16 or float16 halve the bytes on the "
                      "wire (docs/PERFORMANCE.md)."),
    flags.DEFINE_integer("allreduce_pack_mib", 0,
                         "Multi-worker: all-reduce gradients in packs of this many MiB; 0 lets "
                         "TensorFlow choose.", lower_bound=0, upper_bound=MAX_PACK_MIB))
# The records and their batching: what `tfdist data check` reads too.
_SOURCE = _group(
    flags.DEFINE_string("dataset", "shapes",
                        f"Training data, one of {DATASET_FORMS}|python:MODULE:FUNCTION: shapes is "
                        "the built-in 10-class image dataset, generated locally on first use; "
                        "synthetic is one random batch repeated (compute throughput only); "
                        "tfrecord:<glob> reads image/encoded and image/class/label ({split} in "
                        "the glob becomes train and validation); python:MODULE:FUNCTION is a "
                        "dataset function of yours (README \"Use tfdist from your own "
                        "program\"); anything else is a prepared TFDS dataset."),
    flags.DEFINE_string("data_dir", None,
                        "Where prepared datasets live; unset uses $TFDS_DATA_DIR or "
                        "~/tensorflow_datasets."),
    flags.DEFINE_bool("download", False,
                      "Let TFDS download and prepare a dataset that is not prepared (needs "
                      "network)."),
    flags.DEFINE_integer("num_classes", None, "Classes of a tfrecord: or synthetic dataset.",
                         lower_bound=1, upper_bound=MAX_NUM_CLASSES),
    flags.DEFINE_integer("image_size", None,
                         "Resize images to this square size; unset keeps a TFDS dataset's size, "
                         "224 for tfrecord:, 32 for synthetic.",
                         lower_bound=1, upper_bound=MAX_IMAGE_SIZE),
    flags.DEFINE_integer("global_batch_size", 128,
                         "Examples per step over all replicas; must divide by the replica count.",
                         lower_bound=1, upper_bound=MAX_GLOBAL_BATCH_SIZE),
    flags.DEFINE_integer("shuffle_buffer_size", 10_000,
                         "Examples in the training shuffle buffer.",
                         lower_bound=1, upper_bound=MAX_BUFFER_SIZE),
    flags.DEFINE_enum("autoshard", "auto", _choices(AutoShard),
                      "How input pipelines divide the data: file (whole files each), data (every "
                      "N-th example), off (all read everything), auto (file when there are "
                      "enough files, else data)."),
    flags.DEFINE_bool("cache", False, "Keep the records in memory after the first epoch."),
    flags.DEFINE_bool("deterministic", None,
                      "Produce input in a fixed order (--nodeterministic trades order for "
                      "speed); unset keeps tf.data's default."),
    flags.DEFINE_integer("datasets_num_private_threads", None,
                         "Give each input pipeline a private thread pool of this size.",
                         lower_bound=1, upper_bound=MAX_THREADS),
    flags.DEFINE_bool("skip_corrupt_records", False,
                      "Skip the rest of a damaged TFRecord file (logged and counted) instead of "
                      "failing."))
_INPUT = {**_SOURCE, **_group(
    flags.DEFINE_enum("preprocess_on", "auto", _choices(PreprocessOn),
                      "Where augmentation, normalisation and the cast run: host (tf.data), device "
                      "(inside each replica's step; the host only decodes and batches uint8), "
                      "auto (device when there are GPUs)."),
    flags.DEFINE_string("tf_data_service", None,
                        "grpc://host:port of a tf.data service dispatcher (see `tfdist data "
                        "serve`) to run the input pipeline on."),
    flags.DEFINE_enum("tf_data_service_mode", "distributed_epoch", _choices(ServiceMode),
                      "distributed_epoch: service workers split each epoch, every example once; "
                      "parallel_epochs: every service worker produces the whole epoch."))}
_EPOCHS = flags.DEFINE_integer("epochs", 3, "Training epochs.",
                               lower_bound=1, upper_bound=MAX_COUNT)
_SEED = flags.DEFINE_integer("seed", 0, "Seeds Python, NumPy, TensorFlow and input shuffling.",
                             lower_bound=0, upper_bound=MAX_SEED)
_KERAS = flags.DEFINE_enum(
    "keras", str(keras_env.environment_choice()), KERAS_VERSIONS,
    "The Keras models are written in: 2 (tf-keras) or 3 (`import keras`); the default follows "
    "TF_USE_LEGACY_KERAS (unset: 2). launch: the Keras `tf.keras` is in every task; doctor: "
    "check this task for it.")
_TRAIN = _group(
    flags.DEFINE_string("model", ModelName.SMALL_CNN.value,
                        f"Model to train: a built-in one ({', '.join(_choices(ModelName))}) or "
                        "MODULE:FUNCTION, a model function of yours, imported when training "
                        "starts (README \"Use tfdist from your own program\")."),
    _EPOCHS,
    flags.DEFINE_integer("steps_per_epoch", None,
                         "Steps per epoch; unset covers the training split once.",
                         lower_bound=1, upper_bound=MAX_COUNT),
    flags.DEFINE_integer("validation_steps", None,
                         "Validation steps per epoch; unset reads the whole validation split.",
                         lower_bound=1, upper_bound=MAX_COUNT),
    flags.DEFINE_integer("steps_per_execution", 1,
                         "Steps run per tf.function call; more cuts Python overhead per step.",
                         lower_bound=1, upper_bound=MAX_COUNT),
    flags.DEFINE_enum("mixed_precision", "float32", _choices(Precision),
                      "Dtype policy; mixed_float16 adds dynamic loss scaling."),
    flags.DEFINE_string("model_dir", None,
                        "Where checkpoints and TensorBoard logs go; unset keeps nothing."),
    flags.DEFINE_string("backup_every", "epoch",
                        "With --model_dir: back up training state every epoch or every N steps, "
                        "so a restarted job resumes where it stopped."),
    flags.DEFINE_string("metrics_json", None, "Write the run summary as JSON to this path."),
    _SEED,
    _KERAS)
# OptimizerConfig's fields (README "Large-batch training").
_OPTIMIZER = _group(
    flags.DEFINE_enum("optimizer", "adam", _choices(OptimizerName), "Optimizer."),
    _define_float("learning_rate", 3e-3,
                  "Base learning rate: the rate at --base_batch_size, where warmup starts."),
    _define_float("momentum", 0.9, "Momentum of momentum, nesterov and lars."),
    _define_float("weight_decay", 0.0,
                  "Weight decay: decoupled for sgd/momentum/nesterov/adam/adamw/rmsprop, in the "
                  "update for lars."),
    flags.DEFINE_enum("lr_scaling", "none", _choices(LrScaling),
                      "Scale the peak rate with global batch / --base_batch_size: linear, or its "
                      "square root."),
    flags.DEFINE_integer("base_batch_size", 256, "The global batch --learning_rate is meant for.",
                         lower_bound=1, upper_bound=MAX_GLOBAL_BATCH_SIZE),
    _define_float("warmup_epochs", 0.0,
                  "Rise linearly from --learning_rate to the scaled peak over these epochs."),
    flags.DEFINE_enum("lr_schedule", "constant", _choices(LrSchedule),
                      "Decay after warmup: constant, cosine to 0 at the end, or step."),
    flags.DEFINE_list("lr_step_boundaries", [],
                      "lr_schedule=step: epochs (from the start) at which the rate is multiplied "
                      "by --lr_step_factor, e.g. 30,60,80."),
    _define_float("lr_step_factor", 0.1, "lr_schedule=step: factor at each boundary."),
    _define_float("clip_norm", None,
                  "Clip the all-reduced gradients to this global norm; unset does not clip."),
    flags.DEFINE_integer("grad_accum_steps", 1,
                         "Apply one update per N micro-batches, with their mean gradient (an "
                         "effective global batch N times larger).",
                         lower_bound=1, upper_bound=MAX_COUNT),
    _define_float("gradient_noise_eta", 0.0,
                  "Add Gaussian noise of variance eta / (1 + t)^gamma to the all-reduced "
                  "gradients (t = updates so far); 0 adds none."),
    _define_float("gradient_noise_gamma", 0.55, "Annealing exponent of --gradient_noise_eta."),
    flags.DEFINE_boolean("measure_noise_scale", False,
                         "Measure the gradient noise scale B_simple (about the critical batch "
                         "size) from the replicas' own gradients, or from the micro-batches with "
                         "--grad_accum_steps > 1; logged per epoch and kept in the metrics "
                         "JSON as noise_scale (README \"How far can this job scale?\")."),
    _define_float("lars_eeta", 0.001, "lars: trust coefficient."),
    flags.DEFINE_enum("lars_mode", "scale", _choices(LarsMode),
                      "lars: scale the rate by the trust ratio, or clip the ratio at 1 (LARC)."),
    flags.DEFINE_list("lars_exclude", list(DEFAULT_LARS_EXCLUDE),
                      "lars: variables whose name matches one of these regular expressions get "
                      "trust 1 and no weight decay."))
_CLUSTER_RESOLVER = flags.DEFINE_enum(
    "cluster_resolver", "tf_config", ["tf_config", "slurm"],
    "Read the cluster from TF_CONFIG, or from the Slurm job step (each task started by srun; "
    "with --slurm_port_base, --num_ps and --chief as `tfdist manifest --format=slurm` writes "
    "them).")
_SLURM_PORT_BASE = flags.DEFINE_integer(
    "slurm_port_base", 8888,
    "cluster_resolver=slurm: port of the first task on each Slurm node; the n-th uses base + n.",
    lower_bound=1, upper_bound=65535)
_NUM_PS = flags.DEFINE_integer(
    "num_ps", 0, "Parameter-server (ps) tasks: of the Slurm job (cluster_resolver=slurm), or "
                 "that `tfdist launch` starts or `tfdist manifest` describes; plan: exchange "
                 "through N ps tasks instead of all-reduce.",
    lower_bound=0, upper_bound=_MAX_TASKS)
_CHIEF = flags.DEFINE_bool(
    "chief", False, "A chief task (the parameter-server coordinator): in the Slurm job "
                    "(cluster_resolver=slurm), or that `tfdist launch` starts or `tfdist "
                    "manifest` describes.")
_SLURM = _group(_SLURM_PORT_BASE, _NUM_PS, _CHIEF)  # Only with --cluster_resolver=slurm.
_TF_LOGS = flags.DEFINE_bool("tf_logs", False,
                             "Show TensorFlow's start-up and C++ logs (hidden by default).")
_LOG_DIR = flags.FlagHolder(FLAGS, FLAGS["log_dir"])  # absl.logging's flag; launch uses it.

# The flags each command takes; `define_cli_flags` adds the commands besides train.
COMMAND_FLAGS: dict[str, _Holders] = {
    "train": {**_STRATEGY, **_INPUT, **_TRAIN, **_OPTIMIZER,
              **_group(_CLUSTER_RESOLVER), **_SLURM, **_group(_TF_LOGS)},
}
# The groups of the CLI-only flags, filled by `define_cli_flags`.
_BENCHMARK: _Holders = {}
_DATA_CHECK: _Holders = {}
_DATA_SERVE: _Holders = {}
_LAUNCH: _Holders = {}
_MANIFEST: _Holders = {}
_DOCTOR: _Holders = {}
_PLAN: _Holders = {}


def adopt_train_flags() -> None:
    """Makes every train flag a key flag of this program's main module, so that its `--help`
    lists them beside the program's own flags (`--helpfull` lists every flag anyway).

    Call it when the main module is imported, before `app.run` parses argv.
    """
    for holder in COMMAND_FLAGS["train"].values():
        # absl's `--help` lists the key flags of the module named sys.argv[0]
        # (FlagValues.main_module_help).
        FLAGS.register_key_flag_for_module(sys.argv[0], FLAGS[holder.name])


def _define_benchmark_flags() -> _Holders:
    """Benchmark's own flags (--json is `define_cli_flags`')."""
    return _group(
        flags.DEFINE_list("replicas", ["1", "2"],
                          "benchmark: replica counts to sweep (GPUs when present, else logical "
                          "CPUs)."),
        flags.DEFINE_list("data", ["synthetic", "real"],
                          "benchmark: synthetic (one batch, no input cost) and/or real "
                          "(--dataset)."),
        flags.DEFINE_integer("warmup_steps", 5,
                             "benchmark: untimed steps first (tracing, warm-up).",
                             lower_bound=1, upper_bound=MAX_COUNT),
        flags.DEFINE_integer("timed_steps", 20, "benchmark: timed steps per round.",
                             lower_bound=1, upper_bound=MAX_COUNT),
        flags.DEFINE_integer("rounds", 7,
                             "benchmark: timed rounds per configuration; figures are medians "
                             "over rounds, with their spread.",
                             lower_bound=1, upper_bound=MAX_COUNT),
        flags.DEFINE_boolean("overhead", True,
                             "benchmark: on synthetic data, each round also times a plain "
                             "Keras script in the strategy's scope and with no strategy "
                             "(overhead_ratio, overhead_vs_no_strategy)."))


def _define_measure(name: str, text: str, lowest: float, highest: float) -> flags.FlagHolder:
    """A float flag of a physical quantity, unset by default, in [lowest, highest]."""
    holder = _define_float(name, None, text)
    flags.register_validator(holder, lambda value: value is None or lowest <= value <= highest,
                             message=f"must lie in [{lowest:g}, {highest:,.0f}]")
    return holder


def _define_plan_flags() -> _Holders:
    """Plan's own flags (--json and --plot are `define_cli_flags'`)."""
    intra, inter = list(cost_model.INTRA_NODE_LINKS), list(cost_model.INTER_NODE_LINKS)
    overlap = _define_float(
        "overlap", 0.0, "plan: the share of the backward pass the gradient exchange runs "
                        "behind, 0 (after the whole backward pass: TensorFlow's one pack) to 1.")
    backward = _define_float("backward_fraction", 2 / 3,
                             "plan: the backward pass's share of the step's compute time.")
    for holder in (overlap, backward):
        flags.register_validator(holder, lambda value: 0 <= value <= 1,
                                 message="must lie in [0, 1]")
    return _group(
        flags.DEFINE_string("from_benchmark", None,
                            "plan: a `tfdist benchmark --json` file (with 1 in --replicas): its "
                            "1-replica synthetic step time, batch, trainable parameters and "
                            "train flags are the workload; flags given here override them (the "
                            "step time scales with --per_replica_batch_size)."),
        _define_measure("compute_ms", "plan: one replica's step time (forward and backward) "
                        "at --per_replica_batch_size on its own device, in ms.", 1e-3, 1e9),
        flags.DEFINE_integer("per_replica_batch_size", None,
                             "plan: examples per replica per step.",
                             lower_bound=1, upper_bound=MAX_GLOBAL_BATCH_SIZE),
        _define_measure("gradient_mib", "plan: float32 gradient MiB per step; unset counts "
                        "--model's trainable parameters (or takes the benchmark's).",
                        1e-6, 2.0 ** 30),
        flags.DEFINE_integer("gpus_per_node", 8, "plan: GPUs in each node.",
                             lower_bound=1, upper_bound=MAX_REPLICA_DEVICES),
        flags.DEFINE_list("nodes", ["1", "2", "4", "8", "16", "32", "64"],
                          "plan: node counts to predict."),
        flags.DEFINE_enum("intra_link", "nvlink3", intra,
                          "plan: the link between GPUs inside a node (docs/PLANNING.md)."),
        flags.DEFINE_enum("inter_link", "roce25", inter,
                          "plan: each node's network link (docs/PLANNING.md)."),
        flags.DEFINE_bool("gpudirect_rdma", False,
                          "plan: GPUs reach the network without host memory (needs an RDMA "
                          "link: roce25 or ib_*)."),
        flags.DEFINE_enum("host_pcie", "pcie4", ["pcie3", "pcie4", "pcie5"],
                          "plan: the GPUs' link to host memory, which traffic between nodes "
                          "crosses twice without --gpudirect_rdma."),
        _define_measure("intra_gbps", "plan: override --intra_link's Gbit/s.", 1e-3, 1e6),
        _define_measure("intra_latency_us", "plan: override --intra_link's latency in µs.",
                        1e-3, 1e9),
        _define_measure("inter_gbps", "plan: override --inter_link's Gbit/s.", 1e-3, 1e6),
        _define_measure("inter_latency_us", "plan: override --inter_link's latency in µs.",
                        1e-3, 1e9),
        flags.DEFINE_enum("allreduce", "ring", ["ring", "hierarchical"],
                          "plan: one ring through every GPU, or reduce inside nodes, all-reduce "
                          "between them, broadcast inside them."),
        overlap, backward,
        flags.DEFINE_integer("host_cores_per_node", None,
                             "plan: host cores for the input pipeline on each node; unset: as "
                             "many as it needs (the table says how many).",
                             lower_bound=1, upper_bound=MAX_THREADS),
        _define_measure("host_examples_per_core", "plan: examples/s one host core's pipeline "
                        "delivers with preprocessing on the host (scripts/benchmark_input.py).",
                        1e-3, 1e9),
        _define_measure("decode_examples_per_core", "plan: the same with preprocessing on the "
                        "device (the host only decodes and batches).", 1e-3, 1e9))


def _define_launch_flags() -> _Holders:
    """Launch's own flags (the cluster's tasks are `define_cli_flags`')."""
    return _group(
        _LOG_DIR,
        flags.DEFINE_integer("max_restarts", 0,
                             "launch: restart a failed task (every task without ps) up to K "
                             "times.", lower_bound=0, upper_bound=MAX_COUNT),
        _define_duration("timeout_s", None,
                         "launch: stop every task and exit 124 after this many seconds; unset "
                         "waits."),
        flags.DEFINE_enum("network", "auto", _choices(Network),
                          "launch: the tasks' network (TensorFlow's servers listen on every "
                          "interface, without authentication). isolated: one network namespace "
                          "with loopback only, so nothing else connects and the tasks reach no "
                          "network; host: this machine's network, the tasks' ports open on every "
                          "interface; auto: isolated where the machine allows it and the command "
                          "passes no URL or --download, else host with a one-line warning."))


def _define_manifest_flags() -> _Holders:
    """Manifest's own flags (the cluster's tasks are `define_cli_flags`')."""
    return _group(
        flags.DEFINE_enum("format", "tfjob", ["tfjob", "slurm"],
                          "manifest: a Kubeflow TFJob (YAML) or a Slurm sbatch script."),
        flags.DEFINE_string("name", "tfdist", "manifest: the TFJob name or Slurm job name."),
        flags.DEFINE_string("image", None,
                            "manifest: container image of a TFJob (with tfdist in it)."),
        flags.DEFINE_enum("restart_policy", "OnFailure",
                          ["OnFailure", "Never", "Always", "ExitCode"],
                          "manifest: TFJob replicas' restart policy."),
        flags.DEFINE_string("time_limit", "01:00:00", "manifest: Slurm --time of the job."),
        flags.DEFINE_integer("gpus_per_task", 0, "manifest: Slurm --gpus-per-task.",
                             lower_bound=0, upper_bound=MAX_REPLICA_DEVICES))


def _define_doctor_flags() -> _Holders:
    """Doctor's own flags."""
    return _group(
        flags.DEFINE_string("tf_config", None,
                            "TF_CONFIG JSON to check instead of the TF_CONFIG environment "
                            "variable."),
        flags.DEFINE_bool("probe", False,
                          "doctor: also resolve every task's host, check that peers' ports "
                          "answer (bounded by --probe_timeout_s) and warn about loopback "
                          "addresses."),
        _define_duration("probe_timeout_s", 5.0, "doctor: how long --probe may take in all."))


def define_cli_flags() -> None:
    """Defines the flags of tfdist's commands besides train (benchmark, data check and serve,
    launch, manifest, doctor) and adds those commands to COMMAND_FLAGS; later calls do nothing.

    Only `tfdist`'s `main` calls it: in a user's program, names such as --name, --port or
    --format would collide with the program's own flags.
    """
    if "doctor" in COMMAND_FLAGS:
        return
    num_workers = flags.DEFINE_integer(
        "num_workers", 2, "launch: worker tasks to start; manifest: worker tasks of the job; "
                          "data check: workers to simulate; data serve: tf.data service "
                          "workers to start.", lower_bound=1, upper_bound=_MAX_TASKS)
    evaluator = flags.DEFINE_bool("evaluator", False,
                                  "launch: start an evaluator task; manifest: add one.")
    json_path = flags.DEFINE_string(
        "json", None, "data check, benchmark, plan: also write the report as JSON to this path.")
    plot_path = flags.DEFINE_string(
        "plot", None, "benchmark: write a PNG of throughput and efficiency vs replicas; plan: of "
                      "efficiency and step time vs GPUs (needs matplotlib: pip install -e "
                      "'.[plot]').")
    _DATA_CHECK.update(_group(
        num_workers,
        flags.DEFINE_integer("replicas_per_worker", 1,
                             "data check: replicas on each simulated worker.",
                             lower_bound=1, upper_bound=MAX_REPLICA_DEVICES),
        json_path))
    _DATA_SERVE.update(_group(
        flags.DEFINE_integer("port", 5050, "data serve: port of the tf.data service dispatcher.",
                             lower_bound=1, upper_bound=65535),
        num_workers))
    _BENCHMARK.update(_define_benchmark_flags(), **_group(json_path, plot_path))
    _PLAN.update(_define_plan_flags(), **_group(json_path, plot_path))
    tasks = _group(num_workers, _NUM_PS, _CHIEF, evaluator)
    keras = _group(_KERAS)
    _LAUNCH.update(tasks, **_define_launch_flags(), **keras)
    _MANIFEST.update(tasks, **_define_manifest_flags())
    # --log_dir is absl.logging's; launch writes DIR/<type>-<index>.log there.
    FLAGS["log_dir"].help = "launch: write each task's output to DIR/<type>-<index>.log."
    _DOCTOR.update(_define_doctor_flags(), **keras)
    COMMAND_FLAGS.update({
        "doctor": {**_STRATEGY, **_DOCTOR, **_group(_TF_LOGS)},
        "data check": {**_SOURCE, **_group(_SEED), **_DATA_CHECK, **_group(_TF_LOGS)},
        "data serve": {**_DATA_SERVE, **_group(_TF_LOGS)},
        "benchmark": {**_STRATEGY, **_INPUT, **_TRAIN, **_OPTIMIZER, **_BENCHMARK,
                      **_group(_TF_LOGS)},
        "plan": {**_PLAN, **_group(_TRAIN["model"], _SOURCE["image_size"],
                                   _SOURCE["num_classes"], _TRAIN["mixed_precision"],
                                   _STRATEGY["allreduce_dtype"], _NUM_PS, _KERAS, _TF_LOGS)},
        "launch": _LAUNCH,
        "manifest": _MANIFEST,
    })


def parse(command: str, argv: list[str]) -> None:
    """Parses `argv` (program name first) into FLAGS for `command`: train, or another command
    once `define_cli_flags` has run.

    Raises:
      flags.Error: a malformed or out-of-range value, an unknown flag.
      UsageError: a flag of another command, or a stray positional argument.
    """
    FLAGS.unparse_flags()
    remaining = FLAGS(argv)
    if len(remaining) > 1:
        raise UsageError(f"unexpected argument {remaining[1]!r}; flags are written --name=value.")
    every = {name: holder for holders in COMMAND_FLAGS.values()
             for name, holder in holders.items()}
    for name, holder in every.items():
        if holder.present and name not in COMMAND_FLAGS[command]:
            raise UsageError(f"--{name} is not a flag of `tfdist {command}`; see "
                             f"`tfdist {command} --help`.")


def check_train_args(args: list[str]) -> None:
    """Parses `args` as `tfdist train` flags and builds their config, for commands that pass
    train flags on (manifest, launch); FLAGS hold the train flags afterwards.

    Raises:
      UsageError, ConfigError and the other config errors: the first bad train flag.
    """
    try:
        parse("train", ["tfdist", *args])
    except flags.Error as error:
        raise UsageError(f"train flags after `--`: {error}") from None
    run_config(None)


def strategy_config() -> StrategyConfig:
    """The parsed strategy flags as a `StrategyConfig`."""
    return StrategyConfig(**_values(_STRATEGY))


def run_config(cluster: ClusterConfig | None) -> RunConfig:
    """The parsed train flags as one immutable `RunConfig`, once `parse` or a user program's
    `app.run` has parsed argv."""
    return RunConfig(
        strategy=strategy_config(),
        input=input_config("train"),
        train=TrainConfig(**_values(_TRAIN)),
        optimizer=optimizer_config(),
        cluster=cluster,
        show_tf_logs=_TF_LOGS.value)


def optimizer_config() -> OptimizerConfig:
    """The parsed optimizer flags as an `OptimizerConfig`."""
    values = _values(_OPTIMIZER)
    try:
        values["lr_step_boundaries"] = tuple(float(epoch)
                                             for epoch in values["lr_step_boundaries"])
    except ValueError:
        raise UsageError(f"lr_step_boundaries={','.join(values['lr_step_boundaries'])!r} is not "
                         "a list of epochs; write e.g. --lr_step_boundaries=30,60.") from None
    values["lars_exclude"] = tuple(values["lars_exclude"])
    return OptimizerConfig(**values)


def input_config(command: str) -> InputConfig:
    """The parsed input flags of `command` as an `InputConfig`."""
    return InputConfig(seed=_SEED.value, **{name: holder.value for name, holder in _INPUT.items()
                                             if name in COMMAND_FLAGS[command]})


def benchmark_options() -> dict:
    """`tfdist benchmark`'s sweep options, checked.

    Raises:
      UsageError: a replica count that is not an integer from 1 to MAX_REPLICA_DEVICES, an
        unknown data kind, synthetic data asked for a `python:` dataset (by default such a
        sweep runs real data only).
    """
    options = _values(_BENCHMARK)
    replicas, data = options["replicas"], options["data"]
    if not replicas or not all(count.isdigit() and 0 < int(count) <= MAX_REPLICA_DEVICES
                               for count in replicas):
        raise UsageError(f"replicas={','.join(replicas)!r} is not a list of integers from 1 to "
                         f"{MAX_REPLICA_DEVICES}; write e.g. --replicas=1,2,4.")
    if not data or set(data) - {"synthetic", "real"}:
        raise UsageError(f"data={','.join(data)!r} is not understood; use synthetic, real or "
                         "synthetic,real.")
    dataset = _INPUT["dataset"].value
    if dataset.startswith(PYTHON_PREFIX) and "synthetic" in data:
        if _BENCHMARK["data"].present:
            raise UsageError(f"data=synthetic: --dataset={dataset} brings its own model and data, "
                             "which synthetic images do not fit; pass --data=real.")
        data = ["real"]  # The default sweep, less what such a dataset cannot run.
    return {"replicas": sorted({int(count) for count in replicas}),
            "data": [kind for kind in ("synthetic", "real") if kind in data],
            "warmup_steps": options["warmup_steps"], "timed_steps": options["timed_steps"],
            "rounds": options["rounds"], "overhead": options["overhead"],
            "json_path": options["json"],
            "plot_path": options["plot"]}


def benchmark_train_args() -> list[str]:
    """The `tfdist train` flags given to `tfdist benchmark`, as command-line arguments."""
    return [holder.serialize() for name, holder in COMMAND_FLAGS["benchmark"].items()
            if name not in _BENCHMARK and holder.present]


def plan_options() -> dict:
    """`tfdist plan`'s flags by name, `nodes` as integers (checked), and `given`: the names of
    the flags set on the command line (they override a benchmark's figures).

    Raises:
      UsageError: a node count that is not an integer from 1 to 4096.
    """
    options = {name: holder.value for name, holder in COMMAND_FLAGS["plan"].items()}
    nodes = options["nodes"]
    if not nodes or not all(count.isdigit() and 0 < int(count) <= _MAX_TASKS
                            for count in nodes):
        raise UsageError(f"nodes={','.join(nodes)!r} is not a list of integers from 1 to "
                         f"{_MAX_TASKS}; write e.g. --nodes=1,2,4,8.")
    options["nodes"] = sorted({int(count) for count in nodes})
    options["given"] = {name for name, holder in COMMAND_FLAGS["plan"].items() if holder.present}
    return options


def data_check_options() -> tuple[int, int, str | None]:
    """`tfdist data check`'s (num_workers, replicas_per_worker, json)."""
    options = _values(_DATA_CHECK)
    return options["num_workers"], options["replicas_per_worker"], options["json"]


def data_serve_options() -> tuple[int, int]:
    """`tfdist data serve`'s (port, num_workers)."""
    return _DATA_SERVE["port"].value, _DATA_SERVE["num_workers"].value


def keras() -> int:
    """The parsed --keras."""
    return int(_KERAS.value)


def launch_config(command: list[str]) -> LaunchConfig:
    """The parsed `tfdist launch` flags and the command after `--` as a `LaunchConfig`."""
    return LaunchConfig(command=tuple(command), **_values(_LAUNCH))


def slurm_layout() -> dict | None:
    """`cluster_from_slurm`'s arguments when `--cluster_resolver=slurm`, else None.

    Raises:
      UsageError: --num_ps, --chief or --slurm_port_base given without the Slurm resolver.
    """
    if _CLUSTER_RESOLVER.value != "slurm":
        for name, holder in _SLURM.items():
            if holder.present:
                raise UsageError(f"--{name} describes a Slurm cluster; add "
                                 "--cluster_resolver=slurm, or drop it (TF_CONFIG describes "
                                 "the cluster otherwise).")
        return None
    return {"port_base": _SLURM_PORT_BASE.value, "num_ps": _NUM_PS.value, "chief": _CHIEF.value}


def manifest_options() -> dict:
    """`tfdist manifest`'s flags, by name."""
    return _values(_MANIFEST)


def tf_config() -> str | None:
    """`--tf_config`, the TF_CONFIG text `tfdist doctor` checks instead of the environment."""
    return _DOCTOR["tf_config"].value


def probe_timeout_s() -> float | None:
    """`--probe_timeout_s` when `--probe` is given, else None (no probing)."""
    return _DOCTOR["probe_timeout_s"].value if _DOCTOR["probe"].value else None


def require_parsed(caller: str) -> None:
    """Raises ConfigError when argv is not parsed yet, so `caller` cannot read the flags."""
    if not FLAGS.is_parsed():
        raise ConfigError(f"{caller}: the flags are not parsed yet; call it in the main that "
                          "tfdist.run(main) runs (after tfdist.define_flags()), or build a "
                          "tfdist.RunConfig(...) yourself.")


def show_tf_logs() -> bool:
    """`--tf_logs`; False before argv is parsed (a library caller's program without flags)."""
    return FLAGS.is_parsed() and _TF_LOGS.value


def help_text(command: str) -> str:
    """The help of `command`'s flags, one block per flag."""
    blocks = []
    for name in COMMAND_FLAGS[command]:
        flag = FLAGS[name]
        default = "unset" if flag.default is None else flag.default_as_str
        blocks.append(f"  --{name}: {flag.help}\n    (default: {default})")
    return "\n".join(blocks)


def as_flags(message: str) -> str:
    """A config error worded for the command line: each `field=value` that a tfdist flag sets
    becomes `--field=value`. Configs and pipelines name fields, as a library's caller writes
    them; the CLI and users' absl programs print their errors through this."""
    names = sorted({name for holders in COMMAND_FLAGS.values() for name in holders},
                   key=len, reverse=True)
    return re.sub(rf"(?<![\w.-])({'|'.join(map(re.escape, names))})=", r"--\1=", message)
