"""`RunConfig`: everything one `tfdist train` run needs, validated, immutable: the training
(`TrainConfig`), the optimizer and its large-batch recipe (`OptimizerConfig`, in
`optimizer_config`), beside the strategies' and input pipelines' own configs. Pure Python, so
flags parse without TensorFlow."""

import dataclasses
import enum
import math
import os

from tfdist.errors import ConfigError
from tfdist.fields import MAX_COUNT
from tfdist.fields import option
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines.choices import PYTHON_FUNCTION
from tfdist.input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from tfdist.input_pipelines.config import MAX_SEED
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.runtime.optimizer_config import check_peak_learning_rate
from tfdist.runtime.optimizer_config import check_schedule_fits
from tfdist.strategies import ClusterConfig
from tfdist.strategies import StrategyConfig
from tfdist.strategies.config import check_bounds
from tfdist.strategies.config import coerce_enums

KERAS_VERSIONS = ("2", "3")


class KerasFlavourError(ConfigError):
    """tf.keras is Keras 3, or a model was built with Keras 3; one line says what to do."""


class Precision(str, enum.Enum):
    """The Keras mixed-precision policy (`--mixed_precision`)."""

    FLOAT32 = "float32"
    MIXED_FLOAT16 = "mixed_float16"
    MIXED_BFLOAT16 = "mixed_bfloat16"


class NoticeSignal(str, enum.Enum):
    """The signals that give a preemption notice (`--preemption_signal`): SIGTERM always (a pod's
    deletion, `scancel`, `tfdist launch` stopping), and the one Slurm's `--signal` sends ahead of
    a job's time limit."""

    SIGTERM = "SIGTERM"  # That one only.
    SIGUSR1 = "SIGUSR1"
    SIGUSR2 = "SIGUSR2"


class ModelName(str, enum.Enum):
    """The built-in model functions (`tfdist.training.models`)."""

    SMALL_CNN = "small_cnn"
    RESNET20 = "resnet20"
    RESNET50 = "resnet50"


# The smallest image side each built-in model takes: small_cnn pools twice by 2 (valid), Keras'
# ResNet50 refuses below 32; resnet20's strided convolutions are padded.
MIN_IMAGE_SIZE = {
    ModelName.SMALL_CNN.value: 4,
    ModelName.RESNET20.value: 1,
    ModelName.RESNET50.value: 32,
}


def check_image_size(model: str, image_size: int | None) -> None:
    """Raises ConfigError when built-in `model` cannot take images of side `image_size`."""
    smallest = MIN_IMAGE_SIZE.get(model, 1)
    if image_size is not None and image_size < smallest:
        raise ConfigError(
            f"image_size={image_size} is too small for model={model!r}, which "
            f"takes images of at least {smallest}x{smallest}; use "
            f"image_size={smallest} or more."
        )


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train: model, epochs, precision and where results go; each field carries its help
    (its `tfdist train` flag's), default and bounds (`option`). `keras` is the Keras the model is
    written in: 2 (tf-keras, TF_USE_LEGACY_KERAS=1) or 3 (`import keras`; docs/keras.md).

    Example:
      >>> tfdist.TrainConfig(model="my_project.models:build", epochs=5,
      ...                    mixed_precision="mixed_bfloat16", metrics_json="/tmp/m.json")
    """

    model: str = option(
        ModelName.SMALL_CNN.value,
        "Model to train: a built-in one "
        f"({', '.join(name.value for name in ModelName)}) or MODULE:FUNCTION, a model function "
        "of yours, imported when training starts (docs/library.md).",
    )
    epochs: int = option(3, "Training epochs.", bounds=(1, MAX_COUNT))
    steps_per_epoch: int | None = option(
        None,
        "Steps per epoch; unset covers the training split once.",
        bounds=(1, MAX_COUNT),
        fix="e.g. 100",
    )
    validation_steps: int | None = option(
        None,
        "Validation steps per epoch; unset reads the whole validation split.",
        bounds=(1, MAX_COUNT),
        fix="e.g. 10",
    )
    steps_per_execution: int = option(
        1,
        "Steps run per tf.function call; more cuts Python overhead per step.",
        bounds=(1, MAX_COUNT),
    )
    mixed_precision: Precision = option(
        Precision.FLOAT32, "Dtype policy; mixed_float16 adds dynamic loss scaling."
    )
    model_dir: str | None = option(
        None, "Where checkpoints and TensorBoard logs go; unset keeps nothing."
    )
    backup_every: str = option(
        "epoch",
        "With --model_dir: back up training state every epoch or every N steps, so a "
        "restarted job resumes where it stopped.",
    )
    metrics_json: str | None = option(None, "Write the run summary as JSON to this path.")
    preemption_signal: NoticeSignal = option(
        NoticeSignal.SIGTERM,
        "Besides SIGTERM, the signal that means a preemption notice: SIGUSR1 or SIGUSR2 (what "
        "Slurm's --signal sends before the time limit). On notice every task stops at one step, "
        "saves there under --model_dir and exits 75; run again to resume.",
    )
    seed: int = option(
        0, "Seeds Python, NumPy, TensorFlow and input shuffling.", bounds=(0, MAX_SEED)
    )
    keras: int = 2  # Its flag's default follows TF_USE_LEGACY_KERAS.
    # Seconds from a preemption notice to SIGKILL, as the engine that started this task says
    # (`tfdist.cluster.GRACE_ENV`); None: unknown. The first backup's save is checked against it.
    grace_s: float | None = None
    per_replica_batch_size: int | None = option(  # Not InputConfig's: setup derives the global.
        None, bounds=(1, MAX_GLOBAL_BATCH_SIZE), fix="e.g. 64"
    )

    def __post_init__(self):
        if isinstance(self.model, ModelName):
            object.__setattr__(self, "model", self.model.value)
        if not isinstance(self.model, str):
            raise ConfigError(
                f"model={self.model!r} is of type {type(self.model).__name__}, "
                "not a string; pass a built-in model's name or "
                "'MODULE:FUNCTION'."
            )
        for field in ("model_dir", "metrics_json"):
            object.__setattr__(self, field, _path_or_none(field, getattr(self, field)))
        if self.model not in {name.value for name in ModelName}:
            if ":" not in str(self.model):
                raise ConfigError(
                    f"model={self.model!r} is neither a built-in model "
                    f"({', '.join(name.value for name in ModelName)}) nor "
                    "MODULE:FUNCTION; use one of those."
                )
            if not PYTHON_FUNCTION.fullmatch(self.model):
                raise ConfigError(
                    f"model={self.model!r} is not MODULE:FUNCTION; write e.g. "
                    "my_project.models:build (a module on PYTHONPATH)."
                )
        coerce_enums(self, error=ConfigError)
        check_bounds(self, error=ConfigError)
        if str(self.keras) not in KERAS_VERSIONS:
            raise ConfigError(
                f"keras={self.keras!r} is not a Keras tfdist trains with; use "
                "keras=2 (tf-keras) or keras=3 (`import keras`)."
            )
        object.__setattr__(self, "keras", int(self.keras))
        if self.grace_s is not None and not (
            isinstance(self.grace_s, (int, float))
            and math.isfinite(self.grace_s)
            and self.grace_s > 0
        ):
            raise ConfigError(
                f"grace_s={self.grace_s!r} is not a number of seconds above 0; pass the seconds "
                "from a preemption notice to SIGKILL, e.g. grace_s=30, or None."
            )
        if not isinstance(self.backup_every, str):
            raise ConfigError(
                f"backup_every={self.backup_every!r} is not a string; pass "
                "backup_every='epoch' or a number of steps as text, e.g. '100'."
            )
        steps = self.backup_every  # ASCII digits: isdigit also takes e.g. Arabic-Indic ones.
        if steps != "epoch" and not (
            steps.isascii() and steps.isdigit() and 0 < int(steps) <= MAX_COUNT
        ):
            raise ConfigError(
                f"backup_every={steps!r} is neither 'epoch' nor a number of steps "
                f"from 1 to {MAX_COUNT}; use backup_every=epoch or e.g. 100."
            )


def _path_or_none(field: str, value):
    """`value` (a path: str or os.PathLike) as a str, or None; ConfigError for anything else."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if path is None or isinstance(path, str):
        return path
    raise ConfigError(
        f"{field}={value!r} is of type {type(value).__name__}, not a path; pass a "
        f"string, e.g. {field}='/tmp/run'."
    )


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run: the strategy, the input, the training, and the cluster this process belongs to.

    Example (a run without flags; `tfdist.config_from_flags` builds one from them):
      >>> config = tfdist.RunConfig(
      ...     strategy=tfdist.StrategyConfig(strategy="mirrored", num_cpu_devices=2),
      ...     input=tfdist.InputConfig(global_batch_size=256),
      ...     train=tfdist.TrainConfig(epochs=10, model_dir="/tmp/run"),
      ...     optimizer=tfdist.OptimizerConfig(optimizer="momentum", learning_rate=0.1,
      ...                                      lr_scaling="linear", warmup_epochs=2),
      ...     cluster=strategies.from_environment())  # TF_CONFIG's cluster, or None
    """

    strategy: StrategyConfig = StrategyConfig()
    input: InputConfig = InputConfig()
    train: TrainConfig = TrainConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    cluster: ClusterConfig | None = None  # The validated TF_CONFIG; None: a single process.
    show_tf_logs: bool = option(
        False, "Show TensorFlow's start-up and C++ logs (hidden by default)."
    )

    def __post_init__(self):
        for field, kind in (
            ("strategy", StrategyConfig),
            ("input", InputConfig),
            ("train", TrainConfig),
            ("optimizer", OptimizerConfig),
            ("cluster", ClusterConfig),
        ):
            value = getattr(self, field)
            if not (isinstance(value, kind) or (field == "cluster" and value is None)):
                raise ConfigError(
                    f"{field} is a {type(value).__name__}, not a {kind.__name__}; "
                    f"pass a {kind.__name__}(...)."
                )
        check_schedule_fits(self.optimizer, self.train.epochs)
        check_image_size(self.train.model, self.input.image_size)
        if (
            self.optimizer.grad_accum_steps > 1
            and self.train.mixed_precision is Precision.MIXED_FLOAT16
        ):
            raise ConfigError(
                f"grad_accum_steps={self.optimizer.grad_accum_steps} with "
                "mixed_precision=mixed_float16: a skipped loss-scale step would upset the "
                "accumulation; use mixed_bfloat16 or float32."
            )
        if self.train.per_replica_batch_size is None:  # Else setup, with the global batch.
            check_peak_learning_rate(self.optimizer, self.update_batch_size)
        elif self.input.global_batch_size != InputConfig.global_batch_size:
            raise ConfigError(
                f"global_batch_size={self.input.global_batch_size} and "
                f"per_replica_batch_size={self.train.per_replica_batch_size} both "
                "set the batch; give one."
            )
        if self.train.keras == 3 and self.train.backup_every != "epoch":
            raise ConfigError(
                f"backup_every={self.train.backup_every!r} with keras=3: tfdist's "
                "Keras 3 step backs up at the end of each epoch; use "
                "backup_every=epoch, or shorter epochs (steps_per_epoch=N)."
            )

    @property
    def update_batch_size(self) -> int:
        """Examples per optimizer update: the global batch times `grad_accum_steps` (the batch
        the learning rate is scaled for); `setup` derives it from a per-replica batch."""
        if self.train.per_replica_batch_size is not None:  # Known once the strategy is.
            raise ConfigError("update_batch_size: the batch is per replica; read the plan's.")
        return self.input.global_batch_size * self.optimizer.grad_accum_steps

    @property
    def writes_results(self) -> bool:
        """Whether this task writes the run's results (metrics JSON, the model dir's lock and
        history): the chief, or the only process."""
        return self.cluster is None or self.cluster.is_chief
