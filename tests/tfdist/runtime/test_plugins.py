"""`tfdist train --model=MODULE:FUNCTION` and `--dataset=python:MODULE:FUNCTION` with a user's
modules outside the repository (on PYTHONPATH), as a user runs them, and each way they go
wrong: one stderr line, exit status 2."""

import json
import os
import sys
import tempfile
import textwrap
import unittest

import pytest

from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist_cases
from tfdist.runtime import plugins
from tfdist.runtime.config import ConfigError

_MODELS = """
import keras  # Keras 3, for the flavour check.
import tensorflow as tf


def small_cnn(*, input_shape, num_classes):
    layers = tf.keras.layers
    return tf.keras.Sequential([
        layers.Input(input_shape),
        layers.Conv2D(32, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.GlobalAveragePooling2D(),
        layers.Dense(num_classes, activation="softmax"),
    ], name="user_cnn")


def tabular():
    return tf.keras.Sequential([tf.keras.layers.Input((4,)),
                                tf.keras.layers.Dense(2, activation="softmax")], name="tabular")


def not_a_model(**kwargs):
    return 3


def keras3_model(**kwargs):
    return keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(2)])
"""
_DATA = """
import numpy as np
import tensorflow as tf
import tfdist


def _fn(width):
    def make(context):
        features = np.random.default_rng(0).normal(size=(256, width)).astype("float32")
        labels = (features[:, 0] > 0).astype("int64")
        return tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(
            context.get_per_replica_batch_size(32))
    return make


def fits(split):
    return _fn(4) if split == "train" else None


def too_wide(split):
    return _fn(7) if split == "train" else None


def broken_records(split):
    def parse(serialized):
        parsed = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([4], tf.float32)})
        return parsed["x"], parsed["x"]
    return tfdist.Records(RECORDS, parse)


def good_records(split):
    def parse(serialized):
        parsed = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([4], tf.float32),
                                                  "y": tf.io.FixedLenFeature([], tf.int64)})
        return parsed["x"], parsed["y"]
    return tfdist.Records(GOOD, parse) if split == "train" else None
"""
_BROKEN = "raise RuntimeError('boom at import')\n"
_EXITS = "import sys\nsys.exit(0)\n"

# Each way a user's plug-in goes wrong: `tfdist train` arguments and its one stderr line.
_BAD_PLUGINS = [
    (
        ["--model=user_broken:build"],
        "model='user_broken:build': importing user_broken failed: RuntimeError: boom at "
        "import; fix the module.",
    ),
    (["--model=user_models:nope"], "has no 'nope'; check the name after the colon."),
    (
        ["--model=user_exits:build"],
        "model='user_exits:build': importing user_exits called sys.exit(0)",
    ),
    (
        ["--model=user_models:tabular", "--dataset=synthetic"],
        "model='user_models:tabular': calling it with input_shape (32, 32, 3), "
        "num_classes 10 failed: TypeError: tabular() got an unexpected keyword argument "
        "'input_shape'; fix the function.",
    ),
    (
        ["--dataset=python:user_data:fits", "--model=user_models:small_cnn", "--steps_per_epoch=2"],
        "model='user_models:small_cnn': calling it failed: TypeError: small_cnn() missing "
        "2 required keyword-only arguments: 'input_shape' and 'num_classes'; fix the "
        "function.",
    ),
    (
        ["--model=user_models:not_a_model", "--dataset=synthetic"],
        "model='user_models:not_a_model' returned a builtins.int, not a tf-keras model",
    ),
    (
        ["--model=user_models:keras3_model", "--dataset=synthetic"],
        "model='user_models:keras3_model' built a Keras 3 model (keras.src.models."
        "sequential.Sequential, from `import keras`); train it with --keras=3, or build it "
        "with tf.keras (with TF_USE_LEGACY_KERAS=1) or tf_keras.",
    ),
    (
        ["--dataset=python:user_data:fits", "--model=user_models:tabular"],
        "--dataset='python:user_data:fits' does not say how many training examples it "
        "has; set --steps_per_epoch=N.",
    ),
    (
        [
            "--dataset=python:user_data:too_wide",
            "--model=user_models:tabular",
            "--steps_per_epoch=2",
            "--global_batch_size=32",
        ],
        "train_data: its batches do not fit model 'tabular'",
    ),
    (
        ["--dataset=python:user_data:fits", "--steps_per_epoch=2"],
        "model='small_cnn' is built for image datasets",
    ),
    (
        [
            "--dataset=python:user_data:broken_records",
            "--model=user_models:tabular",
            "--steps_per_epoch=2",
        ],
        "records.tfrecord",
    ),
]


@pytest.mark.multiprocess
class PluginsTest(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _user_modules(self, tmp_path, shapes_data_dir):
        self.tmp, self.data_dir = str(tmp_path), shapes_data_dir
        records = os.path.join(self.tmp, "records.tfrecord")  # A record without feature "x".
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        with tf.io.TFRecordWriter(records) as writer:
            writer.write(
                tf.train.Example(
                    features=tf.train.Features(
                        feature={"y": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))}
                    )
                ).SerializeToString()
            )
        good = os.path.join(self.tmp, "good-{index}.tfrecord")  # 4 files of 8 examples.
        for index in range(4):
            with tf.io.TFRecordWriter(good.format(index=index)) as writer:
                for position in range(8):
                    writer.write(
                        tf.train.Example(
                            features=tf.train.Features(
                                feature={
                                    "x": tf.train.Feature(
                                        float_list=tf.train.FloatList(value=[index] * 4)
                                    ),
                                    "y": tf.train.Feature(
                                        int64_list=tf.train.Int64List(value=[position])
                                    ),
                                }
                            )
                        ).SerializeToString()
                    )
        for name, text in (
            ("user_models", _MODELS),
            (
                "user_data",
                _DATA.replace("RECORDS", repr(records)).replace(
                    "GOOD", repr(good.replace("{index}", "*"))
                ),
            ),
            ("user_broken", _BROKEN),
            ("user_exits", _EXITS),
        ):
            with open(os.path.join(self.tmp, f"{name}.py"), "w", encoding="utf-8") as module:
                module.write(textwrap.dedent(text))

    def test_a_users_model_and_dataset_and_records_and_bad_plugins_each_in_one_line(self):
        """In one child (TensorFlow imported once): a user's model function learns the built-in
        dataset, a user's dataset function trains, `data check` counts a user's records, and
        each way a plug-in goes wrong is one line."""
        path = os.path.join(self.tmp, "metrics.json")
        model_function = [
            "train",
            f"--data_dir={self.data_dir}",
            "--model=user_models:small_cnn",
            "--epochs=2",
            "--steps_per_epoch=60",
            "--validation_steps=4",
            f"--metrics_json={path}",
        ]
        dataset_function = [
            "train",
            f"--data_dir={self.data_dir}",
            "--dataset=python:user_data:fits",
            "--model=user_models:tabular",
            "--steps_per_epoch=5",
            "--global_batch_size=32",
        ]
        checks = [
            [
                "data",
                "check",
                "--dataset=python:user_data:good_records",
                "--num_workers=2",
                "--replicas_per_worker=2",
                "--global_batch_size=4",
            ],
            [
                "data",
                "check",
                "--dataset=python:user_data:good_records",
                "--num_workers=2",
                "--global_batch_size=4",
                "--autoshard=off",
            ],
        ]
        bad = [
            ["train", f"--data_dir={self.data_dir}", *args, "--epochs=1"]
            for args, _ in _BAD_PLUGINS
        ]
        learned, trained, sharded, unsharded, *refused = run_tfdist_cases(
            [model_function, dataset_function, *checks, *bad], extra_env={"PYTHONPATH": self.tmp}
        )
        with self.subTest("a user's model function learns the built-in dataset"):
            self.assertEqual(learned.returncode, 0, learned.stderr[-3000:])
            with open(path, encoding="utf-8") as metrics:
                summary = json.load(metrics)
            self.assertEqual((summary["model"], summary["epochs"]), ("user_cnn", 2))
            self.assertGreaterEqual(summary["final"]["val_accuracy"], 0.8, "it learns")
        with self.subTest("a user's dataset function trains"):
            self.assertEqual(trained.returncode, 0, trained.stderr[-3000:])
            self.assertIn(
                "tfdist: one_device on 1 replica(s), 3 epoch(s) of 5 steps", trained.stdout
            )
        with self.subTest("data check reads each of a user's records once, sharded"):
            self.assertEqual(sharded.returncode, 0, sharded.stderr[-3000:])
            self.assertIn("split train: 32 examples; 2 worker(s) x 2 replica(s)", sharded.stdout)
            self.assertIn("ok: every example read exactly once", sharded.stdout)
        with self.subTest("data check finds a user's records read twice, unsharded"):
            self.assertEqual(unsharded.returncode, 1, unsharded.stderr[-3000:])
            self.assertIn("FAIL: 32 example(s) read more than once", unsharded.stdout)
        for (args, expected), result in zip(_BAD_PLUGINS, refused, strict=True):
            with self.subTest(args=args):
                assert_one_line_error(self, result, expected)


class SystemExitTest(unittest.TestCase):
    """A user's module or function that calls sys.exit is one line, not the end of tfdist."""

    def setUp(self):
        super().setUp()
        directory = self.enterContext(tempfile.TemporaryDirectory())
        with open(os.path.join(directory, "exits_at_import.py"), "w", encoding="utf-8") as file:
            file.write(
                "import argparse\nargparse.ArgumentParser().parse_known_args([])\n"
                "raise SystemExit('usage: exits_at_import')\n"
            )
        sys.path.insert(0, directory)
        self.addCleanup(sys.path.remove, directory)
        self.addCleanup(sys.modules.pop, "exits_at_import", None)

    def test_at_import(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"^model='exits_at_import:build': importing "
            r"exits_at_import called sys.exit\('usage: "
            r"exits_at_import'\) .*__name__ == ",
        ):
            plugins.load("model", "exits_at_import:build", "exits_at_import:build")

    def test_at_call(self):
        def build(**_):
            sys.exit(3)

        with self.assertRaisesRegex(
            ConfigError,
            r"^model='mine:build': SystemExitTest\."
            r"test_at_call\.<locals>\.build called "
            r"sys.exit\(3\); return a value instead",
        ):
            plugins.call("model", "mine:build", build, num_classes=2)


if __name__ == "__main__":
    unittest.main()
