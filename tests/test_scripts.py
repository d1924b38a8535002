"""The arithmetic of the measurement scripts in scripts/, on inputs worked out by hand."""

import importlib
import math
import os
import sys
import unittest

_SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def _script(name: str):
    if _SCRIPTS not in sys.path:
        sys.path.insert(0, _SCRIPTS)
    return importlib.import_module(name)


class BatchScalingStudyTest(unittest.TestCase):

    def test_the_knee_fit_recovers_a_known_critical_batch(self):
        study = _script("batch_scaling_study")
        batches = [16, 32, 64, 128, 256, 512, 1024, 2048]
        steps = [50 * (1 + 300 / batch) for batch in batches]
        s_min, b_crit = study._fit_knee(batches, steps)
        self.assertAlmostEqual(s_min / 50, 1, delta=0.01)
        self.assertAlmostEqual(b_crit / 300, 1, delta=0.01)

    def test_the_rate_search_walks_towards_fewer_steps(self):
        study = _script("batch_scaling_study")

        def train_at(rate, best):
            return {"steps": round(100 * (1 + abs(math.log2(rate / 0.16)))), "best": best}

        runs = study._search_rate(0.04, train_at, max_runs=5)
        self.assertEqual([run["rate"] for run in runs], [0.04, 0.02, 0.08, 0.16, 0.32])
        self.assertEqual(runs[3]["best"]["rate"], 0.08)  # The best before it, as the cap.
        self.assertEqual(len(study._search_rate(0.04, train_at, max_runs=3)), 3)

    def test_evaluations_fall_on_a_quarter_octave_grid(self):
        steps = _script("batch_scaling_study")._evaluation_steps(20)
        self.assertEqual(steps, [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16, 19])


if __name__ == "__main__":
    unittest.main()
