"""Optimizers and the large-batch recipe: learning-rate scaling, warmup and decay and LARS, for
tf-keras and Keras 3 alike; what happens to the gradients before the update is the optimizer's
`gradient_path` (`tfdist.optim.gradient_path`).

    schedule = learning_rate_schedule(config, global_batch_size=4096, steps_per_epoch=100,
                                      epochs=90)
    optimizer = build_optimizer(config, global_batch_size=4096, steps_per_epoch=100, epochs=90,
                                transforms=GradientTransforms())
"""

import math

import tensorflow as tf
import tf_keras

from tfdist.optim.gradient_path import GradientPath
from tfdist.optim.gradient_path import GradientTransforms
from tfdist.optim.lars import LARS
from tfdist.runtime.optimizer_config import LrSchedule
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.runtime.optimizer_config import OptimizerName
from tfdist.runtime.optimizer_config import peak_learning_rate


class WarmupSchedule(tf_keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from `initial` to `peak` over `warmup_steps`, then `decay` from the peak
    until `total_steps`: constant, cosine to 0, or times `step_factor` at each of
    `step_boundaries` (steps from the start)."""

    def __init__(
        self,
        *,
        initial: float,
        peak: float,
        warmup_steps: int,
        total_steps: int,
        decay: str,
        step_boundaries: tuple[int, ...] = (),
        step_factor: float = 0.1,
    ):
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
            passed = tf.reduce_sum(
                tf.cast(step >= tf.constant(self.step_boundaries, tf.float32), tf.float32)
            )
            return self.peak * tf.pow(self.step_factor, passed)
        return tf.constant(self.peak, tf.float32)

    def get_config(self):
        return {
            "initial": self.initial,
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "decay": self.decay.value,
            "step_boundaries": self.step_boundaries,
            "step_factor": self.step_factor,
        }


def learning_rate_schedule(
    config: OptimizerConfig, global_batch_size: int, steps_per_epoch: int, epochs: int
) -> WarmupSchedule:
    """The rate per optimizer update: scaled, warmed up and decayed as `config` says.

    `steps_per_epoch` counts updates: training steps / `grad_accum_steps`. Warmup (Goyal et
    al.'s gradual warmup) starts at the unscaled `learning_rate` and rises step by step to the
    peak at the end of `warmup_epochs`.
    """
    return WarmupSchedule(
        initial=config.learning_rate,
        peak=peak_learning_rate(config, global_batch_size),
        warmup_steps=round(config.warmup_epochs * steps_per_epoch),
        total_steps=epochs * steps_per_epoch,
        decay=config.lr_schedule.value,
        step_boundaries=tuple(
            round(epoch * steps_per_epoch) for epoch in config.lr_step_boundaries
        ),
        step_factor=config.lr_step_factor,
    )


def optimizer_class_for(
    config: OptimizerConfig, optimizers=tf_keras.optimizers, lars_class: type = LARS
) -> tuple[type, dict]:
    """The class for `config.optimizer` among `optimizers` (tf-keras' or Keras 3's, whose LARS
    is `lars_class`) and its options besides the rate."""
    decay = {"weight_decay": config.weight_decay} if config.weight_decay else {}
    return {
        OptimizerName.SGD: (optimizers.SGD, decay),
        OptimizerName.MOMENTUM: (optimizers.SGD, {"momentum": config.momentum, **decay}),
        OptimizerName.NESTEROV: (
            optimizers.SGD,
            {"momentum": config.momentum, "nesterov": True, **decay},
        ),
        OptimizerName.ADAM: (optimizers.Adam, decay),
        OptimizerName.ADAMW: (optimizers.AdamW, {"weight_decay": config.weight_decay}),
        OptimizerName.RMSPROP: (optimizers.RMSprop, decay),
        OptimizerName.LARS: (
            lars_class,
            {
                "momentum": config.momentum,
                "weight_decay": config.weight_decay,
                "eeta": config.lars_eeta,
                "mode": config.lars_mode.value,
                "exclude": config.lars_exclude,
            },
        ),
    }[config.optimizer]


def build_optimizer(
    config: OptimizerConfig,
    *,
    update_batch_size: int,
    updates_per_epoch: int,
    epochs: int,
    transforms: GradientTransforms,
) -> tf_keras.optimizers.Optimizer:
    """A fresh tf-keras optimizer with `learning_rate_schedule`'s rate per update (an update
    of `update_batch_size` examples: `grad_accum_steps` micro-batches), carrying the gradient
    path of `transforms` as `gradient_path` (its steps run in the training step; the optimizer
    only updates the variables). Call inside `strategy.scope()`."""
    optimizer_class, options = optimizer_class_for(config)
    schedule = learning_rate_schedule(config, update_batch_size, updates_per_epoch, epochs)
    optimizer = optimizer_class(schedule, **options)
    optimizer.gradient_path = GradientPath(transforms)
    return optimizer
