"""Optimizers and the large-batch recipe: learning-rate scaling, warmup and decay, LARS, and
gradient clipping, noise and accumulation (`tfdist.optim.gradients`), under every strategy.

    schedule = learning_rate_schedule(config, global_batch_size=4096, steps_per_epoch=100,
                                      epochs=90)
    optimizer = build_optimizer(config, global_batch_size=4096, steps_per_epoch=100, epochs=90)
"""

import math

import tensorflow as tf
import tf_keras

from tfdist.strategies import WireDtype
from tfdist.optim.gradients import GradientTransforms
from tfdist.optim.gradients import with_transforms
from tfdist.optim.lars import LARS
from tfdist.runtime.config import LrSchedule
from tfdist.runtime.config import OptimizerConfig
from tfdist.runtime.config import OptimizerName
from tfdist.runtime.config import peak_learning_rate

__all__ = ["LARS", "OptimizerConfig", "OptimizerName", "WarmupSchedule", "build_optimizer",
           "learning_rate_schedule", "peak_learning_rate"]


class WarmupSchedule(tf_keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from `initial` to `peak` over `warmup_steps`, then `decay` from the peak
    until `total_steps`: constant, cosine to 0, or times `step_factor` at each of
    `step_boundaries` (steps from the start)."""

    def __init__(self, *, initial: float, peak: float, warmup_steps: int, total_steps: int,
                 decay: str, step_boundaries: tuple[int, ...] = (), step_factor: float = 0.1):
        super().__init__()
        self.initial, self.peak = initial, peak
        self.warmup_steps, self.total_steps = warmup_steps, total_steps
        self.decay = LrSchedule(decay)
        self.step_boundaries, self.step_factor = tuple(step_boundaries), step_factor

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = float(self.warmup_steps)
        rising = self.initial + (self.peak - self.initial) * step / max(warmup, 1.0)
        return tf.where(step < warmup, rising, self._decayed(step, warmup))

    def _decayed(self, step: tf.Tensor, warmup: float) -> tf.Tensor:
        if self.decay is LrSchedule.COSINE:
            progress = tf.minimum((step - warmup) / max(self.total_steps - warmup, 1.0), 1.0)
            return self.peak * 0.5 * (1.0 + tf.cos(math.pi * progress))
        if self.decay is LrSchedule.STEP:
            passed = tf.reduce_sum(tf.cast(
                step >= tf.constant(self.step_boundaries, tf.float32), tf.float32))
            return self.peak * tf.pow(self.step_factor, passed)
        return tf.constant(self.peak, tf.float32)

    def get_config(self):
        return {"initial": self.initial, "peak": self.peak, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps, "decay": self.decay.value,
                "step_boundaries": self.step_boundaries, "step_factor": self.step_factor}


def learning_rate_schedule(config: OptimizerConfig, global_batch_size: int,
                           steps_per_epoch: int, epochs: int) -> WarmupSchedule:
    """The rate per optimizer update: scaled, warmed up and decayed as `config` says.

    `steps_per_epoch` counts updates: training steps / `grad_accum_steps`. Warmup (Goyal et
    al.'s gradual warmup) starts at the unscaled `learning_rate` and rises step by step to the
    peak at the end of `warmup_epochs`.
    """
    return WarmupSchedule(
        initial=config.learning_rate, peak=peak_learning_rate(config, global_batch_size),
        warmup_steps=round(config.warmup_epochs * steps_per_epoch),
        total_steps=epochs * steps_per_epoch, decay=config.lr_schedule.value,
        step_boundaries=tuple(round(epoch * steps_per_epoch)
                              for epoch in config.lr_step_boundaries),
        step_factor=config.lr_step_factor)


def optimizer_class(config: OptimizerConfig, optimizers=tf_keras.optimizers,
                    lars_class: type = LARS) -> tuple[type, dict]:
    """The class for `config.optimizer` among `optimizers` (tf-keras' or Keras 3's, whose LARS
    is `lars_class`) and its options besides the rate."""
    decay = {"weight_decay": config.weight_decay} if config.weight_decay else {}
    return {
        OptimizerName.SGD: (optimizers.SGD, decay),
        OptimizerName.MOMENTUM: (optimizers.SGD, {"momentum": config.momentum, **decay}),
        OptimizerName.NESTEROV: (optimizers.SGD, {"momentum": config.momentum,
                                                  "nesterov": True, **decay}),
        OptimizerName.ADAM: (optimizers.Adam, decay),
        OptimizerName.ADAMW: (optimizers.AdamW, {"weight_decay": config.weight_decay}),
        OptimizerName.RMSPROP: (optimizers.RMSprop, decay),
        OptimizerName.LARS: (lars_class, {"momentum": config.momentum,
                                    "weight_decay": config.weight_decay,
                                    "eeta": config.lars_eeta, "mode": config.lars_mode.value,
                                    "exclude": config.lars_exclude}),
    }[config.optimizer]


def build_optimizer(config: OptimizerConfig, global_batch_size: int, steps_per_epoch: int,
                    epochs: int, *,
                    allreduce_dtype: WireDtype = WireDtype.FLOAT32,
                    seed: int = 0) -> tf_keras.optimizers.Optimizer:
    """A fresh tf-keras optimizer with `learning_rate_schedule`'s rate and `config`'s gradient
    clipping, noise and accumulation; its all-reduce runs in `allreduce_dtype`. Call inside
    `strategy.scope()`. `steps_per_epoch` counts training steps (micro-batches)."""
    base_class, options = optimizer_class(config)
    schedule = update_schedule(config, global_batch_size, steps_per_epoch, epochs)
    transforms = gradient_transforms(config, allreduce_dtype, seed,
                                     global_batch_size=global_batch_size)
    return with_transforms(base_class, transforms)(schedule, **options)


def gradient_transforms(config: OptimizerConfig, allreduce_dtype: WireDtype, seed: int, *,
                        global_batch_size: int = 0) -> GradientTransforms:
    """`config`'s clipping, noise and accumulation, with the all-reduce in `allreduce_dtype`,
    and the noise-scale measurement when `config` asks for it (of `global_batch_size`)."""
    return GradientTransforms(
        wire_dtype=allreduce_dtype, clip_norm=config.clip_norm,
        noise_eta=config.gradient_noise_eta, noise_gamma=config.gradient_noise_gamma,
        accum_steps=config.grad_accum_steps, seed=seed,
        noise_scale_batch=global_batch_size if config.measure_noise_scale else 0)


def update_schedule(config: OptimizerConfig, global_batch_size: int, steps_per_epoch: int,
                    epochs: int) -> WarmupSchedule:
    """The rate per optimizer update when an update takes `grad_accum_steps` training steps
    (micro-batches) of `global_batch_size` examples each."""
    updates_per_epoch = max(steps_per_epoch // config.grad_accum_steps, 1)
    return learning_rate_schedule(config, global_batch_size * config.grad_accum_steps,
                                  updates_per_epoch, epochs)
