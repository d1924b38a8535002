"""Model functions: the built-in ones (tf-keras layers, no weight downloads) and users' own,
named as `--model=MODULE:FUNCTION`; both are called the same way, inside the strategy scope:
`function(input_shape=(height, width, channels), num_classes=N)`."""

from typing import Callable

import tf_keras

from tfdist import plugins
from tfdist.config import ConfigError
from tfdist.config import ModelName
from tfdist.keras_flavour import require_tf_keras_model
from tfdist.precision import check_output_dtype

ModelFn = Callable[..., tf_keras.Model]


def small_cnn(*, input_shape: tuple[int, int, int], num_classes: int) -> tf_keras.Model:
    """Three conv blocks and a softmax head: learns the built-in dataset in a few epochs on CPU.

    Takes images normalised to [-1, 1] (`input_pipelines` preprocessing) in any float dtype.
    """
    layers = tf_keras.layers
    return tf_keras.Sequential([
        layers.Input(input_shape, dtype=tf_keras.mixed_precision.global_policy().compute_dtype),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.GlobalAveragePooling2D(),
        layers.Dense(num_classes),
        layers.Activation("softmax", dtype="float32"),
    ], name=ModelName.SMALL_CNN.value)


def _residual_block(inputs, filters: int, stride: int):
    """Two 3x3 convolutions with batch norm and a shortcut (He et al. 2016, CIFAR variant)."""
    layers = tf_keras.layers
    outputs = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(inputs)
    outputs = layers.Activation("relu")(layers.BatchNormalization()(outputs))
    outputs = layers.Conv2D(filters, 3, padding="same", use_bias=False)(outputs)
    outputs = layers.BatchNormalization()(outputs)
    if stride != 1 or inputs.shape[-1] != filters:
        inputs = layers.BatchNormalization()(
            layers.Conv2D(filters, 1, strides=stride, use_bias=False)(inputs))
    return layers.Activation("relu")(layers.Add()([outputs, inputs]))


def resnet20(*, input_shape: tuple[int, int, int], num_classes: int) -> tf_keras.Model:
    """ResNet-20 for 32x32 images: 3 stages of 3 residual blocks, 16/32/64 filters."""
    layers = tf_keras.layers
    inputs = layers.Input(input_shape,
                          dtype=tf_keras.mixed_precision.global_policy().compute_dtype)
    outputs = layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)
    outputs = layers.Activation("relu")(layers.BatchNormalization()(outputs))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            outputs = _residual_block(outputs, filters, 2 if stage and not block else 1)
    outputs = layers.Dense(num_classes)(layers.GlobalAveragePooling2D()(outputs))
    outputs = layers.Activation("softmax", dtype="float32")(outputs)
    return tf_keras.Model(inputs, outputs, name=ModelName.RESNET20.value)


def resnet50(*, input_shape: tuple[int, int, int], num_classes: int) -> tf_keras.Model:
    """ResNet-50 (tf-keras applications' layers, random weights) for 224x224 images."""
    body = tf_keras.applications.ResNet50(weights=None, include_top=False, pooling="avg",
                                          input_shape=input_shape)
    outputs = tf_keras.layers.Dense(num_classes)(body.output)
    outputs = tf_keras.layers.Activation("softmax", dtype="float32")(outputs)
    return tf_keras.Model(body.input, outputs, name=ModelName.RESNET50.value)


MODELS: dict[str, ModelFn] = {ModelName.SMALL_CNN.value: small_cnn,
                              ModelName.RESNET20.value: resnet20,
                              ModelName.RESNET50.value: resnet50}


def model_function(model: str) -> ModelFn:
    """The function `--model` names: a built-in one, or the user's MODULE:FUNCTION imported.

    Raises:
      ConfigError: the user's module or function cannot be loaded (`tfdist.plugins`).
    """
    return MODELS.get(model) or plugins.load("model", model, model)


def check_model(model, source: str) -> tf_keras.Model:
    """Returns `model` (what `source` built) when it is a tf-keras model whose outputs are
    float32.

    Raises:
      ConfigError: anything else, in one line that names `source`; a Keras 3 model gets the
        Keras-flavour message (KerasFlavourError).
    """
    if type(model).__module__.startswith("keras"):  # Keras 3 (`import keras`).
        require_tf_keras_model(model)
    if not isinstance(model, tf_keras.Model):
        raise ConfigError(f"{source} returned a {type(model).__module__}.{type(model).__name__}, "
                          "not a tf-keras model; return a tf.keras.Model (e.g. "
                          "tf.keras.Sequential([...])).")
    require_tf_keras_model(model)
    check_output_dtype(model)
    return model


def build(model: str, input_shape: tuple[int, int, int], num_classes: int) -> tf_keras.Model:
    """Builds `--model` for images of `input_shape` under the current dtype policy; call inside
    `strategy.scope()`."""
    built = model_function(model)(input_shape=tuple(input_shape), num_classes=num_classes)
    return check_model(built, f"model={model!r}")
