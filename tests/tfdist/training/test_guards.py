"""`tfdist.training.guards`: on its own (the failed step's data named, the batches a run takes,
divergence), and under `fit`, where runs that would end in a traceback, or with status 0 having
done something else than asked, stop with one line."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import tfdist
from tests.input_pipelines.records import GRAPH_ERROR
from tests.tfdist.training.tabular import MIRRORED
from tests.tfdist.training.tabular import PolicyReset
from tests.tfdist.training.tabular import arrays_dataset_fn
from tests.tfdist.training.tabular import run_config
from tests.tfdist.training.tabular import linear_model
from tests.tfdist.training.tabular import tabular
from tests.tfdist.training.tabular import tabular_model
from tfdist.training import guards as fit_guards
from tfdist import errors
from tfdist.runtime.config import ConfigError
from tests.tf_test_case import TfTestCase


class StepFailureTest(TfTestCase):
    def test_the_step_that_failed_names_its_data(self):
        message = GRAPH_ERROR.format(labels="9").replace("train_function", "test_function")
        failure = fit_guards.step_failure(
            tf.errors.InvalidArgumentError(None, None, message), "tabular"
        )
        self.assertStartsWith(str(failure), "validation_data: model 'tabular' failed on one ")
        lost = fit_guards.step_failure(
            tf.errors.DataLossError(None, None, "corrupted record at 12"), "tabular"
        )
        self.assertEqual(
            str(lost),
            "train_data: reading it failed (DataLossError: corrupted "
            "record at 12); check its files.",
        )


class RequireEnoughTest(TfTestCase):
    def _counts(self, batches: int, replicas: int = 1, pipelines: int = 1):
        counts = fit_guards.BatchCounts(lambda context: tf.data.Dataset.range(batches * 4).batch(4))
        for pipeline in range(pipelines):
            counts(tf.distribute.InputContext(pipelines, pipeline, replicas * pipelines))
        return counts

    def test_enough_for_every_epoch_and_one_batch_fewer_is_not(self):
        fit_guards.require_enough(
            self._counts(6), steps_per_epoch=2, epochs=3, new_iterator_each_epoch=False
        )
        with self.assertRaisesRegex(
            ConfigError,
            r"holds 5 batches but the run takes 2 steps x "
            r"3 epochs = 6 of them",
        ):
            fit_guards.require_enough(
                self._counts(5), steps_per_epoch=2, epochs=3, new_iterator_each_epoch=False
            )

    def test_one_epoch_is_enough_only_when_read_afresh(self):
        fit_guards.require_enough(
            self._counts(2), steps_per_epoch=2, epochs=3, new_iterator_each_epoch=True
        )
        with self.assertRaisesRegex(
            ConfigError,
            r"holds 2 batches but the run takes 2 steps x "
            r"3 epochs = 6 of them",
        ):
            fit_guards.require_enough(
                self._counts(2), steps_per_epoch=2, epochs=3, new_iterator_each_epoch=False
            )

    def test_a_pipeline_feeding_several_replicas(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"holds 6 batches but the run takes 2 steps x 2 "
            r"epochs x 2 replicas it feeds = 8 of them",
        ):
            fit_guards.require_enough(
                self._counts(6, replicas=2),
                steps_per_epoch=2,
                epochs=2,
                new_iterator_each_epoch=False,
            )

    def test_an_infinite_or_unknown_dataset_is_not_judged(self):
        for dataset in (
            tf.data.Dataset.range(4).repeat(),
            tf.data.Dataset.range(4).filter(lambda x: x > 1),
        ):
            counts = fit_guards.BatchCounts(lambda context, dataset=dataset: dataset)
            counts(tf.distribute.InputContext())
            self.assertEqual(counts.pipelines, [])


class FiniteLossTest(TfTestCase):
    def _guard(self, weights_every_epoch: bool, weight: float):
        model = tf_keras.Sequential([tf_keras.layers.Input((1,)), tf_keras.layers.Dense(1)])
        model.set_weights([np.full((1, 1), weight, "float32"), np.zeros(1, "float32")])
        guard = fit_guards.FiniteLoss(0.1, weights_every_epoch=weights_every_epoch)
        guard.set_model(model)
        return guard

    def test_a_worker_with_a_finite_loss_stops_on_the_weights_it_shares(self):
        self._guard(False, np.nan).on_epoch_end(0, {"loss": 1.0})  # Not read: no verdict.
        with self.assertRaisesRegex(
            errors.Diverged,
            r"^loss: training diverged in epoch 3 \(weights "
            r"not all finite\)",
        ):
            self._guard(True, np.nan).on_epoch_end(2, {"loss": 1.0})
        self._guard(True, 1.0).on_epoch_end(2, {"loss": 1.0, "val_loss": 2.0})

    def test_an_infinite_loss(self):
        with self.assertRaisesRegex(
            errors.Diverged,
            r"^loss: training diverged in epoch 1 \(loss "
            r"inf\); .*\(learning_rate=0\.1, ",
        ):
            self._guard(False, 1.0).on_epoch_end(0, {"loss": float("inf")})


class FitGuardsTest(PolicyReset):
    """Runs that ended in a traceback, or with status 0 having done something else than asked,
    stop with one line (`tfdist.training.guards`)."""

    def _fit(
        self, train_data, validation_data=None, model=tabular_model, check_input=True, **config
    ):
        plan = tfdist.setup(run_config(global_batch_size=16, **config), train_examples=64)
        return tfdist.fit(
            plan,
            model,
            train_data,
            validation_data=validation_data,
            loss="sparse_categorical_crossentropy",
            check_input=check_input,
        )

    def test_a_count_of_training_examples_that_is_not_one(self):
        for count in (0, -5, 1.5, "100", True, float("nan"), 10**30):
            with self.subTest(count=count):
                with self.assertRaisesRegex(
                    ConfigError,
                    rf"^train_examples={count!r} is not an "
                    r"integer from 1 to 1099511627776; ",
                ):
                    tfdist.setup(run_config(steps_per_epoch=None), train_examples=count)

    def test_bad_arguments_of_fit(self):
        features, labels = tabular(64, seed=1)
        data = arrays_dataset_fn(features, labels)
        for arguments, error in (
            (dict(validation_steps=0), r"^validation_steps=0 is not an integer from 1 to "),
            (dict(validation_steps=1.5), r"^validation_steps=1.5 is not an integer from 1 "),
            (
                dict(callbacks=[tf_keras.callbacks.History(), 42]),
                r"^callbacks\[1\] is a int, not a Keras callback; pass instances of ",
            ),
            (dict(loss="not_a_loss"), r"^loss: Keras knows no loss named 'not_a_loss'; "),
            (
                dict(metrics=["accuracy", "nope"]),
                r"^metrics: Keras knows no metric named "
                r"'nope'; pass a metric name",
            ),
        ):
            with self.subTest(arguments=arguments):
                plan = tfdist.setup(run_config(global_batch_size=16), train_examples=64)
                with self.assertRaisesRegex(ConfigError, error):
                    tfdist.fit(
                        plan,
                        tabular_model,
                        data,
                        validation_data=data,
                        **{"loss": "sparse_categorical_crossentropy", **arguments},
                    )

    def test_a_dataset_function_that_returns_no_dataset(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"^train data: dataset function .*<lambda> "
            r"returned a NoneType, not a tf.data.Dataset",
        ):
            self._fit(lambda context: None)

    def test_labels_the_loss_cannot_take(self):
        features, _ = tabular(64, seed=1)
        with self.assertRaisesRegex(
            ConfigError,
            r"^train_data: model 'tabular' failed on one of "
            r"its batches \(InvalidArgumentError: Received a "
            r"label value of 7 .*\); make the dataset",
        ):
            self._fit(arrays_dataset_fn(features, np.full(64, 7)))

    def test_validation_labels_the_loss_cannot_take(self):
        features, labels = tabular(64, seed=1)
        with self.assertRaisesRegex(ConfigError, r"^validation_data: model 'tabular' failed on"):
            self._fit(
                arrays_dataset_fn(features, labels),
                arrays_dataset_fn(features, np.full(64, 7), repeat=False),
            )

    def test_features_of_strings(self):
        features, labels = tabular(64, seed=1)
        with self.assertRaisesRegex(
            ConfigError,
            r"^train_data: model 'tabular' failed on one of "
            r"its batches \(UnimplementedError: Cast string",
        ):
            self._fit(arrays_dataset_fn(features.astype(str), labels))

    def test_training_data_that_runs_out(self):
        features, labels = tabular(64, seed=1)  # 4 batches; the run takes 2 x 3.
        with self.assertRaisesRegex(
            ConfigError,
            r"^train_data: an input pipeline holds 4 "
            r"batches but the run takes 2 steps x 3 epochs = "
            r"6 of them; end the dataset with \.repeat\(\)",
        ):
            self._fit(arrays_dataset_fn(features, labels, repeat=False), epochs=3)

    def test_training_data_of_one_epoch_is_read_again_without_a_strategy(self):
        features, labels = tabular(32, seed=1)  # 2 batches: one epoch, read afresh each epoch.
        result = self._fit(arrays_dataset_fn(features, labels, repeat=False), epochs=3)
        self.assertLen(result["history"]["loss"], 3)

    def test_training_data_of_one_epoch_runs_out_under_a_strategy(self):
        features, labels = tabular(64, seed=1)  # Each replica's pipeline: 4 batches of 16.
        with self.assertRaisesRegex(
            ConfigError,
            r"holds 4 batches but the run takes 4 steps x "
            r"2 epochs = 8",
        ):
            self._fit(
                arrays_dataset_fn(features, labels, repeat=False),
                epochs=2,
                steps_per_epoch=4,
                strategy=MIRRORED,
                check_input=False,
            )  # Unsharded, and 16 per replica: what it counts.

    def test_a_loss_that_diverges(self):
        features, labels = tabular(64, seed=1)
        model_dir = self.get_temp_dir()
        with self.assertRaisesRegex(
            errors.Diverged,
            r"^loss: training diverged in epoch 1 \(loss "
            r"nan\); its checkpoint was not written\. Lower "
            r"the learning rate \(learning_rate=0.003, ",
        ):
            self._fit(
                arrays_dataset_fn(features * np.nan, labels),
                model=linear_model,
                model_dir=model_dir,
            )
        self.assertFalse(tf.io.gfile.exists(os.path.join(model_dir, "checkpoints")))

    def test_a_validation_loss_that_is_not_finite(self):
        features, labels = tabular(64, seed=1)
        with self.assertRaisesRegex(
            ConfigError,
            r"^val_loss: nan after epoch 1, while the "
            r"training loss and the weights are finite",
        ):
            self._fit(
                arrays_dataset_fn(features, labels),
                arrays_dataset_fn(features * np.nan, labels, repeat=False),
                model=linear_model,
            )


# A user's program whose second worker reads only NaN features.
_NAN_ON_ONE_WORKER = """
import tfdist

tfdist.define_flags()


def build_model():
    import tensorflow as tf
    return tf.keras.Sequential([tf.keras.layers.Input((8,)),
                                tf.keras.layers.Dense(4, activation="softmax")])


def dataset_fn(context):
    import tensorflow as tf
    features = tf.random.uniform((256, 8)) * (float("nan") if context.input_pipeline_id else 1.0)
    labels = tf.random.uniform((256,), 0, 4, tf.int64)
    return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(
        context.get_per_replica_batch_size(32))


def main(argv):
    plan = tfdist.setup(tfdist.config_from_flags(), train_examples=32)
    tfdist.fit(plan, build_model, dataset_fn, validation_data=None,
               loss="sparse_categorical_crossentropy")


if __name__ == "__main__":
    tfdist.run(main)
"""


@pytest.mark.multiprocess
class DivergenceUnderMultiWorkerTest(TfTestCase):
    def test_every_worker_stops_at_the_same_epoch(self):
        script = os.path.join(self.get_temp_dir(), "nan_on_one_worker.py")
        with open(script, "w", encoding="utf-8") as file:
            file.write(_NAN_ON_ONE_WORKER)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tfdist",
                "launch",
                "--num_workers=2",
                "--timeout_s=240",
                "--",
                sys.executable,
                script,
                "--epochs=3",
                "--global_batch_size=32",
                "--collective_timeout_s=120",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        self.assertEqual(result.returncode, 1, result.stderr[-3000:])  # A failed run, not usage.
        self.assertRegex(
            result.stdout + result.stderr, r"\] .*: error: loss: training diverged in epoch 1 "
        )
        self.assertNotIn("Epoch 2/3", result.stdout + result.stderr)
