"""`RunConfig`: everything one `tfdist train` run needs, validated, immutable: the training
(`TrainConfig`), the optimizer and its large-batch recipe (`OptimizerConfig`), beside the
strategies' and input pipelines' own configs. Pure Python, so flags parse without TensorFlow."""

import contextlib
import dataclasses
import enum
import math
import os
import re

from tfdist import errors
from tfdist.fields import fix_of
from tfdist.fields import option
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from tfdist.input_pipelines.config import MAX_SEED
from tfdist.input_pipelines.config import PYTHON_FUNCTION
from tfdist.strategies import ClusterConfig
from tfdist.strategies import StrategyConfig
from tfdist.strategies.config import check_bounds
from tfdist.strategies.config import coerce_enums

KERAS_VERSIONS = ("2", "3")
MAX_COUNT = (1 << 31) - 1  # Steps, epochs and other counts TensorFlow keeps in int32 or more.
_MAX_FLOAT32 = 3.4028234663852886e38


class ConfigError(errors.UsageError):
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
        ModelName.SMALL_CNN.value, "Model to train: a built-in one "
        f"({', '.join(name.value for name in ModelName)}) or MODULE:FUNCTION, a model function "
        "of yours, imported when training starts (docs/library.md).")
    epochs: int = option(3, "Training epochs.", bounds=(1, MAX_COUNT))
    steps_per_epoch: int | None = option(None, "Steps per epoch; unset covers the training "
                                         "split once.", bounds=(1, MAX_COUNT), fix="e.g. 100")
    validation_steps: int | None = option(None, "Validation steps per epoch; unset reads the "
                                          "whole validation split.", bounds=(1, MAX_COUNT),
                                          fix="e.g. 10")
    steps_per_execution: int = option(1, "Steps run per tf.function call; more cuts Python "
                                      "overhead per step.", bounds=(1, MAX_COUNT))
    mixed_precision: Precision = option(
        Precision.FLOAT32, "Dtype policy; mixed_float16 adds dynamic loss scaling.")
    model_dir: str | None = option(
        None, "Where checkpoints and TensorBoard logs go; unset keeps nothing.")
    backup_every: str = option(
        "epoch", "With --model_dir: back up training state every epoch or every N steps, so a "
        "restarted job resumes where it stopped.")
    metrics_json: str | None = option(None, "Write the run summary as JSON to this path.")
    seed: int = option(0, "Seeds Python, NumPy, TensorFlow and input shuffling.",
                       bounds=(0, MAX_SEED))
    keras: int = 2  # Its flag's default follows TF_USE_LEGACY_KERAS.
    per_replica_batch_size: int | None = option(  # Not InputConfig's: setup derives the global.
        None, bounds=(1, MAX_GLOBAL_BATCH_SIZE), fix="e.g. 64")

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
        coerce_enums(self, error=ConfigError)
        check_bounds(self, error=ConfigError)
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
    raise ConfigError(f"lr_step_boundaries={errors.shown(value)} is not a list of epochs (finite "
                      "numbers); pass e.g. lr_step_boundaries=(30, 60).")


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
    """The optimizer, its learning-rate schedule and what happens to gradients before an update;
    each field carries its help (its `tfdist train` flag's), default and bounds (`option`).
    Warmup rises from `learning_rate` to `peak_learning_rate`, from which `lr_schedule` decays
    until training ends (`TrainConfig.epochs`).

    Example (Goyal et al.'s recipe: linear scaling from 256, 5 warmup epochs, step decay):
      >>> tfdist.OptimizerConfig(optimizer="momentum", learning_rate=0.1, lr_scaling="linear",
      ...                        base_batch_size=256, warmup_epochs=5, lr_schedule="step",
      ...                        lr_step_boundaries=(30, 60, 80))
    """
    optimizer: OptimizerName = option(OptimizerName.ADAM, "Optimizer.")
    learning_rate: float = option(3e-3, "Base learning rate: the rate at --base_batch_size, "
                                  "where warmup starts.", fix="e.g. 0.1")
    momentum: float = option(0.9, "Momentum of momentum, nesterov and lars.")
    weight_decay: float = option(
        0.0, "Weight decay: decoupled for sgd/momentum/nesterov/adam/adamw/rmsprop, in the update "
        "for lars.", fix="e.g. 0.0001")
    lr_scaling: LrScaling = option(
        LrScaling.NONE, "Scale the peak rate with global batch / --base_batch_size: linear, or "
        "its square root.")
    base_batch_size: int = option(256, "The global batch --learning_rate is meant for.",
                                  bounds=(1, MAX_GLOBAL_BATCH_SIZE))
    warmup_epochs: float = option(0.0, "Rise linearly from --learning_rate to the scaled peak "
                                  "over these epochs.", fix="e.g. 5")
    lr_schedule: LrSchedule = option(
        LrSchedule.CONSTANT, "Decay after warmup: constant, cosine to 0 at the end, or step.")
    lr_step_boundaries: tuple[float, ...] = option(
        (), "lr_schedule=step: epochs (from the start) at which the rate is multiplied by "
        "--lr_step_factor, e.g. 30,60,80.", fix="e.g. 30")
    lr_step_factor: float = option(0.1, "lr_schedule=step: factor at each boundary.")
    clip_norm: float | None = option(None, "Clip the all-reduced gradients to this global norm; "
                                     "unset does not clip.", fix="e.g. 1.0")
    grad_accum_steps: int = option(
        1, "Apply one update per N micro-batches, with their mean gradient (an effective global "
        "batch N times larger).", bounds=(1, MAX_COUNT))
    gradient_noise_eta: float = option(
        0.0, "Add Gaussian noise of variance eta / (1 + t)^gamma to the all-reduced gradients "
        "(t = updates so far); 0 adds none.", fix="e.g. 0.01")
    gradient_noise_gamma: float = option(0.55, "Annealing exponent of --gradient_noise_eta.")
    measure_noise_scale: bool = option(
        False, "Measure the gradient noise scale B_simple (about the critical batch size) from "
        "the replicas' own gradients, or from the micro-batches with --grad_accum_steps > 1; "
        "logged per epoch and kept in the metrics JSON as noise_scale (docs/large_batch.md).")
    lars_eeta: float = option(0.001, "lars: trust coefficient.")
    lars_mode: LarsMode = option(
        LarsMode.SCALE, "lars: scale the rate by the trust ratio, or clip the ratio at 1 (LARC).")
    lars_exclude: tuple[str, ...] = option(
        DEFAULT_LARS_EXCLUDE, "lars: variables whose name matches one of these regular "
        "expressions get trust 1 and no weight decay.")

    def __post_init__(self):
        coerce_enums(self, error=ConfigError)
        object.__setattr__(self, "lr_step_boundaries", _epochs(self.lr_step_boundaries))
        if not isinstance(self.lars_exclude, (list, tuple)) or not all(
                isinstance(pattern, str) for pattern in self.lars_exclude):
            raise ConfigError(f"lars_exclude={errors.shown(self.lars_exclude)} is not a list of "
                              "regular expressions; pass strings, e.g. ('bias', 'gamma').")
        object.__setattr__(self, "lars_exclude", tuple(self.lars_exclude))
        self._check_finite()
        self._check_ranges()
        self._check_schedule()
        self._check_lars_flags()

    def _check_finite(self) -> None:
        """NaN and infinities (and floats beyond float32, which the optimizer computes in)."""
        fields = {field.name: field for field in dataclasses.fields(self)}
        numbers = [(name, getattr(self, name), field) for name, field in fields.items()
                   if field.type in (float, float | None)]
        numbers += [(f"lr_step_boundaries[{index}]", epoch, fields["lr_step_boundaries"])
                    for index, epoch in enumerate(self.lr_step_boundaries)]
        for name, value, field in numbers:
            if value is not None and not (isinstance(value, (int, float)) and
                                          not isinstance(value, bool) and
                                          math.isfinite(value) and abs(value) <= _MAX_FLOAT32):
                raise ConfigError(f"{name}={value!r} is not a finite number (within float32's "
                                  f"range); pass {fix_of(field)}.")

    def _check_ranges(self) -> None:
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate={self.learning_rate} must be positive, e.g. 0.1.")
        for field in ("weight_decay", "gradient_noise_eta", "gradient_noise_gamma",
                      "warmup_epochs"):
            if getattr(self, field) < 0:
                raise ConfigError(f"{field}={getattr(self, field)} is negative; use 0 or more.")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"momentum={self.momentum} is outside [0, 1); e.g. 0.9.")
        check_bounds(self, error=ConfigError)
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


def _show(boundaries: tuple[float, ...]) -> str:
    return ",".join(f"{epoch:g}" for epoch in boundaries)


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
    show_tf_logs: bool = option(False, "Show TensorFlow's start-up and C++ logs (hidden by "
                                "default).")

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
