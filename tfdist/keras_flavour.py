"""Guards that the Keras in use is tf-keras (Keras 2), which fits under every strategy.

Keras 3 cannot run `fit` under MultiWorkerMirrored or ParameterServer strategies (see
ARCHITECTURE.md). Importing tfdist selects tf-keras; these checks catch the cases it cannot fix.
"""

import tensorflow as tf
import tf_keras

from tfdist.config import KerasFlavourError


def require_tf_keras() -> None:
    """Raises KerasFlavourError unless `tf.keras` is tf-keras."""
    if not tf.keras.__name__.startswith("tf_keras"):
        raise KerasFlavourError(
            "tf.keras is Keras 3 here because TensorFlow was imported before tfdist (or "
            "TF_USE_LEGACY_KERAS is not 1); set TF_USE_LEGACY_KERAS=1 in the environment, or "
            "import tfdist before tensorflow.")


def require_tf_keras_model(model) -> None:
    """Raises KerasFlavourError unless `model` is a tf-keras model."""
    require_tf_keras()
    if not isinstance(model, tf_keras.Model):
        raise KerasFlavourError(
            f"the model is a {type(model).__module__}.{type(model).__name__}, not a tf-keras "
            "model; build it with tf.keras (with TF_USE_LEGACY_KERAS=1) or tf_keras, never "
            "bare `import keras`.")
