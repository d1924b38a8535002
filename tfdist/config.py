"""`RunConfig`: everything one `tfdist train` run needs, validated, immutable. Pure Python."""

import dataclasses
import enum

from input_pipelines import InputConfig
from input_pipelines.config import MAX_SEED
from input_pipelines.config import PYTHON_FUNCTION
from strategies import ClusterConfig
from strategies import StrategyConfig
from strategies.config import check_int
from strategies.config import coerce_enum
from tfdist.optim_config import MAX_COUNT
from tfdist.optim_config import OptimizerConfig
from tfdist.optim_config import check_peak_learning_rate


class ConfigError(ValueError):
    """A training option is invalid; the message is one line: field, value, fix."""


class KerasFlavourError(ConfigError):
    """tf.keras is Keras 3, or a model was built with Keras 3; one line says what to do."""


class Precision(str, enum.Enum):
    FLOAT32 = "float32"
    MIXED_FLOAT16 = "mixed_float16"
    MIXED_BFLOAT16 = "mixed_bfloat16"


class ModelName(str, enum.Enum):
    """The built-in model functions (`tfdist.models`)."""
    SMALL_CNN = "small_cnn"
    RESNET20 = "resnet20"
    RESNET50 = "resnet50"




def _as_enum(field: str, value, enum_type: type[enum.Enum]):
    return coerce_enum(field, value, enum_type, error=ConfigError)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train: model, epochs, precision and where results go.

    `model` is a built-in model (`ModelName`) or a user's model function as MODULE:FUNCTION.
    `steps_per_epoch=None` covers the training split once per epoch; `validation_steps=None`
    reads the whole validation split. With `model_dir`, a backup is written every epoch or every
    `backup_every` steps, and a restarted job resumes from it.
    """
    model: str = ModelName.SMALL_CNN.value
    epochs: int = 3
    steps_per_epoch: int | None = None
    validation_steps: int | None = None
    steps_per_execution: int = 1
    mixed_precision: Precision = Precision.FLOAT32
    model_dir: str | None = None
    backup_every: str = "epoch"
    metrics_json: str | None = None
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.model, ModelName):
            object.__setattr__(self, "model", self.model.value)
        if self.model not in {name.value for name in ModelName}:
            if ":" not in str(self.model):
                raise ConfigError(f"model={self.model!r} is neither a built-in model "
                                  f"({', '.join(name.value for name in ModelName)}) nor "
                                  "MODULE:FUNCTION; use one of those.")
            if not PYTHON_FUNCTION.fullmatch(self.model):
                raise ConfigError(f"model={self.model!r} is not MODULE:FUNCTION; write e.g. "
                                  "my_project.models:build (a module on PYTHONPATH).")
        object.__setattr__(self, "mixed_precision",
                           _as_enum("mixed_precision", self.mixed_precision, Precision))
        for field in ("epochs", "steps_per_epoch", "validation_steps", "steps_per_execution"):
            value = getattr(self, field)
            if value is not None:
                check_int(field, value, 1, MAX_COUNT, "e.g. 3", error=ConfigError)
        check_int("seed", self.seed, 0, MAX_SEED, "e.g. 0", error=ConfigError)
        if self.backup_every != "epoch" and not (self.backup_every.isdigit() and
                                                 0 < int(self.backup_every) <= MAX_COUNT):
            raise ConfigError(f"backup_every={self.backup_every!r} is neither 'epoch' nor a "
                              f"number of steps from 1 to {MAX_COUNT}; use --backup_every=epoch "
                              "or e.g. 100.")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run: the strategy, the input, the training, and the cluster this process belongs to.

    Attributes:
      optimizer: the optimizer and its schedule; its `epochs` is set to `train.epochs`.
      cluster: the validated TF_CONFIG, or None for a single-process job.
      show_tf_logs: keep TensorFlow's start-up and C++ logs (hidden by default).
    """
    strategy: StrategyConfig = StrategyConfig()
    input: InputConfig = InputConfig()
    train: TrainConfig = TrainConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    cluster: ClusterConfig | None = None
    show_tf_logs: bool = False

    def __post_init__(self):
        # The schedule spans the training: train.epochs rules (and warmup is checked against it).
        object.__setattr__(self, "optimizer",
                           dataclasses.replace(self.optimizer, epochs=self.train.epochs))
        if (self.optimizer.grad_accum_steps > 1 and
                self.train.mixed_precision is Precision.MIXED_FLOAT16):
            raise ConfigError(
                f"grad_accum_steps={self.optimizer.grad_accum_steps} with "
                "mixed_precision=mixed_float16: a skipped loss-scale step would upset the "
                "accumulation; use mixed_bfloat16 or float32.")
        check_peak_learning_rate(self.optimizer,
                                 self.input.global_batch_size * self.optimizer.grad_accum_steps)

    @property
    def writes_results(self) -> bool:
        """Whether this task writes the run's results (metrics JSON, the model dir's lock and
        history): the chief, or the only process."""
        return self.cluster is None or self.cluster.is_chief
