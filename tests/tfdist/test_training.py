"""tfdist's public `setup` and `fit` in-process: the built-in job (strategy x precision) and a
user's own model and data (dataset function, `tfdist.Records`), with the errors a user meets."""

import math
import os
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from absl import flags
from absl.testing import parameterized

import tfdist
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import InputConfigError
from tfdist.strategies import StrategyConfig
from tfdist.training import from_config as train_command
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import Precision
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.runtime.config import OptimizerConfig

_MIRRORED = dict(strategy="mirrored", num_cpu_devices=2)
_FEATURES = 6


def _config(data_dir=None, global_batch_size=16, preprocess_on="auto", strategy=None,
            optimizer=None, **train) -> RunConfig:
    return RunConfig(
        strategy=StrategyConfig(**(strategy or {})),
        input=InputConfig(data_dir=data_dir, global_batch_size=global_batch_size,
                          preprocess_on=preprocess_on),
        optimizer=optimizer or OptimizerConfig(),
        train=TrainConfig(**{"epochs": 1, "steps_per_epoch": 2, "validation_steps": 1,
                             **train}))


def _tabular(count: int, seed: int):
    """Features whose sign pattern decides the label: learnable in a few steps."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(count, _FEATURES)).astype("float32")
    return features, (features[:, 0] + features[:, 1] > 0).astype("int64")


def tabular_dataset_fn(global_batch_size: int, count: int = 512, training: bool = True):
    features, labels = _tabular(count, seed=int(training))

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices((features, labels)).shard(
            context.num_input_pipelines, context.input_pipeline_id)
        dataset = dataset.repeat() if training else dataset
        return dataset.batch(context.get_per_replica_batch_size(global_batch_size))
    return make


def tabular_model() -> tf_keras.Model:
    return tf_keras.Sequential([tf_keras.layers.Input((_FEATURES,)),
                                tf_keras.layers.Dense(16, activation="relu"),
                                tf_keras.layers.Dense(2, activation="softmax", dtype="float32")],
                               name="tabular")


class _PolicyReset(tf.test.TestCase):

    def tearDown(self):
        tf_keras.mixed_precision.set_global_policy("float32")
        super().tearDown()


class BuiltInJobTest(_PolicyReset, parameterized.TestCase):
    """`tfdist train`'s path: `train_command.train`, built on `setup` and `fit`."""

    @pytest.fixture(autouse=True)
    def _data_dir(self, shapes_data_dir):
        self.data_dir = shapes_data_dir

    @parameterized.product(
        strategy=[dict(strategy="one_device"), _MIRRORED],
        mixed_precision=[Precision.FLOAT32, Precision.MIXED_FLOAT16, Precision.MIXED_BFLOAT16])
    def test_fits_under_strategy_and_precision(self, strategy, mixed_precision):
        result = train_command.train(_config(self.data_dir, strategy=strategy,
                                             mixed_precision=mixed_precision,
                                             steps_per_execution=2))
        self.assertEqual((result["steps_per_epoch"], result["steps"]), (2, 2))
        self.assertEqual(set(result["final"]), {"loss", "accuracy", "val_loss", "val_accuracy"})
        self.assertTrue(math.isfinite(result["final"]["loss"]))
        self.assertGreater(result["examples_per_sec"], 0)
        self.assertEqual((result["model"], result["dataset"], result["role"]),
                         ("small_cnn", "shapes", "train"))

    @parameterized.parameters(Precision.FLOAT32, Precision.MIXED_BFLOAT16)
    def test_device_preprocessing_under_mirrored(self, mixed_precision):
        result = train_command.train(_config(self.data_dir, preprocess_on="device",
                                             strategy=_MIRRORED, mixed_precision=mixed_precision))
        self.assertTrue(math.isfinite(result["final"]["val_loss"]))

    def test_batch_that_does_not_split_over_replicas(self):
        with self.assertRaisesRegex(
                InputConfigError, r"global_batch_size=5 does not split evenly over 2 replicas.*"
                                  r"e.g. global_batch_size=4 or 6"):
            tfdist.setup(_config(self.data_dir, global_batch_size=5, strategy=_MIRRORED))

    def test_whole_epoch_steps_come_from_the_split_size(self):
        config = RunConfig(input=InputConfig(data_dir=self.data_dir, global_batch_size=10 ** 6))
        with self.assertRaisesRegex(ConfigError, r"global_batch_size=1000000 is larger than the"):
            tfdist.setup(config)


class PlanTest(_PolicyReset):

    def test_steps_from_the_size_of_the_users_data(self):
        plan = tfdist.setup(_config(steps_per_epoch=None), train_examples=1000)
        self.assertEqual((plan.steps_per_epoch, plan.steps_from), (62, "train_examples"))

    def test_a_python_dataset_needs_steps(self):
        config = RunConfig(input=InputConfig(dataset="python:my_data:splits"))
        with self.assertRaisesRegex(ConfigError, r"^dataset='python:my_data:splits' does not "
                                                 r"say how many training examples it has; set "
                                                 r"steps_per_epoch=N\.$"):
            tfdist.setup(config)


class UserModelAndDataTest(_PolicyReset, parameterized.TestCase):
    """`fit` with a user's model function and dataset function or records."""

    @parameterized.parameters(dict(strategy="one_device"), _MIRRORED)
    def test_a_users_model_learns_a_users_data(self, **strategy):
        plan = tfdist.setup(_config(global_batch_size=32, strategy=strategy, epochs=3,
                                    steps_per_epoch=None, validation_steps=None),
                            train_examples=512)
        result = tfdist.fit(plan, tabular_model, tabular_dataset_fn(32),
                            validation_data=tabular_dataset_fn(32, 128, training=False),
                            loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        self.assertEqual(result["model"], "tabular")
        self.assertIn("tabular_dataset_fn", result["dataset"])
        self.assertGreater(result["final"]["val_accuracy"], 0.85)

    def test_records_with_a_dict_of_features(self):
        directory = self.get_temp_dir()
        features, labels = _tabular(256, seed=3)
        for index in range(2):
            with tf.io.TFRecordWriter(os.path.join(directory, f"t-{index}.tfrecord")) as writer:
                for row, label in zip(features[index::2], labels[index::2]):
                    writer.write(tf.train.Example(features=tf.train.Features(feature={
                        "x": tf.train.Feature(float_list=tf.train.FloatList(value=row)),
                        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                    })).SerializeToString())

        def parse(serialized):
            parsed = tf.io.parse_example(serialized, {
                "x": tf.io.FixedLenFeature([_FEATURES], tf.float32),
                "y": tf.io.FixedLenFeature([], tf.int64)})
            return {"x": parsed["x"]}, parsed["y"]

        def model():
            inputs = tf_keras.Input((_FEATURES,), name="x")
            return tf_keras.Model({"x": inputs}, tf_keras.layers.Dense(2, activation="softmax")(
                inputs), name="dict_model")

        plan = tfdist.setup(_config(global_batch_size=32, strategy=_MIRRORED,
                                    steps_per_epoch=None, validation_steps=None),
                            train_examples=256)
        result = tfdist.fit(plan, model, tfdist.Records(os.path.join(directory, "*.tfrecord"),
                                                        parse),
                            loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        self.assertEqual(result["steps_per_epoch"], 8)
        self.assertTrue(math.isfinite(result["final"]["loss"]))

    def _plan(self, **config):
        return tfdist.setup(_config(global_batch_size=16, **config), train_examples=64)

    def test_an_uncompiled_model_needs_a_loss(self):
        with self.assertRaisesRegex(ConfigError, r"^loss: the model is not compiled; pass "):
            tfdist.fit(self._plan(), tabular_model, tabular_dataset_fn(16))

    def test_a_model_built_outside_the_scope(self):
        plan = self._plan(strategy=_MIRRORED)
        with self.assertRaisesRegex(ConfigError, r"^model 'tabular' was built outside "
                                                 r"plan.strategy.scope\(\); pass a function"):
            tfdist.fit(plan, tabular_model(), tabular_dataset_fn(16), loss="mse")

    def test_a_function_that_returns_no_model(self):
        with self.assertRaisesRegex(ConfigError, r"returned a builtins.NoneType, not a tf-keras "
                                                 r"model"):
            tfdist.fit(self._plan(), lambda: None, tabular_dataset_fn(16), loss="mse")

    def test_batches_that_do_not_fit_the_model(self):
        def wide_model():
            return tf_keras.Sequential([tf_keras.layers.Input((_FEATURES + 1,)),
                                        tf_keras.layers.Dense(2)], name="wide")
        with self.assertRaisesRegex(ConfigError, r"^train_data: its batches do not fit model "
                                                 r"'wide' \(.*\); make the dataset yield"):
            tfdist.fit(self._plan(), wide_model, tabular_dataset_fn(16),
                       loss="sparse_categorical_crossentropy")

    def test_data_that_is_not_data(self):
        with self.assertRaisesRegex(ConfigError, r"^train data is a int; pass a dataset "):
            tfdist.fit(self._plan(), tabular_model, 3, loss="mse")


def _arrays_dataset_fn(features, labels, *, repeat: bool = True):
    """A dataset function over the whole arrays, in batches of 16."""
    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        del context
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        return (dataset.repeat() if repeat else dataset).batch(16, drop_remainder=True)
    return make


def _linear_model() -> tf_keras.Model:
    """A model that passes NaN inputs on to its loss (a ReLU turns them into zeros)."""
    return tf_keras.Sequential([tf_keras.layers.Input((_FEATURES,)),
                                tf_keras.layers.Dense(2, activation="softmax")], name="linear")


class FitGuardsTest(_PolicyReset):
    """Runs that ended in a traceback, or with status 0 having done something else than asked,
    stop with one line (`tfdist.training.guards`)."""

    def _fit(self, train_data, validation_data=None, model=tabular_model, **config):
        plan = tfdist.setup(_config(global_batch_size=16, **config), train_examples=64)
        return tfdist.fit(plan, model, train_data, validation_data=validation_data,
                          loss="sparse_categorical_crossentropy")

    def test_a_count_of_training_examples_that_is_not_one(self):
        for count in (0, -5, 1.5, "100", True, float("nan"), 10**30):
            with self.subTest(count=count):
                with self.assertRaisesRegex(ConfigError, rf"^train_examples={count!r} is not an "
                                                         r"integer from 1 to 1099511627776; "):
                    tfdist.setup(_config(steps_per_epoch=None), train_examples=count)

    def test_bad_arguments_of_fit(self):
        features, labels = _tabular(64, seed=1)
        data = _arrays_dataset_fn(features, labels)
        for arguments, error in (
                (dict(validation_steps=0), r"^validation_steps=0 is not an integer from 1 to "),
                (dict(validation_steps=1.5), r"^validation_steps=1.5 is not an integer from 1 "),
                (dict(callbacks=[tf_keras.callbacks.History(), 42]),
                 r"^callbacks\[1\] is a int, not a Keras callback; pass instances of "),
                (dict(loss="not_a_loss"), r"^loss: Keras knows no loss named 'not_a_loss'; "),
                (dict(metrics=["accuracy", "nope"]), r"^metrics: Keras knows no metric named "
                                                     r"'nope'; pass a metric name")):
            with self.subTest(arguments=arguments):
                plan = tfdist.setup(_config(global_batch_size=16), train_examples=64)
                with self.assertRaisesRegex(ConfigError, error):
                    tfdist.fit(plan, tabular_model, data, validation_data=data,
                               **{"loss": "sparse_categorical_crossentropy", **arguments})

    def test_a_dataset_function_that_returns_no_dataset(self):
        with self.assertRaisesRegex(ConfigError, r"^train data: dataset function .*<lambda> "
                                                 r"returned a NoneType, not a tf.data.Dataset"):
            self._fit(lambda context: None)

    def test_labels_the_loss_cannot_take(self):
        features, _ = _tabular(64, seed=1)
        with self.assertRaisesRegex(ConfigError, r"^train_data: model 'tabular' failed on one of "
                                                 r"its batches \(InvalidArgumentError: Received a "
                                                 r"label value of 7 .*\); make the dataset"):
            self._fit(_arrays_dataset_fn(features, np.full(64, 7)))

    def test_validation_labels_the_loss_cannot_take(self):
        features, labels = _tabular(64, seed=1)
        with self.assertRaisesRegex(ConfigError, r"^validation_data: model 'tabular' failed on"):
            self._fit(_arrays_dataset_fn(features, labels),
                      _arrays_dataset_fn(features, np.full(64, 7), repeat=False))

    def test_features_of_strings(self):
        features, labels = _tabular(64, seed=1)
        with self.assertRaisesRegex(ConfigError, r"^train_data: model 'tabular' failed on one of "
                                                 r"its batches \(UnimplementedError: Cast string"):
            self._fit(_arrays_dataset_fn(features.astype(str), labels))

    def test_training_data_that_runs_out(self):
        features, labels = _tabular(64, seed=1)  # 4 batches; the run takes 2 x 3.
        with self.assertRaisesRegex(ConfigError, r"^train_data: an input pipeline holds 4 "
                                                 r"batches but the run takes 2 steps x 3 epochs = "
                                                 r"6 of them; end the dataset with \.repeat\(\)"):
            self._fit(_arrays_dataset_fn(features, labels, repeat=False), epochs=3)

    def test_training_data_of_one_epoch_is_read_again_without_a_strategy(self):
        features, labels = _tabular(32, seed=1)  # 2 batches: one epoch, read afresh each epoch.
        result = self._fit(_arrays_dataset_fn(features, labels, repeat=False), epochs=3)
        self.assertLen(result["history"]["loss"], 3)

    def test_training_data_of_one_epoch_runs_out_under_a_strategy(self):
        features, labels = _tabular(64, seed=1)  # Each replica's pipeline: 4 batches of 16.
        with self.assertRaisesRegex(ConfigError, r"holds 4 batches but the run takes 4 steps x "
                                                 r"2 epochs = 8"):
            self._fit(_arrays_dataset_fn(features, labels, repeat=False), epochs=2,
                      steps_per_epoch=4, strategy=_MIRRORED)

    def test_a_loss_that_diverges(self):
        features, labels = _tabular(64, seed=1)
        model_dir = self.get_temp_dir()
        with self.assertRaisesRegex(ConfigError, r"^loss: training diverged in epoch 1 \(loss "
                                                 r"nan\); its checkpoint was not written\. Lower "
                                                 r"the learning rate \(--learning_rate=0.003, "):
            self._fit(_arrays_dataset_fn(features * np.nan, labels), model=_linear_model,
                      model_dir=model_dir)
        self.assertFalse(tf.io.gfile.exists(os.path.join(model_dir, "checkpoints")))

    def test_a_validation_loss_that_is_not_finite(self):
        features, labels = _tabular(64, seed=1)
        with self.assertRaisesRegex(ConfigError, r"^val_loss: nan after epoch 1, while the "
                                                 r"training loss and the weights are finite"):
            self._fit(_arrays_dataset_fn(features, labels),
                      _arrays_dataset_fn(features * np.nan, labels, repeat=False),
                      model=_linear_model)


class ApiArgumentsTest(_PolicyReset):
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
        for call in (lambda: tfdist.fit(None, tabular_model),
                     lambda: tfdist.dataset_fn({}, tabular_dataset_fn(16), "train",
                                               training=True),
                     lambda: tfdist.CustomLoop("plan", tabular_model)):
            with self.assertRaisesRegex(ConfigError, r"^plan is a \w+, not a Plan; pass what "
                                                     r"tfdist.setup\(config\) returned\.$"):
                call()

    def test_a_split_the_dataset_does_not_have(self):
        plan = tfdist.setup(_config(data_dir=self.data_dir))
        with self.assertRaisesRegex(InputConfigError, r"^split='test': dataset='shapes' has no "
                                                      r"such split; pass one of 'train', "):
            tfdist.dataset_fn(plan, plan.config.input, "test", training=False)(
                tf.distribute.InputContext())

    def test_the_config_from_flags_before_they_are_parsed(self):
        with mock.patch.object(flags.FlagValues, "is_parsed", return_value=False):
            with self.assertRaisesRegex(ConfigError, r"^config_from_flags: the flags are not "
                                                     r"parsed yet; call it in the main that "):
                tfdist.config_from_flags()


class CustomLoopTest(_PolicyReset):

    def test_a_loop_learns_and_resumes_from_its_checkpoint(self):
        model_dir = self.get_temp_dir()
        config = _config(global_batch_size=32, strategy=_MIRRORED, steps_per_epoch=16,
                         model_dir=model_dir)
        plan = tfdist.setup(config)

        def run_epochs(epochs):
            loop = tfdist.CustomLoop(plan, tabular_model)
            batches = loop.distribute(tabular_dataset_fn(32))
            loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
                reduction=tf_keras.losses.Reduction.NONE)

            def step(features, labels):
                with tf.GradientTape() as tape:
                    loss = loop.scale_loss(loss_fn(labels, loop.model(features, training=True)))
                loop.minimize(loss, tape)
                return loss

            first = loop.restore()
            losses = []
            for epoch in range(first, epochs):
                losses.append(loop.run(step, batches, plan.steps_per_epoch))
                loop.save(epoch + 1)
            return first, losses

        first, losses = run_epochs(2)
        self.assertEqual(first, 0)
        self.assertLess(losses[-1], losses[0])
        first, losses = run_epochs(3)
        self.assertEqual((first, len(losses)), (2, 1))

    def _loop_and_step(self, model_dir=None, model=tabular_model):
        plan = tfdist.setup(_config(global_batch_size=16, model_dir=model_dir), train_examples=64)
        loop = tfdist.CustomLoop(plan, model)

        def step(features, labels):
            with tf.GradientTape() as tape:
                loss = loop.scale_loss(tf_keras.losses.sparse_categorical_crossentropy(
                    labels, loop.model(features, training=True)))
            loop.minimize(loss, tape)
            return loss
        return loop, step

    def test_bad_input_to_a_loop(self):
        with self.assertRaisesRegex(ConfigError, r"^model function .* returned a "
                                                 r"builtins.NoneType, not a tf-keras model"):
            self._loop_and_step(model=lambda: None)
        loop, step = self._loop_and_step()
        features, labels = _tabular(64, seed=1)
        finite = loop.distribute(_arrays_dataset_fn(features, labels, repeat=False))
        for steps in (0, -1, 1.5):
            with self.assertRaisesRegex(ConfigError, rf"^steps={steps} is not an integer from 1 "):
                loop.run(step, finite, steps)
        with self.assertRaisesRegex(ConfigError, r"^dataset: it ran out of batches before the "
                                                 r"run's last step; end the dataset with"):
            loop.run(step, finite, 5)  # It holds 4.
        with self.assertRaisesRegex(ConfigError, r"^epochs_done=-1 is not an integer from 0 "):
            loop.save(-1)

    def test_a_checkpoint_of_another_model(self):
        model_dir = self.get_temp_dir()
        self._loop_and_step(model_dir)[0].save(1)

        def wider():
            return tf_keras.Sequential([tf_keras.layers.Input((_FEATURES,)),
                                        tf_keras.layers.Dense(7), tf_keras.layers.Dense(2)])
        loop, _ = self._loop_and_step(model_dir, wider)
        with self.assertRaisesRegex(ConfigError, rf"^model_dir='{model_dir}': the checkpoint a "
                                                 r"loop left there cannot be restored into this "
                                                 r"one \(.*incompatible.*\); resume it with"):
            loop.restore()


if __name__ == "__main__":
    tf.test.main()
