"""Keras 3 models (`--keras=3`) as a cluster's tasks, each a process under `tfdist launch`:
multi-worker mirrored with an evaluator, parameter server, and a killed worker's group
resuming from its backup with weights identical on every worker."""

import json
import os
import sys
import textwrap
import unittest

import pytest

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
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]

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
        return [f"--strategy={strategy}", "--keras=3", f"--data_dir={self.data_dir}",
                "--epochs=2", "--steps_per_epoch=4", "--global_batch_size=32", *flags]

    def _metrics(self, result, path: str) -> dict:
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        with open(path, encoding="utf-8") as metrics_file:
            return json.load(metrics_file)

    def test_multi_worker_mirrored_with_an_evaluator(self):
        model_dir, path = os.path.join(self.dir, "model"), os.path.join(self.dir, "m.json")
        result = run_tfdist("launch", "--num_workers=2", "--evaluator", "--timeout_s=400", "--",
                            "train", *self._train_flags("multi_worker_mirrored",
                                                        f"--model_dir={model_dir}",
                                                        f"--metrics_json={path}"))
        metrics = self._metrics(result, path)
        self.assertEqual((metrics["strategy"], metrics["num_workers"]),
                         ("multi_worker_mirrored", 2))
        self.assertIn("[worker:0] tfdist: Keras 3 step: 8 optimizer updates", result.stdout)
        with open(os.path.join(model_dir, "evaluations.json"), encoding="utf-8") as file:
            evaluations = json.load(file)
        # The evaluator reads the whole validation split on one task; the workers read it
        # sharded, each example once: the same weights give the same accuracy.
        self.assertAlmostEqual(evaluations["epoch-002"]["accuracy"],
                               metrics["final"]["val_accuracy"], places=6)
        self.assertAlmostEqual(evaluations["epoch-002"]["loss"],
                               metrics["final"]["val_loss"], places=4)

    def test_parameter_server(self):
        path = os.path.join(self.dir, "m.json")
        result = run_tfdist("launch", "--num_workers=2", "--num_ps=1", "--chief",
                            "--timeout_s=400", "--", "train",
                            *self._train_flags("parameter_server", "--validation_steps=2",
                                               f"--metrics_json={path}"))
        metrics = self._metrics(result, path)
        self.assertEqual((metrics["strategy"], metrics["num_workers"]), ("parameter_server", 2))
        # Every update counted, though both workers update at once.
        self.assertIn("[chief:0] tfdist: Keras 3 step: 8 optimizer updates", result.stdout)

    def test_killed_worker_resumes_from_the_backup_with_identical_weights(self):
        script = os.path.join(self.dir, "crash_once.py")
        with open(script, "w", encoding="utf-8") as script_file:
            script_file.write(_TRAIN_CRASHING_ONCE)
        result = run_tfdist(
            "launch", "--num_workers=2", "--max_restarts=1", "--timeout_s=500", "--",
            sys.executable, script, os.path.join(self.dir, "crashed"),
            *self._train_flags("multi_worker_mirrored", "--epochs=3", "--validation_steps=1",
                               f"--model_dir={os.path.join(self.dir, 'model')}",
                               "--collective_timeout_s=60"))
        self.assertEqual(result.returncode, 0, result.stdout[-4000:] + result.stderr[-2000:])
        self.assertIn("worker:1 exited with status 7; restarting every task (1/1)",
                      result.stderr)
        worker_0 = [line for line in result.stdout.splitlines() if line.startswith("[worker:0]")]
        self.assertEqual(sum("Epoch 1/3" in line for line in worker_0), 1, "epoch 1 redone")
        self.assertEqual(sum("Epoch 3/3" in line for line in worker_0), 1)
        self.assertIn("resuming at epoch 2", result.stdout)
        checksums = {line.split("weights ")[1] for line in result.stdout.splitlines()
                     if "] weights " in line}
        self.assertEqual(len(checksums), 1, result.stdout[-2000:])
