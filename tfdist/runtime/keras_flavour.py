"""The Keras a run trains with (`--keras`): its module, guards that the process and the model
match it, and its mixed-precision policy (set once before any model is built, checked on the
model).

2 is tf-keras, which fits under every strategy and is selected when tfdist is imported; 3 is
Keras 3 (`import keras`), which tfdist trains with its own distributed step
(`tfdist.training.keras3.step`), written for one Keras 3 version and guarded to it.
"""

import tensorflow as tf
import tf_keras
from absl import logging

from tfdist import strategies
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import KerasFlavourError
from tfdist.runtime.config import Precision

KERAS3_CHECKED = "3.15."  # The Keras 3 release tfdist's Keras 3 step was written and tested for.
# The tf-keras release whose private hooks tfdist extends (BackupAndRestore's supported
# strategies, SidecarEvaluator's timeout) was checked.
TF_KERAS_CHECKED = "2.21."


def api(keras: int):
    """The Keras module of flavour `keras`: `tf_keras` (2) or `keras` (3, imported on first
    use: a tf-keras run never pays for it)."""
    if keras == 2:
        return tf_keras
    import keras as keras3  # pylint: disable=import-outside-toplevel

    return keras3


def require(keras: int) -> None:
    """Raises KerasFlavourError unless this process can train Keras `keras` models."""
    if keras == 2:
        _require_tf_keras()
        return
    version = api(3).__version__
    if not version.startswith(KERAS3_CHECKED):
        raise KerasFlavourError(
            f"keras=3: tfdist's Keras 3 training step was written for keras {KERAS3_CHECKED}x and "
            f"keras {version} is installed; pip install 'keras=={KERAS3_CHECKED}*', or use "
            "keras=2."
        )


def _require_tf_keras() -> None:
    """Raises KerasFlavourError unless `tf.keras` is tf-keras."""
    if not tf.keras.__name__.startswith("tf_keras"):
        raise KerasFlavourError(
            "tf.keras is Keras 3 here because TensorFlow was imported before tfdist (or "
            "TF_USE_LEGACY_KERAS is not 1); set TF_USE_LEGACY_KERAS=1 in the environment, or "
            "import tfdist before tensorflow, or train it as keras=3."
        )


def require_checked_tf_keras(what: str, fix: str) -> None:
    """Raises KerasFlavourError unless tf-keras is the release whose private hooks `what`
    relies on was checked with; `fix` says what else the user can do."""
    if not tf_keras.__version__.startswith(TF_KERAS_CHECKED):
        raise KerasFlavourError(
            f"{what} relies on tf-keras {TF_KERAS_CHECKED}x and tf-keras {tf_keras.__version__} "
            f"is installed; pip install 'tf-keras=={TF_KERAS_CHECKED}*', or {fix}."
        )


def is_keras3(model) -> bool:
    """Whether `model` was built with Keras 3 (`import keras`)."""
    return type(model).__module__.startswith("keras") and isinstance(model, api(3).Model)


def require_model(model, keras: int, source: str = "model") -> None:
    """Raises KerasFlavourError unless `model` (what `source` built) is a model of flavour
    `keras`."""
    if keras == 2 and is_keras3(model):
        raise KerasFlavourError(
            f"{source} built a Keras 3 model ({type(model).__module__}.{type(model).__name__}, "
            "from `import keras`); train it with keras=3, or build it with tf.keras (with "
            "TF_USE_LEGACY_KERAS=1) or tf_keras."
        )
    if keras == 3 and isinstance(model, tf_keras.Model):
        raise KerasFlavourError(
            f"{source} built a tf-keras model ({type(model).__name__}) but keras=3; build it "
            "with `import keras` (Keras 3), or train it with keras=2."
        )
    if keras == 2:
        _require_tf_keras()


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
