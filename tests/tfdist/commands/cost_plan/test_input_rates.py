"""`tfdist plan`'s host input rates from flags and from a `benchmark_input.py --json` file."""

import json
import os
import tempfile
import types
import unittest

import pytest

from tests.tfdist.cli_runner import run_tfdist_cases
from tfdist.commands.cost_plan import input_rates
from tfdist.runtime.config import ConfigError

MEASURED = {
    "image_size": 224,
    "host_examples_per_core": 700.5,
    "decode_examples_per_core": 880.0,
    "tfdist_eps": 1300.0,
}


class InputRatesTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        scratch = tempfile.TemporaryDirectory()
        self.addCleanup(scratch.cleanup)
        self.dir = scratch.name

    def _file(self, report) -> str:
        path = os.path.join(self.dir, "input.json")
        with open(path, "w", encoding="utf-8") as file:
            file.write(report if isinstance(report, str) else json.dumps(report))
        return path

    def _request(self, path=None, **given):
        values = {name: given.get(name) for name in input_rates.RATES}
        return types.SimpleNamespace(input_benchmark=path, given=frozenset(given), **values)

    def test_the_file_gives_both_rates_and_a_flag_beats_it(self):
        path = self._file(MEASURED)
        host = input_rates.from_request(self._request(path, host_examples_per_core=400.0))
        self.assertEqual(
            host.rates, {"host_examples_per_core": 400.0, "decode_examples_per_core": 880.0}
        )
        self.assertEqual(
            host.sources,
            {"host_examples_per_core": "flag", "decode_examples_per_core": "input benchmark"},
        )
        self.assertEqual(host.image_size, 224)

    def test_without_a_file_or_flags_the_host_is_no_limit(self):
        host = input_rates.from_request(self._request())
        self.assertEqual(host.rates, dict.fromkeys(input_rates.RATES))
        self.assertEqual(set(host.sources.values()), {"default"})
        self.assertIsNone(host.image_size)

    def test_files_without_two_positive_rates_are_one_clear_error(self):
        for report in (
            "not json",
            "[1, 2]",
            {"host_examples_per_core": 1.0},
            {**MEASURED, "decode_examples_per_core": float("nan")},
            {**MEASURED, "host_examples_per_core": -3},
            {**MEASURED, "host_examples_per_core": True},
            {**MEASURED, "host_examples_per_core": "700"},
            # Was an OverflowError: Python reads the digits; no float holds them.
            json.dumps(MEASURED)[:-1] + ', "host_examples_per_core": 1%s}' % ("0" * 400),
        ):
            with self.subTest(report=report):
                path = self._file(report if isinstance(report, str) else json.dumps(report))
                with self.assertRaisesRegex(
                    ConfigError,
                    r"^input_benchmark='.*'[: ].*"
                    r"benchmark_input\.py --json",
                ):
                    input_rates.read(path)


@pytest.mark.multiprocess
class PlanFromAnInputBenchmarkTest(unittest.TestCase):
    def test_the_table_plans_host_cores_from_the_measured_rates(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "input.json")
            with open(path, "w", encoding="utf-8") as file:
                json.dump(MEASURED, file)
            plan = [
                "plan",
                "--compute_ms=100",
                "--per_replica_batch_size=64",
                "--gradient_mib=100",
                "--gpus_per_node=8",
                "--nodes=1",
                f"--input_benchmark={path}",
            ]
            result, refused = run_tfdist_cases(
                [[*plan, "--image_size=224"], [*plan, "--image_size=128"]], without_tensorflow=True
            )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("host_examples_per_core from input benchmark", result.stdout)
        # 8 GPUs x 640 examples/s: 5120 / 700.5 and 5120 / 880 cores.
        self.assertIn("| 7.3, 5.8 |", result.stdout)
        self.assertEqual(refused.returncode, 2)
        self.assertEqual(refused.stdout, "")
        self.assertRegex(
            refused.stderr,
            r"^tfdist plan: error: --input_benchmark=.* measured "
            r"224x224 images, this plan 128x128: pass "
            r"--image_size=224",
        )
        self.assertEqual(len(refused.stderr.splitlines()), 1, refused.stderr)


if __name__ == "__main__":
    unittest.main()
