"""Tests for .ci/suite_time.py, CI's time guard: pytest's own time against a budget scaled by how
much slower than usual the same run's training went."""

import contextlib
import importlib.util
import io
import os
import tempfile
import unittest

from tfdist.training import summary

_GUARD = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".ci", "suite_time.py"
)
_spec = importlib.util.spec_from_file_location("suite_time", _GUARD)
suite_time = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite_time)


def _trained(wall_s: float) -> str:
    """The summary line `tfdist train` prints (tfdist's own formatter, so that a change to it
    that the guard cannot read fails here)."""
    return (
        summary.format_line(
            {
                "strategy": "one_device",
                "num_replicas": 1,
                "num_workers": 1,
                "epochs": 3,
                "steps_per_epoch": 78,
                "wall_s": wall_s,
                "examples_per_sec": 2440.0,
                "final": {"val_accuracy": 0.997, "loss": 0.083},
            }
        )
        + "\n"
    )


class SuiteTimeTest(unittest.TestCase):
    def _guard(self, suite_s: float, first_command_output: str) -> tuple[int, str, str]:
        with tempfile.TemporaryDirectory() as scratch:
            report, log = os.path.join(scratch, "suite.xml"), os.path.join(scratch, "first.log")
            with open(report, "w", encoding="utf-8") as xml:
                xml.write(
                    f'<testsuites><testsuite name="pytest" time="{suite_s}">'
                    '<testcase classname="a.B" name="test_slow" time="90.5"/>'
                    '<testcase classname="a.B" name="test_quick" time="0.1"/>'
                    "</testsuite></testsuites>"
                )
            with open(log, "w", encoding="utf-8") as first:
                first.write(first_command_output)
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                status = suite_time.main(report, 660, 15, log)
        return status, stdout.getvalue(), stderr.getvalue()

    def test_over_the_budget_at_the_usual_speed_fails_in_one_line(self):
        status, stdout, stderr = self._guard(700, "pip noise\n" + _trained(14.6))
        self.assertEqual(status, 1)
        self.assertIn("pytest's own time 700 s (11.7 min) for 2 tests; budget 660 s", stdout)
        self.assertLess(stdout.index("a.B::test_slow"), stdout.index("a.B::test_quick"))
        self.assertEqual(len(stderr.splitlines()), 1)
        self.assertIn("the suite took 700 s, over its budget of 660 s", stderr)

    def test_a_slow_spell_scales_the_budget_by_the_training_time(self):
        status, stdout, _ = self._guard(700, _trained(19.5))
        self.assertEqual(status, 0)
        self.assertIn("trained in 19.5 s (usually 15 s): the budget is scaled by 1.30", stdout)
        self.assertIn("budget 858 s", stdout)

    def test_a_faster_machine_keeps_the_budget(self):
        self.assertEqual(suite_time.speed_factor(_trained(9.0), 15), 1.0)

    def test_without_the_summary_line_the_budget_is_not_scaled(self):
        status, stdout, _ = self._guard(700, "tfdist train: error: something\n")
        self.assertEqual(status, 1)
        self.assertIn("no `tfdist train` summary line", stdout)


if __name__ == "__main__":
    unittest.main()
