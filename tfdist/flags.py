"""Every command-line flag of tfdist, and their conversion into configs.

The only module that defines or reads absl flags. `main` parses once, then hands the resulting
immutable configs to the rest of the code. Pure Python: TensorFlow is imported after parsing.
"""

from absl import flags

from input_pipelines import DATASETS
from input_pipelines import InputConfig
from strategies import AllReduce
from strategies import ClusterConfig
from strategies import Collective
from strategies import StrategyConfig
from strategies import StrategyKind
from tfdist.config import ModelName
from tfdist.config import OptimizerName
from tfdist.config import Precision
from tfdist.config import RunConfig
from tfdist.config import TrainConfig

FLAGS = flags.FLAGS


class UsageError(ValueError):
    """A flag was given to a command that does not take it, or a stray argument."""


def _values(enum_type) -> list[str]:
    return [member.value for member in enum_type]


# Strategy.
flags.DEFINE_enum("strategy", "auto", _values(StrategyKind),
                  "tf.distribute strategy; auto picks parameter_server when TF_CONFIG has ps "
                  "tasks, multi_worker_mirrored with several workers, mirrored with several local "
                  "devices, else one_device.")
flags.DEFINE_integer("num_gpus", None, "GPUs per worker; unset uses every visible GPU.",
                     lower_bound=0)
flags.DEFINE_integer("num_cpu_devices", 1,
                     "Split the host CPU into N logical devices, so N replicas run on a CPU-only "
                     "machine (mirrored).", lower_bound=1)
flags.DEFINE_enum("all_reduce", "auto", _values(AllReduce), "Mirrored cross-device all-reduce.")
flags.DEFINE_integer("num_packs", 1, "Gradient packs for nccl/hierarchical_copy all-reduce.",
                     lower_bound=1)
flags.DEFINE_enum("collective", "auto", _values(Collective),
                  "Multi-worker collective implementation.")
flags.DEFINE_float("collective_timeout_s", None,
                   "Fail a multi-worker collective that takes longer than this, instead of "
                   "hanging on a lost peer; unset waits forever.")
flags.DEFINE_string("variable_partition", "none",
                    "Parameter-server variable sharding: none, min_size:<bytes> or max_shards:<n>.")
# Input.
flags.DEFINE_enum("dataset", "shapes", list(DATASETS),
                  "Training data; shapes is the built-in 10-class image dataset, generated "
                  "locally on first use.")
flags.DEFINE_string("data_dir", None,
                    "Where prepared datasets live; unset uses $TFDS_DATA_DIR or "
                    "~/tensorflow_datasets.")
flags.DEFINE_integer("global_batch_size", 128,
                     "Examples per step over all replicas; must divide by the replica count.",
                     lower_bound=1)
# Training.
flags.DEFINE_enum("model", "small_cnn", _values(ModelName), "Model to train.")
flags.DEFINE_integer("epochs", 3, "Training epochs.", lower_bound=1)
flags.DEFINE_integer("steps_per_epoch", None,
                     "Steps per epoch; unset covers the training split once.", lower_bound=1)
flags.DEFINE_integer("validation_steps", None,
                     "Validation steps per epoch; unset reads the whole validation split.",
                     lower_bound=1)
flags.DEFINE_integer("steps_per_execution", 1,
                     "Steps run per tf.function call; more cuts Python overhead per step.",
                     lower_bound=1)
flags.DEFINE_enum("optimizer", "adam", _values(OptimizerName), "Optimizer.")
flags.DEFINE_float("learning_rate", 3e-3, "Learning rate.")
flags.DEFINE_enum("mixed_precision", "float32", _values(Precision),
                  "Dtype policy; mixed_float16 adds dynamic loss scaling.")
flags.DEFINE_string("model_dir", None,
                    "Where checkpoints and TensorBoard logs go; unset keeps nothing.")
flags.DEFINE_string("metrics_json", None, "Write the run summary as JSON to this path.")
flags.DEFINE_integer("seed", 0, "Seeds Python, NumPy, TensorFlow and input shuffling.")
flags.DEFINE_bool("tf_logs", False, "Show TensorFlow's start-up and C++ logs (hidden by default).")
# Doctor.
flags.DEFINE_string("tf_config", None,
                    "TF_CONFIG JSON to check instead of the TF_CONFIG environment variable.")

_STRATEGY_FLAGS = ("strategy", "num_gpus", "num_cpu_devices", "all_reduce", "num_packs",
                   "collective", "collective_timeout_s", "variable_partition")
_INPUT_FLAGS = ("dataset", "data_dir", "global_batch_size")
_TRAIN_FLAGS = ("model", "epochs", "steps_per_epoch", "validation_steps", "steps_per_execution",
                "optimizer", "learning_rate", "mixed_precision", "model_dir", "metrics_json",
                "seed")
COMMAND_FLAGS = {
    "train": _STRATEGY_FLAGS + _INPUT_FLAGS + _TRAIN_FLAGS + ("tf_logs",),
    "doctor": _STRATEGY_FLAGS + ("tf_config", "tf_logs"),
}


def parse(command: str, argv: list[str]) -> None:
    """Parses `argv` (program name first) into FLAGS for `command`.

    Raises:
      flags.Error: a malformed or out-of-range value, an unknown flag.
      UsageError: a flag of another command, or a stray positional argument.
    """
    FLAGS.unparse_flags()
    remaining = FLAGS(argv)
    if len(remaining) > 1:
        raise UsageError(f"unexpected argument {remaining[1]!r}; flags are written --name=value.")
    own = set(COMMAND_FLAGS[command])
    for name in COMMAND_FLAGS["train"] + COMMAND_FLAGS["doctor"]:
        if FLAGS[name].present and name not in own:
            raise UsageError(f"--{name} is not a flag of `tfdist {command}`; see "
                             f"`tfdist {command} --help`.")


def strategy_config() -> StrategyConfig:
    """The parsed strategy flags as a `StrategyConfig`."""
    return StrategyConfig(**{name: FLAGS[name].value for name in _STRATEGY_FLAGS})


def run_config(cluster: ClusterConfig | None) -> RunConfig:
    """The parsed `tfdist train` flags as one immutable `RunConfig`."""
    return RunConfig(
        strategy=strategy_config(),
        input=InputConfig(dataset=FLAGS.dataset, data_dir=FLAGS.data_dir,
                          global_batch_size=FLAGS.global_batch_size, seed=FLAGS.seed),
        train=TrainConfig(**{name: FLAGS[name].value for name in _TRAIN_FLAGS}),
        cluster=cluster,
        show_tf_logs=FLAGS.tf_logs)


def tf_config() -> str | None:
    """`--tf_config`, the TF_CONFIG text `tfdist doctor` checks instead of the environment."""
    return FLAGS.tf_config


def show_tf_logs() -> bool:
    """`--tf_logs`."""
    return FLAGS.tf_logs


def help_text(command: str) -> str:
    """The help of `command`'s flags, one block per flag."""
    blocks = []
    for name in COMMAND_FLAGS[command]:
        flag = FLAGS[name]
        default = "unset" if flag.default is None else flag.default_as_str
        blocks.append(f"  --{name}: {flag.help}\n    (default: {default})")
    return "\n".join(blocks)
