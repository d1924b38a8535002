"""`tfdist.setup` (`tfdist.runtime.setup`): the steps of an epoch from the size of a user's data,
a dataset that does not say its size, and `--deterministic`'s op determinism and seeds."""

import contextlib
import dataclasses
import io
import json
import os
from unittest import mock

import tensorflow as tf
import tf_keras
from tensorflow.python.framework import config as tf_config
from tensorflow.python.framework import random_seed

import tfdist
from tests.tfdist.training.tabular import MIRRORED
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

    def test_a_training_task_checks_its_peers_job_once_its_strategy_is_built(self):
        """`strategies.check_job` (a Slurm cluster's tasks refuse another job's) is asked by
        every training task, with the strategy's kind and the collective timeout."""
        config = run_config()
        with mock.patch.object(runtime_setup.strategies, "check_job") as check_job:
            plan = tfdist.setup(config)
        check_job.assert_called_once_with(
            plan.config.cluster, plan.kind, config.strategy.collective_timeout_s
        )

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


_PER_REPLICA = dict(per_replica_batch_size=32, global_batch_size=InputConfig.global_batch_size)


class ResumedBatchTest(PolicyReset):
    """A per-replica batch that resumes a backup keeps the backup's global batch on another
    number of replicas (so its steps per epoch and learning-rate schedule), in one line."""

    def _model_dir(self, global_batch: int) -> str:
        root = self.get_temp_dir()
        os.makedirs(os.path.join(root, "backup"), exist_ok=True)
        with open(os.path.join(root, "backup", "checkpoint"), "w", encoding="utf-8") as backup:
            backup.write('model_checkpoint_path: "ckpt-1"\n')
        with open(os.path.join(root, "cluster.json"), "w", encoding="utf-8") as record:
            json.dump(
                {"num_workers": 2, "num_replicas": 2, "global_batch_size": global_batch}, record
            )
        return root

    def test_the_backups_global_batch_is_kept_and_said(self):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            plan = tfdist.setup(run_config(**_PER_REPLICA, model_dir=self._model_dir(64)))
        self.assertEqual((plan.global_batch_size, plan.per_replica_batch_size), (64, 64))
        self.assertEqual(
            stderr.getvalue(),
            "tfdist: resuming with the backup's global batch of 64 (64 per replica on 1), not "
            "per_replica_batch_size=32's 32: a resume keeps the global batch, hence the steps "
            "per epoch and the learning-rate schedule\n",
        )
        fresh = tfdist.setup(run_config(**_PER_REPLICA, model_dir=self.get_temp_dir() + "/new"))
        self.assertEqual(fresh.global_batch_size, 32, "nothing to resume: the flag's")

    def test_a_batch_the_replicas_do_not_split_names_the_batches_that_would(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"^per_replica_batch_size=32: the backup in model_dir='.*' trained with a global "
            r"batch of 63, which 2 replicas do not split evenly; resume on a number of replicas "
            r"that divides it, or pass global_batch_size=62 or 64 instead to resume with that "
            r"batch \(its steps and learning-rate schedule follow it\), or another model_dir=DIR "
            r"to start afresh\.$",
        ):
            tfdist.setup(
                run_config(**_PER_REPLICA, model_dir=self._model_dir(63), strategy=MIRRORED)
            )


def _with_input(config: RunConfig, **fields) -> RunConfig:
    return dataclasses.replace(config, input=dataclasses.replace(config.input, **fields))


if __name__ == "__main__":
    tf.test.main()
