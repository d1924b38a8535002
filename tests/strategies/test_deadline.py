"""strategies.CollectiveDeadline: one thread bounds each step call; TensorFlow's own
per-collective timeout, which costs a thread per collective, is never passed."""

import threading
import time

from absl.testing import absltest
from absl.testing import parameterized

from tfdist import strategies
from tfdist.strategies import CollectiveDeadline
from tfdist.strategies import StrategyConfig
from tfdist.strategies import StrategyKind
from tests.tf_test_case import TfTestCase


class _Aborts:
    """Records each abort's message, in place of TensorFlow's abort."""

    def __init__(self):
        self.messages, self.done = [], threading.Event()

    def __call__(self, message: str) -> None:
        self.messages.append(message)
        self.done.set()


class CollectiveDeadlineTest(absltest.TestCase):
    def test_a_call_that_outlives_the_timeout_aborts_once_with_the_words_liveness_reads(self):
        aborts = _Aborts()
        deadline = CollectiveDeadline(0.2, abort=aborts)
        with deadline.step("train"):  # The first call, which traces the function.
            time.sleep(0.5)
        self.assertEqual(aborts.messages, [], "a first call is given FIRST_CALL_S")
        with deadline.step("train"):
            self.assertTrue(aborts.done.wait(30), "the deadline never fired")
            time.sleep(0.3)
        self.assertEqual(
            aborts.messages,
            [
                "Collective has timed out: a call of the step function ran longer than "
                "collective_timeout_s=0.2 s"
            ],
        )

    def test_time_between_calls_is_not_counted(self):
        aborts = _Aborts()
        deadline = CollectiveDeadline(0.3, abort=aborts)
        for _ in range(3):
            with deadline.step("train"):
                pass
            time.sleep(0.5)  # Outside a call: a save, the input, the user's own code.
        self.assertEqual(aborts.messages, [])

    def test_one_thread_however_many_calls(self):
        deadline = CollectiveDeadline(600, abort=_Aborts())
        before = threading.active_count()
        for _ in range(2000):
            with deadline.step("train"):
                pass
        self.assertEqual(threading.active_count(), before + 1)

    def test_each_functions_first_call_is_given_the_time_to_trace_it(self):
        aborts = _Aborts()
        deadline = CollectiveDeadline(0.2, abort=aborts)
        for function in ("train", "test"):  # Each traces its function: FIRST_CALL_S.
            with deadline.step(function):
                time.sleep(0.5)
        self.assertEqual(aborts.messages, [])
        with deadline.step("test"):
            self.assertTrue(aborts.done.wait(30), "the second call was not bounded")

    def test_each_call_gets_the_whole_timeout(self):
        aborts = _Aborts()
        deadline = CollectiveDeadline(2.0, abort=aborts)
        for _ in range(5):  # 3 s of calls of 0.6 s each: each within its own bound.
            with deadline.step("train"):
                time.sleep(0.6)
        self.assertEqual(aborts.messages, [])


class WhereABoundIsKeptTest(parameterized.TestCase):
    def _cluster(self, num_workers: int):
        return strategies.make_cluster(
            num_workers=num_workers, ports=range(2222, 2222 + num_workers), task=("worker", 0)
        )

    def test_a_multi_worker_task_with_a_timeout_is_bounded(self):
        deadline = strategies.collective_deadline(
            StrategyConfig(collective_timeout_s=600),
            self._cluster(2),
            StrategyKind.MULTI_WORKER_MIRRORED,
        )
        self.assertIsInstance(deadline, CollectiveDeadline)
        self.assertEqual(deadline.timeout_s, 600)

    @parameterized.named_parameters(
        ("no_timeout", None, 2, StrategyKind.MULTI_WORKER_MIRRORED),
        ("one_worker", 600, 1, StrategyKind.MULTI_WORKER_MIRRORED),
        ("no_cluster", 600, 0, StrategyKind.MULTI_WORKER_MIRRORED),
        ("parameter_server", 600, 2, StrategyKind.PARAMETER_SERVER),
    )
    def test_nothing_else_is(self, timeout_s, num_workers, kind):
        cluster = self._cluster(num_workers) if num_workers else None
        config = StrategyConfig(collective_timeout_s=timeout_s)
        self.assertIsNone(strategies.collective_deadline(config, cluster, kind))


class NoPerCollectiveTimeoutTest(TfTestCase):
    def test_the_strategy_gets_no_tensorflow_timeout(self):
        strategy = strategies.build(
            StrategyConfig(strategy="multi_worker_mirrored", collective_timeout_s=30.0)
        )
        # Private, read in a test only: TensorFlow starts a thread per collective that sleeps
        # for this timeout (strategies/deadline.py).
        self.assertIsNone(strategy.extended._communication_options.timeout_seconds)


if __name__ == "__main__":
    absltest.main()
