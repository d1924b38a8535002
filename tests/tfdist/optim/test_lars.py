"""LARS: its steps match a NumPy implementation, alone, on 2 replicas and under loss scaling."""

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from tfdist.optim.lars import LARS
from tests.tf_test_case import TfTestCase

_KERNEL = np.float32([[1.0, -2.0, 0.5], [0.25, 3.0, -1.5]])
_BIAS = np.float32([0.5, -0.25, 1.0])
_GRADS = [  # (kernel, bias) gradients of steps 1 and 2
    (np.float32([[0.1, 0.2, -0.3], [0.05, -0.4, 0.2]]), np.float32([0.3, -0.1, 0.2])),
    (np.float32([[-0.2, 0.1, 0.1], [0.3, 0.2, -0.1]]), np.float32([-0.1, 0.4, 0.05])),
]


def _numpy_lars(
    w,
    g,
    v,
    rate,
    *,
    momentum=0.9,
    weight_decay=0.0,
    eeta=0.001,
    mode="scale",
    excluded=False,
    epsilon=0.0,
):
    """One LARS step in float64; returns (new w, new v, trust)."""
    w, g = np.float64(w), np.float64(g)
    if excluded:
        trust, weight_decay = 1.0, 0.0
    else:
        w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
        trust = 1.0
        if w_norm > 0 and g_norm > 0:
            trust = eeta * w_norm / (g_norm + weight_decay * w_norm + epsilon)
        if mode == "clip":
            trust = min(trust, 1.0)
    v = momentum * v + rate * trust * (g + weight_decay * w)
    return w - v, v, trust


def _variables():
    return tf.Variable(_KERNEL, name="kernel"), tf.Variable(_BIAS, name="bias")


def _apply(optimizer, variables, grads):
    optimizer.apply_gradients([(tf.convert_to_tensor(g), v) for g, v in zip(grads, variables)])


class LarsTest(TfTestCase, parameterized.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # One strategy for all, reducing through one device, not collectives: strategies
        # built in one process reuse collective keys, and other tests' would clash with these.
        cls.strategy = tf.distribute.MirroredStrategy(
            ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
        )

    def _assert_matches_numpy(self, optimizer, rates, **options):
        """Two steps on (kernel, bias), the bias excluded, against NumPy at `rates`."""
        kernel, bias = _variables()
        expected_kernel, kernel_v = _KERNEL, 0.0
        expected_bias, bias_v = _BIAS, 0.0
        for rate, (kernel_grad, bias_grad) in zip(rates, _GRADS):
            _apply(optimizer, (kernel, bias), (kernel_grad, bias_grad))
            expected_kernel, kernel_v, _ = _numpy_lars(
                expected_kernel, kernel_grad, kernel_v, rate, **options
            )
            expected_bias, bias_v, _ = _numpy_lars(
                expected_bias, bias_grad, bias_v, rate, excluded=True, **options
            )
            self.assertAllClose(kernel, expected_kernel, rtol=1e-6, atol=1e-7)
            self.assertAllClose(bias, expected_bias, rtol=1e-6, atol=1e-7)

    def test_one_and_two_steps_match_numpy(self):
        options = {"momentum": 0.9, "weight_decay": 0.01, "eeta": 0.02}
        self._assert_matches_numpy(LARS(0.5, **options), [0.5, 0.5], **options)

    def test_steps_in_a_tf_function_match_numpy(self):
        optimizer = LARS(0.5, weight_decay=0.01, eeta=0.02)
        kernel, bias = _variables()
        step = tf.function(lambda grads: optimizer.apply_gradients(zip(grads, (kernel, bias))))
        expected, velocity = _KERNEL, 0.0
        for kernel_grad, bias_grad in _GRADS:
            step([tf.constant(kernel_grad), tf.constant(bias_grad)])
            expected, velocity, _ = _numpy_lars(
                expected, kernel_grad, velocity, 0.5, weight_decay=0.01, eeta=0.02
            )
        self.assertAllClose(kernel, expected, rtol=1e-6, atol=1e-7)

    def test_learning_rate_schedule(self):
        schedule = tf_keras.optimizers.schedules.ExponentialDecay(
            0.5, decay_steps=1, decay_rate=0.5
        )
        options = {"momentum": 0.9, "weight_decay": 0.01, "eeta": 0.02}
        self._assert_matches_numpy(LARS(schedule, **options), [0.5, 0.25], **options)

    @parameterized.parameters("scale", "clip")
    def test_clip_caps_trust_at_one(self, mode):
        options = {"momentum": 0.9, "weight_decay": 0.01, "eeta": 10.0, "mode": mode}
        kernel, _ = _variables()
        _apply(LARS(0.1, **options), [kernel], [_GRADS[0][0]])
        expected, _, trust = _numpy_lars(_KERNEL, _GRADS[0][0], 0.0, 0.1, **options)
        self.assertEqual(trust > 1, mode == "scale")
        self.assertAllClose(kernel, expected, rtol=1e-6, atol=1e-7)

    def test_zero_weights_take_trust_one(self):
        kernel = tf.Variable(np.zeros_like(_KERNEL), name="kernel")
        _apply(LARS(0.1, weight_decay=0.01), [kernel], [_GRADS[0][0]])
        self.assertAllClose(kernel, -0.1 * _GRADS[0][0], rtol=1e-6)

    def test_zero_gradient_takes_trust_one(self):
        kernel, _ = _variables()
        _apply(LARS(0.1, weight_decay=0.01), [kernel], [np.zeros_like(_KERNEL)])
        self.assertAllClose(kernel, _KERNEL - 0.1 * 0.01 * _KERNEL, rtol=1e-6)

    def test_excluded_variables_take_trust_one_and_no_weight_decay(self):
        kernel, bias = _variables()
        # exclude=("kernel",): the kernel is excluded, the bias is not.
        _apply(LARS(0.1, weight_decay=0.01, exclude=("kernel",)), (kernel, bias), _GRADS[0])
        self.assertAllClose(kernel, _KERNEL - 0.1 * _GRADS[0][0], rtol=1e-6)
        expected_bias, _, _ = _numpy_lars(_BIAS, _GRADS[0][1], 0.0, 0.1, weight_decay=0.01)
        self.assertAllClose(bias, expected_bias, rtol=1e-6)

    def test_sparse_gradients_update_as_dense(self):
        kernel, _ = _variables()
        sparse = tf.IndexedSlices(
            tf.constant(_GRADS[0][0][1:]), tf.constant([1]), tf.constant([2, 3])
        )
        LARS(0.1, weight_decay=0.01, eeta=0.02).apply_gradients([(sparse, kernel)])
        dense = np.concatenate([np.zeros([1, 3]), _GRADS[0][0][1:]])
        expected, _, _ = _numpy_lars(_KERNEL, dense, 0.0, 0.1, weight_decay=0.01, eeta=0.02)
        self.assertAllClose(kernel, expected, rtol=1e-6, atol=1e-7)

    def test_mirrored_replicas_apply_the_summed_gradient(self):
        with self.strategy.scope():
            kernel, bias = _variables()
            optimizer = LARS(0.5, weight_decay=0.01, eeta=0.02)

        @tf.function
        def step():
            def replica_fn():
                replica = tf.distribute.get_replica_context().replica_id_in_sync_group
                scale = tf.cast(replica + 1, tf.float32)  # replicas send g and 2g: 3g in all
                _apply(optimizer, (kernel, bias), [g * scale for g in _GRADS[0]])

            self.strategy.run(replica_fn)

        step()
        expected_kernel, _, _ = _numpy_lars(
            _KERNEL, 3 * _GRADS[0][0], 0.0, 0.5, weight_decay=0.01, eeta=0.02
        )
        expected_bias = _BIAS - 0.5 * 3 * _GRADS[0][1]
        for variable, expected in ((kernel, expected_kernel), (bias, expected_bias)):
            for local in self.strategy.experimental_local_results(variable):
                self.assertAllClose(local, expected, rtol=1e-6, atol=1e-7)

    def test_model_fit_under_mirrored_strategy(self):
        with self.strategy.scope():
            model = tf_keras.Sequential([tf_keras.layers.Dense(2, input_shape=(3,))])
            model.compile(optimizer=LARS(0.1, weight_decay=1e-4), loss="mse")
        before = [w.copy() for w in model.get_weights()]
        rng = np.random.default_rng(0)
        x = rng.normal(size=(8, 3)).astype(np.float32)
        y = rng.normal(size=(8, 2)).astype(np.float32)
        history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][-1]))
        for old, new in zip(before, model.get_weights()):
            self.assertNotAllClose(old, new)

    def test_under_a_loss_scale_optimizer(self):
        variables = _variables()
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(
            LARS(0.5, weight_decay=0.01, eeta=0.02)
        )
        with tf.GradientTape() as tape:  # a loss whose gradients are _GRADS[0]
            loss = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(_GRADS[0], variables)])
            scaled_loss = optimizer.get_scaled_loss(loss)
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, variables))
        optimizer.apply_gradients(zip(grads, variables))
        plain = _variables()
        _apply(LARS(0.5, weight_decay=0.01, eeta=0.02), plain, _GRADS[0])
        self.assertAllClose(variables, plain, rtol=1e-6)

    def test_config_round_trips(self):
        optimizer = LARS(
            0.2,
            momentum=0.5,
            weight_decay=0.01,
            eeta=0.02,
            mode="clip",
            exclude=("kernel",),
            epsilon=1e-6,
            clipnorm=1.0,
        )
        config = optimizer.get_config()
        clone = LARS.from_config(config)
        self.assertIsNone(clone.weight_decay)  # the base class's own decay stays off
        self.assertEqual(clone.get_config(), config)
        self.assertEqual((clone.eeta, clone.mode, config["exclude"]), (0.02, "clip", ("kernel",)))

    @parameterized.parameters(
        ({"mode": "trim"}, "mode='trim'"),
        ({"eeta": 0.0}, "eeta=0.0"),
        ({"eeta": -1.0}, "eeta=-1.0"),
        ({"weight_decay": -0.1}, "weight_decay=-0.1"),
        ({"momentum": 1.0}, "momentum=1.0"),
        ({"momentum": -0.5}, "momentum=-0.5"),
    )
    def test_bad_arguments_are_named(self, options, message):
        with self.assertRaisesRegex(ValueError, message):
            LARS(**options)
