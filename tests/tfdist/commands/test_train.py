"""`tfdist train` end to end, as a user runs it: 2 replicas over 2 logical CPUs, metrics JSON.
(The summary line before the one-line error when the summary cannot be saved: test_fit.)"""

import json
import os
import re
import unittest

import pytest
from absl.testing import parameterized

from tests.tfdist.cli_runner import run_tfdist

_MIN_VAL_ACCURACY = 0.8
_EXPECTED_KEYS = {
    "strategy",
    "num_replicas",
    "num_workers",
    "global_batch_size",
    "per_replica_batch_size",
    "mixed_precision",
    "epochs",
    "steps",
    "final",
    "history",
    "examples_per_sec",
    "epoch_train_s",
    "wall_s",
}


@pytest.mark.multiprocess
class TrainEndToEndTest(parameterized.TestCase):
    @pytest.fixture(autouse=True)
    def _dirs(self, shapes_data_dir, tmp_path):
        self.data_dir = shapes_data_dir
        self.metrics = str(tmp_path / "out" / "metrics.json")

    def test_default_job_on_two_replicas_learns_and_reports(self):
        """The default job with both options that change it but not its steps: the gradient
        noise scale measured, the preprocessing on the replica devices (host on CPUs by
        default, the path the other built-in-dataset trainings take)."""
        result = self._train_and_check("--measure_noise_scale", "--preprocess_on=device")
        with open(self.metrics, encoding="utf-8") as metrics_file:
            noise_scales = json.load(metrics_file)["history"]["noise_scale"]
        logged = re.findall(
            r"epoch ([0-9]+): gradient noise scale B_simple=([0-9.e+]+)", result.stderr
        )
        self.assertEqual(
            [int(epoch) for epoch, _ in logged], [1, 2, 3], "the noise scale is logged each epoch"
        )
        for recorded, (_, printed) in zip(noise_scales, logged):
            self.assertGreater(recorded, 0, "the noise scale in the metrics")
            self.assertAlmostEqual(
                recorded / float(printed),
                1.0,
                places=3,
                msg="the noise scale in the metrics is the one logged",
            )
        self.assertIn(
            "tfdist: the gradient noise scale ends at B_simple=",
            result.stderr,
            "the noise scale's advice at the end",
        )
        self.assertIn(
            "preprocessing on device: 3,080 bytes/example host->device",
            result.stderr,
            "the preprocessing on the replica devices (and learns)",
        )

    def _train_and_check(self, *args: str):
        result = run_tfdist(
            "train",
            "--strategy=mirrored",
            "--num_cpu_devices=2",
            f"--data_dir={self.data_dir}",
            f"--metrics_json={self.metrics}",
            *args,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        with open(self.metrics, encoding="utf-8") as metrics_file:
            metrics = json.load(metrics_file)
        self.assertLessEqual(_EXPECTED_KEYS, set(metrics))
        self.assertEqual(metrics["strategy"], "mirrored")
        self.assertEqual(metrics["num_replicas"], 2)
        self.assertEqual(metrics["num_workers"], 1)
        # The default global batch of 128 over 2 replicas, 10,000 training examples, 3 epochs.
        self.assertEqual(metrics["per_replica_batch_size"], 64)
        self.assertEqual(metrics["steps_per_epoch"], 78)
        self.assertEqual(metrics["steps"], 234)
        self.assertGreaterEqual(metrics["final"]["val_accuracy"], _MIN_VAL_ACCURACY, "it learns")
        # Keras' own log lines are a second witness of each epoch's validation accuracy.
        logged = [float(value) for value in re.findall(r"val_accuracy: ([0-9.]+)", result.stdout)]
        self.assertLen(logged, 3)
        for recorded, printed in zip(metrics["history"]["val_accuracy"], logged):
            self.assertAlmostEqual(recorded, printed, places=4)
        self.assertGreater(metrics["examples_per_sec"], 0)
        self.assertLen(metrics["epoch_train_s"], 3)
        self.assertTrue(all(seconds > 0 for seconds in metrics["epoch_train_s"]))
        summary = result.stdout.strip().splitlines()[-1]
        self.assertIn("mirrored on 2 replica(s)", summary)
        self.assertIn("val_accuracy=", summary)
        self.assertEqual(os.listdir(os.path.dirname(self.metrics)), ["metrics.json"])
        return result


if __name__ == "__main__":
    unittest.main()
