"""`tfdist.setup` (`tfdist.runtime.setup`): the steps of an epoch from the size of a user's data,
a dataset that does not say its size, and `--deterministic`'s op determinism and seeds."""

import dataclasses
import tensorflow as tf
import tf_keras
from tensorflow.python.framework import config as tf_config
from tensorflow.python.framework import random_seed

import tfdist
from tests.tfdist.training.tabular import PolicyReset
from tests.tfdist.training.tabular import run_config
from tfdist.input_pipelines import InputConfig
from tfdist.runtime.config import ConfigError
from tfdist.runtime import setup as runtime_setup
from tfdist.runtime.config import RunConfig
from tfdist.strategies import StrategyKind


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

    def test_deterministic_turns_on_op_determinism_and_seeds_tensorflow(self):
        """tests/conftest.py turns op determinism off again after each test."""
        for deterministic in (None, False):
            tfdist.setup(_with_input(run_config(), deterministic=deterministic))
            self.assertIs(tf_config.is_op_determinism_enabled(), False)
        tfdist.setup(_with_input(run_config(seed=7), deterministic=True))
        self.assertIs(tf_config.is_op_determinism_enabled(), True)
        first = tf.random.uniform(())  # Random ops need a seed under op determinism.
        tfdist.setup(_with_input(run_config(seed=7), deterministic=True))
        self.assertEqual(float(tf.random.uniform(())), float(first))

    def test_a_deterministic_parameter_server_run_seeds_tensorflow_too(self):
        """Not otherwise (unseeded shuffles would shuffle alike on every worker), but op
        determinism refuses random ops without a seed."""
        for deterministic, global_seed in ((None, None), (True, 5)):
            tf.random.set_seed(None)
            config = _with_input(run_config(seed=5), deterministic=deterministic)
            runtime_setup._seed(config, StrategyKind.PARAMETER_SERVER, tf_keras)  # pylint: disable=protected-access
            self.assertEqual(random_seed.get_seed(None)[0], global_seed, deterministic)


def _with_input(config: RunConfig, **fields) -> RunConfig:
    return dataclasses.replace(config, input=dataclasses.replace(config.input, **fields))


if __name__ == "__main__":
    tf.test.main()
