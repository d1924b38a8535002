"""`tfdist plan`: the table, JSON, plot and advice, the workload's sources, and its errors."""

import json
import os
import tempfile
import unittest

import pytest

from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist

# One replica: 100 ms for 64 examples; 100 MiB of gradients; 4 GPUs per node.
WORKLOAD = ["--compute_ms=100", "--per_replica_batch_size=64", "--gradient_mib=100",
            "--gpus_per_node=4", "--nodes=1,2,4"]


def _benchmark_report(path: str, **changes) -> None:
    report = {"configurations": [
        {"replicas": 1, "data": "synthetic", "global_batch_size": 32,
         "step_time_s": {"median": 0.25, "min": 0.2, "max": 0.3}},
        {"replicas": 2, "data": "synthetic", "global_batch_size": 32,
         "step_time_s": {"median": 0.5, "min": 0.4, "max": 0.6}}],
        "train_args": ["--model=resnet20", "--mixed_precision=mixed_float16"],
        "trainable_parameters": 262144, **changes}
    with open(path, "w", encoding="utf-8") as file:
        json.dump(report, file)


@pytest.mark.multiprocess
class PlanTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self._scratch = tempfile.TemporaryDirectory()
        self.addCleanup(self._scratch.cleanup)
        self.dir = self._scratch.name

    def test_table_json_and_advice_without_tensorflow(self):
        json_path = os.path.join(self.dir, "plan.json")
        result = run_tfdist("plan", *WORKLOAD, "--intra_link=nvlink3", "--inter_link=eth10",
                            f"--json={json_path}", without_tensorflow=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertIn("4 GPUs per node on nvlink3 (2400 Gbit/s)", lines[0])
        self.assertEqual(len([line for line in lines if line.startswith("| ")]), 2 + 3)
        advice = [line for line in lines if line.startswith("tfdist plan: ")][1:]
        self.assertTrue(advice[0].startswith("tfdist plan: scale up first: 4 GPUs on nvlink3 "
                                             "reach 0.9"), advice)
        with open(json_path, encoding="utf-8") as file:
            report = json.load(file)
        rows = report["configurations"]
        self.assertEqual([row["gpus"] for row in rows], [4, 8, 16])
        # 2 nodes over 10 Gbit/s TCP, staged through host memory: a flat ring of 8 GPUs moves
        # 14/8 x 100 MiB at 1.25e9 bytes/s, with 14 latencies of 50 + 2 x 5.7 µs.
        self.assertAlmostEqual(rows[1]["exchange_s"],
                               14 / 8 * 100 * 2 ** 20 / 1.25e9 + 14 * 61.4e-6, places=6)
        self.assertAlmostEqual(rows[1]["scaling_efficiency"], 0.1 / (0.1 + rows[1]["exchange_s"]))
        self.assertEqual(report["advice"], [line[len("tfdist plan: "):] for line in advice])
        self.assertIsNone(report["workload"]["host_examples_per_core"])  # Unlimited, not inf.

    def test_the_advice_names_the_best_exchange_setting_from_the_model(self):
        result = run_tfdist("plan", *WORKLOAD, "--inter_link=ib_hdr", without_tensorflow=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        last = result.stdout.strip().splitlines()[-1]
        self.assertRegex(last, r"^tfdist plan: .* brings 2 nodes and 4 nodes to \d\.\d\d and "
                               r"\d\.\d\d\.$")

    def test_a_host_stack_slows_the_all_reduce_between_nodes(self):
        exchanges = []
        for stack in ([], ["--inter_stack_gbps=10"]):
            json_path = os.path.join(self.dir, f"plan{len(stack)}.json")
            result = run_tfdist("plan", *WORKLOAD, "--inter_link=eth10", "--gpudirect_rdma=false",
                                *stack, f"--json={json_path}", without_tensorflow=True)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual("its stack 10 Gbit/s" in result.stdout.splitlines()[0], bool(stack))
            with open(json_path, encoding="utf-8") as file:
                report = json.load(file)
            exchanges.append(report["configurations"][1]["exchange_s"])
        self.assertAlmostEqual(exchanges[1] - exchanges[0],
                               14 / 8 * 100 * 2 ** 20 / 1.25e9, places=6)  # As fast as eth10.

    def test_the_workload_from_a_benchmark_and_flags_over_it(self):
        path = os.path.join(self.dir, "bench.json")
        _benchmark_report(path)
        json_path = os.path.join(self.dir, "plan.json")
        result = run_tfdist("plan", f"--from_benchmark={path}", "--nodes=1,2",
                            "--per_replica_batch_size=16", f"--json={json_path}",
                            without_tensorflow=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(json_path, encoding="utf-8") as file:
            report = json.load(file)
        workload = report["workload"]
        self.assertEqual((workload["compute_s"], workload["per_replica_batch"],
                          workload["gradient_bytes"], workload["compute_dtype_bytes"]),
                         (0.125, 16, 4 * 262144, 2))  # The 32-example step, scaled to 16.
        self.assertEqual(report["sources"]["per_replica_batch_size"], "flag")
        self.assertEqual(report["sources"]["compute_ms"], "benchmark")
        self.assertEqual(report["model"], "resnet20")

    def test_gradients_counted_from_the_model(self):
        result = run_tfdist("plan", "--compute_ms=10", "--per_replica_batch_size=8",
                            "--model=small_cnn", "--nodes=1")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("gradient_mib from small_cnn's trainable parameters", result.stdout)

    def test_plot(self):
        path = os.path.join(self.dir, "plan.png")
        result = run_tfdist("plan", *WORKLOAD, f"--plot={path}", without_tensorflow=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(path, "rb") as file:
            self.assertEqual(file.read(8), b"\x89PNG\r\n\x1a\n")

    def test_one_line_errors(self):
        benchmark = os.path.join(self.dir, "bench.json")
        _benchmark_report(benchmark, configurations=[{"replicas": 2, "data": "synthetic"}])
        old = os.path.join(self.dir, "old.json")
        _benchmark_report(old, trainable_parameters=-3)
        odd = os.path.join(self.dir, "odd.json")
        _benchmark_report(odd, train_args=["--image_size=big"])
        cases = (
            (["--compute_ms=100"], "per_replica_batch_size"),
            (["--per_replica_batch_size=8"], "compute_ms"),
            ([*WORKLOAD, "--inter_link=eth100", "--gpudirect_rdma"],
             "--gpudirect_rdma=True with --inter_link=eth100"),
            ([f"--from_benchmark={benchmark}"], "has no 1-replica synthetic configuration"),
            ([f"--from_benchmark={old}"], "not a positive number"),
            ([f"--from_benchmark={odd}"], "the train flag '--image_size=big'"),
            ([f"--from_benchmark={self.dir}"], "it is a directory; give a file"),
            ([*WORKLOAD, "--overlap=1.5"], "--overlap"),
            ([*WORKLOAD, "--nodes=2,x"], "--nodes"),
        )
        for args, expected in cases:
            with self.subTest(args=args):
                assert_one_line_error(self, run_tfdist("plan", *args, without_tensorflow=True),
                                      expected)


if __name__ == "__main__":
    unittest.main()
