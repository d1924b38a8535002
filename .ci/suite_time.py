"""The suite's time guard: reads the JUnit XML of README's test command and prints pytest's own
time and the slowest tests; exits 1 when that time is over the budget.

Usage: python3 .ci/suite_time.py REPORT.xml BUDGET_S [SLOWEST]
"""

import sys
import xml.etree.ElementTree as ElementTree


def main(report: str, budget_s: float, slowest: int = 15) -> int:
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    seconds = float(suite.get("time"))
    cases = sorted(((float(case.get("time", 0)), f"{case.get('classname')}::{case.get('name')}")
                    for case in suite.iter("testcase")), reverse=True)
    print(f"ci: README's test command: pytest's own time {seconds:.0f} s ({seconds / 60:.1f} min) "
          f"for {len(cases)} tests; budget {budget_s:g} s. The {slowest} slowest:")
    for case_s, name in cases[:slowest]:
        print(f"ci: {case_s:7.1f} s  {name}")
    if seconds > budget_s:
        print(f"ci: error: the suite took {seconds:.0f} s, over its budget of {budget_s:g} s; "
              "make the new slow tests cheaper (share a child, merge a scenario, wait on an event "
              "instead of a fixed time), or raise the budget in .ci/run with the figures that "
              "justify it.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), *map(int, sys.argv[3:])))
