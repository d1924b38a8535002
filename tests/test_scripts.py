"""The arithmetic of the measurement scripts in scripts/, on inputs worked out by hand."""

import importlib
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

    def test_evaluations_fall_on_a_quarter_octave_grid(self):
        steps = _script("batch_scaling_study")._evaluation_steps(20)
        self.assertEqual(steps, [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16, 19])


if __name__ == "__main__":
    unittest.main()
