"""`RunConfig`: everything one `tfdist train` run needs, validated, immutable: the training
(`TrainConfig`), the optimizer and its large-batch recipe (`OptimizerConfig`), beside the
strategies' and input pipelines' own configs. Pure Python, so flags parse without TensorFlow."""

import contextlib
import dataclasses
import enum
import math
import os
import re

from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from tfdist.input_pipelines.config import MAX_SEED
from tfdist.input_pipelines.config import PYTHON_FUNCTION
from tfdist.strategies import ClusterConfig
from tfdist.strategies import StrategyConfig
from tfdist.strategies.config import check_int
from tfdist.strategies.config import coerce_enum

KERAS_VERSIONS = ("2", "3")
MAX_COUNT = (1 << 31) - 1  # Steps, epochs and other counts TensorFlow keeps in int32 or more.
_MAX_FLOAT32 = 3.4028234663852886e38


class ConfigError(ValueError):
    """A training option is invalid; the message is one line: field, value, fix."""


class KerasFlavourError(ConfigError):
    """tf.keras is Keras 3, or a model was built with Keras 3; one line says what to do."""


class Precision(str, enum.Enum):
    """The Keras mixed-precision policy (`--mixed_precision`)."""
    FLOAT32 = "float32"
    MIXED_FLOAT16 = "mixed_float16"
    MIXED_BFLOAT16 = "mixed_bfloat16"


class ModelName(str, enum.Enum):
    """The built-in model functions (`tfdist.training.models`)."""
    SMALL_CNN = "small_cnn"
    RESNET20 = "resnet20"
    RESNET50 = "resnet50"


# The smallest image side each built-in model takes: small_cnn pools twice by 2 (valid), Keras'
# ResNet50 refuses below 32; resnet20's strided convolutions are padded.
MIN_IMAGE_SIZE = {ModelName.SMALL_CNN.value: 4, ModelName.RESNET20.value: 1,
                  ModelName.RESNET50.value: 32}


def check_image_size(model: str, image_size: int | None) -> None:
    """Raises ConfigError when built-in `model` cannot take images of side `image_size`."""
    smallest = MIN_IMAGE_SIZE.get(model, 1)
    if image_size is not None and image_size < smallest:
        raise ConfigError(f"image_size={image_size} is too small for model={model!r}, which "
                          f"takes images of at least {smallest}x{smallest}; use "
                          f"image_size={smallest} or more.")


def _as_enum(field: str, value, enum_type: type[enum.Enum]):
    return coerce_enum(field, value, enum_type, error=ConfigError)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train: model, epochs, precision and where results go.

    `model` is a built-in model (`ModelName`) or a user's model function as MODULE:FUNCTION.
    `keras` is the Keras the model is written in: 2 (tf-keras, `tf.keras` with
    TF_USE_LEGACY_KERAS=1) or 3 (`import keras`, docs/keras.md).
    `steps_per_epoch=None` covers the training split once per epoch; `validation_steps=None`
    reads the whole validation split. With `model_dir`, a backup is written every epoch or every
    `backup_every` steps, and a restarted job resumes from it.

    Example:
      >>> tfdist.TrainConfig(model="my_project.models:build", epochs=5,
      ...                    mixed_precision="mixed_bfloat16", metrics_json="/tmp/m.json")
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
    keras: int = 2
    per_replica_batch_size: int | None = None  # Not InputConfig's: setup derives the global.

    def __post_init__(self):
        if isinstance(self.model, ModelName):
            object.__setattr__(self, "model", self.model.value)
        if not isinstance(self.model, str):
            raise ConfigError(f"model={self.model!r} is of type {type(self.model).__name__}, "
                              "not a string; pass a built-in model's name or "
                              "'MODULE:FUNCTION'.")
        for field in ("model_dir", "metrics_json"):
            object.__setattr__(self, field, _path_or_none(field, getattr(self, field)))
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
        for field, highest in (("epochs", MAX_COUNT), ("steps_per_epoch", MAX_COUNT),
                               ("validation_steps", MAX_COUNT), ("steps_per_execution", MAX_COUNT),
                               ("per_replica_batch_size", MAX_GLOBAL_BATCH_SIZE)):
            if getattr(self, field) is not None:
                check_int(field, getattr(self, field), 1, highest, "e.g. 3", error=ConfigError)
        check_int("seed", self.seed, 0, MAX_SEED, "e.g. 0", error=ConfigError)
        if str(self.keras) not in KERAS_VERSIONS:
            raise ConfigError(f"keras={self.keras!r} is not a Keras tfdist trains with; use "
                              "keras=2 (tf-keras) or keras=3 (`import keras`).")
        object.__setattr__(self, "keras", int(self.keras))
        if not isinstance(self.backup_every, str):
            raise ConfigError(f"backup_every={self.backup_every!r} is not a string; pass "
                              "backup_every='epoch' or a number of steps as text, e.g. '100'.")
        steps = self.backup_every  # ASCII digits: isdigit also takes e.g. Arabic-Indic ones.
        if steps != "epoch" and not (steps.isascii() and steps.isdigit() and
                                     0 < int(steps) <= MAX_COUNT):
            raise ConfigError(f"backup_every={steps!r} is neither 'epoch' nor a number of steps "
                              f"from 1 to {MAX_COUNT}; use backup_every=epoch or e.g. 100.")


def _path_or_none(field: str, value):
    """`value` (a path: str or os.PathLike) as a str, or None; ConfigError for anything else."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if path is None or isinstance(path, str):
        return path
    raise ConfigError(f"{field}={value!r} is of type {type(value).__name__}, not a path; pass a "
                      f"string, e.g. {field}='/tmp/run'.")


def _epochs(value) -> tuple[float, ...]:
    """`lr_step_boundaries` as a tuple of floats; ConfigError unless a list of numbers."""
    with contextlib.suppress(OverflowError):  # An int beyond any float.
        if isinstance(value, (list, tuple)) and all(
                isinstance(epoch, (int, float)) and not isinstance(epoch, bool)
                for epoch in value):
            return tuple(float(epoch) for epoch in value)
    raise ConfigError(f"lr_step_boundaries={_short(value)} is not a list of epochs (finite "
                      "numbers); pass e.g. lr_step_boundaries=(30, 60).")


def _short(value, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 4] + " ..."


class OptimizerName(str, enum.Enum):
    """The optimizers `--optimizer` names (`momentum` and `nesterov` are SGD with momentum)."""
    SGD = "sgd"
    MOMENTUM = "momentum"
    NESTEROV = "nesterov"
    ADAM = "adam"
    ADAMW = "adamw"
    RMSPROP = "rmsprop"
    LARS = "lars"


class LrScaling(str, enum.Enum):
    """How the peak rate grows with the global batch (Goyal et al. 2017: linear)."""
    NONE = "none"
    LINEAR = "linear"
    SQRT = "sqrt"


class LrSchedule(str, enum.Enum):
    """The decay after warmup."""
    CONSTANT = "constant"
    COSINE = "cosine"
    STEP = "step"


class LarsMode(str, enum.Enum):
    """LARS scales the rate by the trust ratio; LARC's clip mode caps the ratio at 1."""
    SCALE = "scale"
    CLIP = "clip"


# Biases and normalisation weights: LARS leaves them at trust 1 and without weight decay.
DEFAULT_LARS_EXCLUDE = ("bias", "batch_normalization", "layer_normalization", "gamma", "beta")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """The optimizer, its learning-rate schedule and what happens to gradients before an update.

    Field names are the `tfdist train` flags. Rates: the peak is `learning_rate` scaled by
    `global_batch_size / base_batch_size` (`lr_scaling`); warmup rises from `learning_rate` to
    the peak over `warmup_epochs`; `lr_schedule` then decays from the peak until training ends
    (`TrainConfig.epochs`), at `lr_step_boundaries` (epochs from the start) by `lr_step_factor`
    for `step`. Gradients, after the all-reduce: clipped to global norm `clip_norm`, given
    Gaussian noise of variance `gradient_noise_eta / (1 + t) ** gradient_noise_gamma`, and
    averaged over `grad_accum_steps` micro-batches per update. `measure_noise_scale` measures
    the gradient noise scale (`tfdist.optim.noise_scale`), which needs 2+ replicas in sync or
    `grad_accum_steps` > 1.

    Example (Goyal et al.'s recipe: linear scaling from 256, 5 warmup epochs, step decay):
      >>> tfdist.OptimizerConfig(optimizer="momentum", learning_rate=0.1, lr_scaling="linear",
      ...                        base_batch_size=256, warmup_epochs=5, lr_schedule="step",
      ...                        lr_step_boundaries=(30, 60, 80))
    """
    optimizer: OptimizerName = OptimizerName.ADAM
    learning_rate: float = 3e-3
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_scaling: LrScaling = LrScaling.NONE
    base_batch_size: int = 256
    warmup_epochs: float = 0.0
    lr_schedule: LrSchedule = LrSchedule.CONSTANT
    lr_step_boundaries: tuple[float, ...] = ()
    lr_step_factor: float = 0.1
    clip_norm: float | None = None
    grad_accum_steps: int = 1
    gradient_noise_eta: float = 0.0
    gradient_noise_gamma: float = 0.55
    measure_noise_scale: bool = False
    lars_eeta: float = 0.001
    lars_mode: LarsMode = LarsMode.SCALE
    lars_exclude: tuple[str, ...] = DEFAULT_LARS_EXCLUDE

    def __post_init__(self):
        for field, enum_type in (("optimizer", OptimizerName), ("lr_scaling", LrScaling),
                                 ("lr_schedule", LrSchedule), ("lars_mode", LarsMode)):
            object.__setattr__(self, field, _as_enum(field, getattr(self, field), enum_type))
        object.__setattr__(self, "lr_step_boundaries", _epochs(self.lr_step_boundaries))
        if not isinstance(self.lars_exclude, (list, tuple)) or not all(
                isinstance(pattern, str) for pattern in self.lars_exclude):
            raise ConfigError(f"lars_exclude={_short(self.lars_exclude)} is not a list of "
                              "regular expressions; pass strings, e.g. ('bias', 'gamma').")
        object.__setattr__(self, "lars_exclude", tuple(self.lars_exclude))
        self._check_finite()
        self._check_ranges()
        self._check_schedule()
        self._check_lars_flags()

    def _check_finite(self) -> None:
        """NaN and infinities (and floats beyond float32, which the optimizer computes in)."""
        numbers = {field: getattr(self, field) for field in _FLOAT_EXAMPLES
                   if field != "lr_step_boundaries"}
        numbers.update({f"lr_step_boundaries[{index}]": epoch
                        for index, epoch in enumerate(self.lr_step_boundaries)})
        for field, value in numbers.items():
            if value is not None and not (isinstance(value, (int, float)) and
                                          not isinstance(value, bool) and
                                          math.isfinite(value) and abs(value) <= _MAX_FLOAT32):
                raise ConfigError(
                    f"{field}={value!r} is not a finite number (within float32's range); pass "
                    f"e.g. {_FLOAT_EXAMPLES[field.split('[')[0]]}.")

    def _check_ranges(self) -> None:
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate={self.learning_rate} must be positive, e.g. 0.1.")
        for field in ("weight_decay", "gradient_noise_eta", "gradient_noise_gamma",
                      "warmup_epochs"):
            if getattr(self, field) < 0:
                raise ConfigError(f"{field}={getattr(self, field)} is negative; use 0 or more.")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"momentum={self.momentum} is outside [0, 1); e.g. 0.9.")
        check_int("base_batch_size", self.base_batch_size, 1, MAX_GLOBAL_BATCH_SIZE, "e.g. 256",
                  error=ConfigError)
        check_int("grad_accum_steps", self.grad_accum_steps, 1, MAX_COUNT, "e.g. 1",
                  error=ConfigError)
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ConfigError(f"clip_norm={self.clip_norm} must be positive; leave it unset "
                              "to not clip.")
        if not 0 < self.lr_step_factor <= 1:
            raise ConfigError(f"lr_step_factor={self.lr_step_factor} is outside (0, 1]; e.g. "
                              "0.1 divides the rate by 10 at each boundary.")

    def _check_schedule(self) -> None:
        boundaries = self.lr_step_boundaries
        if self.lr_schedule is LrSchedule.STEP and not boundaries:
            raise ConfigError("lr_schedule=step needs step boundaries in epochs, e.g. "
                              "lr_step_boundaries=30,60.")
        if boundaries and self.lr_schedule is not LrSchedule.STEP:
            raise ConfigError(f"lr_step_boundaries={_show(boundaries)} applies to "
                              f"lr_schedule=step, not {self.lr_schedule.value}.")
        if any(later <= earlier for earlier, later in zip(boundaries, boundaries[1:])):
            raise ConfigError(f"lr_step_boundaries={_show(boundaries)} are not increasing; list "
                              "epochs in order, e.g. 30,60,80.")
        if boundaries and not self.warmup_epochs < boundaries[0]:
            raise ConfigError(f"lr_step_boundaries={_show(boundaries)} must fall after warmup "
                              f"(warmup_epochs={self.warmup_epochs:g}); move them later or "
                              "warm up for fewer epochs.")

    def _check_lars_flags(self) -> None:
        if self.optimizer is OptimizerName.LARS:
            if not self.lars_eeta > 0:
                raise ConfigError(f"lars_eeta={self.lars_eeta} must be positive, e.g. 0.001.")
            for pattern in self.lars_exclude:
                try:
                    re.compile(pattern)
                except re.error as error:
                    raise ConfigError(
                        f"lars_exclude={pattern!r} is not a regular expression ({error}); "
                        "escape special characters, e.g. 'bias' or 'batch_norm.*'.") from None
            return
        for field in ("lars_eeta", "lars_mode", "lars_exclude"):
            if getattr(self, field) != getattr(OptimizerConfig, field):  # Its default.
                raise ConfigError(f"{field} applies to optimizer=lars, not "
                                  f"{self.optimizer.value}; drop it or use optimizer=lars.")


def peak_learning_rate(config: OptimizerConfig, global_batch_size: int) -> float:
    """`learning_rate` scaled by global_batch_size / base_batch_size as `lr_scaling` says."""
    ratio = global_batch_size / config.base_batch_size
    scale = {LrScaling.NONE: 1.0, LrScaling.LINEAR: ratio,
             LrScaling.SQRT: math.sqrt(ratio)}[config.lr_scaling]
    return config.learning_rate * scale


def check_peak_learning_rate(config: OptimizerConfig, global_batch_size: int) -> None:
    """Raises ConfigError when scaling takes the rate past float32's range."""
    peak = peak_learning_rate(config, global_batch_size)
    if peak > _MAX_FLOAT32:
        raise ConfigError(
            f"learning_rate={config.learning_rate:g} scaled {config.lr_scaling.value} to "
            f"global_batch_size={global_batch_size} is {peak:g}, beyond float32; lower "
            "learning_rate.")


def check_schedule_fits(config: OptimizerConfig, epochs: int) -> None:
    """Raises ConfigError when warmup or a step boundary does not end before `epochs` do."""
    if config.warmup_epochs >= epochs:
        raise ConfigError(f"warmup_epochs={config.warmup_epochs:g} is not shorter than training "
                          f"(epochs={epochs}); warm up for fewer epochs or train longer.")
    boundaries = config.lr_step_boundaries
    if boundaries and not boundaries[-1] < epochs:
        raise ConfigError(f"lr_step_boundaries={_show(boundaries)} must fall before the end of "
                          f"training (epochs={epochs}); drop the last or train longer.")


# The float options, each with an example value for error messages.
_FLOAT_EXAMPLES = {"learning_rate": 0.1, "momentum": 0.9, "weight_decay": 0.0001,
                   "warmup_epochs": 5, "lr_step_boundaries": 30, "lr_step_factor": 0.1,
                   "clip_norm": 1.0, "gradient_noise_eta": 0.01, "gradient_noise_gamma": 0.55,
                   "lars_eeta": 0.001}


def _show(boundaries: tuple[float, ...]) -> str:
    return ",".join(f"{epoch:g}" for epoch in boundaries)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run: the strategy, the input, the training, and the cluster this process belongs to.

    Attributes:
      optimizer: the optimizer and its schedule, which spans `train.epochs`.
      cluster: the validated TF_CONFIG, or None for a single-process job.
      show_tf_logs: keep TensorFlow's start-up and C++ logs (hidden by default).

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
    cluster: ClusterConfig | None = None
    show_tf_logs: bool = False

    def __post_init__(self):
        for field, kind in (("strategy", StrategyConfig), ("input", InputConfig),
                            ("train", TrainConfig), ("optimizer", OptimizerConfig),
                            ("cluster", ClusterConfig)):
            value = getattr(self, field)
            if not (isinstance(value, kind) or (field == "cluster" and value is None)):
                raise ConfigError(f"{field} is a {type(value).__name__}, not a {kind.__name__}; "
                                  f"pass a {kind.__name__}(...).")
        check_schedule_fits(self.optimizer, self.train.epochs)
        check_image_size(self.train.model, self.input.image_size)
        if (self.optimizer.grad_accum_steps > 1 and
                self.train.mixed_precision is Precision.MIXED_FLOAT16):
            raise ConfigError(
                f"grad_accum_steps={self.optimizer.grad_accum_steps} with "
                "mixed_precision=mixed_float16: a skipped loss-scale step would upset the "
                "accumulation; use mixed_bfloat16 or float32.")
        if self.train.per_replica_batch_size is None:  # Else setup, with the global batch.
            check_peak_learning_rate(self.optimizer, self.update_batch_size)
        elif self.input.global_batch_size != InputConfig.global_batch_size:
            raise ConfigError(f"global_batch_size={self.input.global_batch_size} and "
                              f"per_replica_batch_size={self.train.per_replica_batch_size} both "
                              "set the batch; give one.")
        if self.train.keras == 3 and self.train.backup_every != "epoch":
            raise ConfigError(f"backup_every={self.train.backup_every!r} with keras=3: tfdist's "
                              "Keras 3 step backs up at the end of each epoch; use "
                              "backup_every=epoch, or shorter epochs (steps_per_epoch=N).")

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
