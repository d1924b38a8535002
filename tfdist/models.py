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


def resnet20(image_shape: tuple[int, int, int], num_classes: int) -> tf_keras.Model:
    """ResNet-20 for 32x32 images: 3 stages of 3 residual blocks, 16/32/64 filters."""
    layers = tf_keras.layers
    inputs = layers.Input(image_shape,
                          dtype=tf_keras.mixed_precision.global_policy().compute_dtype)
    outputs = layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)
    outputs = layers.Activation("relu")(layers.BatchNormalization()(outputs))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            outputs = _residual_block(outputs, filters, 2 if stage and not block else 1)
    outputs = layers.Dense(num_classes)(layers.GlobalAveragePooling2D()(outputs))
    outputs = layers.Activation("softmax", dtype="float32")(outputs)
    return tf_keras.Model(inputs, outputs, name=ModelName.RESNET20.value)


def resnet50(image_shape: tuple[int, int, int], num_classes: int) -> tf_keras.Model:
    """ResNet-50 (tf-keras applications' layers, random weights) for 224x224 images."""
    body = tf_keras.applications.ResNet50(weights=None, include_top=False, pooling="avg",
                                          input_shape=image_shape)
    outputs = tf_keras.layers.Dense(num_classes)(body.output)
    outputs = tf_keras.layers.Activation("softmax", dtype="float32")(outputs)
    return tf_keras.Model(body.input, outputs, name=ModelName.RESNET50.value)


MODELS: dict[ModelName, ModelFn] = {ModelName.SMALL_CNN: small_cnn,
                                    ModelName.RESNET20: resnet20,
                                    ModelName.RESNET50: resnet50}


def build(name: ModelName, image_shape: tuple[int, int, int], num_classes: int) -> tf_keras.Model:
    """Builds model `name` under the current dtype policy; call inside `strategy.scope()`."""
    model = MODELS[name](image_shape, num_classes)
    require_tf_keras_model(model)
    check_output_dtype(model)
    return model
