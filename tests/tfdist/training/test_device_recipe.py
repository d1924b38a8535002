"""The augmentation recipe reaches the device: with preprocessing on the device, the model's
preprocessing layer applies the recipe the pipeline read the images for (imagenet: flip and
normalisation only, the host having cropped in the decode), and training runs under one and
two replicas on ImageNet-layout JPEG TFRecords with 1-based labels."""

import math
import os

import pytest
import tf_keras
from absl.testing import parameterized

import tfdist
from tests.input_pipelines.imagenet_examples import encode_image
from tests.input_pipelines.imagenet_examples import imagenet_example
from tests.input_pipelines.imagenet_examples import smooth_pixels
from tests.input_pipelines.records import write_records
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines.choices import Augment
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.strategies import StrategyConfig
from tfdist.training import from_config as train_command
from tfdist.training.keras2 import fit as keras2_fit
from tests.tf_test_case import TfTestCase


def _model() -> tf_keras.Model:
    return tf_keras.Sequential(
        [
            tf_keras.layers.Input((32, 32, 3)),
            tf_keras.layers.GlobalAveragePooling2D(),
            tf_keras.layers.Dense(3, activation="softmax"),
        ],
        name="tiny",
    )


class DeviceRecipeTest(TfTestCase, parameterized.TestCase):
    @pytest.fixture(autouse=True)
    def _files(self, tmp_path):
        self.pattern = f"tfrecord:{tmp_path}/{{split}}-*"
        for split, count in (("train", 16), ("validation", 8)):
            write_records(
                os.path.join(tmp_path, f"{split}-0"),
                [
                    imagenet_example(
                        encode_image(smooth_pixels(40 + 3 * index, 56 - 2 * index, index), "JPEG"),
                        1 + index % 3,
                    )
                    for index in range(count)
                ],
            )

    def _config(self, strategy: StrategyConfig | None = None, **input_options) -> RunConfig:
        return RunConfig(
            strategy=strategy or StrategyConfig(),
            input=InputConfig(
                dataset=self.pattern,
                num_classes=3,
                label_offset=1,
                image_size=32,
                global_batch_size=4,
                preprocess_on="device",
                **input_options,
            ),
            train=TrainConfig(epochs=1, steps_per_epoch=2, validation_steps=1),
        )

    @parameterized.parameters(
        ("auto", Augment.IMAGENET), ("small", Augment.SMALL), ("none", Augment.NONE)
    )
    def test_the_layer_applies_the_inputs_recipe(self, augment, expected):
        plan = tfdist.setup(self._config(augment=augment))
        model = keras2_fit.build_model(
            plan, _model, data=plan.config.input, loss="sparse_categorical_crossentropy"
        )
        self.assertIs(model.get_layer("device_preprocessing").augmentation, expected)

    @parameterized.parameters(
        dict(strategy="one_device"), dict(strategy="mirrored", num_cpu_devices=2)
    )
    def test_trains_on_jpeg_tfrecords(self, **strategy):
        result = train_command.train(self._config(StrategyConfig(**strategy)))
        self.assertTrue(math.isfinite(result["final"]["val_loss"]))
