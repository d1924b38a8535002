"""Keras 3 models (`--keras=3`) under parameter server with `--variable_partition`: a variable
split over 2 ps tasks trains shard by shard, its optimizer slots and gradient accumulators beside
each shard, and resumes from the backup when a ps task is killed (each task a process under
`tfdist launch`); the CTR example's embedding table, on 2 workers whose every update counts;
and a split variable's checkpoint, which restores into the variable split or whole
(in-process)."""

import json
import os
import re
import sys
import textwrap
import unittest

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.tfdist.cli_runner import launch_killing
from tests.tfdist.cli_runner import run_tfdist
from tfdist.training.keras3 import shards as keras3_shards
from tests.tf_test_case import TfTestCase

_EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 4, "examples")
_LAUNCH = ("launch", "--keras=3", "--num_ps=2", "--chief", "--timeout_s=300")

# A Keras 3 model whose hidden kernel (192 x 1024 floats, 768 KiB) `max_shards:2` splits in 2.
# Its columns start with norms near 0.56, and near 0.40 in each half: the constraint binds on the
# whole kernel, not on the halves.
_MODEL = textwrap.dedent("""
    import keras

    def wide(*, input_shape, num_classes):
        return keras.Sequential([
            keras.Input(input_shape), keras.layers.AveragePooling2D(4), keras.layers.Flatten(),
            keras.layers.Dense(1024, activation="relu", name="hidden",
                               kernel_constraint=keras.constraints.MaxNorm(0.5)),
            keras.layers.Dense(num_classes, activation="softmax")], name="wide")
""")
# `tfdist train` that prints the sum of the hidden kernel after each epoch (then, after epoch 1
# of the first attempt, waits until ps:1 is killed: its port refuses, 2 minutes at most) and
# before each but the first; and when training ends, where its shards and the optimizer's and
# gradient path's variables of a shard's shape live, and the largest norm of its columns.
_TRAIN_SHOWING_THE_KERNEL = textwrap.dedent("""
    import json, os, socket, sys, time
    import keras
    import tensorflow as tf
    from tfdist.commands import cli
    from tfdist.training import from_config as train_command

    def wait_until_ps_1_is_gone():
        host, port = json.loads(os.environ["TF_CONFIG"])["cluster"]["ps"][1].rsplit(":", 1)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
            except OSError:
                return
            time.sleep(0.05)

    def task(variable):
        variable = variable.value if isinstance(variable, keras.Variable) else variable
        return variable.device.split("/task:")[1].split("/")[0]

    class ShowKernel(keras.callbacks.Callback):
        def kernel(self):
            return self.model.get_layer("hidden").kernel.value
        def show(self, when):
            total = sum(float(tf.reduce_sum(shard)) for shard in self.kernel().variables)
            print(f"kernel {when}: {total:.5f}", flush=True)
        def on_epoch_begin(self, epoch, logs=None):
            if epoch:
                self.show(f"before epoch {epoch + 1}")
        def on_epoch_end(self, epoch, logs=None):
            self.show(f"after epoch {epoch + 1}")
            if epoch == 0:
                wait_until_ps_1_is_gone()
        def on_train_end(self, logs=None):
            shards = self.kernel().variables
            optimizer = self.model.optimizer
            blocks = [variable for variable in (*optimizer.variables,
                                                *optimizer.gradient_path.accumulators)
                      if variable.shape == shards[0].shape]
            norms = tf.norm(tf.concat(shards, axis=0), axis=0)
            print("placement " + json.dumps({
                "sharded": isinstance(self.kernel(), tf.__internal__.distribute.ShardedVariable),
                "shards": [task(shard) for shard in shards],
                "blocks": sorted(task(block) for block in blocks),
                "max_norm": round(float(tf.reduce_max(norms)), 4)}), flush=True)

    fit = train_command.fit
    train_command.fit = lambda plan, **options: fit(plan, callbacks=[ShowKernel()], **options)
    sys.exit(cli.main(["tfdist", "train", *sys.argv[1:]]))
""")


@pytest.mark.multiprocess
class PartitionedClusterTest(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _scratch(self, tmp_path, small_shapes_data_dir):
        self.dir, self.data_dir = str(tmp_path), small_shapes_data_dir

    def _write(self, name: str, text: str) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)
        return path

    def test_a_split_variable_trains_and_resumes_when_a_ps_task_is_killed(self):
        # ps:1, which holds half the kernel, is killed once epoch 1 is backed up (and its
        # kernel shown): every task restarts, and the chief restores the backup onto the new
        # ps tasks.
        self._write("user_wide.py", _MODEL)
        command = [
            sys.executable,
            "-m",
            "tfdist",
            *_LAUNCH,
            "--num_workers=1",
            "--max_restarts=1",
            "--",
            sys.executable,
            self._write("train.py", _TRAIN_SHOWING_THE_KERNEL),
            "--strategy=parameter_server",
            "--model=user_wide:wide",
            "--variable_partition=max_shards:2",
            f"--data_dir={self.data_dir}",
            "--epochs=3",
            "--steps_per_epoch=4",
            "--global_batch_size=32",
            "--validation_steps=1",
            "--grad_accum_steps=2",
            f"--model_dir={os.path.join(self.dir, 'model')}",
            f"--metrics_json={os.path.join(self.dir, 'm.json')}",
        ]
        output, killed, status = launch_killing(
            command,
            when="[chief:0] kernel after epoch 1",
            task="ps:1",
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [self.dir, os.environ.get("PYTHONPATH")])
                ),
            },
        )
        self.assertTrue(killed, output[-3000:])
        self.assertEqual(status, 0, output[-3000:])
        lines = output.splitlines(keepends=True)
        self.assertEqual(
            output.count(
                "[chief:0] tfdist: variable wide/hidden/kernel 192x1024 (0.8 MiB) in 2 shards: "
                "rows 0-95 on ps:0, rows 96-191 on ps:1\n"
            ),
            2,
            output[-3000:],
        )
        self.assertIn("ps:1 was killed by signal 9 (SIGKILL); restarting every task (1/1)", output)
        self.assertIn("resuming at epoch 2", output)
        self.assertEqual(
            [line.split(" - ")[0] for line in lines if line.startswith("[chief:0] Epoch ")],
            ["[chief:0] Epoch 1/3", "[chief:0] Epoch 2/3", "[chief:0] Epoch 3/3"],
        )
        # The restored kernel is the one backed up, ps:1's half too.
        after_1 = re.findall(r"\[chief:0\] kernel after epoch 1: (\S+)", output)
        self.assertEqual(len(after_1), 1, output[-3000:])
        self.assertEqual(
            set(re.findall(r"\[chief:0\] kernel before epoch 2: (\S+)", output)), set(after_1)
        )
        # Adam's 2 slots and the accumulator of each shard, beside it; the constraint held on
        # the whole kernel.
        placement = json.loads(re.search(r"\[chief:0\] placement (.*)", output)[1])
        self.assertEqual(
            placement,
            {
                "sharded": True,
                "shards": ["0", "1"],
                "blocks": ["0", "0", "0", "1", "1", "1"],
                "max_norm": 0.5,
            },
        )
        self.assertIn("[chief:0] tfdist: Keras 3 step: 6 optimizer updates", output)
        with open(os.path.join(self.dir, "m.json"), encoding="utf-8") as metrics_file:
            final = json.load(metrics_file)["final"]
        self.assertLess(final["loss"], 3.0)  # Finite, near ln(10) = 2.30 after 12 batches.

    def test_ctr_example_embedding_sharded_over_two_ps_tasks(self):
        # Also Keras 3 under parameter server on 2 workers (test_step_on_clusters has none).
        metrics_path = os.path.join(self.dir, "m.json")
        result = run_tfdist(
            *_LAUNCH,
            "--num_workers=2",
            "--",
            sys.executable,
            os.path.join(_EXAMPLES, "ctr_parameter_server.py"),
            "--variable_partition=max_shards:2",
            "--hash_buckets=16384",
            "--epochs=1",
            "--steps_per_epoch=20",
            f"--metrics_json={metrics_path}",
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-2000:])
        self.assertRegex(
            result.stdout,
            r"\[chief:0\] tfdist: variable hashed_ids/embeddings 16384x8 "
            r"\(0\.5 MiB\) in 2 shards: rows 0-8191 on ps:0, rows 8192-16383 "
            r"on ps:1",
            "the table's shards and where they live",
        )
        self.assertGreater(
            float(re.search(r"ctr: val_auc=([0-9.]+)", result.stdout)[1]), 0.6, "the example learns"
        )
        # Every update counted, though both workers update at once.
        self.assertIn(
            "[chief:0] tfdist: Keras 3 step: 20 optimizer updates",
            result.stdout,
            "the optimizer's update count",
        )
        with open(metrics_path, encoding="utf-8") as metrics_file:
            metrics = json.load(metrics_file)
        self.assertEqual(
            (metrics["strategy"], metrics["num_workers"]),
            ("parameter_server", 2),
            "the metrics name the cluster",
        )


def _table(*blocks: np.ndarray) -> keras.Model:
    """A Keras 3 model whose embedding table is `blocks`: split as a partitioner splits it (a
    ShardedVariable as its variable's value) when there are several, else whole."""
    model = keras.Sequential(
        [
            keras.Input((1,), dtype="int32"),
            keras.layers.Embedding(sum(len(block) for block in blocks), 2, name="table"),
        ]
    )
    if len(blocks) > 1:
        # pylint: disable-next=protected-access
        model.get_layer("table").embeddings._value = tf.__internal__.distribute.ShardedVariable(
            [tf.Variable(block) for block in blocks]
        )
        keras3_shards.make_savable(model)
    return model


def _values(model: keras.Model) -> list:
    table = model.get_layer("table").embeddings
    return [
        shard.numpy().tolist() for shard in keras3_shards.shards_of(table)
    ] or table.numpy().tolist()


class SplitCheckpointTest(TfTestCase):
    def test_a_split_variable_restores_split_or_whole(self):
        values = np.arange(10, dtype="float32").reshape(5, 2)
        split = _table(values[:3], values[3:])
        self.assertEqual(len(keras3_shards.shards_of(split.get_layer("table").embeddings)), 2)
        saved = tf.train.Checkpoint(model=split).write(os.path.join(self.get_temp_dir(), "s"))
        for restored, expected in (
            (_table(np.zeros((5, 2), "float32")), values.tolist()),
            (
                _table(np.zeros((3, 2), "float32"), np.zeros((2, 2), "float32")),
                [values[:3].tolist(), values[3:].tolist()],
            ),
        ):
            tf.train.Checkpoint(model=restored).read(saved).assert_existing_objects_matched()
            self.assertEqual(_values(restored), expected)
