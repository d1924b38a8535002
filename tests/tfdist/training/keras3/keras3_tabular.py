"""The tabular job's model in Keras 3."""

import keras

from tests.tfdist.training.tabular import FEATURES


def keras3_tabular_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.layers.Input((FEATURES,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(2),
            keras.layers.Activation("softmax", dtype="float32"),
        ],
        name="keras3_tabular",
    )
