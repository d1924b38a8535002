"""Built-in models, all from tf-keras layers (no weight downloads)."""

from typing import Callable

import tf_keras

from tfdist.config import ModelName
from tfdist.keras_flavour import require_tf_keras_model
from tfdist.precision import check_output_dtype

ModelFn = Callable[[tuple[int, int, int], int], tf_keras.Model]


def small_cnn(image_shape: tuple[int, int, int], num_classes: int) -> tf_keras.Model:
    """Three conv blocks and a softmax head: learns the built-in dataset in a few epochs on CPU.

    Takes images normalised to [-1, 1] (`input_pipelines` preprocessing) in any float dtype.
    """
    layers = tf_keras.layers
    return tf_keras.Sequential([
        layers.Input(image_shape, dtype=tf_keras.mixed_precision.global_policy().compute_dtype),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.GlobalAveragePooling2D(),
        layers.Dense(num_classes),
        layers.Activation("softmax", dtype="float32"),
    ], name=ModelName.SMALL_CNN.value)


MODELS: dict[ModelName, ModelFn] = {ModelName.SMALL_CNN: small_cnn}


def build(name: ModelName, image_shape: tuple[int, int, int], num_classes: int) -> tf_keras.Model:
    """Builds model `name` under the current dtype policy; call inside `strategy.scope()`."""
    model = MODELS[name](image_shape, num_classes)
    require_tf_keras_model(model)
    check_output_dtype(model)
    return model
