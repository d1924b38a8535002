"""tfdist's optimizer recipe (`--optimizer`, rate scaling, warmup and decay, LARS) as a Keras 3
optimizer.

Gradient all-reduce dtype, clipping, noise, accumulation and loss scaling are not the
optimizer's: its `gradient_path` applies them in tfdist's Keras 3 step
(`tfdist.training.keras3.step`), as in the tf-keras one, so the optimizer only updates the
variables.
"""

import re

import keras
import tensorflow as tf

from tfdist.optim import lars
from tfdist.optim import recipe as optim
from tfdist.optim.gradient_path import GradientPath
from tfdist.optim.gradient_path import GradientTransforms
from tfdist.runtime.optimizer_config import OptimizerConfig


class _Schedule(keras.optimizers.schedules.LearningRateSchedule):
    """`optim.learning_rate_schedule`'s rate, for a Keras 3 optimizer."""

    def __init__(self, schedule: optim.WarmupSchedule):
        self._schedule = schedule

    def __call__(self, step):
        return self._schedule(step)

    def get_config(self):
        return self._schedule.get_config()


class LARS(keras.optimizers.Optimizer):
    """`tfdist.optim.lars.LARS` (You et al., 2017) on the Keras 3 optimizer base: the same update,
    trust ratio and options. Variables whose path matches a pattern in `exclude` take trust 1
    and no weight decay."""

    def __init__(
        self,
        learning_rate=0.1,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eeta: float = 0.001,
        mode: str = "scale",
        exclude: tuple[str, ...] = lars.DEFAULT_EXCLUDE,
        epsilon: float = 0.0,
        name: str = "LARS",
        **kwargs,
    ):
        lars.check_options(
            momentum=momentum,
            weight_decay=weight_decay,
            eeta=eeta,
            mode=mode,
            exclude=exclude,
            epsilon=epsilon,
        )
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum, self.lars_weight_decay, self.eeta = momentum, weight_decay, eeta
        self.mode, self.exclude, self.epsilon = mode, tuple(exclude), epsilon
        self._excluded: frozenset = frozenset()

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._velocities = [
            self.add_variable_from_reference(variable, "velocity") for variable in variables
        ]
        self._excluded = frozenset(
            self._var_key(variable)
            for variable in variables
            if any(re.search(pattern, variable.path) for pattern in self.exclude)
        )

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        gradient = tf.cast(tf.convert_to_tensor(gradient), dtype)
        velocity = self._velocities[self._get_variable_index(variable)]
        rate = tf.cast(learning_rate, dtype)
        if self._var_key(variable) not in self._excluded:
            rate = rate * lars.trust_ratio(
                variable,
                gradient,
                eeta=self.eeta,
                weight_decay=self.lars_weight_decay,
                epsilon=self.epsilon,
                clip=self.mode == "clip",
            )
            gradient = gradient + tf.cast(self.lars_weight_decay, dtype) * variable
        self.assign(velocity, tf.cast(self.momentum, dtype) * velocity + rate * gradient)
        self.assign_sub(variable, velocity)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "momentum": self.momentum,
            "weight_decay": self.lars_weight_decay,
            "eeta": self.eeta,
            "mode": self.mode,
            "exclude": self.exclude,
            "epsilon": self.epsilon,
        }


def build_optimizer(
    config: OptimizerConfig,
    *,
    update_batch_size: int,
    updates_per_epoch: int,
    epochs: int,
    transforms: GradientTransforms,
) -> keras.optimizers.Optimizer:
    """A fresh Keras 3 optimizer with `optim.learning_rate_schedule`'s rate per update,
    carrying the gradient path of `transforms` as `gradient_path`, as
    `tfdist.optim.recipe.build_optimizer` makes a tf-keras one. Call inside
    `strategy.scope()`."""
    optimizer_class, options = optim.optimizer_class_for(config, keras.optimizers, LARS)
    schedule = optim.learning_rate_schedule(config, update_batch_size, updates_per_epoch, epochs)
    optimizer = optimizer_class(_Schedule(schedule), **options)
    optimizer.gradient_path = GradientPath(transforms)
    return optimizer
