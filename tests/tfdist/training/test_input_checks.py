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
from tests.tfdist.training.tabular import MIRRORED
from tests.tfdist.training.tabular import PolicyReset
from tests.tfdist.training.tabular import run_config
from tests.tfdist.training.tabular import tabular_dataset_fn
from tests.tfdist.training.tabular import tabular_model
from tfdist.runtime.config import ConfigError
from tfdist.training import input_checks
from tests.tf_test_case import TfTestCase

FEATURES = np.random.default_rng(0).normal(size=(256, 6)).astype("float32")


def _user_dataset_fn(global_batch_size: int, *, shard: bool = True, per_replica: bool = True):
    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices((FEATURES, np.arange(256) % 2))
        if shard:
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        batch = (
            context.get_per_replica_batch_size(global_batch_size)
            if per_replica
            else global_batch_size
        )
        return dataset.repeat().batch(batch)

    return make


class InProcessTest(PolicyReset):
    def _fit(self, data, **kwargs):
        plan = tfdist.setup(run_config(global_batch_size=32, strategy=MIRRORED))
        return tfdist.fit(
            plan,
            tabular_model,
            data(plan.global_batch_size),
            validation_data=None,
            loss="sparse_categorical_crossentropy",
            **kwargs,
        )

    def test_pipelines_that_do_not_shard(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"^train_data: replica pipelines 0 and 1 read the same first "
            r"batch, .*shard the data by context.input_pipeline_id .*"
            r"check_input=False",
        ):
            self._fit(lambda batch: _user_dataset_fn(batch, shard=False))

    def test_batches_of_the_global_batch(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"^train_data: its first batch holds 32 examples, but each "
            r"replica's batch is 16 \(global batch 32 over 2 replica\(s\)\).*"
            r"get_per_replica_batch_size",
        ):
            self._fit(lambda batch: _user_dataset_fn(batch, per_replica=False))

    def test_opting_out_trains(self):
        summary = self._fit(lambda batch: _user_dataset_fn(batch, shard=False), check_input=False)
        self.assertEqual(summary["steps"], 2)

    def test_a_dataset_function_that_shards_trains(self):
        self.assertEqual(self._fit(tabular_dataset_fn)["steps"], 2)

    def test_a_generator_that_raises_at_once_is_its_own_line(self):
        def failing(global_batch_size):
            def make(context):
                del context

                def examples():
                    raise RuntimeError("my source is down")
                    yield  # pylint: disable=unreachable

                spec = (tf.TensorSpec((6,), tf.float32), tf.TensorSpec((), tf.int64))
                return tf.data.Dataset.from_generator(examples, output_signature=spec).batch(16)

            del global_batch_size
            return make

        with self.assertRaisesRegex(
            ConfigError,
            r"^train_data: reading its first batch failed \(RuntimeError: my source is down\); "
            r"fix what it reads, then run again\.$",
        ):
            self._fit(failing)

    def test_check_input_must_be_a_bool(self):
        with self.assertRaisesRegex(ConfigError, r"^check_input='no' is not True or False"):
            self._fit(tabular_dataset_fn, check_input="no")

    def test_custom_loop_checks_its_training_data(self):
        plan = tfdist.setup(run_config(global_batch_size=32, strategy=MIRRORED))
        loop = tfdist.CustomLoop(plan, tabular_model)
        with self.assertRaisesRegex(ConfigError, r"^train data: replica pipelines 0 and 1"):
            loop.distribute(_user_dataset_fn(32, shard=False))
        loop.distribute(_user_dataset_fn(32, shard=False), check_input=False)
        loop.distribute(_user_dataset_fn(32, shard=False), "validation", training=False)

    def test_fingerprints_any_structure(self):
        def batch(first):
            return (
                {
                    "ids": tf.ragged.constant([[first, 2], [3]]),
                    "sparse": tf.sparse.from_dense([[0, first], [1, 0]]),
                    "dense": tf.constant([[1.0], [2.0]]),
                },
                tf.constant([0, 1]),
            )

        # pylint: disable-next=protected-access
        one, other = (input_checks._fingerprint_and_size(batch(value)).numpy() for value in (1, 5))
        self.assertEqual((one[1], other[1]), (2, 2))
        self.assertNotEqual(one[0], other[0])


# Fits a model once per item of --fits, in order, on one plan (the strategy, and with it the
# cluster, made once): "+"-joined words say how its dataset function reads (noshard: without
# sharding; seed:N: shuffled with seed N, else unseeded; batch_by_global: batches of the global
# batch) and whether fit checks it (nocheck: check_input=False). Each fit prints a line: "fit
# ITEM: trained N step(s)", or "fit ITEM: raised ..." with the check's error; the last fit's
# error is not caught, so tfdist.run says it in its one line and exits 2.
_PROGRAM = """
from absl import flags
import tfdist
from tfdist.runtime.config import ConfigError
tfdist.define_flags()
_FITS = flags.DEFINE_list("fits", [], "")

def main(argv):
    config = tfdist.config_from_flags()
    import numpy as np, tensorflow as tf
    plan = tfdist.setup(config, train_examples=256)
    features = np.random.default_rng(0).normal(size=(256, 6)).astype("float32")

    def dataset_fn(words, seed):
        def make(context):
            dataset = tf.data.Dataset.from_tensor_slices((features, np.arange(256) % 2))
            if "noshard" not in words:
                dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
            dataset = dataset.shuffle(256, seed=seed).repeat()
            return dataset.batch(plan.global_batch_size if "batch_by_global" in words
                                 else context.get_per_replica_batch_size(plan.global_batch_size))
        return make

    model = lambda: tf.keras.Sequential([tf.keras.layers.Input((6,)), tf.keras.layers.Dense(2)])
    for number, item in enumerate(_FITS.value, 1):
        words = item.split("+")
        seeds = [int(word.split(":")[1]) for word in words if word.startswith("seed:")]
        try:
            summary = tfdist.fit(
                plan, model, dataset_fn(words, seeds[0] if seeds else None), validation_data=None,
                check_input="nocheck" not in words,
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        except ConfigError as error:
            if number == len(_FITS.value):
                raise
            print(f"fit {item}: raised {error}", flush=True)
        else:
            print(f"fit {item}: trained {summary['steps']} step(s)", flush=True)

if __name__ == "__main__":
    tfdist.run(main)
"""


@pytest.mark.multiprocess
class UnderLaunchTest(TfTestCase):
    """One launch per strategy, whose tasks fit several dataset functions in turn."""

    def _launch(self, cluster: list[str], fits: list[str]) -> subprocess.CompletedProcess:
        program = os.path.join(self.get_temp_dir(), "program.py")
        with open(program, "w", encoding="utf-8") as file:
            file.write(textwrap.dedent(_PROGRAM))
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "tfdist",
                "launch",
                "--timeout_s=300",
                *cluster,
                "--",
                sys.executable,
                program,
                "--epochs=1",
                "--steps_per_epoch=4",
                "--global_batch_size=16",
                f"--fits={','.join(fits)}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=320,
            check=False,
        )

    def test_multi_worker_mirrored_workers_that_read_the_same_examples(self):
        result = self._launch(
            ["--num_workers=2"], ["noshard+nocheck", "batch_by_global", "noshard"]
        )
        output = result.stdout
        for index in (0, 1):
            self.assertIn(
                f"[worker:{index}] fit noshard+nocheck: trained 4 step(s)",
                output,
                "opted out, workers that read the same examples train",
            )
        self.assertRegex(
            output,
            r"\[worker:0\] fit batch_by_global: raised train_data: its "
            r"first batch holds 16 examples, but each replica's batch is 8 "
            r"\(global batch 16 over 2 replica",
            "batches of the global batch are refused",
        )
        self.assertEqual(result.returncode, 2, output[-3000:])
        lines = [line for line in output.splitlines() if "error:" in line]
        self.assertTrue(lines, output[-3000:])
        self.assertRegex(
            lines[0],
            r"program.py: error: train_data: workers 0 and 1 read the "
            r"same first batch",
            "workers that read the same examples: tfdist.run's one line",
        )
        self.assertNotIn("Traceback", output)

    def test_parameter_server_workers_that_shuffle_alike(self):
        result = self._launch(["--num_workers=2", "--num_ps=1", "--chief"], ["unseeded", "seed:7"])
        output = result.stdout
        self.assertIn(
            "[chief:0] fit unseeded: trained 4 step(s)",
            output,
            "workers that shuffle unseeded pass the check and train",
        )
        self.assertEqual(result.returncode, 2, output[-3000:])
        self.assertRegex(
            output,
            r"\[chief:0\] program.py: error: train_data: "
            r"parameter-server workers 0 and 1 read the same first "
            r"batch.*unseeded shuffle",
            "workers that shuffle alike: the chief's one line",
        )
        self.assertNotIn("Traceback", output)
