"""`tfdist.training.keras3.optim`: Keras 3 LARS takes tf-keras LARS's step, and the recipe's
learning-rate schedule."""

import keras
import numpy as np
import tensorflow as tf

from tfdist.optim.gradient_path import GradientTransforms
from tfdist.training.keras3 import optim as keras3_optim
from tfdist.optim import lars
from tfdist.optim import recipe as optim
from tfdist.runtime.optimizer_config import OptimizerConfig
from tests.tf_test_case import TfTestCase


class Keras3OptimizerTest(TfTestCase):
    def test_lars_takes_the_same_step_as_tf_keras_lars(self):
        options = dict(momentum=0.9, weight_decay=1e-4, eeta=0.01, exclude=("bias",))
        weights = np.arange(1.0, 7.0, dtype="float32").reshape(2, 3)
        gradient = tf.constant(np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3))
        tf_keras_variable = tf.Variable(weights, name="dense/kernel")
        keras3_variable = keras.Variable(weights, name="kernel")
        tf_keras_lars = lars.LARS(learning_rate=0.1, **options)
        keras3_lars = keras3_optim.LARS(learning_rate=0.1, **options)
        for _ in range(3):
            tf_keras_lars.apply_gradients([(gradient, tf_keras_variable)])
            keras3_lars.apply([gradient], [keras3_variable])
        self.assertAllClose(keras3_variable.numpy(), tf_keras_variable.numpy(), atol=1e-6)

    def test_recipe_rate_follows_the_warmup_schedule(self):
        config = OptimizerConfig(
            optimizer="momentum", learning_rate=0.1, warmup_epochs=1, lr_schedule="cosine"
        )
        optimizer = keras3_optim.build_optimizer(
            config,
            update_batch_size=256,
            updates_per_epoch=10,
            epochs=2,
            transforms=GradientTransforms(),
        )
        schedule = optim.learning_rate_schedule(config, 256, 10, 2)
        self.assertIsInstance(optimizer, keras.optimizers.SGD)
        for step in (0, 5, 10, 15, 19):
            optimizer.iterations.assign(step)
            self.assertAllClose(optimizer.learning_rate, schedule(step))

    def test_keras3_lars_refuses_bad_options_like_tf_keras_lars(self):
        with self.assertRaisesRegex(ValueError, "LARS eeta=0 is invalid"):
            keras3_optim.LARS(eeta=0)


if __name__ == "__main__":
    tf.test.main()
