"""The mixed-precision policy: set once before any model is built, checked on the model."""

import tensorflow as tf
import tf_keras
from absl import logging

from tfdist import strategies

from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import Precision

_MIN_FP16_COMPUTE_CAPABILITY = (7, 0)


def _has_fast_fp16_gpu() -> bool:
    """True when a visible GPU has Tensor Cores for float16 (compute capability >= 7.0)."""
    for gpu in strategies.visible_gpus():
        capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        if capability and tuple(capability) >= _MIN_FP16_COMPUTE_CAPABILITY:
            return True
    return False


def apply_policy(precision: Precision, keras=tf_keras) -> None:
    """Sets the global dtype policy of the Keras module `keras`; warns when float16 cannot run
    fast here."""
    keras.mixed_precision.set_global_policy(precision.value)
    if precision is Precision.MIXED_FLOAT16 and not _has_fast_fp16_gpu():
        logging.warning(
            "mixed_precision=mixed_float16 needs a GPU of compute capability 7.0 or newer to run "
            "fast, and none is visible; expect it to be slower than float32 here."
        )


def check_output_dtype(model: tf_keras.Model) -> None:
    """Raises ConfigError unless every model output is float32 (stable softmax and loss)."""
    for output in getattr(model, "outputs", None) or ():  # Subclassed: maybe not known yet.
        dtype = tf.as_dtype(output.dtype)  # Keras 3 names dtypes as strings.
        if dtype != tf.float32:
            raise ConfigError(
                f"model output {output.name!r} is {dtype.name}; under mixed precision the "
                'last activation must stay float32: give it dtype="float32".'
            )
