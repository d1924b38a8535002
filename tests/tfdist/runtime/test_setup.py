"""`tfdist.setup` (`tfdist.runtime.setup`): the steps of an epoch from the size of a user's data,
and a dataset that does not say its size."""

import tensorflow as tf

import tfdist
from tests.tfdist.training.tabular import PolicyReset
from tests.tfdist.training.tabular import run_config
from tfdist.input_pipelines import InputConfig
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import RunConfig


class PlanTest(PolicyReset):
    def test_steps_from_the_size_of_the_users_data(self):
        plan = tfdist.setup(run_config(steps_per_epoch=None), train_examples=1000)
        self.assertEqual((plan.steps_per_epoch, plan.steps_from), (62, "train_examples"))

    def test_a_python_dataset_needs_steps(self):
        config = RunConfig(input=InputConfig(dataset="python:my_data:splits"))
        with self.assertRaisesRegex(
            ConfigError,
            r"^dataset='python:my_data:splits' does not "
            r"say how many training examples it has; set "
            r"steps_per_epoch=N\.$",
        ):
            tfdist.setup(config)


if __name__ == "__main__":
    tf.test.main()
