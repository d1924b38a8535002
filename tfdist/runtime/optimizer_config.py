"""`OptimizerConfig`: the optimizer, its learning-rate schedule and what happens to gradients
before an update, validated, immutable; the peak rate it scales to. Pure Python."""

import contextlib
import dataclasses
import enum
import math
import re

from tfdist import errors
from tfdist.errors import ConfigError
from tfdist.fields import MAX_COUNT
from tfdist.fields import MAX_FLOAT32
from tfdist.fields import fix_of
from tfdist.fields import option
from tfdist.input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from tfdist.strategies import StrategyKind
from tfdist.strategies.config import check_bounds
from tfdist.strategies.config import coerce_enums


def _epochs(value) -> tuple[float, ...]:
    """`lr_step_boundaries` as a tuple of floats; ConfigError unless a list of numbers."""
    with contextlib.suppress(OverflowError):  # An int beyond any float.
        if isinstance(value, (list, tuple)) and all(
            isinstance(epoch, (int, float)) and not isinstance(epoch, bool) for epoch in value
        ):
            return tuple(float(epoch) for epoch in value)
    raise ConfigError(
        f"lr_step_boundaries={errors.shown(value)} is not a list of epochs (finite "
        "numbers); pass e.g. lr_step_boundaries=(30, 60)."
    )


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
    learning_rate: float = option(
        3e-3,
        "Base learning rate: the rate at --base_batch_size, where warmup starts.",
        fix="e.g. 0.1",
    )
    momentum: float = option(0.9, "Momentum of momentum, nesterov and lars.")
    weight_decay: float = option(
        0.0,
        "Weight decay: decoupled for sgd/momentum/nesterov/adam/adamw/rmsprop, in the update "
        "for lars.",
        fix="e.g. 0.0001",
    )
    lr_scaling: LrScaling = option(
        LrScaling.NONE,
        "Scale the peak rate with global batch / --base_batch_size: linear, or its square root.",
    )
    base_batch_size: int = option(
        256, "The global batch --learning_rate is meant for.", bounds=(1, MAX_GLOBAL_BATCH_SIZE)
    )
    warmup_epochs: float = option(
        0.0,
        "Rise linearly from --learning_rate to the scaled peak over these epochs.",
        fix="e.g. 5",
    )
    lr_schedule: LrSchedule = option(
        LrSchedule.CONSTANT, "Decay after warmup: constant, cosine to 0 at the end, or step."
    )
    lr_step_boundaries: tuple[float, ...] = option(
        (),
        "lr_schedule=step: epochs (from the start) at which the rate is multiplied by "
        "--lr_step_factor, e.g. 30,60,80.",
        fix="e.g. 30",
    )
    lr_step_factor: float = option(0.1, "lr_schedule=step: factor at each boundary.")
    clip_norm: float | None = option(
        None,
        "Clip the all-reduced gradients to this global norm; unset does not clip.",
        fix="e.g. 1.0",
    )
    grad_accum_steps: int = option(
        1,
        "Apply one update per N micro-batches, with their mean gradient (an effective global "
        "batch N times larger).",
        bounds=(1, MAX_COUNT),
    )
    gradient_noise_eta: float = option(
        0.0,
        "Add Gaussian noise of variance eta / (1 + t)^gamma to the all-reduced gradients "
        "(t = updates so far); 0 adds none.",
        fix="e.g. 0.01",
    )
    gradient_noise_gamma: float = option(0.55, "Annealing exponent of --gradient_noise_eta.")
    measure_noise_scale: bool = option(
        False,
        "Measure the gradient noise scale B_simple (about the critical batch size) from "
        "the replicas' own gradients, or from the micro-batches with --grad_accum_steps > 1; "
        "logged per epoch and kept in the metrics JSON as noise_scale (docs/large_batch.md).",
    )
    lars_eeta: float = option(0.001, "lars: trust coefficient.")
    lars_mode: LarsMode = option(
        LarsMode.SCALE, "lars: scale the rate by the trust ratio, or clip the ratio at 1 (LARC)."
    )
    lars_exclude: tuple[str, ...] = option(
        DEFAULT_LARS_EXCLUDE,
        "lars: variables whose name matches one of these regular "
        "expressions get trust 1 and no weight decay.",
    )

    def __post_init__(self):
        coerce_enums(self, error=ConfigError)
        object.__setattr__(self, "lr_step_boundaries", _epochs(self.lr_step_boundaries))
        if not isinstance(self.lars_exclude, (list, tuple)) or not all(
            isinstance(pattern, str) for pattern in self.lars_exclude
        ):
            raise ConfigError(
                f"lars_exclude={errors.shown(self.lars_exclude)} is not a list of "
                "regular expressions; pass strings, e.g. ('bias', 'gamma')."
            )
        object.__setattr__(self, "lars_exclude", tuple(self.lars_exclude))
        self._check_finite()
        self._check_ranges()
        self._check_schedule()
        self._check_lars_flags()

    def _check_finite(self) -> None:
        """NaN and infinities (and floats beyond float32, which the optimizer computes in)."""
        fields = {field.name: field for field in dataclasses.fields(self)}
        numbers = [
            (name, getattr(self, name), field)
            for name, field in fields.items()
            if field.type in (float, float | None)
        ]
        numbers += [
            (f"lr_step_boundaries[{index}]", epoch, fields["lr_step_boundaries"])
            for index, epoch in enumerate(self.lr_step_boundaries)
        ]
        for name, value, field in numbers:
            if value is not None and not (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
                and abs(value) <= MAX_FLOAT32
            ):
                raise ConfigError(
                    f"{name}={value!r} is not a finite number (within float32's "
                    f"range); pass {fix_of(field)}."
                )

    def _check_ranges(self) -> None:
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate={self.learning_rate} must be positive, e.g. 0.1.")
        for field in (
            "weight_decay",
            "gradient_noise_eta",
            "gradient_noise_gamma",
            "warmup_epochs",
        ):
            if getattr(self, field) < 0:
                raise ConfigError(f"{field}={getattr(self, field)} is negative; use 0 or more.")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"momentum={self.momentum} is outside [0, 1); e.g. 0.9.")
        check_bounds(self, error=ConfigError)
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ConfigError(
                f"clip_norm={self.clip_norm} must be positive; leave it unset to not clip."
            )
        if not 0 < self.lr_step_factor <= 1:
            raise ConfigError(
                f"lr_step_factor={self.lr_step_factor} is outside (0, 1]; e.g. "
                "0.1 divides the rate by 10 at each boundary."
            )

    def _check_schedule(self) -> None:
        boundaries = self.lr_step_boundaries
        if self.lr_schedule is LrSchedule.STEP and not boundaries:
            raise ConfigError(
                "lr_schedule=step needs step boundaries in epochs, e.g. lr_step_boundaries=30,60."
            )
        if boundaries and self.lr_schedule is not LrSchedule.STEP:
            raise ConfigError(
                f"lr_step_boundaries={_show(boundaries)} applies to "
                f"lr_schedule=step, not {self.lr_schedule.value}."
            )
        if any(later <= earlier for earlier, later in zip(boundaries, boundaries[1:])):
            raise ConfigError(
                f"lr_step_boundaries={_show(boundaries)} are not increasing; list "
                "epochs in order, e.g. 30,60,80."
            )
        if boundaries and not self.warmup_epochs < boundaries[0]:
            raise ConfigError(
                f"lr_step_boundaries={_show(boundaries)} must fall after warmup "
                f"(warmup_epochs={self.warmup_epochs:g}); move them later or "
                "warm up for fewer epochs."
            )

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
                        "escape special characters, e.g. 'bias' or 'batch_norm.*'."
                    ) from None
            return
        for field in ("lars_eeta", "lars_mode", "lars_exclude"):
            if getattr(self, field) != getattr(OptimizerConfig, field):  # Its default.
                raise ConfigError(
                    f"{field} applies to optimizer=lars, not "
                    f"{self.optimizer.value}; drop it or use optimizer=lars."
                )


def peak_learning_rate(config: OptimizerConfig, global_batch_size: int) -> float:
    """`learning_rate` scaled by global_batch_size / base_batch_size as `lr_scaling` says."""
    ratio = global_batch_size / config.base_batch_size
    scale = {LrScaling.NONE: 1.0, LrScaling.LINEAR: ratio, LrScaling.SQRT: math.sqrt(ratio)}[
        config.lr_scaling
    ]
    return config.learning_rate * scale


def check_peak_learning_rate(config: OptimizerConfig, global_batch_size: int) -> None:
    """Raises ConfigError when scaling takes the rate past float32's range."""
    peak = peak_learning_rate(config, global_batch_size)
    if peak > MAX_FLOAT32:
        raise ConfigError(
            f"learning_rate={config.learning_rate:g} scaled {config.lr_scaling.value} to "
            f"global_batch_size={global_batch_size} is {peak:g}, beyond float32; lower "
            "learning_rate."
        )


def check_schedule_fits(config: OptimizerConfig, epochs: int) -> None:
    """Raises ConfigError when warmup or a step boundary does not end before `epochs` do."""
    if config.warmup_epochs >= epochs:
        raise ConfigError(
            f"warmup_epochs={config.warmup_epochs:g} is not shorter than training "
            f"(epochs={epochs}); warm up for fewer epochs or train longer."
        )
    boundaries = config.lr_step_boundaries
    if boundaries and not boundaries[-1] < epochs:
        raise ConfigError(
            f"lr_step_boundaries={_show(boundaries)} must fall before the end of "
            f"training (epochs={epochs}); drop the last or train longer."
        )


def _show(boundaries: tuple[float, ...]) -> str:
    return ",".join(f"{epoch:g}" for epoch in boundaries)


def check_noise_scale_strategy(optimizer: OptimizerConfig, kind: StrategyKind) -> None:
    """Raises ConfigError when `--measure_noise_scale` meets a strategy without in-sync
    replicas."""
    if optimizer.measure_noise_scale and kind is StrategyKind.PARAMETER_SERVER:
        raise ConfigError(
            "measure_noise_scale=True with strategy=parameter_server: each update there is one "
            "worker's gradient, with no larger batch to compare it with; measure under mirrored "
            "or multi_worker_mirrored (same model and global batch)."
        )


def check_noise_scale_replicas(
    optimizer: OptimizerConfig, kind: StrategyKind, num_replicas: int
) -> None:
    """Raises ConfigError when `--measure_noise_scale` has no two batch sizes to compare."""
    if optimizer.measure_noise_scale and num_replicas == 1 and optimizer.grad_accum_steps == 1:
        raise ConfigError(
            f"measure_noise_scale=True with 1 replica under strategy={kind.value}: it compares "
            "small- and large-batch gradients; train on 2+ replicas (e.g. strategy=mirrored "
            "num_cpu_devices=2) or with grad_accum_steps=2 or more."
        )
