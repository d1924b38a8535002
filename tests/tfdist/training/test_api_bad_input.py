"""The Python API's bad-input corpus: configs, `tfdist.train` and `fit`'s arguments given values
of the wrong type, and a dataset whose Python code raises, each refused with one ConfigError line
that names the field and the value (the command line's is tests/tfdist/commands/
test_bad_input_corpus.py)."""

import functools
import pathlib
import sys
import types
from unittest import mock

import tensorflow as tf
import tf_keras
from absl.testing import parameterized

import tfdist
from tfdist.runtime import tf_import
from tfdist.runtime.config import ConfigError
from tfdist.strategies import StrategyKind
from tfdist.training import data
from tfdist.training import guards
from tfdist.training.keras2 import fit as keras2_fit
from tfdist.training import model as training_model
from tfdist.training import models
from tests.tf_test_case import TfTestCase


def _one_line(test, error: Exception, *expected: str) -> None:
    test.assertNotIn("\n", str(error))
    for text in expected:
        test.assertIn(text, str(error))


class ConfigTypesTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("model_list", tfdist.TrainConfig, {"model": ["a"]}, "model=['a']"),
        ("backup_every_int", tfdist.TrainConfig, {"backup_every": 5}, "backup_every=5"),
        ("backup_every_none", tfdist.TrainConfig, {"backup_every": None}, "backup_every=None"),
        ("backup_every_arabic", tfdist.TrainConfig, {"backup_every": "١٢"}, "backup_every="),
        ("model_dir_int", tfdist.TrainConfig, {"model_dir": 123}, "model_dir=123"),
        ("metrics_json_list", tfdist.TrainConfig, {"metrics_json": ["a"]}, "metrics_json=['a']"),
        (
            "boundaries_strings",
            tfdist.OptimizerConfig,
            {"lr_step_boundaries": ["a"]},
            "lr_step_boundaries=['a']",
        ),
        (
            "boundaries_int",
            tfdist.OptimizerConfig,
            {"lr_step_boundaries": 5},
            "lr_step_boundaries=5",
        ),
        (
            "boundaries_huge",
            tfdist.OptimizerConfig,
            {"lr_schedule": "step", "lr_step_boundaries": [10**400]},
            "lr_step_boundaries=",
        ),
        (
            "lars_exclude_int",
            tfdist.OptimizerConfig,
            {"optimizer": "lars", "lars_exclude": 5},
            "lars_exclude=5",
        ),
    )
    def test_a_value_of_the_wrong_type(self, kind, arguments, named):
        with self.assertRaises(ConfigError) as raised:
            kind(**arguments)
        _one_line(self, raised.exception, named)

    def test_a_path_object_is_a_path(self):
        self.assertEqual(
            tfdist.TrainConfig(model_dir=pathlib.Path("/tmp/run")).model_dir, "/tmp/run"
        )

    def test_images_too_small_for_the_model(self):
        for model, size, smallest in (("small_cnn", 1, 4), ("resnet50", 8, 32)):
            with self.subTest(model=model), self.assertRaises(ConfigError) as raised:
                tfdist.RunConfig(
                    input=tfdist.InputConfig(image_size=size), train=tfdist.TrainConfig(model=model)
                )
            _one_line(self, raised.exception, f"image_size={size}", f"{smallest}x{smallest}")
        with self.assertRaisesRegex(ConfigError, r"image_size=16 is too small .*'resnet50'"):
            models.build("resnet50", (16, 16, 3), 10)
        tfdist.RunConfig(
            input=tfdist.InputConfig(image_size=1), train=tfdist.TrainConfig(model="resnet20")
        )


def _two_arguments(a, b):
    del a, b


class TrainAndFitArgumentsTest(TfTestCase):
    def test_train_takes_a_run_config(self):
        for value in ("x", None):
            with self.subTest(value=value), self.assertRaises(ConfigError) as raised:
                tfdist.train(value)
            _one_line(self, raised.exception, "config:", repr(value), "RunConfig")

    def test_a_model_function_that_takes_arguments(self):
        with self.assertRaises(ConfigError) as raised:
            training_model._check_no_arguments(_two_arguments)  # pylint: disable=protected-access
        _one_line(self, raised.exception, "_two_arguments needs arguments", "functools.partial")
        training_model._check_no_arguments(  # pylint: disable=protected-access
            functools.partial(_two_arguments, 1, 2)
        )

    def test_a_loss_or_metric_that_is_neither_a_name_nor_callable(self):
        for loss, metrics, named in (
            (42, None, "loss: 42"),
            ("mse", [42], "metrics: 42"),
            ("mse", 42, "metrics=42"),
            ("mse", {"out": [None]}, "metrics: None"),
        ):
            with self.subTest(named=named), self.assertRaises(ConfigError) as raised:
                guards.check_compile_names(tf_keras, loss, metrics)
            _one_line(self, raised.exception, named)
        guards.check_compile_names(
            tf_keras, tf_keras.losses.MeanSquaredError(), ["accuracy", tf_keras.metrics.AUC()]
        )

    def test_a_callback_with_batch_hooks_under_parameter_server(self):
        class EveryStep(tf_keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                del batch, logs

        class EveryEpoch(tf_keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                del epoch, logs

        ps_plan = types.SimpleNamespace(kind=StrategyKind.PARAMETER_SERVER)
        with self.assertRaises(ConfigError) as raised:
            keras2_fit._check_batch_hooks(ps_plan, [EveryEpoch(), EveryStep()])  # pylint: disable=protected-access
        _one_line(self, raised.exception, "callbacks[1] (EveryStep) has batch hooks", "epoch hooks")
        reads_no_logs = EveryStep()
        reads_no_logs._supports_tf_logs = True  # pylint: disable=protected-access
        keras2_fit._check_batch_hooks(ps_plan, [EveryEpoch(), reads_no_logs])  # pylint: disable=protected-access
        mirrored_plan = types.SimpleNamespace(kind=StrategyKind.MIRRORED)
        keras2_fit._check_batch_hooks(mirrored_plan, [EveryStep()])  # pylint: disable=protected-access

    def test_a_dataset_whose_python_code_raises_names_its_function(self):
        def generator():
            yield 1.0
            raise RuntimeError("boom in generator")

        def dataset_fn(context):
            del context
            return tf.data.Dataset.from_generator(
                generator, output_signature=tf.TensorSpec((), tf.float32)
            )

        with self.assertRaises(tf.errors.OpError) as failed:
            list(dataset_fn(None))
        with self.assertRaises(ConfigError) as raised:
            data.explain(dataset_fn, failed.exception)
        _one_line(
            self,
            raised.exception,
            "train_data: dataset function",
            "dataset_fn",
            "RuntimeError: boom in generator",
        )


class TensorFlowUnavailableTest(TfTestCase):
    def test_a_tensorflow_that_cannot_load_is_one_line(self):
        with (
            mock.patch.dict(sys.modules, {"tensorflow": None}),
            self.assertRaises(tf_import.TensorFlowUnavailable) as raised,
        ):
            tf_import._import()  # pylint: disable=protected-access
        _one_line(self, raised.exception, "TensorFlow cannot load", "ulimit -v")
        self.assertIsInstance(raised.exception, ConfigError)

    def test_too_little_address_space_is_refused_before_the_import(self):
        with (
            mock.patch.object(tf_import.resource, "getrlimit", return_value=(1 << 30, 1 << 30)),
            self.assertRaises(tf_import.TensorFlowUnavailable) as raised,
        ):
            tf_import._check_address_space()  # pylint: disable=protected-access
        _one_line(self, raised.exception, "(ulimit -v) is 1024 MiB", "3.5 GiB")
        with mock.patch.object(
            tf_import.resource, "getrlimit", return_value=(tf_import.resource.RLIM_INFINITY,) * 2
        ):
            tf_import._check_address_space()  # pylint: disable=protected-access


if __name__ == "__main__":
    tf.test.main()
