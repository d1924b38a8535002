"""Gradient compression: replicas sum their gradients in the wire dtype, and only there."""

import numpy as np
import tensorflow as tf

from strategies import WireDtype
from tfdist import optim
from tfdist import precision
from tfdist.config import OptimizerName
from tfdist.config import Precision

_ONE_PLUS = 1.0 + 2.0**-10  # bfloat16 keeps 8 bits of mantissa: it rounds this to 1.0.


class WireCompressionTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # One strategy for all: strategies built in one process reuse collective keys.
        cls.strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def _sgd_step(self, wire_dtype: WireDtype, mixed: Precision = Precision.FLOAT32):
        """One SGD step (rate 1) on 2 replicas whose gradients are g and 2g; returns -update."""
        strategy = self.strategy
        with strategy.scope():
            variable = tf.Variable([0.0, 0.0])
            optimizer = precision.wrap_optimizer(
                optim.build(OptimizerName.SGD, 1.0, allreduce_dtype=wire_dtype), mixed)

        @tf.function
        def step():
            def replica_fn():
                replica = tf.distribute.get_replica_context().replica_id_in_sync_group
                grad = tf.constant([_ONE_PLUS, 3.0]) * tf.cast(replica + 1, tf.float32)
                optimizer.apply_gradients([(grad, variable)])
            strategy.run(replica_fn)

        step()
        return -variable.numpy()

    def test_float32_sums_exactly(self):
        self.assertAllEqual(self._sgd_step(WireDtype.FLOAT32), [3 * _ONE_PLUS, 9.0])

    def test_bfloat16_rounds_what_it_cannot_hold(self):
        # bfloat16 rounds 1 + 2**-10 and 2 + 2**-9 to 1 and 2: the sum is 3.
        self.assertAllEqual(self._sgd_step(WireDtype.BFLOAT16), [3.0, 9.0])

    def test_float16_sums_in_float16(self):
        # float16 holds both gradients exactly, but not their sum 3 + 3 * 2**-10.
        expected = float(np.float16(_ONE_PLUS) + np.float16(2 * _ONE_PLUS))
        self.assertNotEqual(expected, 3 * _ONE_PLUS)
        self.assertAllEqual(self._sgd_step(WireDtype.FLOAT16), [expected, 9.0])

    def test_under_a_loss_scale_optimizer(self):
        self.assertAllEqual(self._sgd_step(WireDtype.BFLOAT16, Precision.MIXED_FLOAT16),
                            [3.0, 9.0])
