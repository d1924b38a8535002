"""LARS: SGD with momentum whose step is scaled per layer by a trust ratio (You et al., 2017).

Each variable's rate is scaled by eeta * ||w|| / (||g|| + weight_decay * ||w|| + epsilon), so
layers step in proportion to their weights' size: large-batch training stays stable.
"""

import re

import tensorflow as tf
import tf_keras

from tfdist.errors import ConfigError
from tfdist.runtime.optimizer_config import DEFAULT_LARS_EXCLUDE as DEFAULT_EXCLUDE

LearningRateSchedule = tf_keras.optimizers.schedules.LearningRateSchedule
_MODES = ("scale", "clip")


def trust_ratio(
    variable, gradient: tf.Tensor, *, eeta: float, weight_decay: float, epsilon: float, clip: bool
) -> tf.Tensor:
    """eeta * ||w|| / (||g|| + weight_decay * ||w|| + epsilon): 1 where ||w|| or ||g|| is 0,
    at most 1 when `clip`."""
    dtype = gradient.dtype
    w_norm = tf.norm(variable)
    g_norm = tf.norm(gradient)
    denominator = g_norm + tf.cast(weight_decay, dtype) * w_norm + tf.cast(epsilon, dtype)
    ratio = tf.cast(eeta, dtype) * tf.math.divide_no_nan(w_norm, denominator)
    trust = tf.where(tf.logical_and(w_norm > 0, g_norm > 0), ratio, tf.ones([], dtype))
    return tf.minimum(trust, 1) if clip else trust


def check_options(
    *,
    momentum: float,
    weight_decay: float,
    eeta: float,
    mode: str,
    exclude: tuple[str, ...],
    epsilon: float,
) -> None:
    """Raises ConfigError, naming the option, unless LARS can run with these."""
    if mode not in _MODES:
        raise ConfigError(f"LARS mode={mode!r} is invalid: use 'scale' or 'clip'.")
    if eeta <= 0:
        raise ConfigError(f"LARS eeta={eeta} is invalid: use a value > 0.")
    if not 0 <= momentum < 1:
        raise ConfigError(f"LARS momentum={momentum} is invalid: use a value in [0, 1).")
    if weight_decay < 0:
        raise ConfigError(f"LARS weight_decay={weight_decay} is invalid: use a value >= 0.")
    if epsilon < 0:
        raise ConfigError(f"LARS epsilon={epsilon} is invalid: use a value >= 0.")
    if isinstance(exclude, str):
        raise ConfigError(
            f"LARS exclude={exclude!r} is a string: pass a tuple of patterns, e.g. ({exclude!r},)."
        )


@tf_keras.saving.register_keras_serializable(package="tfdist")
class LARS(tf_keras.optimizers.Optimizer):
    """Layer-wise Adaptive Rate Scaling, on the tf-keras (v2.11+) optimizer base.

    Per variable w with gradient g and velocity v, at learning rate `rate`:

        trust = eeta * ||w|| / (||g|| + weight_decay * ||w|| + epsilon)
        v <- momentum * v + rate * trust * (g + weight_decay * w)
        w <- w - v

    trust is 1 where ||w|| or ||g|| is 0; in "clip" mode it is at most 1. Variables whose name
    matches a pattern in `exclude` (re.search) take trust 1 and no weight decay.

    Args:
        learning_rate: A float or a `tf_keras.optimizers.schedules.LearningRateSchedule`.
        momentum: In [0, 1).
        weight_decay: L2 weight decay (>= 0), applied by LARS itself, not by the base class.
        eeta: The trust coefficient (> 0).
        mode: "scale" (use the trust ratio as is) or "clip" (cap it at 1).
        exclude: Regular expressions; matching variables get trust 1 and no weight decay.
        epsilon: Added to the trust ratio's denominator (>= 0).
        name: The optimizer's name.
        **kwargs: Base-class options: clipnorm, global_clipnorm, use_ema, jit_compile, ...
    """

    def __init__(
        self,
        learning_rate: float | LearningRateSchedule = 0.1,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eeta: float = 0.001,
        mode: str = "scale",
        exclude: tuple[str, ...] = DEFAULT_EXCLUDE,
        epsilon: float = 0.0,
        name: str = "LARS",
        **kwargs,
    ):
        check_options(
            momentum=momentum,
            weight_decay=weight_decay,
            eeta=eeta,
            mode=mode,
            exclude=exclude,
            epsilon=epsilon,
        )
        # The base class's decoupled weight decay stays off (None): LARS applies its own.
        super().__init__(name=name, weight_decay=None, **kwargs)
        self._learning_rate = self._build_learning_rate(learning_rate)
        self.momentum = momentum
        self._lars_weight_decay = weight_decay
        self.eeta = eeta
        self.mode = mode
        self._exclude = tuple(exclude)
        self.epsilon = epsilon

    def build(self, var_list):
        """Creates one velocity per variable and notes which variables are excluded."""
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self.velocities = [self.add_variable_from_reference(var, "v") for var in var_list]
        self._excluded = frozenset(
            self._var_key(var)
            for var in var_list
            if any(re.search(pattern, var.name) for pattern in self._exclude)
        )
        self._built = True

    def update_step(self, gradient, variable):
        """Applies one LARS step to `variable`."""
        dtype = variable.dtype
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        gradient = tf.cast(gradient, dtype)
        var_key = self._var_key(variable)
        velocity = self.velocities[self._index_dict[var_key]]
        local_rate = tf.cast(self.learning_rate, dtype)
        if var_key not in self._excluded:
            local_rate = local_rate * trust_ratio(
                variable,
                gradient,
                eeta=self.eeta,
                weight_decay=self._lars_weight_decay,
                epsilon=self.epsilon,
                clip=self.mode == "clip",
            )
            gradient = gradient + tf.cast(self._lars_weight_decay, dtype) * variable
        velocity.assign(tf.cast(self.momentum, dtype) * velocity + local_rate * gradient)
        variable.assign_sub(velocity)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "learning_rate": self._serialize_hyperparameter(self._learning_rate),
                "momentum": self.momentum,
                "weight_decay": self._lars_weight_decay,
                "eeta": self.eeta,
                "mode": self.mode,
                "exclude": self._exclude,
                "epsilon": self.epsilon,
            }
        )
        return config
