"""`tfdist.commands.benchmark.rounds`: configurations interleaved round by round in live processes,
and what happens when one fails or goes silent (with a stand-in child, no TensorFlow)."""

import os
import pathlib
import tempfile
import unittest
from unittest import mock

import pytest

from tfdist.commands.benchmark import rounds as benchmark_rounds
from tfdist.errors import RunFailure
from tfdist.errors import UsageError

_ROOT = pathlib.Path(__file__).resolve().parents[4]


class BenchmarkRoundsTest(unittest.TestCase):
    def setUp(self):
        scratch = tempfile.TemporaryDirectory()
        self.addCleanup(scratch.cleanup)
        self.log = os.path.join(scratch.name, "rounds.log")
        patcher = mock.patch.object(
            benchmark_rounds, "CHILD_MODULE", "tests.tfdist.commands.benchmark.fake_child"
        )
        patcher.start()
        self.addCleanup(patcher.stop)

    def _specs(self, names, **extra):
        return [{"train_args": [name], "log": self.log, **extra.get(name, {})} for name in names]

    def _env(self):
        """The children's environment: their interpreter (`python -P`) finds `tests` on
        PYTHONPATH, not in the working directory."""
        return dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])),
        )

    def _logged(self):
        with open(self.log, encoding="utf-8") as log:
            return [line.split() for line in log]

    @pytest.mark.multiprocess
    def test_every_round_times_each_configuration_once_starting_one_later(self):
        measured = benchmark_rounds.run(self._specs("abc"), self._env(), rounds=4)
        logged = self._logged()
        self.assertEqual([name for name, _ in logged], list("abcbcacababc"))
        pids = {name: {pid for logged_name, pid in logged if logged_name == name} for name in "abc"}
        self.assertTrue(all(len(pid) == 1 for pid in pids.values()), pids)  # One process each.
        self.assertEqual([entry["name"] for entry in measured], list("abc"))
        for entry in measured:
            self.assertEqual(entry["tfdist"], [[1.0], [2.0], [3.0], [4.0]])
            self.assertEqual(entry["trainable_parameters"], 7)
            self.assertEqual(entry["global_batch_size"], 8)

    @pytest.mark.multiprocess
    def test_a_failing_configuration_names_itself_and_its_error(self):
        with self.assertRaisesRegex(
            RunFailure,
            r"^benchmark configuration `tfdist train b` "
            r"failed: b: failed on purpose in round 2$",
        ):
            benchmark_rounds.run(self._specs("ab", b={"fail_on_round": 2}), self._env(), rounds=3)
        self.assertEqual([name for name, _ in self._logged()], ["a", "b"])  # Round 2 starts at b.

    @pytest.mark.multiprocess
    def test_a_configuration_train_refuses_is_its_one_line_as_a_usage_error(self):
        with self.assertRaisesRegex(
            UsageError, r"^benchmark configuration `tfdist train b`: --x=1 is wrong; pass 2\.$"
        ):
            specs = self._specs("ab", b={"refused": "--x=1 is wrong; pass 2."})
            benchmark_rounds.run(specs, self._env(), rounds=3)
        self.assertFalse(os.path.exists(self.log))  # No round was timed.

    @pytest.mark.multiprocess
    def test_a_silent_configuration_is_stopped_after_the_wait(self):
        # The children may take up to a minute to start; once the rounds begin, an answer is
        # due within 2 s (the stand-in answers at once), and a child closed out gets half a
        # second to exit before it is killed.
        child_class = benchmark_rounds._Child  # pylint: disable=protected-access
        request = child_class.request

        def request_then_wait_2_s(child):
            benchmark_rounds._WAIT_S = 2  # pylint: disable=protected-access
            request(child)

        with (
            mock.patch.object(benchmark_rounds, "_WAIT_S", 60),
            mock.patch.object(benchmark_rounds, "_EXIT_WAIT_S", 0.5),
            mock.patch.object(child_class, "request", request_then_wait_2_s),
        ):
            with self.assertRaisesRegex(RunFailure, r"`tfdist train b` gave no answer in 2 s"):
                benchmark_rounds.run(
                    self._specs("ab", b={"hang_on_round": 1}), self._env(), rounds=2
                )
        logged = self._logged()
        self.assertEqual([name for name, _ in logged], ["a", "b"])  # b was asked, and hung.
        for name, pid in logged:  # Every child has exited (killed, or closed with its input).
            with self.assertRaises(ProcessLookupError, msg=f"{name} is still running"):
                os.kill(int(pid), 0)

    def test_children_see_no_tf_config_and_grow_gpu_memory_only_on_gpus(self):
        with mock.patch.dict(os.environ, {"TF_CONFIG": "{}"}):
            cpu, gpu = benchmark_rounds.child_env(0), benchmark_rounds.child_env(2)
        self.assertNotIn("TF_CONFIG", cpu)
        self.assertNotIn("TF_FORCE_GPU_ALLOW_GROWTH", cpu)
        self.assertEqual(gpu["TF_FORCE_GPU_ALLOW_GROWTH"], "true")
