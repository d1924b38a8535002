"""tfdist.training.fit in-process: strategy x precision on the built-in dataset, few steps."""

import math

import pytest
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

import strategies
from input_pipelines import InputConfig
from input_pipelines import InputConfigError
from tfdist import precision
from tfdist import training
from tfdist.config import ConfigError
from tfdist.config import Precision
from tfdist.config import RunConfig
from tfdist.config import TrainConfig


class FitTest(tf.test.TestCase, parameterized.TestCase):

    @pytest.fixture(autouse=True)
    def _data_dir(self, shapes_data_dir):
        self.data_dir = shapes_data_dir

    def tearDown(self):
        tf_keras.mixed_precision.set_global_policy("float32")
        super().tearDown()

    def _config(self, global_batch_size=16, preprocess_on="auto", **train) -> RunConfig:
        return RunConfig(
            input=InputConfig(data_dir=self.data_dir, global_batch_size=global_batch_size,
                              preprocess_on=preprocess_on),
            train=TrainConfig(**{"epochs": 1, "steps_per_epoch": 2, "validation_steps": 1,
                                 **train}))

    @parameterized.product(
        strategy=[dict(strategy="one_device"), dict(strategy="mirrored", num_cpu_devices=2)],
        mixed_precision=[Precision.FLOAT32, Precision.MIXED_FLOAT16, Precision.MIXED_BFLOAT16])
    def test_fits_under_strategy_and_precision(self, strategy, mixed_precision):
        config = self._config(mixed_precision=mixed_precision, steps_per_execution=2)
        precision.apply_policy(mixed_precision)
        result = training.fit(config, strategies.build(strategies.StrategyConfig(**strategy)))
        self.assertEqual((result.steps_per_epoch, result.steps), (2, 2))
        self.assertEqual(set(result.final), {"loss", "accuracy", "val_loss", "val_accuracy"})
        self.assertTrue(math.isfinite(result.final["loss"]))
        self.assertGreater(result.examples_per_sec, 0)

    @parameterized.parameters(Precision.FLOAT32, Precision.MIXED_BFLOAT16)
    def test_device_preprocessing_under_mirrored(self, mixed_precision):
        config = self._config(preprocess_on="device", mixed_precision=mixed_precision)
        precision.apply_policy(mixed_precision)
        strategy = strategies.build(strategies.StrategyConfig(strategy="mirrored",
                                                              num_cpu_devices=2))
        result = training.fit(config, strategy)
        self.assertTrue(math.isfinite(result.final["val_loss"]))

    def test_batch_that_does_not_split_over_replicas(self):
        strategy = strategies.build(strategies.StrategyConfig(num_cpu_devices=2))
        with self.assertRaisesRegex(
                InputConfigError, r"global_batch_size=5 does not split evenly over 2 replicas.*"
                             r"--global_batch_size=4 or 6"):
            training.fit(self._config(global_batch_size=5), strategy)

    def test_whole_epoch_steps_come_from_the_split_size(self):
        config = RunConfig(input=InputConfig(data_dir=self.data_dir, global_batch_size=10 ** 6))
        strategy = strategies.build(strategies.StrategyConfig())
        with self.assertRaisesRegex(ConfigError, r"global_batch_size=1000000 is larger than the"):
            training.fit(config, strategy)


if __name__ == "__main__":
    tf.test.main()
