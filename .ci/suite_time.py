"""The suite's time guard: reads the JUnit XML of README's test command and prints pytest's own
time and the slowest tests; exits 1 when that time is over the budget.

The budget holds at this machine's usual speed. A shared machine has slow spells that slow every
test alike, so the budget is scaled by the run's own measure of speed: how long README's first
command took to train (its `tfdist train` summary line) against how long it usually takes.

Usage: python3 .ci/suite_time.py REPORT.xml BUDGET_S USUAL_TRAIN_S FIRST_COMMAND_OUTPUT
"""

import re
import sys
import xml.etree.ElementTree as ElementTree

SLOWEST = 15
# `tfdist train`'s summary line: "tfdist: one_device on 1 replica(s), 3 epoch(s) of 78 steps in
# 11.7s: val_accuracy=..."
_TRAINED_IN = re.compile(r"^tfdist: .* steps in ([0-9.]+)s\b", re.MULTILINE)


def speed_factor(first_command_output: str, usual_train_s: float) -> float:
    """How much slower than usual this machine ran README's first command (1 when faster, or
    when its summary line is missing)."""
    trained = _TRAINED_IN.findall(first_command_output)
    if not trained:
        print(
            "ci: warning: no `tfdist train` summary line in README's first command's output; "
            "the budget is not scaled"
        )
        return 1.0
    train_s = float(trained[-1])
    factor = max(1.0, train_s / usual_train_s)
    print(
        f"ci: README's first command trained in {train_s:g} s (usually {usual_train_s:g} s): "
        f"the budget is scaled by {factor:.2f}"
    )
    return factor


def main(report: str, budget_s: float, usual_train_s: float, first_command_log: str) -> int:
    with open(first_command_log, encoding="utf-8", errors="replace") as log:
        budget_s *= speed_factor(log.read(), usual_train_s)
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    seconds = float(suite.get("time"))
    cases = sorted(
        (
            (float(case.get("time", 0)), f"{case.get('classname')}::{case.get('name')}")
            for case in suite.iter("testcase")
        ),
        reverse=True,
    )
    print(
        f"ci: README's test command: pytest's own time {seconds:.0f} s ({seconds / 60:.1f} min) "
        f"for {len(cases)} tests; budget {budget_s:.0f} s. The {SLOWEST} slowest:"
    )
    for case_s, name in cases[:SLOWEST]:
        print(f"ci: {case_s:7.1f} s  {name}")
    if seconds > budget_s:
        print(
            f"ci: error: the suite took {seconds:.0f} s, over its budget of {budget_s:.0f} s; "
            "make the new slow tests cheaper (share a child, merge a scenario, wait on an event "
            "instead of a fixed time), or raise the budget in .ci/run with the figures that "
            "justify it.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]))
