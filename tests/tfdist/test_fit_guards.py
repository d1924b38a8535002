"""`tfdist.training.guards` on its own: the failed step's data named, the batches a run takes,
divergence (`fit` under each guard: tests/tfdist/test_training.py, FitGuardsTest)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from tests.input_pipelines.test_records import GRAPH_ERROR
from tfdist.training import guards as fit_guards
from tfdist.runtime.config import ConfigError

class StepFailureTest(tf.test.TestCase):

    def test_the_step_that_failed_names_its_data(self):
        message = GRAPH_ERROR.format(labels="9").replace("train_function", "test_function")
        failure = fit_guards.step_failure(tf.errors.InvalidArgumentError(None, None, message),
                                          "tabular")
        self.assertStartsWith(str(failure), "validation_data: model 'tabular' failed on one ")
        lost = fit_guards.step_failure(
            tf.errors.DataLossError(None, None, "corrupted record at 12"), "tabular")
        self.assertEqual(str(lost), "train_data: reading it failed (DataLossError: corrupted "
                                    "record at 12); check its files.")


class RequireEnoughTest(tf.test.TestCase):

    def _counts(self, batches: int, replicas: int = 1, pipelines: int = 1):
        counts = fit_guards.BatchCounts(
            lambda context: tf.data.Dataset.range(batches * 4).batch(4))
        for pipeline in range(pipelines):
            counts(tf.distribute.InputContext(pipelines, pipeline, replicas * pipelines))
        return counts

    def test_enough_for_every_epoch(self):
        fit_guards.require_enough(self._counts(6), steps_per_epoch=2, epochs=3,
                                  new_iterator_each_epoch=False)

    def test_one_epoch_is_enough_only_when_read_afresh(self):
        fit_guards.require_enough(self._counts(2), steps_per_epoch=2, epochs=3,
                                  new_iterator_each_epoch=True)
        with self.assertRaisesRegex(ConfigError, r"holds 2 batches but the run takes 2 steps x "
                                                 r"3 epochs = 6 of them"):
            fit_guards.require_enough(self._counts(2), steps_per_epoch=2, epochs=3,
                                      new_iterator_each_epoch=False)

    def test_a_pipeline_feeding_several_replicas(self):
        with self.assertRaisesRegex(ConfigError, r"holds 6 batches but the run takes 2 steps x 2 "
                                                 r"epochs x 2 replicas it feeds = 8 of them"):
            fit_guards.require_enough(self._counts(6, replicas=2), steps_per_epoch=2, epochs=2,
                                      new_iterator_each_epoch=False)

    def test_an_infinite_or_unknown_dataset_is_not_judged(self):
        for dataset in (tf.data.Dataset.range(4).repeat(),
                        tf.data.Dataset.range(4).filter(lambda x: x > 1)):
            counts = fit_guards.BatchCounts(lambda context, dataset=dataset: dataset)
            counts(tf.distribute.InputContext())
            self.assertEqual(counts.pipelines, [])


class FiniteLossTest(tf.test.TestCase):

    def _guard(self, weights_every_epoch: bool, weight: float):
        model = tf_keras.Sequential([tf_keras.layers.Input((1,)), tf_keras.layers.Dense(1)])
        model.set_weights([np.full((1, 1), weight, "float32"), np.zeros(1, "float32")])
        guard = fit_guards.FiniteLoss(0.1, weights_every_epoch=weights_every_epoch)
        guard.set_model(model)
        return guard

    def test_a_worker_with_a_finite_loss_stops_on_the_weights_it_shares(self):
        self._guard(False, np.nan).on_epoch_end(0, {"loss": 1.0})  # Not read: no verdict.
        with self.assertRaisesRegex(ConfigError, r"^loss: training diverged in epoch 3 \(weights "
                                                 r"not all finite\)"):
            self._guard(True, np.nan).on_epoch_end(2, {"loss": 1.0})
        self._guard(True, 1.0).on_epoch_end(2, {"loss": 1.0, "val_loss": 2.0})

    def test_an_infinite_loss(self):
        with self.assertRaisesRegex(ConfigError, r"^loss: training diverged in epoch 1 \(loss "
                                                 r"inf\); .*--learning_rate=0\.1, "):
            self._guard(False, 1.0).on_epoch_end(0, {"loss": float("inf")})


# A user's program whose second worker reads only NaN features.
_NAN_ON_ONE_WORKER = '''
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
'''


@pytest.mark.multiprocess
class DivergenceUnderMultiWorkerTest(tf.test.TestCase):

    def test_every_worker_stops_at_the_same_epoch(self):
        script = os.path.join(self.get_temp_dir(), "nan_on_one_worker.py")
        with open(script, "w", encoding="utf-8") as file:
            file.write(_NAN_ON_ONE_WORKER)
        result = subprocess.run(
            [sys.executable, "-m", "tfdist", "launch", "--num_workers=2", "--timeout_s=240",
             "--", sys.executable, script, "--epochs=3", "--global_batch_size=32",
             "--collective_timeout_s=120"],
            capture_output=True, text=True, timeout=300, check=False)
        self.assertEqual(result.returncode, 2, result.stderr[-3000:])
        self.assertRegex(result.stdout + result.stderr,
                         r"\] .*: error: loss: training diverged in epoch 1 ")
        self.assertNotIn("Epoch 2/3", result.stdout + result.stderr)
