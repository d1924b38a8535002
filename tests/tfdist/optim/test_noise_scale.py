"""The gradient noise scale: McCandlish et al.'s estimators against NumPy on gradients of known
covariance, the optimizer's measurement on 2 replicas and over micro-batches, and `fit`'s
per-epoch figures in both Kerases."""

import functools
import math
import tempfile

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

import tfdist
from tfdist.optim import gradient_path
from tfdist.optim import noise_scale
from tfdist.optim.gradient_path import GradientPath
from tfdist.optim.gradient_path import GradientTransforms
from tfdist.training.keras2 import step as tfdist_step
from tests.tfdist.training.keras3.keras3_tabular import keras3_tabular_model
from tests.tfdist.training.tabular import MIRRORED
from tests.tfdist.training.tabular import run_config
from tests.tfdist.training.tabular import tabular_dataset_fn
from tests.tfdist.training.tabular import tabular_model
from tests.tf_test_case import TfTestCase


class EstimatorTest(TfTestCase):
    """Batch-mean gradients drawn as N(G, Σ / B): the truth is tr(Σ) / |G|²."""

    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(0)
        dims = 1000
        self.rng = rng
        self.gradient = rng.normal(size=dims)
        self.variances = rng.uniform(0.5, 1.5, dims) * 100.0
        self.truth = self.variances.sum() / np.square(self.gradient).sum()

    def _squared_norms(self, steps: int, replicas: int, per_replica: int):
        """|G_small|² averaged over the replicas and |G_big|², one pair per step."""
        draws = self.gradient + self.rng.normal(
            size=(steps, replicas, self.gradient.size)
        ) * np.sqrt(self.variances / per_replica)
        small_sq = np.square(draws).sum(axis=2).mean(axis=1)
        big_sq = np.square(draws.mean(axis=1)).sum(axis=1)
        return small_sq, big_sq

    def test_the_estimates_are_unbiased(self):
        small_sq, big_sq = self._squared_norms(steps=4000, replicas=2, per_replica=32)
        gradient_sq, trace = noise_scale.estimates(small_sq, big_sq, 32, 64)
        self.assertAllClose(gradient_sq.mean(), np.square(self.gradient).sum(), rtol=0.05)
        self.assertAllClose(trace.mean(), self.variances.sum(), rtol=0.02)

    def test_the_moving_averages_land_within_10_percent_of_the_truth(self):
        self.assertAllClose(self.truth, 100, rtol=0.3)  # A noise scale between the batches.
        for replicas, per_replica in ((2, 32), (8, 16)):
            scale = noise_scale.NoiseScale()
            small_sq, big_sq = self._squared_norms(
                steps=600, replicas=replicas, per_replica=per_replica
            )
            for small, big in zip(small_sq, big_sq):
                scale.observe(
                    small_sq=small,
                    big_sq=big,
                    small_batch=per_replica,
                    big_batch=replicas * per_replica,
                )
            measured = scale.result()
            self.assertAllClose(measured["noise_scale"], self.truth, rtol=0.1)
            self.assertAllClose(measured["trace"], self.variances.sum(), rtol=0.1)

    def test_steps_that_overflowed_are_left_out(self):
        scale = noise_scale.NoiseScale()
        scale.observe(small_sq=50.0, big_sq=45.0, small_batch=4, big_batch=8)
        before = scale.result()
        scale.observe(small_sq=np.inf, big_sq=np.nan, small_batch=4, big_batch=8)
        self.assertEqual(scale.result(), before)
        self.assertAllClose(before["noise_scale"], 1.0)  # |G|² = 40 and tr(Σ) = 40.

    def test_nothing_before_the_first_step_and_none_while_all_noise(self):
        scale = noise_scale.NoiseScale()
        self.assertIsNone(scale.result())
        scale.observe(small_sq=10.0, big_sq=5.0, small_batch=4, big_batch=8)  # |G|² = 0
        self.assertIsNone(scale.result()["noise_scale"])


@functools.cache
def _mirrored() -> tf.distribute.MirroredStrategy:
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )


class OptimizerTest(TfTestCase):
    """What tfdist's optimizer measures equals the estimators on the gradients it was given."""

    def _optimizer(self, **transforms) -> tf_keras.optimizers.Optimizer:
        optimizer = tf_keras.optimizers.SGD(0.0)
        optimizer.gradient_path = GradientPath(GradientTransforms(**transforms))
        return optimizer

    def test_two_replicas_compare_their_own_gradients_with_the_sum(self):
        # Keras divides each replica's loss by the replicas: a replica's gradient of the mean
        # over its 4 examples is 2 x what it hands the optimizer.
        handed = [np.array([1.0, 2.0]), np.array([2.0, 1.0])]
        with _mirrored().scope():
            variable = tf.Variable(tf.zeros(2))
            optimizer = self._optimizer(noise_scale_batch=8)

        @tf.function
        def step():
            def replica_fn():
                replica = tf.distribute.get_replica_context().replica_id_in_sync_group
                grad = tf.gather(tf.constant(np.stack(handed), tf.float32), replica)
                tfdist_step.apply_gradients(optimizer, [grad], [variable])

            _mirrored().run(replica_fn)

        step()
        small_sq = np.mean([np.square(2 * grad).sum() for grad in handed])
        big_sq = np.square(handed[0] + handed[1]).sum()
        gradient_sq, trace = noise_scale.estimates(small_sq, big_sq, 4, 8)
        measured = gradient_path.gradient_noise_scale(optimizer)
        self.assertAllClose([measured["gradient_sq"], measured["trace"]], [gradient_sq, trace])
        self.assertAllClose(measured["noise_scale"], trace / gradient_sq)
        self.assertTrue(gradient_path.measures_noise_scale(optimizer))
        self.assertFalse(gradient_path.measures_noise_scale(self._optimizer()))

    def test_micro_batches_compare_each_with_their_mean(self):
        optimizer = self._optimizer(noise_scale_batch=16, accum_steps=2)
        variable = tf.Variable(tf.zeros(2))
        micro = [np.array([1.0, 2.0]), np.array([3.0, -1.0])]
        for grad in micro:
            tfdist_step.apply_gradients(optimizer, [tf.constant(grad, tf.float32)], [variable])
        small_sq = np.mean([np.square(grad).sum() for grad in micro])
        big_sq = np.square(np.mean(micro, axis=0)).sum()
        gradient_sq, trace = noise_scale.estimates(small_sq, big_sq, 16, 32)
        measured = gradient_path.gradient_noise_scale(optimizer)
        self.assertAllClose([measured["gradient_sq"], measured["trace"]], [gradient_sq, trace])
        tfdist_step.apply_gradients(optimizer, [tf.constant(micro[0], tf.float32)], [variable])
        self.assertEqual(gradient_path.gradient_noise_scale(optimizer), measured)  # Half an update.


class FitTest(TfTestCase, parameterized.TestCase):
    """`fit` puts B_simple into every epoch's history, in either Keras."""

    @parameterized.named_parameters(
        ("tf_keras_mirrored", 2, MIRRORED, 1),
        ("keras3_mirrored", 3, MIRRORED, 1),
        ("tf_keras_micro_batches", 2, {"strategy": "one_device"}, 2),
        ("keras3_micro_batches", 3, {"strategy": "one_device"}, 2),
    )
    def test_each_epoch_has_a_noise_scale(self, keras, strategy, accum_steps):
        plan = tfdist.setup(
            run_config(
                strategy=strategy,
                keras=keras,
                epochs=2,
                steps_per_epoch=20,
                optimizer=tfdist.OptimizerConfig(
                    measure_noise_scale=True, grad_accum_steps=accum_steps
                ),
            )
        )
        model = keras3_tabular_model if keras == 3 else tabular_model
        summary = tfdist.fit(
            plan, model, tabular_dataset_fn(16), None, loss="sparse_categorical_crossentropy"
        )
        noise_scales = summary["history"]["noise_scale"]
        self.assertLen(noise_scales, 2)
        self.assertTrue(
            all(math.isfinite(value) and value > 0 for value in noise_scales), noise_scales
        )

    def test_tensorboard_gets_it_as_a_scalar(self):
        model_dir = self.enterContext(tempfile.TemporaryDirectory())
        plan = tfdist.setup(
            run_config(
                strategy=MIRRORED,
                epochs=1,
                steps_per_epoch=10,
                model_dir=model_dir,
                optimizer=tfdist.OptimizerConfig(measure_noise_scale=True),
            )
        )
        tfdist.fit(
            plan,
            tabular_model,
            tabular_dataset_fn(16),
            None,
            loss="sparse_categorical_crossentropy",
        )
        tags = {
            value.tag
            for path in tf.io.gfile.glob(f"{model_dir}/logs/train/*")
            for event in tf.compat.v1.train.summary_iterator(path)
            for value in event.summary.value
        }
        self.assertIn("epoch_noise_scale", tags)


if __name__ == "__main__":
    tf.test.main()
