"""`tfdist.commands.benchmark.figures`: the arithmetic of a sweep's figures, its table and its
noisy figures."""

import unittest

from tfdist.commands.benchmark import figures as benchmark


class FiguresTest(unittest.TestCase):
    """The arithmetic, on step times whose figures are worked out by hand."""

    def test_figures_are_medians_over_rounds_with_their_spread(self):
        measured = {
            "global_batch_size": 32,
            "tfdist": [[0.4, 0.1, 0.2], [0.1, 0.1, 0.1], [0.4, 0.4, 0.3]],
            "plain": [[0.1, 0.1], [0.1, 0.1], [0.2, 0.2]],
            "no_strategy": [[0.1], [0.05], [0.4]],
        }
        figures = benchmark.figures(measured, "synthetic")
        self.assertEqual(figures["rounds"], 3)
        self.assertEqual(figures["step_time_s"], {"median": 0.2, "min": 0.1, "max": 0.4})
        self.assertEqual(figures["examples_per_sec"], {"median": 160.0, "min": 80.0, "max": 320.0})
        self.assertEqual(figures["rounds_examples_per_sec"], [160.0, 320.0, 80.0])
        # Per round 2.0, 1.0, 2.0 against plain; 2.0, 2.0, 1.0 against no strategy.
        self.assertAlmostEqual(figures["overhead_ratio"], 2.0)
        self.assertEqual(figures["overhead_ratio_spread"], [1.0, 2.0])
        self.assertAlmostEqual(figures["overhead_vs_no_strategy"], 2.0)
        self.assertEqual(figures["overhead_vs_no_strategy_spread"], [1.0, 2.0])
        self.assertNotIn("overhead_ratio", benchmark.figures(measured, "real"))
        self.assertNotIn("noise_scale", figures)

    def test_noise_scale_and_its_cost(self):
        measured = {
            "global_batch_size": 32,
            "tfdist": [[0.4, 0.1, 0.2]],
            "plain": [],
            "noise_scale": 300.0,
            "without_noise_scale": [[0.1, 0.2, 0.25]],
        }
        figures = benchmark.figures(measured, "synthetic")
        self.assertEqual(figures["noise_scale"], 300.0)
        self.assertAlmostEqual(figures["noise_scale_overhead"], 1.0)
        table = benchmark.table([{"replicas": 2, "data": "synthetic", **figures}])
        self.assertIn("B_simple", table)
        self.assertIn("300", table.splitlines()[1])

    def test_efficiency_and_input_bound_ratio_pair_the_same_rounds(self):
        rounds = {
            (1, "synthetic"): [100.0, 200.0, 100.0],
            (2, "synthetic"): [150.0, 200.0, 180.0],
            (1, "real"): [50.0, 100.0, 90.0],
            (2, "real"): [60.0, 200.0, 90.0],
        }
        results = [
            {"replicas": replicas, "data": data, "rounds": 3, "rounds_examples_per_sec": rates}
            for (replicas, data), rates in rounds.items()
        ]
        benchmark.add_ratios(results)
        figures = {(entry["replicas"], entry["data"]): entry for entry in results}
        # Per round 0.75, 0.5, 0.9: the slow first round of 1 replica pairs with 2's.
        self.assertAlmostEqual(figures[2, "synthetic"]["scaling_efficiency"], 0.75)
        self.assertEqual(figures[2, "synthetic"]["scaling_efficiency_spread"], [0.5, 0.9])
        self.assertEqual(figures[1, "synthetic"]["scaling_efficiency"], 1.0)
        # Per round 0.5, 0.5, 0.9 (1 replica); 0.4, 1.0, 0.5 (2 replicas).
        self.assertAlmostEqual(figures[1, "real"]["input_bound_ratio"], 0.5)
        self.assertAlmostEqual(figures[1, "synthetic"]["input_bound_ratio"], 0.5)
        self.assertEqual(figures[1, "real"]["input_bound_ratio_spread"], [0.5, 0.9])
        self.assertAlmostEqual(figures[2, "real"]["input_bound_ratio"], 0.5)
        self.assertEqual(figures[2, "real"]["input_bound_ratio_spread"], [0.4, 1.0])

    def test_a_spread_wider_than_the_effect_is_named(self):
        entries = [
            {
                "replicas": 1,
                "data": "synthetic",
                "rounds": 3,
                "overhead_vs_no_strategy": 1.03,
                "overhead_vs_no_strategy_spread": [0.97, 1.12],
                "overhead_ratio": 1.30,
                "overhead_ratio_spread": [1.25, 1.35],
            }
        ]
        lines = benchmark.noisy_figures(entries)
        self.assertEqual(len(lines), 1)
        self.assertIn("overhead_vs_no_strategy 1.030 spans 0.970-1.120 over 3 rounds", lines[0])
        self.assertIn(
            "1.030±.075",
            benchmark.table(
                [
                    {
                        **entries[0],
                        "global_batch_size": 8,
                        "examples_per_sec": {"median": 1, "min": 1, "max": 1},
                        "step_time_s": {"median": 1},
                    }
                ]
            ),
        )
        self.assertEqual(benchmark.noisy_figures([{**entries[0], "rounds": 1}]), [])

    def test_multi_worker_tax_pairs_the_same_rounds(self):
        mirrored = {"global_batch_size": 16, "tfdist": [[0.25, 0.5, 0.75], [0.5], [1.0, 1.0]]}
        multi_worker = {"global_batch_size": 16, "tfdist": [[0.75, 0.5, 0.5], [0.75], [1.0]]}
        tax = benchmark.multi_worker_tax(mirrored, multi_worker)
        # Per round 0.5/0.5, 0.75/0.5, 1/1: the slow third round is on both sides.
        self.assertAlmostEqual(tax["overhead_vs_mirrored"], 1.0)
        self.assertEqual(tax["overhead_vs_mirrored_spread"], [1.0, 1.5])
        self.assertEqual(tax["step_time_s"], {"median": 0.75, "min": 0.5, "max": 1.0})
        self.assertEqual(tax["mirrored_step_time_s"], {"median": 0.5, "min": 0.5, "max": 1.0})
        self.assertEqual((tax["workers"], tax["replicas"], tax["rounds"]), (1, 1, 3))
        self.assertEqual(
            benchmark.tax_line(tax, "1 CPU device"),
            "multi_worker_mirrored, 1 worker on 1 CPU device, synthetic data: "
            "750.0 ms a step against mirrored's 500.0 ms on the same device: "
            "overhead_vs_mirrored 1.000±.250",
        )
        lines = benchmark.noisy_figures([], tax)
        self.assertEqual(len(lines), 1)
        self.assertIn(
            "multi_worker_mirrored: overhead_vs_mirrored 1.000 spans 1.000-1.500", lines[0]
        )
