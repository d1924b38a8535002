"""Keras 3 models (`--keras=3`) in-process: tfdist's own step under one_device and mirrored,
its gradient transforms and loss scaling, backups, and the flavour errors. The optimizers:
tests/tfdist/training/keras3/test_optim.py; multi-process strategies:
tests/tfdist/training/keras3/test_step_on_clusters.py."""

from tests.tfdist.training.keras3.keras3_tabular import keras3_tabular_model
import os
from unittest import mock

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import tfdist
from tfdist import errors
from tfdist.optim.gradient_path import INITIAL_LOSS_SCALE
from tfdist.runtime import keras_flavour
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import KerasFlavourError
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.runtime.config import TrainConfig
from tests.tfdist.training.tabular import FEATURES
from tests.tfdist.training.tabular import MIRRORED
from tests.tfdist.training.tabular import arrays_dataset_fn
from tests.tfdist.training.tabular import run_config
from tests.tfdist.training.tabular import tabular_dataset_fn
from tests.tfdist.training.tabular import tabular_model
from tests.tf_test_case import TfTestCase

_LOSS = "sparse_categorical_crossentropy"


class _Interrupt(Exception):
    """Stands for a killed process in a resume test."""


class _InterruptAtEpoch(keras.callbacks.Callback):
    def __init__(self, epoch: int):
        super().__init__()
        self._epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self._epoch:
            raise _Interrupt()


class Keras3FitTest(TfTestCase, parameterized.TestCase):
    def tearDown(self):
        keras.mixed_precision.set_global_policy("float32")
        super().tearDown()

    def _fit(self, *, strategy=None, callbacks=(), **train):
        train = {"keras": 3, "epochs": 3, "steps_per_epoch": 20, "validation_steps": 8, **train}
        plan = tfdist.setup(run_config(strategy=strategy, **train))
        summary = tfdist.fit(
            plan,
            keras3_tabular_model,
            tabular_dataset_fn(16),
            tabular_dataset_fn(16, count=128, training=False),
            loss=_LOSS,
            metrics=["accuracy"],
            callbacks=callbacks,
        )
        return plan, summary

    @parameterized.named_parameters(
        ("one_device", {"strategy": "one_device"}), ("mirrored", MIRRORED)
    )
    def test_learns_and_reports_like_tf_keras(self, strategy):
        plan, summary = self._fit(strategy=strategy)
        self.assertEqual(summary["num_replicas"], plan.num_replicas)
        self.assertEqual(summary["model"], "keras3_tabular")
        self.assertGreaterEqual(summary["final"]["val_accuracy"], 0.85)
        self.assertEqual(
            sorted(summary["history"]), ["accuracy", "loss", "val_accuracy", "val_loss"]
        )
        self.assertLen(summary["history"]["loss"], 3)
        self.assertLess(summary["history"]["loss"][-1], summary["history"]["loss"][0])
        self.assertGreater(summary["examples_per_sec"], 0)

    def test_steps_per_execution_runs_every_step(self):
        plan = tfdist.setup(
            run_config(
                keras=3, epochs=1, steps_per_epoch=7, steps_per_execution=3, strategy=MIRRORED
            )
        )
        with plan.strategy.scope():
            model = keras3_tabular_model()
        tfdist.fit(plan, model, tabular_dataset_fn(16), None, loss=_LOSS)
        self.assertEqual(int(model.optimizer.iterations.numpy()), 7)

    def test_replicas_stay_identical_with_every_gradient_transform(self):
        # Reduced through one device: a collective key reused in this process with another
        # dtype aborts (tests/tfdist/optim/test_gradient_path.py:_mirrored).
        plan = tfdist.setup(
            run_config(
                keras=3,
                epochs=1,
                steps_per_epoch=6,
                strategy={
                    **MIRRORED,
                    "allreduce_dtype": "float16",
                    "all_reduce": "reduction_to_one_device",
                },
                optimizer=OptimizerConfig(
                    clip_norm=0.5, gradient_noise_eta=0.3, grad_accum_steps=2
                ),
            )
        )
        with plan.strategy.scope():
            model = keras3_tabular_model()
        before = [variable.numpy() for variable in model.trainable_variables]
        tfdist.fit(plan, model, tabular_dataset_fn(16), None, loss=_LOSS)
        self.assertEqual(int(model.optimizer.iterations.numpy()), 3)  # 6 steps / 2.
        for variable, initial in zip(model.trainable_variables, before):
            copies = plan.strategy.experimental_local_results(variable.value)
            self.assertLen(copies, 2)
            self.assertAllEqual(copies[0], copies[1])
            self.assertNotAllClose(copies[0], initial)

    def test_accumulating_two_micro_batches_is_one_batch_twice_as_large(self):
        def trained_weights(global_batch_size, grad_accum_steps, steps):
            plan = tfdist.setup(
                run_config(
                    keras=3,
                    epochs=1,
                    steps_per_epoch=steps,
                    global_batch_size=global_batch_size,
                    optimizer=OptimizerConfig(
                        optimizer="sgd", learning_rate=0.5, grad_accum_steps=grad_accum_steps
                    ),
                )
            )
            with plan.strategy.scope():
                model = keras3_tabular_model()
            data = tabular_dataset_fn(global_batch_size)
            tfdist.fit(
                plan, model, lambda context: data(context).take(steps).repeat(), None, loss=_LOSS
            )
            return [variable.numpy() for variable in model.trainable_variables]

        for accumulated, whole in zip(trained_weights(16, 2, 2), trained_weights(32, 1, 1)):
            self.assertAllClose(accumulated, whole, atol=1e-6)

    def test_mixed_float16_loss_scaling_skips_overflows_without_nan(self):
        keras.mixed_precision.set_global_policy("float32")

        def huge_loss(labels, predictions):  # Overflows float16 at the initial loss scale.
            return 1e4 * keras.losses.sparse_categorical_crossentropy(labels, predictions)

        plan = tfdist.setup(
            run_config(
                keras=3,
                epochs=2,
                steps_per_epoch=20,
                mixed_precision="mixed_float16",
                strategy=MIRRORED,
                optimizer=OptimizerConfig(optimizer="sgd", learning_rate=1e-5),
            )
        )
        with plan.strategy.scope():
            model = keras3_tabular_model()
        summary = tfdist.fit(
            plan, model, tabular_dataset_fn(16), None, loss=huge_loss, metrics=["accuracy"]
        )
        self.assertEqual(model.layers[0].compute_dtype, "float16")
        self.assertTrue(np.isfinite(summary["final"]["loss"]), summary["final"])
        for variable in model.trainable_variables:
            self.assertTrue(np.all(np.isfinite(variable.numpy())), variable.path)
        # Overflowing steps were skipped, each halving the loss scale (and counted, as Keras'
        # LossScaleOptimizer counts them), and the rest learned.
        path = model.optimizer.inner_optimizer.gradient_path
        self.assertLessEqual(float(path.loss_scale.numpy()), INITIAL_LOSS_SCALE / 2)
        self.assertEqual(int(model.optimizer.iterations.numpy()), 40)
        self.assertLess(summary["history"]["loss"][-1], summary["history"]["loss"][0])

    def test_model_dir_resumes_from_the_backup_and_keeps_each_epoch(self):
        model_dir = self.get_temp_dir()
        with self.assertRaises(_Interrupt):
            self._fit(epochs=3, model_dir=model_dir, callbacks=[_InterruptAtEpoch(2)])
        self.assertTrue(os.path.isdir(os.path.join(model_dir, "backup")))
        _, summary = self._fit(epochs=3, model_dir=model_dir)
        self.assertEqual(summary["resumed_from_epoch"], 2)
        self.assertLen(summary["history"]["loss"], 3)  # Epochs 1-2 from the first attempt.
        checkpoints = sorted(os.listdir(os.path.join(model_dir, "checkpoints")))
        for epoch in ("epoch-001", "epoch-002", "epoch-003"):
            self.assertIn(f"{epoch}.index", checkpoints)
        # Finished: the backup keeps the final state, so a rerun trains nothing and its model
        # is the finished one, and a longer schedule goes on from it.
        _, again = self._fit(epochs=3, model_dir=model_dir)
        self.assertIs(again["finished_before"], True)
        self.assertEqual(again["final"], summary["final"])
        for finished, restored in zip(summary.model.weights, again.model.weights, strict=True):
            self.assertAllEqual(finished, restored)
        _, longer = self._fit(epochs=4, model_dir=model_dir)
        self.assertEqual(longer["resumed_from_epoch"], 3)
        self.assertLen(longer["history"]["loss"], 4)

    def test_a_loss_that_diverges_stops_before_the_epoch_is_saved(self):
        model_dir = self.get_temp_dir()
        plan = tfdist.setup(run_config(keras=3, epochs=2, steps_per_epoch=4, model_dir=model_dir))
        features = np.full((64, FEATURES), np.nan, "float32")
        with self.assertRaisesRegex(errors.Diverged, r"^loss: training diverged in epoch 1 "):
            tfdist.fit(
                plan,
                lambda: keras.Sequential(
                    [keras.layers.Input((FEATURES,)), keras.layers.Dense(2, "softmax")]
                ),
                arrays_dataset_fn(features, np.zeros(64, "int64")),
                None,
                loss=_LOSS,
            )
        self.assertFalse(os.path.exists(os.path.join(model_dir, "checkpoints")))

    def test_training_data_that_runs_out(self):
        plan = tfdist.setup(run_config(keras=3, epochs=3, steps_per_epoch=2))
        features, labels = np.zeros((64, FEATURES), "float32"), np.zeros(64, "int64")
        with self.assertRaisesRegex(
            ConfigError,
            r"^train_data: an input pipeline holds 4 "
            r"batches but the run takes 2 steps x 3 epochs",
        ):
            tfdist.fit(
                plan,
                keras3_tabular_model,
                arrays_dataset_fn(features, labels, repeat=False),
                None,
                loss=_LOSS,
            )

    def test_a_loss_name_keras_3_does_not_know(self):
        plan = tfdist.setup(run_config(keras=3))
        with self.assertRaisesRegex(ConfigError, r"^loss: Keras knows no loss named 'nope'; "):
            tfdist.fit(plan, keras3_tabular_model, tabular_dataset_fn(16), None, loss="nope")

    def test_uncounted_training_data_that_runs_out(self):
        plan = tfdist.setup(run_config(keras=3, epochs=3, steps_per_epoch=2))
        features, labels = np.zeros((64, FEATURES), "float32"), np.zeros(64, "int64")
        filtered = arrays_dataset_fn(features, labels, repeat=False)
        with self.assertRaisesRegex(
            ConfigError,
            r"^train_data: it ran out of batches before the "
            r"run's last step; end the dataset with",
        ):
            tfdist.fit(
                plan,
                keras3_tabular_model,
                lambda context: filtered(context).filter(lambda x, y: True),
                None,
                loss=_LOSS,
            )


class Keras3ErrorsTest(TfTestCase):
    def test_keras3_model_under_keras_2(self):
        plan = tfdist.setup(run_config())
        with self.assertRaisesRegex(
            KerasFlavourError, "built a Keras 3 model .* train it with keras=3"
        ):
            tfdist.fit(plan, keras3_tabular_model, tabular_dataset_fn(16), None, loss=_LOSS)

    def test_tf_keras_model_under_keras_3(self):
        plan = tfdist.setup(run_config(keras=3))
        with self.assertRaisesRegex(
            KerasFlavourError, "built a tf-keras model .* but keras=3; build it with `import keras`"
        ):
            tfdist.fit(plan, tabular_model, tabular_dataset_fn(16), None, loss=_LOSS)

    def test_keras_version_outside_one_and_the_guard(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"keras=4 is not a Keras tfdist trains with; "
            r"use keras=2 \(tf-keras\) or keras=3",
        ):
            TrainConfig(keras=4)
        self.assertEqual(TrainConfig(keras="3").keras, 3)
        with mock.patch.object(keras, "__version__", "3.99.0"):
            with self.assertRaisesRegex(
                KerasFlavourError,
                r"written for keras 3\.15\.x and keras "
                r"3\.99\.0 is installed; pip install "
                r"'keras==3\.15\.\*', or use keras=2",
            ):
                keras_flavour.require(3)

    def test_step_backups_and_custom_loop_are_refused_under_keras_3(self):
        with self.assertRaisesRegex(ConfigError, "backup_every='100' with keras=3"):
            run_config(keras=3, backup_every="100", model_dir="/tmp/x")
        plan = tfdist.setup(run_config(keras=3))
        with self.assertRaisesRegex(ConfigError, "keras=3: CustomLoop trains tf-keras models"):
            tfdist.CustomLoop(plan, keras3_tabular_model)

    def test_uncompiled_model_without_a_loss(self):
        plan = tfdist.setup(run_config(keras=3))
        with self.assertRaisesRegex(ConfigError, "loss: the model is not compiled"):
            tfdist.fit(plan, keras3_tabular_model, tabular_dataset_fn(16), None)

    def test_model_built_outside_the_scope(self):
        plan = tfdist.setup(run_config(keras=3, strategy=MIRRORED))
        with self.assertRaisesRegex(ConfigError, "was built outside plan.strategy.scope()"):
            tfdist.fit(plan, keras3_tabular_model(), tabular_dataset_fn(16), None, loss=_LOSS)


if __name__ == "__main__":
    tf.test.main()
