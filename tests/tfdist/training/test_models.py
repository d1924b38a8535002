"""Built-in models, in tf-keras and in Keras 3: shapes, sizes and float32 outputs."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from tfdist.training import models
from tfdist.runtime.config import ModelName
from tests.tf_test_case import TfTestCase


class ModelsTest(TfTestCase, parameterized.TestCase):
    @parameterized.parameters(
        (ModelName.SMALL_CNN, 32, 56_970, 2),
        (ModelName.RESNET20, 32, 274_042, 2),  # He et al. report 0.27M for CIFAR-10.
        (ModelName.RESNET50, 224, 23_608_202, 2),  # 23.5M in the body, a 10-class head.
        (ModelName.SMALL_CNN, 32, 56_970, 3),  # The same models in Keras 3.
        (ModelName.RESNET20, 32, 274_042, 3),
        (ModelName.RESNET50, 224, 23_608_202, 3),
    )
    def test_builds_with_the_expected_size_and_classifies(self, name, side, num_params, keras):
        model = models.build(name, (side, side, 3), 10, keras)
        self.assertEqual(model.count_params(), num_params)
        probabilities = model(np.zeros((2, side, side, 3), "float32"), training=False)
        self.assertEqual(probabilities.shape, (2, 10))
        self.assertEqual(probabilities.dtype, tf.float32)
        self.assertAllClose(tf.reduce_sum(probabilities, axis=1), [1.0, 1.0])
