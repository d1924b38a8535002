"""`tfdist launch` with real processes on 127.0.0.1: output, logs, restarts, timeouts, errors.

The supervision tests launch small Python programs (no TensorFlow), so they take seconds; the
cluster tests run `tfdist train` under multi-worker mirrored and parameter server.
"""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from unittest import mock

import portpicker
import pytest
from absl.testing import parameterized

from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist
from tfdist import cli

# Prints its task from TF_CONFIG; fails on the first run of worker 1 (a marker file records it).
_FLAKY_TASK = textwrap.dedent("""
    import json, os, sys
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    print("task", task["type"], task["index"], "keras", os.environ.get("TF_USE_LEGACY_KERAS"))
    marker = os.path.join(sys.argv[1], "failed-once")
    if task["index"] == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        sys.exit(3)
""")


class _Scratch:

    @pytest.fixture(autouse=True)
    def _scratch(self, tmp_path):
        self.dir = str(tmp_path)

    def script(self, text: str) -> str:
        path = os.path.join(self.dir, "task.py")
        with open(path, "w", encoding="utf-8") as script_file:
            script_file.write(text)
        return path


class SupervisionTest(_Scratch, unittest.TestCase):

    def test_prefixes_output_writes_logs_and_sets_tf_config(self):
        script = self.script(_FLAKY_TASK.replace('task["index"] == 1', "False"))
        logs = os.path.join(self.dir, "logs")
        result = run_tfdist("launch", "--num_workers=2", f"--log_dir={logs}", "--",
                            sys.executable, script, self.dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"tfdist launch: started worker:1 pid=\d+")
        self.assertIn("[worker:0] task worker 0 keras 1", result.stdout)
        self.assertIn("[worker:1] task worker 1 keras 1", result.stdout)
        with open(os.path.join(logs, "worker-1.log"), encoding="utf-8") as log:
            self.assertEqual(log.read(), "task worker 1 keras 1\n")

    def test_failed_worker_restarts_the_group(self):
        result = run_tfdist("launch", "--num_workers=2", "--max_restarts=1", "--",
                            sys.executable, self.script(_FLAKY_TASK), self.dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("worker:1 exited with status 3; restarting every task (1/1)",
                      result.stderr)
        self.assertEqual(result.stdout.count("[worker:0] task worker 0"), 2)

    def test_final_failure_stops_everything_with_the_tasks_status(self):
        script = self.script(_FLAKY_TASK.replace("not os.path.exists(marker)", "True") +
                             "import time\ntime.sleep(600)\n")
        start = time.monotonic()
        result = run_tfdist("launch", "--num_workers=2", "--", sys.executable, script, self.dir)
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertIn("worker:1 exited with status 3 after 0 restart(s); stopped every task",
                      result.stderr)
        self.assertLess(time.monotonic() - start, 60)

    def test_timeout_stops_everything(self):
        script = self.script("import time\ntime.sleep(600)\n")
        start = time.monotonic()
        result = run_tfdist("launch", "--num_workers=2", "--timeout_s=2", "--", sys.executable,
                            script)
        self.assertEqual(result.returncode, 124, result.stderr)
        self.assertIn("timed out after 2 s; stopped every task", result.stderr)
        self.assertLess(time.monotonic() - start, 60)


class BadLaunchTest(_Scratch, parameterized.TestCase):

    @parameterized.named_parameters(
        ("no_command", ["--num_workers=2"], "launch needs a command after `--`"),
        ("empty_command", ["--num_workers=2", "--"], "launch needs a command after `--`"),
        ("not_executable", ["--", "no-such-program-xyz"],
         "command 'no-such-program-xyz' is not an executable file or on PATH"),
        ("ps_without_chief", ["--num_ps=1", "--", "python"], "num_ps=1 needs a coordinator"),
        ("negative_restarts", ["--max_restarts=-1", "--", "python"], "--max_restarts=-1"),
    )
    def test_one_line_error(self, args, expected):
        assert_one_line_error(self, run_tfdist("launch", *args), expected)

    def test_too_many_tasks_for_the_free_ports(self):
        stderr = io.StringIO()
        with mock.patch("portpicker.pick_unused_port",
                        side_effect=portpicker.NoFreePortFoundError), \
                contextlib.redirect_stderr(stderr):
            status = cli.main(["tfdist", "launch", "--num_workers=3", "--", "python"])
        self.assertEqual(status, 2)
        self.assertEqual(stderr.getvalue(),
                         "tfdist launch: error: no free ports for 3 tasks on 127.0.0.1; launch "
                         "fewer tasks or free some ports.\n")

    def test_evaluator_without_a_model_dir(self):
        tf_config = json.dumps({"cluster": {"worker": ["127.0.0.1:1"]},
                                "task": {"type": "evaluator", "index": 0}})
        assert_one_line_error(self, run_tfdist("train", tf_config=tf_config),
                              "the evaluator task needs --model_dir=DIR")


@pytest.mark.multiprocess
class ClusterLaunchTest(_Scratch, unittest.TestCase):

    @pytest.fixture(autouse=True)
    def _data(self, small_shapes_data_dir):
        self.data_dir = small_shapes_data_dir

    def _launch_train(self, *launch_args: str, strategy: str,
                      train_args: tuple[str, ...] = ("--validation_steps=2",)) -> dict:
        metrics = os.path.join(self.dir, "metrics.json")
        result = run_tfdist("launch", *launch_args, "--timeout_s=400", "--", "train",
                            f"--strategy={strategy}", f"--data_dir={self.data_dir}",
                            "--epochs=2", "--steps_per_epoch=4", "--global_batch_size=32",
                            f"--metrics_json={metrics}", *train_args)
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        with open(metrics, encoding="utf-8") as metrics_file:
            return json.load(metrics_file)

    def test_multi_worker_mirrored_with_an_evaluator(self):
        model_dir = os.path.join(self.dir, "model")
        metrics = self._launch_train("--num_workers=2", "--evaluator",
                                     strategy="multi_worker_mirrored",
                                     train_args=(f"--model_dir={model_dir}",))
        self.assertEqual((metrics["strategy"], metrics["num_workers"]),
                         ("multi_worker_mirrored", 2))
        with open(os.path.join(model_dir, "evaluations.json"), encoding="utf-8") as file:
            evaluations = json.load(file)
        self.assertIn("epoch-002", evaluations)  # The evaluator saw the last checkpoint.
        # It evaluates the whole validation split on one task; the workers validated it
        # sharded, each example once: the same weights give the same accuracy.
        self.assertAlmostEqual(evaluations["epoch-002"]["accuracy"],
                               metrics["final"]["val_accuracy"], places=6)
        self.assertAlmostEqual(evaluations["epoch-002"]["loss"],
                               metrics["final"]["val_loss"], places=4)

    def test_parameter_server(self):
        metrics = self._launch_train("--num_workers=2", "--num_ps=1", "--chief",
                                     strategy="parameter_server")
        self.assertEqual((metrics["strategy"], metrics["num_workers"]), ("parameter_server", 2))


    def test_unmodified_tf_keras_multi_worker_script(self):
        script = self.script(textwrap.dedent("""
            import numpy as np
            import tensorflow as tf
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
            with strategy.scope():
                model = tf.keras.Sequential([tf.keras.layers.Input((4,)),
                                             tf.keras.layers.Dense(1)])
                model.compile("sgd", "mse")
            x = np.ones((64, 4), "float32")
            model.fit(x, x.sum(1), epochs=1, batch_size=16, verbose=0)
            print("replicas", strategy.num_replicas_in_sync, "keras", tf.keras.__name__)
        """))
        result = run_tfdist("launch", "--num_workers=2", "--timeout_s=300", "--", sys.executable,
                            script)
        self.assertEqual(result.returncode, 0, result.stdout[-3000:])
        for index in (0, 1):
            self.assertIn(f"[worker:{index}] replicas 2 keras tf_keras", result.stdout)


# `tfdist train` with a callback that kills worker 1 at epoch 2, step 2 of its first attempt
# (a marker file records it) and prints a checksum of the weights when training ends.
_TRAIN_CRASHING_ONCE = textwrap.dedent("""
    import json, os, sys
    import tfdist
    from tfdist import cli, training
    import tensorflow as tf
    import tf_keras

    marker, args = sys.argv[1], sys.argv[2:]
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]

    class CrashOnce(tf_keras.callbacks.Callback):
        epoch = 0
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
        def on_train_batch_end(self, batch, logs=None):
            if index == 1 and self.epoch == 1 and batch == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(7)
        def on_train_end(self, logs=None):
            total = sum(float(tf.reduce_sum(weight)) for weight in self.model.weights)
            print(f"weights {total:.6f}", flush=True)

    callbacks = training._output_callbacks
    training._output_callbacks = lambda *a: callbacks(*a) + [CrashOnce()]
    sys.exit(cli.main(["tfdist", "train", *args]))
""")


@pytest.mark.multiprocess
class FaultToleranceTest(_Scratch, unittest.TestCase):

    @pytest.fixture(autouse=True)
    def _data(self, small_shapes_data_dir):
        self.data_dir = small_shapes_data_dir

    def test_multi_worker_group_restarts_and_resumes_from_the_backup(self):
        result = run_tfdist(
            "launch", "--num_workers=2", "--max_restarts=1", "--timeout_s=500", "--",
            sys.executable, self.script(_TRAIN_CRASHING_ONCE), os.path.join(self.dir, "crashed"),
            "--strategy=multi_worker_mirrored", f"--data_dir={self.data_dir}", "--epochs=3",
            "--steps_per_epoch=4", "--validation_steps=1", "--global_batch_size=32",
            f"--model_dir={os.path.join(self.dir, 'model')}", "--collective_timeout_s=60")
        self.assertEqual(result.returncode, 0, result.stdout[-4000:] + result.stderr[-2000:])
        self.assertIn("worker:1 exited with status 7; restarting every task (1/1)",
                      result.stderr)
        worker_0 = [line for line in result.stdout.splitlines()
                    if line.startswith("[worker:0]")]
        self.assertEqual(sum("Epoch 1/3" in line for line in worker_0), 1, "epoch 1 redone")
        self.assertEqual(sum("Epoch 3/3" in line for line in worker_0), 1)
        checksums = {line.split("weights ")[1] for line in result.stdout.splitlines()
                     if "] weights " in line}
        self.assertEqual(len(checksums), 1, result.stdout[-2000:])


    def test_parameter_server_job_survives_a_killed_worker(self):
        command = [sys.executable, "-m", "tfdist", "launch", "--num_workers=2", "--num_ps=1",
                   "--chief", "--max_restarts=1", "--timeout_s=400", "--", "train",
                   "--strategy=parameter_server", f"--data_dir={self.data_dir}", "--epochs=3",
                   "--steps_per_epoch=20", "--validation_steps=1", "--global_batch_size=32"]
        launcher = subprocess.Popen(  # pylint: disable=consider-using-with
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines, killed = [], False
        try:
            for line in launcher.stdout:
                lines.append(line)
                if not killed and line.startswith("[chief:0] Epoch 2/3"):
                    pid = int(next(text for text in lines if "started worker:1" in text)
                              .rsplit("pid=", 1)[1])
                    os.kill(pid, signal.SIGKILL)
                    killed = True
            self.assertEqual(launcher.wait(timeout=60), 0, "".join(lines[-50:]))
        finally:
            launcher.kill()
            launcher.wait(timeout=60)
        self.assertTrue(killed, "".join(lines[-50:]))
        output = "".join(lines)
        self.assertIn("[chief:0] tfdist: parameter_server", output)
        self.assertIn("3 epoch(s) of 20 steps", output)


    def _launch_with_a_worker_that_never_starts(self, *train_flags: str,
                                                timeout_s: int) -> subprocess.CompletedProcess:
        script = self.script(textwrap.dedent("""
            import json, os, sys, time
            if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
                time.sleep(600)
            from tfdist import cli
            sys.exit(cli.main(["tfdist", "train", *sys.argv[1:]]))
        """))
        return run_tfdist("launch", "--num_workers=2", f"--timeout_s={timeout_s}", "--",
                          sys.executable, script, "--strategy=multi_worker_mirrored",
                          f"--data_dir={self.data_dir}", *train_flags)

    def test_worker_that_never_starts_fails_its_peer_at_the_collective_timeout(self):
        start = time.monotonic()
        result = self._launch_with_a_worker_that_never_starts("--collective_timeout_s=10",
                                                               timeout_s=300)
        self.assertNotIn(result.returncode, (0, 124), result.stderr[-2000:])
        self.assertRegex(result.stdout,
                         r"\[worker:0\] tfdist train: error: worker:0 waited 10 s "
                         r"\(--collective_timeout_s\) for the other 1 worker\(s\) to join; .* "
                         r"Not answering: 127\.0\.0\.1:\d+\.")
        self.assertLess(time.monotonic() - start, 90)

    def test_worker_that_never_starts_without_a_collective_timeout_ends_at_the_launch_timeout(
            self):
        start = time.monotonic()
        result = self._launch_with_a_worker_that_never_starts(timeout_s=20)
        self.assertEqual(result.returncode, 124, result.stderr[-2000:])
        self.assertIn("waiting for all 2 workers to join, without a time limit", result.stdout)
        self.assertIn("timed out after 20 s; stopped every task", result.stderr)
        self.assertLess(time.monotonic() - start, 90)

if __name__ == "__main__":
    unittest.main()
