"""The Keras flavour: a model that is not a tf-keras model, and tf.keras that is Keras 3, each
rejected in one line."""

import subprocess
import sys

import pytest
import tensorflow as tf

from tfdist.training import models
from tfdist.runtime.config import ConfigError
from tests.tf_test_case import TfTestCase


class KerasFlavourTest(TfTestCase):
    def test_non_keras_model_is_rejected(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"model returned a .*Module, not a tf-keras "
            r"model; return a Keras model",
        ):
            models.check_model(tf.Module(), "model")

    @pytest.mark.multiprocess
    def test_keras_3_tf_keras_is_rejected_with_one_line(self):
        code = (
            "import os; os.environ.pop('TF_USE_LEGACY_KERAS', None); import tensorflow; "
            "from tfdist.runtime.keras_flavour import require; require(2)"
        )
        env = {"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3"}
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        last_line = result.stderr.strip().splitlines()[-1]
        self.assertIn("KerasFlavourError: tf.keras is Keras 3", last_line)
        self.assertIn("set TF_USE_LEGACY_KERAS=1", last_line)


if __name__ == "__main__":
    tf.test.main()
