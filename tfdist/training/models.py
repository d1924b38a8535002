"""Model functions: the built-in ones (no weight downloads) and users' own, named as
`--model=MODULE:FUNCTION`; both are called the same way, inside the strategy scope:
`function(input_shape=(height, width, channels), num_classes=N)`. The built-in ones take the
Keras module to build with as `keras=` (tf-keras by default, Keras 3 under `--keras=3`)."""

from typing import Callable

import tf_keras

from tfdist.runtime import keras_flavour
from tfdist.runtime import plugins
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import ModelName
from tfdist.runtime.config import check_image_size
from tfdist.runtime.keras_flavour import check_output_dtype

ModelFn = Callable[..., tf_keras.Model]


def small_cnn(
    *, input_shape: tuple[int, int, int], num_classes: int, keras=tf_keras
) -> tf_keras.Model:
    """Three conv blocks and a softmax head: learns the built-in dataset in a few epochs on CPU.

    Takes images normalised to [-1, 1] (`input_pipelines` preprocessing) in any float dtype.
    """
    layers = keras.layers
    return keras.Sequential(
        [
            layers.Input(input_shape, dtype=keras.mixed_precision.global_policy().compute_dtype),
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, padding="same", activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(num_classes),
            layers.Activation("softmax", dtype="float32"),
        ],
        name=ModelName.SMALL_CNN.value,
    )


# Batch norm's moving averages keep momentum^updates of their start: Keras' 0.99 still holds 56%
# after the 57 updates of 3 epochs at batch 512 on the built-in data, so validation (which uses
# them) lagged far behind training. 0.9 (PyTorch's default) forgets it within ~50 updates.
_BATCH_NORM_MOMENTUM = 0.9


def _batch_norm(layers):
    return layers.BatchNormalization(momentum=_BATCH_NORM_MOMENTUM)


def _residual_block(layers, inputs, filters: int, stride: int):
    """Two 3x3 convolutions with batch norm and a shortcut (He et al. 2016, CIFAR variant)."""
    outputs = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(inputs)
    outputs = layers.Activation("relu")(_batch_norm(layers)(outputs))
    outputs = layers.Conv2D(filters, 3, padding="same", use_bias=False)(outputs)
    outputs = _batch_norm(layers)(outputs)
    if stride != 1 or inputs.shape[-1] != filters:
        inputs = _batch_norm(layers)(
            layers.Conv2D(filters, 1, strides=stride, use_bias=False)(inputs)
        )
    return layers.Activation("relu")(layers.Add()([outputs, inputs]))


def resnet20(
    *, input_shape: tuple[int, int, int], num_classes: int, keras=tf_keras
) -> tf_keras.Model:
    """ResNet-20 for 32x32 images: 3 stages of 3 residual blocks, 16/32/64 filters, batch norm
    with momentum 0.9 (moving averages that settle within a short run)."""
    layers = keras.layers
    inputs = layers.Input(input_shape, dtype=keras.mixed_precision.global_policy().compute_dtype)
    outputs = layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)
    outputs = layers.Activation("relu")(_batch_norm(layers)(outputs))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            outputs = _residual_block(layers, outputs, filters, 2 if stage and not block else 1)
    outputs = layers.Dense(num_classes)(layers.GlobalAveragePooling2D()(outputs))
    outputs = layers.Activation("softmax", dtype="float32")(outputs)
    return keras.Model(inputs, outputs, name=ModelName.RESNET20.value)


def resnet50(
    *, input_shape: tuple[int, int, int], num_classes: int, keras=tf_keras
) -> tf_keras.Model:
    """ResNet-50 (Keras applications' layers, random weights) for 224x224 images."""
    body = keras.applications.ResNet50(
        weights=None, include_top=False, pooling="avg", input_shape=input_shape
    )
    outputs = keras.layers.Dense(num_classes)(body.output)
    outputs = keras.layers.Activation("softmax", dtype="float32")(outputs)
    return keras.Model(body.input, outputs, name=ModelName.RESNET50.value)


MODELS: dict[str, ModelFn] = {
    ModelName.SMALL_CNN.value: small_cnn,
    ModelName.RESNET20.value: resnet20,
    ModelName.RESNET50.value: resnet50,
}


def model_function(model: str) -> ModelFn:
    """The function `--model` names: a built-in one, or the user's MODULE:FUNCTION imported.

    Raises:
      ConfigError: the user's module or function cannot be loaded (`tfdist.runtime.plugins`).
    """
    return MODELS.get(model) or plugins.load("model", model, model)


def check_model(model, source: str, keras: int = 2) -> tf_keras.Model:
    """Returns `model` (what `source` built) when it is a model of Keras `keras` whose outputs
    are float32.

    Raises:
      ConfigError: anything else, in one line that names `source`; a model of the other Keras
        gets the Keras-flavour message (KerasFlavourError).
    """
    keras_flavour.require_model(model, keras, source)
    if not isinstance(model, keras_flavour.api(keras).Model):
        example = "tf.keras.Sequential([...])" if keras == 2 else "keras.Sequential([...])"
        raise ConfigError(
            f"{source} returned a {type(model).__module__}.{type(model).__name__}, "
            f"not a {'tf-keras' if keras == 2 else 'Keras 3'} model; return a "
            f"Keras model (e.g. {example})."
        )
    check_output_dtype(model)
    return model


def build(
    model: str, input_shape: tuple[int, int, int], num_classes: int, keras: int = 2
) -> tf_keras.Model:
    """Builds `--model` for images of `input_shape` under the current dtype policy, in Keras
    `keras` when it is a built-in one; call inside `strategy.scope()`."""
    function = model_function(model)
    arguments = {"input_shape": tuple(input_shape), "num_classes": num_classes}
    if model in MODELS:  # Keras would say so in a traceback while building.
        check_image_size(model, min(input_shape[:2]))
        built = function(**arguments, keras=keras_flavour.api(keras))
    else:
        built = plugins.call("model", model, function, **arguments)
    return check_model(built, f"model={model!r}", keras)
