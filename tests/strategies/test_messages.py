"""tfdist.strategies.messages: `problem` words a refused value in one line, the value cut."""

import unittest

from tfdist.strategies.messages import problem


class ProblemTest(unittest.TestCase):
    def test_a_field_its_value_cut_the_problem_and_the_fix_in_one_line(self):
        self.assertEqual(
            problem("epochs", "is too many", "pass e.g. 3", value=10**100),
            f"epochs={str(10**100)[:76]} ... is too many; pass e.g. 3.",
        )
        self.assertEqual(
            problem("TF_CONFIG", "has no cluster", "add one."),
            "TF_CONFIG: has no cluster; add one.",
        )
