"""examples/, run as a user runs them: each a program of its own on tfdist's public API,
alone or under `tfdist launch`, as every task of the cluster."""

import json
import os
import re
import subprocess
import sys
import unittest

import pytest

_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
_TIMEOUT_S = 420
# The tutorial's model reaches the tests' 0.9 validation accuracy within one short epoch.
_SHORT = ("--epochs=1", "--steps_per_epoch=24")


def _run(*args: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=_TIMEOUT_S, cwd=cwd, check=False
    )


def _example(name: str) -> str:
    return os.path.join(_EXAMPLES, name)


def _launch(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfdist", "launch", "--timeout_s=400", *args]


@pytest.mark.multiprocess
class ExamplesTest(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = str(tmp_path)

    def _metrics(self, result: subprocess.CompletedProcess, path: str) -> dict:
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        with open(path, encoding="utf-8") as metrics:
            return json.load(metrics)

    def test_keras_model_alone_and_on_two_cpu_replicas(self):
        for name, flags in (
            ("one_device", []),
            ("mirrored", ["--strategy=mirrored", "--num_cpu_devices=2"]),
        ):
            with self.subTest(name):
                path = os.path.join(self.tmp, f"{name}.json")
                summary = self._metrics(
                    _run(
                        sys.executable,
                        _example("keras_multi_worker.py"),
                        *_SHORT,
                        f"--metrics_json={path}",
                        *flags,
                        cwd=self.tmp,
                    ),
                    path,
                )
                self.assertEqual(summary["strategy"], name)
                self.assertEqual(summary["model"], "tutorial_cnn")
                self.assertGreaterEqual(summary["final"]["val_accuracy"], 0.9)

    def test_keras_model_under_multi_worker_mirrored(self):
        path = os.path.join(self.tmp, "mwm.json")
        summary = self._metrics(
            _run(
                *_launch("--num_workers=2"),
                "--",
                sys.executable,
                _example("keras_multi_worker.py"),
                *_SHORT,
                f"--metrics_json={path}",
                cwd=self.tmp,
            ),
            path,
        )
        self.assertEqual(
            (summary["strategy"], summary["num_workers"], summary["num_replicas"]),
            ("multi_worker_mirrored", 2, 2),
        )
        self.assertGreaterEqual(summary["final"]["val_accuracy"], 0.9)

    def test_tutorial_model_in_keras_3_under_multi_worker_mirrored(self):
        # The same program: under `launch --keras=3` its tf.keras is Keras 3, which Keras 3's
        # own fit cannot train under this strategy; tfdist's Keras 3 step does.
        path = os.path.join(self.tmp, "mwm3.json")
        result = _run(
            *_launch("--num_workers=2", "--keras=3"),
            "--",
            sys.executable,
            _example("keras_multi_worker.py"),
            *_SHORT,
            f"--metrics_json={path}",
            cwd=self.tmp,
        )
        summary = self._metrics(result, path)
        self.assertEqual(
            (summary["strategy"], summary["num_replicas"]), ("multi_worker_mirrored", 2)
        )
        self.assertIn("[worker:0] tfdist: Keras 3 step: ", result.stdout)
        self.assertGreaterEqual(summary["final"]["val_accuracy"], 0.9)

    def test_keras_model_under_parameter_server_with_an_evaluator(self):
        path, model_dir = os.path.join(self.tmp, "ps.json"), os.path.join(self.tmp, "model")
        result = _run(
            *_launch("--num_workers=2", "--num_ps=1", "--chief", "--evaluator"),
            "--",
            sys.executable,
            _example("keras_multi_worker.py"),
            "--epochs=2",
            f"--model_dir={model_dir}",
            "--validation_steps=8",
            f"--metrics_json={path}",
            cwd=self.tmp,
        )
        summary = self._metrics(result, path)
        self.assertEqual((summary["strategy"], summary["num_workers"]), ("parameter_server", 2))
        self.assertGreaterEqual(summary["final"]["val_accuracy"], 0.9)
        with open(os.path.join(model_dir, "evaluations.json"), encoding="utf-8") as evaluations:
            evaluated = json.load(evaluations)
        self.assertIn("epoch-002", evaluated)
        self.assertGreaterEqual(evaluated["epoch-002"]["accuracy"], 0.9)
        self.assertIn("[worker:0] tfdist: worker:0 serving at", result.stdout)

    def test_text_classifier_from_records_under_mirrored(self):
        path = os.path.join(self.tmp, "text.json")
        summary = self._metrics(
            _run(
                sys.executable,
                _example("text_classifier.py"),
                f"--records_dir={self.tmp}/records",
                "--strategy=mirrored",
                "--num_cpu_devices=2",
                "--epochs=1",
                f"--metrics_json={path}",
                cwd=self.tmp,
            ),
            path,
        )
        self.assertEqual((summary["strategy"], summary["num_replicas"]), ("mirrored", 2))
        self.assertTrue(summary["dataset"].startswith("records:"))
        self.assertGreaterEqual(summary["final"]["val_accuracy"], 0.85)

    def test_ctr_embedding_sharded_over_two_ps_tasks(self):
        result = _run(
            *_launch("--num_workers=2", "--num_ps=2", "--chief"),
            "--",
            sys.executable,
            _example("ctr_parameter_server.py"),
            "--variable_partition=max_shards:2",
            "--epochs=1",
            "--steps_per_epoch=10",
            cwd=self.tmp,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertRegex(
            result.stdout,
            r"\[chief:0\] tfdist: variable hashed_ids/embeddings 1048576x8 "
            r"\(32\.0 MiB\) in 2 shards: rows 0-524287 on ps:0, rows "
            r"524288-1048575 on ps:1",
        )
        self.assertGreater(float(re.search(r"ctr: val_auc=([0-9.]+)", result.stdout)[1]), 0.6)

    def test_custom_loop_under_multi_worker_mirrored_resumes(self):
        model_dir = os.path.join(self.tmp, "loop")
        args = (
            "--",
            sys.executable,
            _example("custom_loop.py"),
            "--strategy=multi_worker_mirrored",
            f"--model_dir={model_dir}",
            "--steps_per_epoch=8",
        )  # Enough for the loss to fall by more than half.
        first = _run(*_launch("--num_workers=2"), *args, "--epochs=2", cwd=self.tmp)
        self.assertEqual(first.returncode, 0, first.stderr[-3000:])
        losses = re.findall(r"\[worker:0\] worker:0: epoch (\d): loss=([0-9.]+)", first.stdout)
        self.assertEqual([epoch for epoch, _ in losses], ["1", "2"])
        self.assertLess(float(losses[1][1]), float(losses[0][1]))
        self.assertIn("[worker:1] worker:1: epoch 2:", first.stdout)
        again = _run(*_launch("--num_workers=2"), *args, "--epochs=3", cwd=self.tmp)
        self.assertEqual(again.returncode, 0, again.stderr[-3000:])
        self.assertEqual(re.findall(r"\[worker:0\] worker:0: epoch (\d)", again.stdout), ["3"])

    def test_parameter_server_tutorials_loop_resumes(self):
        model_dir = os.path.join(self.tmp, "ps_loop")
        args = (
            "--num_workers=2",
            "--num_ps=2",
            "--chief",
            "--",
            sys.executable,
            _example("ps_custom_loop.py"),
            "--variable_partition=max_shards:2",
            "--global_batch_size=32",
            f"--model_dir={model_dir}",
        )
        first = _run(*_launch(*args), "--epochs=2", cwd=self.tmp)
        self.assertEqual(first.returncode, 0, first.stderr[-3000:])
        epochs = re.findall(
            r"\[chief:0\] epoch (\d): loss=([0-9.]+) accuracy=[0-9.]+ "
            r"eval_accuracy=([0-9.]+)",
            first.stdout,
        )
        self.assertEqual([epoch for epoch, _, _ in epochs], ["1", "2"])
        self.assertLess(float(epochs[1][1]), float(epochs[0][1]))
        for task in ("worker:0", "worker:1", "ps:0", "ps:1"):
            self.assertIn(f"[{task}] tfdist: {task} serving at", first.stdout)
        self.assertIn(
            "[chief:0] tfdist: variable embedding/embeddings 7x16384 (0.4 MiB) in 2 "
            "shards: rows 0-3 on ps:0, rows 4-6 on ps:1",
            first.stdout,
        )
        again = _run(*_launch(*args), "--epochs=3", cwd=self.tmp)
        self.assertEqual(again.returncode, 0, again.stderr[-3000:])
        self.assertIn("resuming at epoch 3", again.stdout + again.stderr)
        last = re.findall(
            r"\[chief:0\] epoch (\d): loss=([0-9.]+) accuracy=[0-9.]+ "
            r"eval_accuracy=([0-9.]+)",
            again.stdout,
        )
        self.assertEqual([epoch for epoch, _, _ in last], ["3"])
        self.assertGreaterEqual(float(last[0][2]), 0.9)


if __name__ == "__main__":
    unittest.main()
