"""Every step loop of tfdist brackets each call of its step function with the plan's collective
deadline (`Plan.bounded_step`): tf-keras `fit`, the Keras 3 step and `CustomLoop`, training and
validation calls alike, and nothing outside them."""

import dataclasses

from absl.testing import parameterized

import tfdist
from tests.tfdist.training.keras3.keras3_tabular import keras3_tabular_model
from tests.tfdist.training.tabular import PolicyReset
from tests.tfdist.training.tabular import run_config
from tests.tfdist.training.tabular import tabular_dataset_fn
from tests.tfdist.training.tabular import tabular_model
from tests.tfdist.training.tabular import training_step
from tfdist.strategies import CollectiveDeadline

_STEPS, _VALIDATION_STEPS = 5, 2


class _CountedDeadline(CollectiveDeadline):
    """A deadline that never fires in a test's time and counts the calls it bounds."""

    def __init__(self):
        super().__init__(3600, abort=self._fired)
        self.started_calls = self.ended_calls = 0
        self.open = False
        self.functions = set()

    def _fired(self, message: str) -> None:
        raise AssertionError(message)

    def started(self, function):
        assert not self.open, "a call began inside another"
        self.started_calls, self.open = self.started_calls + 1, True
        self.functions.add(function)
        super().started(function)

    def ended(self):
        self.ended_calls, self.open = self.ended_calls + 1, False
        super().ended()


class BoundedStepsTest(PolicyReset, parameterized.TestCase):
    def _plan(self, **train):
        config = run_config(
            steps_per_epoch=_STEPS, validation_steps=_VALIDATION_STEPS, epochs=1, **train
        )
        deadline = _CountedDeadline()
        return dataclasses.replace(tfdist.setup(config), collective_deadline=deadline), deadline

    @parameterized.named_parameters(
        ("tf_keras", 2, tabular_model), ("keras3", 3, keras3_tabular_model)
    )
    def test_fit_bounds_each_training_and_validation_call(self, keras, model):
        plan, deadline = self._plan(keras=keras)
        tfdist.fit(
            plan,
            model,
            tabular_dataset_fn(16),
            tabular_dataset_fn(16, count=128, training=False),
            loss="sparse_categorical_crossentropy",
        )
        self.assertEqual(deadline.started_calls, _STEPS + _VALIDATION_STEPS)
        self.assertEqual(deadline.ended_calls, deadline.started_calls)
        self.assertLen(deadline.functions, 2, "training and validation, each named once")

    def test_a_custom_loop_bounds_each_call(self):
        plan, deadline = self._plan(steps_per_execution=2)
        loop = tfdist.CustomLoop(plan, tabular_model)
        batches = loop.distribute(tabular_dataset_fn(16))
        loop.run(training_step(loop), batches, _STEPS)  # Calls of 2, 2, 1.
        self.assertEqual((deadline.started_calls, deadline.ended_calls), (3, 3))
        evaluation = loop.distribute(tabular_dataset_fn(16, count=128, training=False))
        loop.run(lambda features, labels: None, evaluation, 1)
        self.assertEqual((deadline.started_calls, deadline.ended_calls), (4, 4))
        self.assertLen(deadline.functions, 2, "the training loop and the evaluation loop")
