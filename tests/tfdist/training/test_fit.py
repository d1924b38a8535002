"""tfdist's public `setup` and `fit` in-process (`tfdist.training.fit`): the built-in job
(strategy x precision), a user's own model and data (dataset function, `tfdist.Records`), and the
API's entry points given what they cannot take (the tabular job: tests/tfdist/training/tabular)."""

import contextlib
import io
import math
import os
import stat
import tempfile
from unittest import mock

import pytest
import tensorflow as tf
import tf_keras
from absl import flags
from absl.testing import parameterized

import tfdist
from tests import scratch_files
from tests.tfdist.training.tabular import FEATURES
from tests.tfdist.training.tabular import MIRRORED
from tests.tfdist.training.tabular import PolicyReset
from tests.tfdist.training.tabular import run_config
from tests.tfdist.training.tabular import tabular
from tests.tfdist.training.tabular import tabular_dataset_fn
from tests.tfdist.training.tabular import tabular_model
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import InputConfigError
from tfdist.training import data
from tfdist.training import from_config as train_command
from tfdist.training import summary
from tfdist.errors import ResultNotSaved
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import Precision
from tfdist.runtime.config import RunConfig
from tfdist.runtime.optimizer_config import OptimizerConfig


class BuiltInJobTest(PolicyReset, parameterized.TestCase):
    """`tfdist train`'s path: `train_command.train`, built on `setup` and `fit`."""

    @pytest.fixture(autouse=True)
    def _data_dir(self, shapes_data_dir):
        self.data_dir = shapes_data_dir

    @parameterized.product(
        strategy=[dict(strategy="one_device"), MIRRORED],
        mixed_precision=[Precision.FLOAT32, Precision.MIXED_FLOAT16, Precision.MIXED_BFLOAT16],
    )
    def test_fits_under_strategy_and_precision(self, strategy, mixed_precision):
        result = train_command.train(
            run_config(
                self.data_dir,
                strategy=strategy,
                mixed_precision=mixed_precision,
                steps_per_execution=2,
            )
        )
        self.assertEqual((result["steps_per_epoch"], result["steps"]), (2, 2))
        self.assertEqual(set(result["final"]), {"loss", "accuracy", "val_loss", "val_accuracy"})
        self.assertTrue(math.isfinite(result["final"]["loss"]))
        self.assertGreater(result["examples_per_sec"], 0)
        self.assertEqual(
            (result["model"], result["dataset"], result["role"]), ("small_cnn", "shapes", "train")
        )

    @parameterized.parameters(Precision.FLOAT32, Precision.MIXED_BFLOAT16)
    def test_device_preprocessing_under_mirrored(self, mixed_precision):
        result = train_command.train(
            run_config(
                self.data_dir,
                preprocess_on="device",
                strategy=MIRRORED,
                mixed_precision=mixed_precision,
            )
        )
        self.assertTrue(math.isfinite(result["final"]["val_loss"]))

    def test_batch_that_does_not_split_over_replicas(self):
        with self.assertRaisesRegex(
            InputConfigError,
            r"global_batch_size=5 does not split evenly over 2 replicas.*"
            r"e.g. global_batch_size=4 or 6",
        ):
            tfdist.setup(run_config(self.data_dir, global_batch_size=5, strategy=MIRRORED))

    def test_whole_epoch_steps_come_from_the_split_size(self):
        config = RunConfig(input=InputConfig(data_dir=self.data_dir, global_batch_size=10**6))
        with self.assertRaisesRegex(ConfigError, r"global_batch_size=1000000 is larger than the"):
            tfdist.setup(config)


class UserModelAndDataTest(PolicyReset, parameterized.TestCase):
    """`fit` with a user's model function and dataset function or records."""

    @parameterized.parameters(dict(strategy="one_device"), MIRRORED)
    def test_a_users_model_learns_a_users_data(self, **strategy):
        plan = tfdist.setup(
            run_config(
                global_batch_size=32,
                strategy=strategy,
                epochs=3,
                steps_per_epoch=None,
                validation_steps=None,
            ),
            train_examples=512,
        )
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            result = tfdist.fit(
                plan,
                tabular_model,
                tabular_dataset_fn(32),
                validation_data=tabular_dataset_fn(32, 128, training=False),
                loss="sparse_categorical_crossentropy",
                metrics=["accuracy"],
            )
        self.assertEqual(
            stdout.getvalue().splitlines()[-1],  # As `tfdist train` shows it.
            summary.format_line(result),
        )
        self.assertEqual(result["model"], "tabular")
        self.assertIn("tabular_dataset_fn", result["dataset"])
        self.assertGreater(result["final"]["val_accuracy"], 0.85)

    def test_a_summary_that_cannot_be_written_is_printed_first(self):
        with tempfile.TemporaryDirectory() as scratch:
            full = scratch_files.device(scratch, "full", scratch_files.FULL)
            plan = tfdist.setup(
                run_config(
                    global_batch_size=32,
                    epochs=1,
                    steps_per_epoch=2,
                    validation_steps=None,
                    metrics_json=full,
                ),
                train_examples=64,
            )
            stdout = io.StringIO()
            with (
                contextlib.redirect_stdout(stdout),
                self.assertRaisesRegex(
                    ResultNotSaved,
                    rf"^metrics_json='{full}': could not "
                    r"write it \(No space left on "
                    r"device\); .* \(The summary line is "
                    r"above\.\)$",
                ) as raised,
            ):
                tfdist.fit(
                    plan,
                    tabular_model,
                    tabular_dataset_fn(32),
                    loss="sparse_categorical_crossentropy",
                )
            self.assertEqual(
                stdout.getvalue().splitlines()[-1], summary.format_line(raised.exception.summary)
            )
            self.assertTrue(stat.S_ISCHR(os.stat(full).st_mode))

    def test_records_with_a_dict_of_features(self):
        directory = self.get_temp_dir()
        features, labels = tabular(256, seed=3)
        for index in range(2):
            with tf.io.TFRecordWriter(os.path.join(directory, f"t-{index}.tfrecord")) as writer:
                for row, label in zip(features[index::2], labels[index::2]):
                    writer.write(
                        tf.train.Example(
                            features=tf.train.Features(
                                feature={
                                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=row)),
                                    "y": tf.train.Feature(
                                        int64_list=tf.train.Int64List(value=[label])
                                    ),
                                }
                            )
                        ).SerializeToString()
                    )

        def parse(serialized):
            parsed = tf.io.parse_example(
                serialized,
                {
                    "x": tf.io.FixedLenFeature([FEATURES], tf.float32),
                    "y": tf.io.FixedLenFeature([], tf.int64),
                },
            )
            return {"x": parsed["x"]}, parsed["y"]

        def model():
            inputs = tf_keras.Input((FEATURES,), name="x")
            return tf_keras.Model(
                {"x": inputs},
                tf_keras.layers.Dense(2, activation="softmax")(inputs),
                name="dict_model",
            )

        plan = tfdist.setup(
            run_config(
                global_batch_size=32, strategy=MIRRORED, steps_per_epoch=None, validation_steps=None
            ),
            train_examples=256,
        )
        records = tfdist.Records(os.path.join(directory, "*.tfrecord"), parse)
        # Validation on the same records without num_examples: one pass, its size counted.
        self.assertEqual(data.validation_steps(plan, records), 8)
        result = tfdist.fit(
            plan,
            model,
            records,
            validation_data=records,
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
        self.assertEqual(result["steps_per_epoch"], 8)
        self.assertTrue(math.isfinite(result["final"]["loss"]))
        self.assertTrue(math.isfinite(result["final"]["val_loss"]))

    def _plan(self, **config):
        return tfdist.setup(run_config(global_batch_size=16, **config), train_examples=64)

    def test_an_uncompiled_model_needs_a_loss(self):
        with self.assertRaisesRegex(ConfigError, r"^loss: the model is not compiled; pass "):
            tfdist.fit(self._plan(), tabular_model, tabular_dataset_fn(16))

    def test_a_model_built_outside_the_scope(self):
        plan = self._plan(strategy=MIRRORED)
        with self.assertRaisesRegex(
            ConfigError,
            r"^model 'tabular' was built outside "
            r"plan.strategy.scope\(\); pass a function",
        ):
            tfdist.fit(plan, tabular_model(), tabular_dataset_fn(16), loss="mse")

    def test_a_function_that_returns_no_model(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"returned a builtins.NoneType, not a tf-keras "
            r"model",
        ):
            tfdist.fit(self._plan(), lambda: None, tabular_dataset_fn(16), loss="mse")

    def test_batches_that_do_not_fit_the_model(self):
        def wide_model():
            return tf_keras.Sequential(
                [tf_keras.layers.Input((FEATURES + 1,)), tf_keras.layers.Dense(2)], name="wide"
            )

        with self.assertRaisesRegex(
            ConfigError,
            r"^train_data: its batches do not fit model "
            r"'wide' \(.*\); make the dataset yield",
        ):
            tfdist.fit(
                self._plan(),
                wide_model,
                tabular_dataset_fn(16),
                loss="sparse_categorical_crossentropy",
            )

    def test_data_that_is_not_data(self):
        with self.assertRaisesRegex(ConfigError, r"^train data is a int; pass a dataset "):
            tfdist.fit(self._plan(), tabular_model, 3, loss="mse")


class ApiArgumentsTest(PolicyReset):
    """The public API's entry points given what they cannot take: one line each."""

    @pytest.fixture(autouse=True)
    def _data_dir(self, shapes_data_dir):
        self.data_dir = shapes_data_dir

    def test_configs_of_the_wrong_kind(self):
        with self.assertRaisesRegex(ConfigError, r"^strategy is a dict, not a StrategyConfig; "):
            RunConfig(strategy={"strategy": "mirrored"})
        with self.assertRaisesRegex(ConfigError, r"^learning_rate='0.1' is not a finite number"):
            OptimizerConfig(learning_rate="0.1")
        with self.assertRaisesRegex(ConfigError, r"^config is a NoneType, not a RunConfig; "):
            tfdist.setup(None)

    def test_something_else_than_a_plan(self):
        for call in (
            lambda: tfdist.fit(None, tabular_model),
            lambda: tfdist.dataset_fn({}, tabular_dataset_fn(16), "train", training=True),
            lambda: tfdist.CustomLoop("plan", tabular_model),
        ):
            with self.assertRaisesRegex(
                ConfigError,
                r"^plan is a \w+, not a Plan; pass what "
                r"tfdist.setup\(config\) returned\.$",
            ):
                call()

    def test_a_split_the_dataset_does_not_have(self):
        plan = tfdist.setup(run_config(data_dir=self.data_dir))
        with self.assertRaisesRegex(
            InputConfigError,
            r"^split='test': dataset='shapes' has no "
            r"such split; pass one of 'train', ",
        ):
            tfdist.dataset_fn(plan, plan.config.input, "test", training=False)(
                tf.distribute.InputContext()
            )

    def test_the_config_from_flags_before_they_are_parsed(self):
        with mock.patch.object(flags.FlagValues, "is_parsed", return_value=False):
            with self.assertRaisesRegex(
                ConfigError,
                r"^config_from_flags: the flags are not "
                r"parsed yet; call it in the main that ",
            ):
                tfdist.config_from_flags()


if __name__ == "__main__":
    tf.test.main()
