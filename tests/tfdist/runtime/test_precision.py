"""Mixed precision: policy, loss scaling, float32 outputs, clear errors."""

from unittest import mock

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from tfdist.training import models
from tfdist.runtime import keras_flavour
from tfdist.runtime.config import ConfigError
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.strategies import StrategyConfig
from tfdist.runtime.config import ModelName
from tfdist.runtime.config import Precision
from tests.tf_test_case import TfTestCase


class PrecisionTest(TfTestCase, parameterized.TestCase):
    def tearDown(self):
        tf_keras.mixed_precision.set_global_policy("float32")
        super().tearDown()

    @parameterized.parameters(
        (Precision.FLOAT32, "float32"),
        (Precision.MIXED_FLOAT16, "float16"),
        (Precision.MIXED_BFLOAT16, "bfloat16"),
    )
    def test_model_computes_in_policy_dtype_and_outputs_float32(self, policy, compute_dtype):
        keras_flavour.apply_policy(policy)
        model = models.build(ModelName.SMALL_CNN, (32, 32, 3), 10)
        conv = next(layer for layer in model.layers if isinstance(layer, tf_keras.layers.Conv2D))
        self.assertEqual(conv.compute_dtype, compute_dtype)
        self.assertEqual(conv.variable_dtype, "float32")
        self.assertEqual(model.output.dtype, tf.float32)

    def test_float16_keeps_gradients_too_small_for_float16(self):
        """A loss of order 1e-9 gives the float16 layer gradients below float16's smallest
        (6e-8), which reach it as 0 unless the loss is scaled first (by 2**15)."""
        import tfdist  # pylint: disable=import-outside-toplevel

        config = RunConfig(
            strategy=StrategyConfig(strategy="one_device"),
            optimizer=OptimizerConfig(optimizer="sgd", learning_rate=1e6),
            train=TrainConfig(mixed_precision="mixed_float16", epochs=1, steps_per_epoch=1),
        )
        plan = tfdist.setup(config)

        def build():
            return tf_keras.Sequential(
                [
                    tf_keras.Input((4,)),
                    tf_keras.layers.Dense(4, use_bias=False, name="float16"),
                    tf_keras.layers.Dense(1, use_bias=False, dtype="float32"),
                ]
            )

        def data(context):
            del context
            return tf.data.Dataset.from_tensors((tf.ones((8, 4)), tf.zeros((8, 1)))).repeat()

        tiny_loss = lambda labels, outputs: 1e-9 * tf.reduce_sum(outputs)  # noqa: E731
        with plan.strategy.scope():
            model = build()
        before = model.get_layer("float16").kernel.numpy()
        tfdist.fit(plan, model, data, None, loss=tiny_loss)
        after = model.get_layer("float16").kernel.numpy()
        self.assertEqual(model.get_layer("float16").compute_dtype, "float16")
        self.assertTrue(np.all(np.abs(after - before) > 1e-4), after - before)

    def test_float16_without_a_fast_gpu_warns_once_in_one_line(self):
        with mock.patch.object(keras_flavour, "_has_fast_fp16_gpu", return_value=False):
            with self.assertLogs("absl", level="WARNING") as logs:
                keras_flavour.apply_policy(Precision.MIXED_FLOAT16)
        self.assertLen(logs.output, 1)
        self.assertIn("compute capability 7.0", logs.output[0])
        self.assertNotIn("\n", logs.output[0])

    def test_float16_on_a_fast_gpu_does_not_warn(self):
        with mock.patch.object(keras_flavour, "_has_fast_fp16_gpu", return_value=True):
            with self.assertNoLogs("absl", level="WARNING"):
                keras_flavour.apply_policy(Precision.MIXED_FLOAT16)

    def test_fast_gpu_means_compute_capability_7_or_newer(self):
        for capability, fast in (((6, 1), False), ((7, 0), True), ((9, 0), True), (None, False)):
            details = {"compute_capability": capability} if capability else {}
            with (
                mock.patch.object(tf.config, "list_physical_devices", return_value=["gpu"]),
                mock.patch.object(
                    tf.config.experimental, "get_device_details", return_value=details
                ),
            ):
                self.assertEqual(keras_flavour._has_fast_fp16_gpu(), fast, capability)

    def test_float16_output_is_rejected(self):
        keras_flavour.apply_policy(Precision.MIXED_FLOAT16)
        model = tf_keras.Sequential([tf_keras.layers.Input((4,)), tf_keras.layers.Dense(2)])
        with self.assertRaisesRegex(ConfigError, r"is float16.*dtype=\"float32\""):
            keras_flavour.check_output_dtype(model)


if __name__ == "__main__":
    tf.test.main()
