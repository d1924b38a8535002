"""`tfdist.training.summary`: the summary line."""

import unittest

from absl.testing import parameterized

from tfdist.training import summary


class FormatLineTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("one_worker", "mirrored", 2, 1, None, "mirrored on 2 replica(s), 3 epoch(s)"),
        (
            "two_workers",
            "multi_worker_mirrored",
            2,
            2,
            None,
            "multi_worker_mirrored on 2 replica(s) in all (2 workers x 1), 3 epoch(s)",
        ),
        (
            "parameter_server",
            "parameter_server",
            1,
            2,
            None,
            "parameter_server on 2 worker(s), asynchronous, 1 replica(s) each",
        ),
        ("resumed", "one_device", 1, 1, 1, "in 5.0s (resumed at epoch 2):"),
    )
    def test_says_how_many_replicas_in_all(self, strategy, replicas, workers, resumed, expected):
        line = summary.format_line(
            {
                "strategy": strategy,
                "num_replicas": replicas,
                "num_workers": workers,
                "epochs": 3,
                "steps_per_epoch": 10,
                "wall_s": 5.0,
                "final": {"loss": 0.5},
                "examples_per_sec": 100.0,
                "resumed_from_epoch": resumed,
            }
        )
        self.assertIn(expected, line)


if __name__ == "__main__":
    unittest.main()
