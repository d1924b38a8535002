"""`tfdist plan`: the table, JSON, plot and advice, the workload's sources, and its errors."""

import contextlib
import io
import json
import os
import tempfile
import unittest

import pytest

from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist_cases
from tfdist.commands import cli
from tfdist.commands import flags as flags_lib

# One replica: 100 ms for 64 examples; 100 MiB of gradients; 4 GPUs per node.
WORKLOAD = [
    "--compute_ms=100",
    "--per_replica_batch_size=64",
    "--gradient_mib=100",
    "--gpus_per_node=4",
    "--nodes=1,2,4",
]


def _benchmark_report(path: str, **changes) -> None:
    report = {
        "configurations": [
            {
                "replicas": 1,
                "data": "synthetic",
                "global_batch_size": 32,
                "step_time_s": {"median": 0.25, "min": 0.2, "max": 0.3},
            },
            {
                "replicas": 2,
                "data": "synthetic",
                "global_batch_size": 32,
                "step_time_s": {"median": 0.5, "min": 0.4, "max": 0.6},
            },
        ],
        "train_args": ["--model=resnet20", "--mixed_precision=mixed_float16"],
        "trainable_parameters": 262144,
        **changes,
    }
    with open(path, "w", encoding="utf-8") as file:
        json.dump(report, file)


# The `tfdist plan` cases of PlanTest, by name; {dir} stands for the folder the class writes
# its files to.
_CASES = {
    "table": [*WORKLOAD, "--intra_link=nvlink3", "--inter_link=eth10", "--json={dir}/plan.json"],
    "advice": [*WORKLOAD, "--inter_link=ib_hdr"],
    "without_stack": [
        *WORKLOAD,
        "--inter_link=eth10",
        "--gpudirect_rdma=false",
        "--json={dir}/plan0.json",
    ],
    "with_stack": [
        *WORKLOAD,
        "--inter_link=eth10",
        "--gpudirect_rdma=false",
        "--inter_stack_gbps=10",
        "--json={dir}/plan1.json",
    ],
    "from_benchmark": [
        "--from_benchmark={dir}/bench.json",
        "--nodes=1,2",
        "--per_replica_batch_size=16",
        "--json={dir}/from_benchmark.json",
    ],
    "plot": [*WORKLOAD, "--plot={dir}/plan.png"],
}
# Flags that fail in one line, with a part of that line.
_ERRORS = (
    (["--compute_ms=100"], "per_replica_batch_size"),
    (["--per_replica_batch_size=8"], "compute_ms"),
    (
        [*WORKLOAD, "--inter_link=eth100", "--gpudirect_rdma"],
        "--gpudirect_rdma=True with --inter_link=eth100",
    ),
    (["--from_benchmark={dir}/no_1_replica.json"], "has no 1-replica synthetic configuration"),
    (["--from_benchmark={dir}/old.json"], "not a positive number"),
    (["--from_benchmark={dir}/odd.json"], "the train flag '--image_size=big'"),
    (["--from_benchmark={dir}"], "it is a directory; give a file"),
    ([*WORKLOAD, "--overlap=1.5"], "--overlap"),
    ([*WORKLOAD, "--nodes=2,x"], "--nodes"),
)


@pytest.mark.multiprocess
class PlanTest(unittest.TestCase):
    """`tfdist plan` as a user runs it, with TensorFlow failing to import: every case of the
    class runs in one child (`run_tfdist_cases`), started by the first test that reads one; each
    test checks its own cases."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        scratch = tempfile.TemporaryDirectory()  # pylint: disable=consider-using-with
        cls.addClassCleanup(scratch.cleanup)
        cls.dir = scratch.name
        _benchmark_report(os.path.join(cls.dir, "bench.json"))
        _benchmark_report(
            os.path.join(cls.dir, "no_1_replica.json"),
            configurations=[{"replicas": 2, "data": "synthetic"}],
        )
        _benchmark_report(os.path.join(cls.dir, "old.json"), trainable_parameters=-3)
        _benchmark_report(os.path.join(cls.dir, "odd.json"), train_args=["--image_size=big"])
        cls._results = None

    def _flags(self, flags: list[str]) -> list[str]:
        return [flag.replace("{dir}", self.dir) for flag in flags]

    def _result(self, case):
        """The result of `case` (a name of `_CASES`, or an index of `_ERRORS`)."""
        if PlanTest._results is None:
            cases = [*_CASES.values(), *(flags for flags, _ in _ERRORS)]
            results = run_tfdist_cases(
                [["plan", *self._flags(flags)] for flags in cases], without_tensorflow=True
            )
            PlanTest._results = dict(zip([*_CASES, *range(len(_ERRORS))], results))
        return PlanTest._results[case]

    def _report(self, name: str) -> dict:
        with open(os.path.join(self.dir, name), encoding="utf-8") as file:
            return json.load(file)

    def test_table_json_and_advice_without_tensorflow(self):
        result = self._result("table")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertIn("4 GPUs per node on nvlink3 (2400 Gbit/s)", lines[0])
        self.assertEqual(len([line for line in lines if line.startswith("| ")]), 2 + 3)
        advice = [line for line in lines if line.startswith("tfdist plan: ")][1:]
        self.assertTrue(
            advice[0].startswith("tfdist plan: scale up first: 4 GPUs on nvlink3 reach 0.9"), advice
        )
        report = self._report("plan.json")
        rows = report["configurations"]
        self.assertEqual([row["gpus"] for row in rows], [4, 8, 16])
        # 2 nodes over 10 Gbit/s TCP, staged through host memory: a flat ring of 8 GPUs moves
        # 14/8 x 100 MiB at 1.25e9 bytes/s, with 14 latencies of 50 + 2 x 5.7 µs.
        self.assertAlmostEqual(
            rows[1]["exchange_s"], 14 / 8 * 100 * 2**20 / 1.25e9 + 14 * 61.4e-6, places=6
        )
        self.assertAlmostEqual(rows[1]["scaling_efficiency"], 0.1 / (0.1 + rows[1]["exchange_s"]))
        self.assertEqual(report["advice"], [line[len("tfdist plan: ") :] for line in advice])
        self.assertIsNone(report["workload"]["host_examples_per_core"])  # Unlimited, not inf.

    def test_the_advice_names_the_best_exchange_setting_from_the_model(self):
        result = self._result("advice")
        self.assertEqual(result.returncode, 0, result.stderr)
        last = result.stdout.strip().splitlines()[-1]
        self.assertRegex(
            last,
            r"^tfdist plan: .* brings 2 nodes and 4 nodes to \d\.\d\d and "
            r"\d\.\d\d\.$",
        )

    def test_a_host_stack_slows_the_all_reduce_between_nodes(self):
        exchanges = []
        for name, report, stack in (
            ("without_stack", "plan0.json", False),
            ("with_stack", "plan1.json", True),
        ):
            result = self._result(name)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual("its stack 10 Gbit/s" in result.stdout.splitlines()[0], stack)
            exchanges.append(self._report(report)["configurations"][1]["exchange_s"])
        self.assertAlmostEqual(
            exchanges[1] - exchanges[0], 14 / 8 * 100 * 2**20 / 1.25e9, places=6
        )  # As fast as eth10.

    def test_the_workload_from_a_benchmark_and_flags_over_it(self):
        result = self._result("from_benchmark")
        self.assertEqual(result.returncode, 0, result.stderr)
        report = self._report("from_benchmark.json")
        workload = report["workload"]
        self.assertEqual(
            (
                workload["compute_s"],
                workload["per_replica_batch"],
                workload["gradient_bytes"],
                workload["compute_dtype_bytes"],
            ),
            (0.125, 16, 4 * 262144, 2),
        )  # The 32-example step, scaled to 16.
        self.assertEqual(report["sources"]["per_replica_batch_size"], "flag")
        self.assertEqual(report["sources"]["compute_ms"], "benchmark")
        self.assertEqual(report["model"], "resnet20")

    def test_plot(self):
        result = self._result("plot")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(self.dir, "plan.png"), "rb") as file:
            self.assertEqual(file.read(8), b"\x89PNG\r\n\x1a\n")

    def test_one_line_errors(self):
        for index, (flags, expected) in enumerate(_ERRORS):
            with self.subTest(args=self._flags(flags)):
                assert_one_line_error(self, self._result(index), expected)


class PlanWithTensorFlowTest(unittest.TestCase):
    """`tfdist plan` where it builds the model, in this process (TensorFlow is imported here
    already: conftest)."""

    def test_gradients_counted_from_the_model(self):
        self.addCleanup(flags_lib.FLAGS.unparse_flags)
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = cli.main(
                [
                    "tfdist",
                    "plan",
                    "--compute_ms=10",
                    "--per_replica_batch_size=8",
                    "--model=small_cnn",
                    "--nodes=1",
                ]
            )
        self.assertEqual(status, 0, stderr.getvalue())
        self.assertIn("gradient_mib from small_cnn's trainable parameters", stdout.getvalue())


if __name__ == "__main__":
    unittest.main()
