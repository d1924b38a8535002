"""A `gs://` model dir, end to end, against the emulated Cloud Storage (tests/cloud_storage.py)
reached as TensorFlow reaches the real one: a user's program trains into the bucket from one
emulated host, a second run on the same dir from another host is refused while the first
holds it, the first is preempted, and the second resumes to the weights of a run that was never
stopped; every file of the run is in the bucket and none on either host's local disk.

Needs root, network namespaces, openssl and gcp-storage-emulator; skipped where missing."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import pytest

from tests import cloud_storage
from tests.tfdist.cli_runner import MLP_PROGRAM
from tests.tfdist.cli_runner import digests
from tfdist.cluster.rehearsal import hosts as hosts_lib
from tfdist.errors import EXIT_PREEMPTED
from tfdist.runtime.model_dir import lease

_TEMP_SAVE_RE = re.compile(r"backup%2Fchief%2Fckpt-(\d+)_temp")  # A backup being written.
_LEASE_S = 6  # Every run here: a killed run's lease is taken over after 6 s, not 30.
_RUN_S = 300  # A run's longest wait, loaded: a few seconds of training and TensorFlow's import.
_COMMAND = [
    sys.executable,
    MLP_PROGRAM,
    "--strategy=one_device",
    "--epochs=3",
    "--global_batch_size=32",
]


@pytest.mark.multiprocess
@cloud_storage.skip_unless_available
class ModelDirInABucketTest(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _data(self, small_shapes_data_dir):
        self.data_dir = small_shapes_data_dir

    def setUp(self):
        super().setUp()
        try:
            self.gcs = cloud_storage.EmulatedCloudStorage(["pod-a", "pod-b"])
        except hosts_lib.NoHosts as refused:
            self.skipTest(f"this machine cannot emulate hosts: {refused}")
        self.addCleanup(self.gcs.close)
        self.cwd = self.enterContext(tempfile.TemporaryDirectory())  # Both hosts' local disk.

    def _start(self, host: str, model_dir: str, *flags: str) -> subprocess.Popen:
        program = self.gcs.run(
            host,
            [*_COMMAND, f"--model_dir={model_dir}", *flags],
            cwd=self.cwd,
            env={**os.environ, lease.LEASE_ENV: str(_LEASE_S)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.addCleanup(program.kill)
        return program

    def _ended(self, program: subprocess.Popen, seen: str = "") -> tuple[int, str]:
        output, _ = program.communicate(timeout=_RUN_S)
        return program.returncode, seen + output

    def test_train_refuse_a_second_run_preempt_and_resume_on_another_host(self):
        alone = self._start("pod-b", "gs://bkt/alone")
        first = self._start("pod-a", "gs://bkt/run", "--hold_at_epoch=2")
        seen = ""
        for line in first.stdout:  # Until the hold (bounded by the hold's 120 s).
            seen += line
            if "holding at epoch 2 until a preemption notice" in line:
                break
        status, refused = self._ended(self._start("pod-b", "gs://bkt/run"))
        self.assertEqual(status, 2, refused)
        self.assertRegex(
            refused,
            r"error: --model_dir='gs://bkt/run' is in use by another run \(pid \d+ on pod-a since "
            r"[0-9T:-]+; its lease gs://bkt/run/\.tfdist\.lock was renewed within 6 s\); wait "
            r"for it to end or stop it, or pass another --model_dir=DIR\.\n$",
        )
        first.send_signal(signal.SIGTERM)
        status, output = self._ended(first, seen)
        self.assertEqual(status, EXIT_PREEMPTED, output)
        self.assertIn("preempted at epoch 2 step 1", output)
        status, resumed = self._ended(self._start("pod-b", "gs://bkt/run"))
        self.assertEqual(status, 0, resumed)
        self.assertIn("resuming at epoch 2 step 2", resumed)
        status, uninterrupted = self._ended(alone)
        self.assertEqual(status, 0, uninterrupted)
        self.assertEqual(digests(resumed), digests(uninterrupted))

        objects = self.gcs.objects("bkt", "run/")
        for kept in ("cluster.json", "history.json", "save_time.json", "held-once"):
            self.assertIn(f"run/{kept}", objects)
        self.assertIn("run/checkpoints/epoch-003.index", objects)
        self.assertTrue(any(name.startswith("run/backup/") for name in objects), objects)
        self.assertNotIn("run/.tfdist.lock", objects)  # Released by the run that ended.
        self.assertEqual(os.listdir(self.cwd), [])  # No ./gs:/bkt/run/... on the local disk.
        self.assertNotIn("the emulator failed", self.gcs.log())

    def test_a_run_killed_mid_save_resumes_from_the_last_complete_backup(self):
        """SIGKILL while a backup is being uploaded (its `_temp` objects seen at the emulator),
        with earlier backups complete: the resume takes the last complete one and ends with the
        weights of a run never stopped."""
        alone = self._start("pod-b", "gs://bkt/alone")
        first = self._start("pod-a", "gs://bkt/run", "--backup_every=3")
        deadline = time.monotonic() + _RUN_S
        while len(set(_TEMP_SAVE_RE.findall(self.gcs.log()))) < 3:  # The third save under way.
            self.assertIsNone(first.poll(), "the run ended before its third backup")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        first.kill()  # The pod goes with its init, SIGKILLed as a node lost.
        first.wait(timeout=_RUN_S)
        status, resumed = self._ended(self._start("pod-b", "gs://bkt/run", "--backup_every=3"))
        self.assertEqual(status, 0, resumed)
        self.assertRegex(resumed, r"resuming at epoch 1 step [47]\b")
        status, uninterrupted = self._ended(alone)
        self.assertEqual(status, 0, uninterrupted)
        self.assertEqual(digests(resumed), digests(uninterrupted))

    def test_two_workers_under_launch_with_an_evaluator_keep_every_file_in_the_bucket(self):
        """Keras 3's own step: worker 1 saves into scratch directories in the bucket and
        removes them; the evaluator finds the chief's checkpoints there and records its
        results there; both leases are released."""
        metrics = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "m.json")
        status, output = self._ended(
            self.gcs.run(
                "pod-a",
                [
                    sys.executable,
                    "-m",
                    "tfdist",
                    "launch",
                    "--num_workers=2",
                    "--evaluator",
                    f"--timeout_s={_RUN_S}",
                    "--",
                    "train",
                    "--strategy=multi_worker_mirrored",
                    "--keras=3",
                    f"--data_dir={self.data_dir}",
                    "--model_dir=gs://bkt/mw",
                    "--epochs=2",
                    "--steps_per_epoch=4",
                    "--global_batch_size=32",
                    f"--metrics_json={metrics}",
                ],
                cwd=self.cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        self.assertEqual(status, 0, output)
        self.assertIn("[evaluator:0] tfdist evaluator: epoch-002", output)
        objects = self.gcs.objects("bkt", "mw/")
        for kept in ("cluster.json", "history.json", "evaluations.json"):
            self.assertIn(f"mw/{kept}", objects)
        self.assertIn("mw/checkpoints/epoch-002.index", objects)
        left = [name for name in objects if ".tmp" in name or name.endswith(".lock")]
        self.assertEqual(left, [], "worker 1's scratch and the leases are gone")
        self.assertEqual(os.listdir(self.cwd), [])


if __name__ == "__main__":
    unittest.main()
