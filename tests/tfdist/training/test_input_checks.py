"""`tfdist.training.input_checks`: a dataset function that does not shard, or that batches by
the global batch, is one line before the first step (in-process on 2 replicas, and under
`tfdist launch` on 2 multi-worker mirrored workers and 2 parameter-server workers), unless
`check_input=False`."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tfdist
from tests.tfdist.training.test_fit import _MIRRORED
from tests.tfdist.training.test_fit import _PolicyReset
from tests.tfdist.training.test_fit import _config
from tests.tfdist.training.test_fit import tabular_dataset_fn
from tests.tfdist.training.test_fit import tabular_model
from tfdist.runtime.config import ConfigError
from tfdist.training import input_checks

_FEATURES = np.random.default_rng(0).normal(size=(256, 6)).astype("float32")


def _user_dataset_fn(global_batch_size: int, *, shard: bool = True, per_replica: bool = True):
    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices((_FEATURES, np.arange(256) % 2))
        if shard:
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        batch = context.get_per_replica_batch_size(global_batch_size) if per_replica \
            else global_batch_size
        return dataset.repeat().batch(batch)
    return make


class InProcessTest(_PolicyReset):

    def _fit(self, data, **kwargs):
        plan = tfdist.setup(_config(global_batch_size=32, strategy=_MIRRORED))
        return tfdist.fit(plan, tabular_model, data(plan.global_batch_size),
                          validation_data=None, loss="sparse_categorical_crossentropy",
                          **kwargs)

    def test_pipelines_that_do_not_shard(self):
        with self.assertRaisesRegex(
                ConfigError, r"^train_data: replica pipelines 0 and 1 read the same first "
                             r"batch, .*shard the data by context.input_pipeline_id .*"
                             r"check_input=False"):
            self._fit(lambda batch: _user_dataset_fn(batch, shard=False))

    def test_batches_of_the_global_batch(self):
        with self.assertRaisesRegex(
                ConfigError, r"^train_data: its first batch holds 32 examples, but each "
                             r"replica's batch is 16 \(global batch 32 over 2 replica\(s\)\).*"
                             r"get_per_replica_batch_size"):
            self._fit(lambda batch: _user_dataset_fn(batch, per_replica=False))

    def test_opting_out_trains(self):
        summary = self._fit(lambda batch: _user_dataset_fn(batch, shard=False),
                            check_input=False)
        self.assertEqual(summary["steps"], 2)

    def test_a_dataset_function_that_shards_trains(self):
        self.assertEqual(self._fit(tabular_dataset_fn)["steps"], 2)

    def test_check_input_must_be_a_bool(self):
        with self.assertRaisesRegex(ConfigError, r"^check_input='no' is not True or False"):
            self._fit(tabular_dataset_fn, check_input="no")

    def test_custom_loop_checks_its_training_data(self):
        plan = tfdist.setup(_config(global_batch_size=32, strategy=_MIRRORED))
        loop = tfdist.CustomLoop(plan, tabular_model)
        with self.assertRaisesRegex(ConfigError, r"^train data: replica pipelines 0 and 1"):
            loop.distribute(_user_dataset_fn(32, shard=False))
        loop.distribute(_user_dataset_fn(32, shard=False), check_input=False)
        loop.distribute(_user_dataset_fn(32, shard=False), "validation", training=False)

    def test_fingerprints_any_structure(self):
        def batch(first):
            return ({"ids": tf.ragged.constant([[first, 2], [3]]),
                     "sparse": tf.sparse.from_dense([[0, first], [1, 0]]),
                     "dense": tf.constant([[1.0], [2.0]])}, tf.constant([0, 1]))
        # pylint: disable-next=protected-access
        one, other = (input_checks._fingerprint_and_size(batch(value)).numpy() for value in (1, 5))
        self.assertEqual((one[1], other[1]), (2, 2))
        self.assertNotEqual(one[0], other[0])


_PROGRAM = """
from absl import flags
import tfdist
tfdist.define_flags()
_SHARD = flags.DEFINE_bool("shard", True, "")
_SEED = flags.DEFINE_integer("shuffle_seed", None, "")
_CHECK = flags.DEFINE_bool("check", True, "")
_GLOBAL = flags.DEFINE_bool("batch_by_global", False, "")

def main(argv):
    config = tfdist.config_from_flags()
    import numpy as np, tensorflow as tf
    plan = tfdist.setup(config, train_examples=256)
    features = np.random.default_rng(0).normal(size=(256, 6)).astype("float32")

    def make(context):
        dataset = tf.data.Dataset.from_tensor_slices((features, np.arange(256) % 2))
        if _SHARD.value:
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        dataset = dataset.shuffle(256, seed=_SEED.value).repeat()
        return dataset.batch(plan.global_batch_size if _GLOBAL.value
                             else context.get_per_replica_batch_size(plan.global_batch_size))

    model = lambda: tf.keras.Sequential([tf.keras.layers.Input((6,)), tf.keras.layers.Dense(2)])
    tfdist.fit(plan, model, make, validation_data=None, check_input=_CHECK.value,
               loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

if __name__ == "__main__":
    tfdist.run(main)
"""


@pytest.mark.multiprocess
class UnderLaunchTest(tf.test.TestCase):

    def _launch(self, cluster: list[str], *flags: str) -> subprocess.CompletedProcess:
        program = os.path.join(self.get_temp_dir(), "program.py")
        with open(program, "w", encoding="utf-8") as file:
            file.write(textwrap.dedent(_PROGRAM))
        return subprocess.run(
            [sys.executable, "-m", "tfdist", "launch", "--timeout_s=300", *cluster, "--",
             sys.executable, program, "--epochs=1", "--steps_per_epoch=4",
             "--global_batch_size=16", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=320,
            check=False)

    def test_multi_worker_mirrored_workers_that_read_the_same_examples(self):
        result = self._launch(["--num_workers=2"], "--noshard")
        self.assertNotEqual(result.returncode, 0)
        lines = [line for line in result.stdout.splitlines() if "error:" in line]
        self.assertRegex(lines[0], r"program.py: error: train_data: workers 0 and 1 read the "
                                   r"same first batch")
        self.assertNotIn("Traceback", result.stdout)
        opted_out = self._launch(["--num_workers=2"], "--noshard", "--nocheck")
        self.assertEqual(opted_out.returncode, 0, opted_out.stdout[-3000:])
        too_large = self._launch(["--num_workers=2"], "--batch_by_global")
        self.assertRegex(too_large.stdout, r"\[worker:0\] program.py: error: train_data: its "
                                           r"first batch holds 16 examples, but each replica's "
                                           r"batch is 8 \(global batch 16 over 2 replica")

    def test_parameter_server_workers_that_shuffle_alike(self):
        cluster = ["--num_workers=2", "--num_ps=1", "--chief"]
        result = self._launch(cluster, "--shuffle_seed=7")
        self.assertEqual(result.returncode, 2, result.stdout[-3000:])
        self.assertRegex(result.stdout, r"\[chief:0\] program.py: error: train_data: "
                                        r"parameter-server workers 0 and 1 read the same first "
                                        r"batch.*unseeded shuffle")
        self.assertNotIn("Traceback", result.stdout)
        unseeded = self._launch(cluster)
        self.assertEqual(unseeded.returncode, 0, unseeded.stdout[-3000:])
