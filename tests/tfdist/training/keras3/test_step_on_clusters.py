"""Keras 3 models (`--keras=3`) as a cluster's tasks, each a process under `tfdist launch`:
multi-worker mirrored with an evaluator, whose killed worker's group resumes from its backup with
weights identical on every worker. Keras 3 under parameter server: test_ps_partitioned (2
workers in the CTR example; `tfdist train` resuming when a ps task is killed)."""

import json
import os
import sys
import textwrap
import unittest

import pytest

from tests.tfdist.cli_runner import assert_evaluator_agrees
from tests.tfdist.cli_runner import run_tfdist

# `tfdist train` whose worker 1 dies at the start of epoch 2 of its first attempt (a marker
# file records it), and which prints a checksum of the weights when training ends.
_TRAIN_CRASHING_ONCE = textwrap.dedent("""
    import json, os, sys
    import keras
    import numpy as np
    from tfdist.commands import cli
    from tfdist.training import from_config as train_command

    marker, args = sys.argv[1], sys.argv[2:]
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]  # The evaluator's is 0.

    class CrashOnce(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if index == 1 and epoch == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(7)
        def on_train_end(self, logs=None):
            total = sum(float(np.sum(weight.numpy())) for weight in self.model.weights)
            print(f"weights {total:.6f}", flush=True)

    fit = train_command.fit
    train_command.fit = lambda plan, **options: fit(plan, callbacks=[CrashOnce()], **options)
    sys.exit(cli.main(["tfdist", "train", *args]))
""")


@pytest.mark.multiprocess
class Keras3ClusterTest(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _scratch(self, tmp_path, small_shapes_data_dir):
        self.dir, self.data_dir = str(tmp_path), small_shapes_data_dir

    def _train_flags(self, strategy: str, *flags: str) -> list[str]:
        return [
            f"--strategy={strategy}",
            "--keras=3",
            f"--data_dir={self.data_dir}",
            "--epochs=2",
            "--steps_per_epoch=4",
            "--global_batch_size=32",
            *flags,
        ]

    def _metrics(self, result, path: str) -> dict:
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        with open(path, encoding="utf-8") as metrics_file:
            return json.load(metrics_file)

    def test_multi_worker_mirrored_with_an_evaluator_resumes_a_killed_worker_from_the_backup(self):
        script = os.path.join(self.dir, "crash_once.py")
        with open(script, "w", encoding="utf-8") as script_file:
            script_file.write(_TRAIN_CRASHING_ONCE)
        model_dir, path = os.path.join(self.dir, "model"), os.path.join(self.dir, "m.json")
        result = run_tfdist(
            "launch",
            "--num_workers=2",
            "--evaluator",
            "--max_restarts=1",
            "--timeout_s=500",
            "--",
            sys.executable,
            script,
            os.path.join(self.dir, "crashed"),
            *self._train_flags(
                "multi_worker_mirrored",
                f"--model_dir={model_dir}",
                f"--metrics_json={path}",
                "--collective_timeout_s=60",
            ),
        )
        metrics = self._metrics(result, path)
        self.assertEqual(
            (metrics["strategy"], metrics["num_workers"]),
            ("multi_worker_mirrored", 2),
            "the metrics name the cluster",
        )
        self.assertIn(
            "worker:1 exited with status 7; restarting every task (1/1)",
            result.stderr,
            "the killed worker restarts the group",
        )
        worker_0 = [line for line in result.stdout.splitlines() if line.startswith("[worker:0]")]
        self.assertEqual(sum("Epoch 1/2" in line for line in worker_0), 1, "epoch 1 redone")
        self.assertIn(
            "[worker:0] tfdist: resuming at epoch 2",
            result.stdout,
            "the group resumes from the backup",
        )
        self.assertEqual(sum("Epoch 2/2" in line for line in worker_0), 1, "epoch 2 once")
        checksums = {
            line.split("weights ")[1] for line in result.stdout.splitlines() if "] weights " in line
        }
        self.assertEqual(
            len(checksums), 1, f"the workers end with the same weights: {result.stdout[-2000:]}"
        )
        # Every update counted, those restored from the backup too.
        self.assertIn(
            "[worker:0] tfdist: Keras 3 step: 8 optimizer updates",
            result.stdout,
            "the optimizer's update count",
        )
        assert_evaluator_agrees(self, model_dir, metrics, "epoch-002")
