"""`OptimizerConfig`: the optimizer and its large-batch recipe. Pure Python, so flags parse
without TensorFlow; `tfdist.optim` builds from it (and re-exports it)."""

import dataclasses
import enum
import math
import re

from input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from strategies.config import check_int
from strategies.config import coerce_enum

MAX_COUNT = (1 << 31) - 1  # Steps, epochs and other counts TensorFlow keeps in int32 or more.
_MAX_FLOAT32 = 3.4028234663852886e38


class OptimizerConfigError(ValueError):
    """An optimizer option is invalid; the message is one line: field, value, fix."""


class OptimizerName(str, enum.Enum):
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


def _as_enum(field: str, value, enum_type: type[enum.Enum]):
    return coerce_enum(field, value, enum_type, error=OptimizerConfigError)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """The optimizer, its learning-rate schedule and what happens to gradients before an update.

    Field names are the `tfdist train` flags. Rates: the peak is `learning_rate` scaled by
    `global_batch_size / base_batch_size` (`lr_scaling`); warmup rises from `learning_rate` to
    the peak over `warmup_epochs`; `lr_schedule` then decays from the peak until `epochs` end,
    at `lr_step_boundaries` (epochs from the start) by `lr_step_factor` for `step`. Gradients,
    after the all-reduce: clipped to global norm `clip_norm`, given Gaussian noise of variance
    `gradient_noise_eta / (1 + t) ** gradient_noise_gamma`, and averaged over
    `grad_accum_steps` micro-batches per update.
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
    epochs: int = 3
    clip_norm: float | None = None
    grad_accum_steps: int = 1
    gradient_noise_eta: float = 0.0
    gradient_noise_gamma: float = 0.55
    lars_eeta: float = 0.001
    lars_mode: LarsMode = LarsMode.SCALE
    lars_exclude: tuple[str, ...] = DEFAULT_LARS_EXCLUDE

    def __post_init__(self):
        for field, enum_type in (("optimizer", OptimizerName), ("lr_scaling", LrScaling),
                                 ("lr_schedule", LrSchedule), ("lars_mode", LarsMode)):
            object.__setattr__(self, field, _as_enum(field, getattr(self, field), enum_type))
        object.__setattr__(self, "lr_step_boundaries",
                           tuple(float(epoch) for epoch in self.lr_step_boundaries))
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
            if value is not None and not (math.isfinite(value) and abs(value) <= _MAX_FLOAT32):
                raise OptimizerConfigError(
                    f"{field}={value} is not a finite number (within float32's range); pass "
                    f"e.g. {_FLOAT_EXAMPLES[field.split('[')[0]]}.")

    def _check_ranges(self) -> None:
        if not self.learning_rate > 0:
            raise OptimizerConfigError(f"learning_rate={self.learning_rate} must be positive, e.g. 0.1.")
        for field in ("weight_decay", "gradient_noise_eta", "gradient_noise_gamma",
                      "warmup_epochs"):
            if getattr(self, field) < 0:
                raise OptimizerConfigError(f"{field}={getattr(self, field)} is negative; use 0 or more.")
        if not 0 <= self.momentum < 1:
            raise OptimizerConfigError(f"momentum={self.momentum} is outside [0, 1); e.g. 0.9.")
        check_int("base_batch_size", self.base_batch_size, 1, MAX_GLOBAL_BATCH_SIZE, "e.g. 256",
                  error=OptimizerConfigError)
        for field in ("epochs", "grad_accum_steps"):
            check_int(field, getattr(self, field), 1, MAX_COUNT, "e.g. 1",
                      error=OptimizerConfigError)
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise OptimizerConfigError(f"clip_norm={self.clip_norm} must be positive; leave it unset "
                              "to not clip.")
        if not 0 < self.lr_step_factor <= 1:
            raise OptimizerConfigError(f"lr_step_factor={self.lr_step_factor} is outside (0, 1]; e.g. "
                              "0.1 divides the rate by 10 at each boundary.")

    def _check_schedule(self) -> None:
        if self.warmup_epochs >= self.epochs:
            raise OptimizerConfigError(f"warmup_epochs={self.warmup_epochs:g} is not shorter than "
                              f"training (epochs={self.epochs}); warm up for fewer epochs or "
                              "train longer.")
        boundaries = self.lr_step_boundaries
        if self.lr_schedule is LrSchedule.STEP and not boundaries:
            raise OptimizerConfigError("lr_schedule=step needs --lr_step_boundaries, e.g. 30,60 (epochs).")
        if boundaries and self.lr_schedule is not LrSchedule.STEP:
            raise OptimizerConfigError(f"lr_step_boundaries={_show(boundaries)} applies to "
                              f"lr_schedule=step, not {self.lr_schedule.value}.")
        if any(later <= earlier for earlier, later in zip(boundaries, boundaries[1:])):
            raise OptimizerConfigError(f"lr_step_boundaries={_show(boundaries)} are not increasing; list "
                              "epochs in order, e.g. 30,60,80.")
        if boundaries and not (self.warmup_epochs < boundaries[0] and
                               boundaries[-1] < self.epochs):
            raise OptimizerConfigError(f"lr_step_boundaries={_show(boundaries)} must fall after warmup "
                              f"(warmup_epochs={self.warmup_epochs:g}) and before the end of "
                              f"training (epochs={self.epochs}).")

    def _check_lars_flags(self) -> None:
        if self.optimizer is OptimizerName.LARS:
            if not self.lars_eeta > 0:
                raise OptimizerConfigError(f"lars_eeta={self.lars_eeta} must be positive, e.g. 0.001.")
            for pattern in self.lars_exclude:
                try:
                    re.compile(pattern)
                except re.error as error:
                    raise OptimizerConfigError(
                        f"lars_exclude={pattern!r} is not a regular expression ({error}); "
                        "escape special characters, e.g. 'bias' or 'batch_norm.*'.") from None
            return
        defaults = OptimizerConfig.__dataclass_fields__
        for field in ("lars_eeta", "lars_mode", "lars_exclude"):
            if getattr(self, field) != defaults[field].default:
                raise OptimizerConfigError(f"{field} applies to optimizer=lars, not "
                                  f"{self.optimizer.value}; drop it or use --optimizer=lars.")


def peak_learning_rate(config: OptimizerConfig, global_batch_size: int) -> float:
    """`learning_rate` scaled by global_batch_size / base_batch_size as `lr_scaling` says."""
    ratio = global_batch_size / config.base_batch_size
    scale = {LrScaling.NONE: 1.0, LrScaling.LINEAR: ratio,
             LrScaling.SQRT: math.sqrt(ratio)}[config.lr_scaling]
    return config.learning_rate * scale


def check_peak_learning_rate(config: OptimizerConfig, global_batch_size: int) -> None:
    """Raises OptimizerConfigError when scaling takes the rate past float32's range."""
    peak = peak_learning_rate(config, global_batch_size)
    if peak > _MAX_FLOAT32:
        raise OptimizerConfigError(
            f"learning_rate={config.learning_rate:g} scaled {config.lr_scaling.value} to "
            f"global_batch_size={global_batch_size} is {peak:g}, beyond float32; lower "
            "--learning_rate.")


# The float options, each with an example value for error messages.
_FLOAT_EXAMPLES = {"learning_rate": 0.1, "momentum": 0.9, "weight_decay": 0.0001,
                   "warmup_epochs": 5, "lr_step_boundaries": 30, "lr_step_factor": 0.1,
                   "clip_norm": 1.0, "gradient_noise_eta": 0.01, "gradient_noise_gamma": 0.55,
                   "lars_eeta": 0.001}


def _show(boundaries: tuple[float, ...]) -> str:
    return ",".join(f"{epoch:g}" for epoch in boundaries)
