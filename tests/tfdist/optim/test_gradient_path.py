"""The gradient path, as tf-keras' step, Keras 3's and CustomLoop run it: the wire dtype,
loss scaling, clipping, noise and accumulation, with a tf-keras optimizer applying the result."""

import functools

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from tfdist.optim.gradient_path import INITIAL_LOSS_SCALE
from tfdist.optim.gradient_path import GradientPath
from tfdist.optim.gradient_path import GradientTransforms
from tfdist.strategies import WireDtype
from tfdist.training.keras2 import step
from tests.tf_test_case import TfTestCase

_ONE_PLUS = 1.0 + 2.0**-10  # bfloat16 keeps 8 bits of mantissa: it rounds this to 1.0.


def _sgd(
    transforms: GradientTransforms, rate: float = 1.0, **options
) -> tf_keras.optimizers.Optimizer:
    """SGD carrying the gradient path of `transforms`, as the optimizer recipe builds it."""
    optimizer = tf_keras.optimizers.SGD(rate, **options)
    optimizer.gradient_path = GradientPath(transforms)
    return optimizer


@functools.cache
def _mirrored() -> tf.distribute.MirroredStrategy:
    """2 replicas reducing through one device, not collectives: strategies built in one process
    reuse collective keys, and a key reused with another dtype (bfloat16 here, float32 in other
    tests) aborts the collective."""
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )


class _Mirrored(TfTestCase, parameterized.TestCase):
    @property
    def strategy(self) -> tf.distribute.MirroredStrategy:
        return _mirrored()

    def _step_on_replicas(
        self, transforms: GradientTransforms, grad: list[float], steps: int = 1
    ) -> tf.Variable:
        """`steps` SGD steps (rate 1) from 0 on 2 replicas whose gradients are `grad` and
        2 x `grad`."""
        with self.strategy.scope():
            variable = tf.Variable(tf.zeros(len(grad)))
            optimizer = _sgd(transforms)

        @tf.function
        def train():
            def replica_fn():
                replica = tf.distribute.get_replica_context().replica_id_in_sync_group
                step.apply_gradients(
                    optimizer, [tf.constant(grad) * tf.cast(replica + 1, tf.float32)], [variable]
                )

            self.strategy.run(replica_fn)

        for _ in range(steps):
            train()
        self.optimizer = optimizer
        return variable


class WireDtypeTest(_Mirrored):
    def _update(self, wire_dtype: WireDtype, *, loss_scaling: bool = False):
        scale = INITIAL_LOSS_SCALE if loss_scaling else 1.0
        variable = self._step_on_replicas(
            GradientTransforms(wire_dtype=wire_dtype, loss_scaling=loss_scaling),
            [_ONE_PLUS * scale, 3.0 * scale],
        )
        return -variable.numpy()

    def test_float32_sums_exactly(self):
        self.assertAllEqual(self._update(WireDtype.FLOAT32), [3 * _ONE_PLUS, 9.0])

    def test_bfloat16_rounds_what_it_cannot_hold(self):
        # bfloat16 rounds 1 + 2**-10 and 2 + 2**-9 to 1 and 2: the sum is 3.
        self.assertAllEqual(self._update(WireDtype.BFLOAT16), [3.0, 9.0])

    def test_float16_sums_in_float16(self):
        # float16 holds both gradients exactly, but not their sum 3 + 3 * 2**-10.
        expected = float(np.float16(_ONE_PLUS) + np.float16(2 * _ONE_PLUS))
        self.assertNotEqual(expected, 3 * _ONE_PLUS)
        self.assertAllEqual(self._update(WireDtype.FLOAT16), [expected, 9.0])

    def test_scaled_gradients_cross_the_wire_and_are_unscaled_after(self):
        # Times 2**15, a power of two, bfloat16 rounds them as it rounds the unscaled ones.
        self.assertAllEqual(self._update(WireDtype.BFLOAT16, loss_scaling=True), [3.0, 9.0])


class LossScaleTest(_Mirrored):
    def test_a_step_that_overflows_is_skipped_and_halves_the_scale(self):
        variable = self._step_on_replicas(GradientTransforms(loss_scaling=True), [np.inf, 1.0])
        path = self.optimizer.gradient_path
        self.assertAllEqual(variable.numpy(), [0.0, 0.0])
        self.assertEqual(float(path.loss_scale.numpy()), INITIAL_LOSS_SCALE / 2)
        self.assertEqual(int(self.optimizer.iterations.numpy()), 1)  # Counted, as Keras does.

    def test_finite_steps_update_and_count_towards_growth(self):
        variable = self._step_on_replicas(
            GradientTransforms(loss_scaling=True), [INITIAL_LOSS_SCALE, 0.0], steps=2
        )
        self.assertAllEqual(-variable.numpy(), [6.0, 0.0])
        self.assertEqual(int(self.optimizer.gradient_path.finite_steps.numpy()), 2)

    def test_the_loss_is_scaled_before_backprop(self):
        path = GradientPath(GradientTransforms(loss_scaling=True))
        path.build([])
        self.assertEqual(float(path.scale_loss(tf.constant(2.0))), 2.0 * INITIAL_LOSS_SCALE)
        unscaled = GradientPath(GradientTransforms())
        self.assertEqual(float(unscaled.scale_loss(tf.constant(2.0))), 2.0)


class ClipAndNoiseTest(_Mirrored):
    def test_clips_the_summed_gradient_to_the_global_norm(self):
        # Replicas send (1, 4/3) and (2, 8/3): the sum (3, 4) has norm 5, clipped to 1.
        variable = self._step_on_replicas(GradientTransforms(clip_norm=1.0), [1.0, 4 / 3])
        self.assertAllClose(-variable.numpy(), [0.6, 0.8])

    def test_every_replica_adds_the_same_noise(self):
        variable = self._step_on_replicas(GradientTransforms(noise_eta=1.0), [1.0] * 1000)
        first, second = (value.numpy() for value in variable.values)
        self.assertAllEqual(first, second)
        self.assertGreater(np.std(first), 0.5)  # Noise of variance 1 at t = 0 was added.

    @parameterized.parameters(0, 9)
    def test_noise_variance_is_eta_over_one_plus_t_to_the_gamma(self, updates_so_far):
        eta, gamma, size = 0.04, 0.55, 1_000_000
        optimizer = _sgd(GradientTransforms(noise_eta=eta, noise_gamma=gamma))
        variable = tf.Variable(tf.zeros(size))
        optimizer.build([variable])
        optimizer.iterations.assign(updates_so_far)
        step.apply_gradients(optimizer, [tf.zeros(size)], [variable])
        expected_std = np.sqrt(eta / (1 + updates_so_far) ** gamma)
        self.assertAllClose(np.std(variable.numpy()), expected_std, rtol=0.01)
        self.assertAllClose(np.mean(variable.numpy()), 0.0, atol=0.01 * expected_std)


class SparseGradientTest(_Mirrored):
    def test_an_embeddings_gradient_stays_sparse_when_nothing_needs_every_value(self):
        path = GradientPath(GradientTransforms(loss_scaling=True))
        with self.strategy.scope():
            path.build([])

        @tf.function
        def reduce():
            def replica_fn():
                sparse = tf.IndexedSlices(
                    tf.ones((2, 3)) * INITIAL_LOSS_SCALE, tf.constant([1, 4]), tf.constant([8, 3])
                )
                return path.reduce([sparse], updates=tf.constant(0))

            return self.strategy.run(replica_fn)

        reduced = self.strategy.experimental_local_results(reduce())[0][0]
        self.assertIsInstance(reduced, tf.IndexedSlices)
        dense = tf.convert_to_tensor(reduced).numpy()
        self.assertAllEqual(dense[[1, 4]], np.full((2, 3), 2.0))  # Summed, unscaled.


class AccumulationTest(_Mirrored):
    """K micro-batches, then one update with their mean: the same as one K-times larger batch,
    through tf-keras' `fit` with tfdist's step."""

    def _fit(
        self,
        optimizer_class,
        options: dict,
        *,
        batch_size: int,
        accum_steps: int,
        num_examples: int = 16,
    ):
        """One epoch of `num_examples`; the final weights and the update count (the weights
        after each batch go to `self.weights_after_batch`)."""
        features = np.random.default_rng(0).normal(size=(num_examples, 3)).astype("float32")
        targets = features @ np.array([[1.0], [-2.0], [0.5]], "float32") + 0.3
        with self.strategy.scope():
            tf_keras.utils.set_random_seed(1)
            model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(1)])
            optimizer = optimizer_class(0.1, **options)
            optimizer.gradient_path = GradientPath(GradientTransforms(accum_steps=accum_steps))
            model.compile(optimizer, "mse")
            step.install(model, optimizer)
        self.weights_after_batch = []
        record = tf_keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda batch, logs: self.weights_after_batch.append(
                model.get_weights()
            )
        )
        model.fit(
            features,
            targets,
            batch_size=batch_size,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[record],
        )
        return model.get_weights(), int(model.optimizer.iterations.numpy())

    @parameterized.named_parameters(
        ("sgd", tf_keras.optimizers.SGD, {}),
        ("sgd_weight_decay", tf_keras.optimizers.SGD, {"weight_decay": 0.1}),
        ("momentum", tf_keras.optimizers.SGD, {"momentum": 0.9}),
        ("adam", tf_keras.optimizers.Adam, {}),
    )
    def test_four_micro_batches_update_as_one_large_batch(self, optimizer_class, options):
        large, large_updates = self._fit(optimizer_class, options, batch_size=16, accum_steps=1)
        micro, micro_updates = self._fit(optimizer_class, options, batch_size=4, accum_steps=4)
        self.assertEqual((large_updates, micro_updates), (1, 1))
        for expected, actual in zip(large, micro):
            self.assertAllClose(expected, actual, rtol=1e-5, atol=1e-6)

    def test_accumulators_start_again_from_zero_after_each_update(self):
        self._fit(tf_keras.optimizers.SGD, {}, batch_size=16, accum_steps=1, num_examples=32)
        large = self.weights_after_batch
        _, updates = self._fit(
            tf_keras.optimizers.SGD, {}, batch_size=4, accum_steps=4, num_examples=32
        )
        micro = self.weights_after_batch[3::4]  # After each 4th micro-batch: an update.
        self.assertEqual((len(large), len(micro), updates), (2, 2, 2))
        for update, (expected, actual) in enumerate(zip(large, micro)):
            for expected_weight, actual_weight in zip(expected, actual):
                self.assertAllClose(
                    expected_weight,
                    actual_weight,
                    rtol=1e-5,
                    atol=1e-6,
                    msg=f"after update {update + 1}",
                )

    def test_no_update_before_the_last_micro_batch(self):
        weights, updates = self._fit(tf_keras.optimizers.SGD, {}, batch_size=4, accum_steps=8)
        self.assertEqual(updates, 0)  # 4 micro-batches of 8 seen: nothing applied yet.
        with self.strategy.scope():
            tf_keras.utils.set_random_seed(1)
            initial = tf_keras.Sequential(
                [tf_keras.Input((3,)), tf_keras.layers.Dense(1)]
            ).get_weights()
        for expected, actual in zip(initial, weights):
            self.assertAllEqual(expected, actual)
