"""`tfdist plan --noise_scale_json / --critical_batch`: the steps-to-target model, the rule for
where scaling stops paying, the metrics JSON reader and its errors, and the check against this
project's batch-scaling study (docs/results/batch_scaling.json). In this process, through
`cli.main`, with TensorFlow's import replaced by a failure: none of it may need TensorFlow."""

import contextlib
import io
import json
import os
import statistics
import tempfile
import types
import unittest
from unittest import mock

from tfdist.cluster import cost_model
from tfdist.commands import cli
from tfdist.commands.cost_plan import scaling
from tfdist.runtime import tf_import
from tfdist.runtime.config import ConfigError

_RESULTS = os.path.join(os.path.dirname(__file__), *[os.pardir] * 4, "docs", "results")
# The study's B_simple where each batch's best run reached its target: median 13
# (docs/results/batch_scaling.md).
STUDY_B_SIMPLE = [16, 8, 12, 5, 18, 11, 14, 22]
# McCandlish et al. find B_simple and B_crit within about an order of magnitude of each other.
PAPERS_FACTOR = 10
# The study's batches, 16 to 2,048, as 1 to 128 one-GPU nodes at 16 examples each.
STUDY_GRID = [
    "--compute_ms=25",
    "--per_replica_batch_size=16",
    "--gradient_mib=0.22",
    "--gpus_per_node=1",
    "--nodes=1,2,4,8,16,32,64,128",
]
WORKLOAD = [
    "--compute_ms=100",
    "--per_replica_batch_size=64",
    "--gradient_mib=100",
    "--gpus_per_node=4",
    "--nodes=1,2,4",
]


def plan(*args: str) -> tuple[int, str, str]:
    """`tfdist plan ARGS` in this process: (exit status, stdout, stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        mock.patch.object(tf_import, "import_tensorflow", side_effect=AssertionError("TF")),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        status = cli.main(["tfdist", "plan", *args])
    return status, stdout.getvalue(), stderr.getvalue()


class ModelTest(unittest.TestCase):
    """The model and the rule in `tfdist.cluster.cost_model`."""

    def test_a_doubling_cuts_a_quarter_of_the_steps_exactly_at_the_critical_batch(self):
        self.assertAlmostEqual(cost_model.doubling_cut(44, 44), cost_model.PAYING_CUT)
        self.assertGreater(cost_model.doubling_cut(43.9, 44), cost_model.PAYING_CUT)
        self.assertLess(cost_model.doubling_cut(44.1, 44), cost_model.PAYING_CUT)
        self.assertAlmostEqual(cost_model.doubling_cut(1e-9, 44), 0.5)  # Perfect scaling.
        self.assertAlmostEqual(cost_model.doubling_cut(1e9, 44), 0.0)

    def test_steps_relative_to_a_baseline_batch(self):
        self.assertEqual(cost_model.steps_ratio(16, 44, 16), 1.0)
        self.assertAlmostEqual(
            cost_model.steps_ratio(2048, 44, 16), (1 + 44 / 2048) / (1 + 44 / 16)
        )

    def test_the_cut_per_doubling_of_the_gpus(self):
        self.assertAlmostEqual(cost_model.cut_per_doubling(1.0, 0.25, 1, 4), 0.5)
        self.assertAlmostEqual(cost_model.cut_per_doubling(1.0, 1.0, 2, 8), 0.0)
        self.assertLess(cost_model.cut_per_doubling(1.0, 1.1, 8, 16), 0)  # Slower: a loss.


class ReadNoiseScaleTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        scratch = tempfile.TemporaryDirectory()
        self.addCleanup(scratch.cleanup)
        self.dir = scratch.name

    def _write(self, content) -> str:
        path = os.path.join(self.dir, "metrics.json")
        with open(path, "w", encoding="utf-8") as file:
            file.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def test_the_median_of_the_measured_epochs(self):
        path = self._write(
            {"history": {"noise_scale": [None, -3.0, 10.0, 30.0, 20.0, 0.0], "loss": [1.0] * 6}}
        )
        critical = scaling.read_noise_scale(path)
        self.assertEqual(critical.examples, 20.0)
        self.assertEqual(
            critical.b_simple, {"median": 20.0, "min": 10.0, "max": 30.0, "last": 20.0, "epochs": 3}
        )

    def test_files_that_hold_no_noise_scale_are_one_clear_error(self):
        benchmark = os.path.join(_RESULTS, "benchmark_noise_scale.json")  # A benchmark report.
        for content, expected in (
            ("{not json", "it is not JSON"),
            ("[" * 60_000 + "]" * 60_000, "nested too deeply to be a metrics JSON"),
            ({"history": {"loss": [1.0]}}, "has no noise_scale history"),
            ({"history": {"noise_scale": 13}}, "has no noise_scale history"),
            ([1, 2], "has no noise_scale history"),
            ({"history": {"noise_scale": ["13"]}}, "not a number of at most 1e\\+12"),
            ({"history": {"noise_scale": [True]}}, "not a number"),
            ('{"history": {"noise_scale": [1e400]}}', "1e400, which is not a finite number"),
            (
                '{"history": {"noise_scale": [%s]}}' % ("9" * 401),
                "99999999999999999999..., which is not a finite number of at most 32 digits",
            ),
            ('{"history": {"noise_scale": [NaN]}}', "NaN, which is not a finite number"),
            ({"history": {"noise_scale": [None, -1.0, 0]}}, "no positive noise_scale"),
        ):
            with self.subTest(content=str(content)[:40]):
                with self.assertRaisesRegex(ConfigError, f"^noise_scale_json='[^']*'.*{expected}"):
                    scaling.read_noise_scale(self._write(content))
        for path, expected in (
            (benchmark, "has no noise_scale history"),
            (self.dir, "it is a directory"),
            (os.path.join(self.dir, "none.json"), "No such file"),
        ):
            with self.subTest(path=path):
                with self.assertRaisesRegex(ConfigError, expected):
                    scaling.read_noise_scale(path)

    def test_both_flags_are_refused(self):
        request = types.SimpleNamespace(noise_scale_json="m.json", critical_batch=44.0)
        with self.assertRaisesRegex(
            ConfigError,
            r"^noise_scale_json='m.json' and "
            r"critical_batch=44: give one of them",
        ):
            scaling.from_request(request)


def _rows(*gpus_and_efficiency) -> list[dict]:
    return [
        {"nodes": gpus, "gpus": gpus, "global_batch": 16 * gpus, "scaling_efficiency": eff}
        for gpus, eff in gpus_and_efficiency
    ]


class StopsPayingTest(unittest.TestCase):
    def test_the_steps_alone_stop_paying_past_the_critical_batch(self):
        rows = scaling.with_steps(
            _rows((1, 1.0), (2, 1.0), (4, 1.0), (8, 1.0)), scaling.CriticalBatch(32.0), 16
        )
        self.assertIsNone(rows[0]["time_cut_per_doubling"])
        self.assertAlmostEqual(rows[2]["steps_ratio"], (1 + 32 / 64) / (1 + 32 / 16))
        last, first = scaling.stops_paying(rows)
        # 32 -> 64 examples cuts exactly a quarter (pays); 64 -> 128 less.
        self.assertEqual((last["gpus"], first["gpus"]), (4, 8))

    def test_a_slow_exchange_stops_it_earlier(self):
        rows = scaling.with_steps(
            _rows((1, 1.0), (2, 1.0), (4, 0.6)), scaling.CriticalBatch(1000.0), 16
        )
        last, first = scaling.stops_paying(rows)
        self.assertEqual((last["gpus"], first["gpus"]), (2, 4))
        self.assertAlmostEqual(
            rows[2]["time_to_target_speedup"], 0.6 / cost_model.steps_ratio(64, 1000, 16)
        )

    def test_when_every_row_pays(self):
        rows = scaling.with_steps(_rows((2, 1.0), (4, 1.0)), scaling.CriticalBatch(1e6), 16)
        self.assertEqual(scaling.stops_paying(rows), (rows[-1], None))
        line = scaling.advice(rows, scaling.CriticalBatch(1e6), 16, 1)
        self.assertTrue(line.startswith("scaling pays up to 4 nodes: each doubling"), line)


class PlanOutputTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        scratch = tempfile.TemporaryDirectory()
        self.addCleanup(scratch.cleanup)
        self.dir = scratch.name
        self.metrics = os.path.join(self.dir, "metrics.json")
        with open(self.metrics, "w", encoding="utf-8") as file:
            json.dump({"history": {"noise_scale": STUDY_B_SIMPLE}}, file)

    def _report(self, *args: str) -> tuple[list[str], dict]:
        json_path = os.path.join(self.dir, "plan.json")
        status, stdout, stderr = plan(*args, f"--json={json_path}")
        self.assertEqual(status, 0, stderr)
        with open(json_path, encoding="utf-8") as file:
            return stdout.splitlines(), json.load(file)

    def test_without_the_flags_nothing_changes(self):
        lines, report = self._report(*WORKLOAD)
        self.assertTrue(lines[1].endswith("| host->device MB/s per GPU (host, device prep) |"))
        self.assertNotIn("critical_batch", report)
        self.assertNotIn("steps_ratio", report["configurations"][0])
        self.assertEqual(len(report["advice"]), len(lines) - 6)  # Describe, 2 + 3 table lines.

    def test_the_table_json_and_advice_from_a_metrics_json(self):
        lines, report = self._report(*WORKLOAD, f"--noise_scale_json={self.metrics}")
        self.assertRegex(
            lines[1],
            r"^tfdist plan: critical batch B_crit ~ 13 examples, "
            r"estimated by the median .* of 8 epoch\(s\) .*\(5 to 22, "
            r"last 22\); an estimate",
        )
        self.assertTrue(
            lines[2].endswith(
                "| steps vs 1 GPU | time to target speed-up | time cut per doubling |"
            )
        )
        rows = report["configurations"]
        self.assertAlmostEqual(rows[0]["steps_ratio"], (1 + 13 / 256) / (1 + 13 / 64))
        self.assertAlmostEqual(
            rows[1]["time_to_target_speedup"],
            rows[1]["scaling_efficiency"] / rows[1]["steps_ratio"],
        )
        self.assertIn(
            f"| {rows[0]['steps_ratio']:.2f} | {rows[0]['time_to_target_speedup']:.1f} |", lines[4]
        )
        critical = report["critical_batch"]
        self.assertEqual(
            (critical["b_crit"], critical["source"], critical["knee_replicas"]),
            (13.0, "noise_scale_json", 13 / 64),
        )
        self.assertEqual(critical["pays_up_to"], {"nodes": None, "gpus": 1})
        self.assertEqual(lines[-1], f"tfdist plan: {report['advice'][-1]}")
        self.assertRegex(
            lines[-1],
            r"^tfdist plan: scaling stops paying past 1 GPU: .* under "
            r"25%.*; for the steps alone from a global batch of about "
            r"13 \(B_crit; at 64 examples per replica one replica is "
            r"already past it\)\.$",
        )

    def test_critical_batch_given_directly(self):
        lines, report = self._report(*STUDY_GRID, "--critical_batch=44")
        self.assertEqual(
            lines[1], "tfdist plan: critical batch B_crit = 44 examples (--critical_batch)."
        )
        self.assertEqual(report["critical_batch"]["stops_paying_at"], {"nodes": 8, "gpus": 8})
        self.assertIn("about 2.8 replicas, 2.8 nodes", lines[-1])

    def test_bad_values_are_one_line_exit_2_with_nothing_written(self):
        empty = os.path.join(self.dir, "empty")
        open(empty, "w", encoding="utf-8").close()
        json_path = os.path.join(self.dir, "plan.json")
        cases = [
            (f"--noise_scale_json={value}", "noise_scale_json")
            for value in (self.dir, empty, "/nowhere/metrics.json")
        ]
        cases += [
            (f"--critical_batch={value}", "critical_batch")
            for value in ("nan", "inf", "-inf", "1e999", "x", "", "-1", "0", "1e13")
        ]
        cases.append((f"--critical_batch=44 --noise_scale_json={self.metrics}", "give one"))
        for args, named in cases:
            with self.subTest(args=args):
                status, stdout, stderr = plan(*WORKLOAD, *args.split(), f"--json={json_path}")
                self.assertEqual((status, stdout), (2, ""), stderr)
                self.assertEqual(len(stderr.strip().splitlines()), 1, stderr)
                self.assertIn(named, stderr)
                self.assertNotIn("Traceback", stderr)
                self.assertFalse(os.path.exists(json_path))


class StudyCheckTest(unittest.TestCase):
    """The advice's knee from the study's B_simple against the knee the study measured."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        with open(os.path.join(_RESULTS, "batch_scaling.json"), encoding="utf-8") as file:
            cls.study = json.load(file)
        cls.steps = {
            int(batch): entry["best"]["steps"] for batch, entry in cls.study["batches"].items()
        }

    def test_the_knee_from_b_simple_lies_within_the_papers_factor_of_the_measured_one(self):
        self.assertEqual(statistics.median(STUDY_B_SIMPLE), 13)
        with tempfile.TemporaryDirectory() as scratch:
            metrics, json_path = os.path.join(scratch, "m.json"), os.path.join(scratch, "p.json")
            with open(metrics, "w", encoding="utf-8") as file:
                json.dump({"history": {"noise_scale": STUDY_B_SIMPLE}}, file)
            status, _, stderr = plan(
                *STUDY_GRID, f"--noise_scale_json={metrics}", f"--json={json_path}"
            )
            self.assertEqual(status, 0, stderr)
            with open(json_path, encoding="utf-8") as file:
                report = json.load(file)
        predicted = report["critical_batch"]["knee_global_batch"]
        fitted = self.study["fit"]["b_crit"]
        self.assertAlmostEqual(fitted / predicted, scaling.STUDY_KNEE_OVER_B_SIMPLE, delta=0.05)
        self.assertLess(fitted / predicted, PAPERS_FACTOR)
        # The same rule on the measured steps: the first batch whose doubling saved < 1/4.
        batches = sorted(self.steps)
        measured = next(
            batch
            for batch, doubled in zip(batches, batches[1:])
            if 1 - self.steps[doubled] / self.steps[batch] < cost_model.PAYING_CUT
        )
        self.assertEqual(measured, 64)
        self.assertLess(measured / predicted, PAPERS_FACTOR)
        # Predicted steps (relative to batch 16) against measured: B_simple's knee is too early,
        # so it predicts too few steps saved, by at most this factor (docs/PLANNING.md).
        rows = report["configurations"]
        over = [
            row["steps_ratio"] / (self.steps[row["global_batch"]] / self.steps[16]) for row in rows
        ]
        self.assertEqual(round(max(over), 2), 2.32)
        self.assertGreaterEqual(min(over), 1.0)


if __name__ == "__main__":
    unittest.main()
