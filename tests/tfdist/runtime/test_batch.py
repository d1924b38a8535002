"""The batch a run gives, global or per replica, and the one derivation of the other in `setup`
(`tfdist.runtime.setup`): the plan's batches, the pipelines' and the learning rate's."""

import dataclasses

import tensorflow as tf
from absl.testing import parameterized

import tfdist
from tests.tfdist.training.tabular import PolicyReset
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from tfdist.runtime.config import ConfigError
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.strategies import StrategyConfig
from tfdist.training import data
from tfdist.training.keras2 import fit as keras2_fit

_TWO_REPLICAS = StrategyConfig(strategy="mirrored", num_cpu_devices=2)


def _per_replica(per_replica: int, **optimizer) -> RunConfig:
    """A run on 2 CPU replicas whose batch is `per_replica` examples per replica."""
    return RunConfig(
        strategy=_TWO_REPLICAS,
        input=InputConfig(dataset="synthetic", num_classes=2, image_size=8),
        train=TrainConfig(epochs=1, steps_per_epoch=2, per_replica_batch_size=per_replica),
        optimizer=OptimizerConfig(**optimizer),
    )


class ConfigTest(parameterized.TestCase):
    """`TrainConfig.per_replica_batch_size` and `RunConfig`'s rule: one batch, or neither."""

    @parameterized.parameters(0, -1, MAX_GLOBAL_BATCH_SIZE + 1, True, 2.0, "32")
    def test_a_per_replica_batch_is_a_count(self, value):
        with self.assertRaisesRegex(
            ConfigError,
            r"^per_replica_batch_size=.* is not an integer "
            r"from 1 to 16777216; e\.g\. 64\.$",
        ):
            TrainConfig(per_replica_batch_size=value)

    def test_both_batches_are_refused(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"^global_batch_size=256 and "
            r"per_replica_batch_size=32 both set the batch; "
            r"give one\.$",
        ):
            RunConfig(
                input=InputConfig(global_batch_size=256),
                train=TrainConfig(per_replica_batch_size=32),
            )

    def test_neither_is_the_default_global_batch(self):
        config = RunConfig()
        self.assertIsNone(config.train.per_replica_batch_size)
        self.assertEqual(config.update_batch_size, 128)

    def test_the_update_batch_waits_for_setup(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"^update_batch_size: the batch is per "
            r"replica; read the plan's\.$",
        ):
            _ = _per_replica(32).update_batch_size


class PlanTest(PolicyReset):
    """`setup` derives the global batch from a per-replica one, and the plan's readers read it."""

    def test_the_global_batch_is_per_replica_times_replicas(self):
        plan = tfdist.setup(_per_replica(32), train_examples=640)
        self.assertEqual(
            (plan.num_replicas, plan.per_replica_batch_size, plan.global_batch_size), (2, 32, 64)
        )
        self.assertEqual(plan.config.input.global_batch_size, 64)
        self.assertIsNone(plan.config.train.per_replica_batch_size)  # The global form.
        self.assertEqual(plan.update_batch_size, 64)
        self.assertEqual(plan.steps_per_epoch, 2)  # --steps_per_epoch, not 640 / 64.
        unset_steps = dataclasses.replace(
            _per_replica(32), train=TrainConfig(epochs=1, per_replica_batch_size=32)
        )
        plan = tfdist.setup(unset_steps, train_examples=640)
        self.assertEqual(plan.steps_per_epoch, 10)  # 640 examples / 64.

    def test_each_pipeline_batches_per_replica(self):
        plan = tfdist.setup(_per_replica(3))
        dataset = data.dataset_fn(plan, plan.config.input, "train", training=True)(
            tf.distribute.InputContext(num_replicas_in_sync=2)
        )
        images, _ = next(iter(dataset))
        self.assertEqual(images.shape[0], 3)

    def test_the_learning_rate_is_scaled_for_the_derived_global_batch(self):
        plan = tfdist.setup(
            _per_replica(
                32, optimizer="sgd", learning_rate=0.1, lr_scaling="linear", base_batch_size=32
            )
        )
        self.assertAlmostEqual(float(keras2_fit.tfdist_optimizer(plan).learning_rate), 0.2)

    def test_a_global_batch_past_the_bound(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"^per_replica_batch_size=16777216 over 2 "
            r"replicas is a global batch of 33554432, past "
            r"the largest tfdist takes \(16777216\); use "
            r"per_replica_batch_size=8388608 or less\.$",
        ):
            tfdist.setup(_per_replica(MAX_GLOBAL_BATCH_SIZE))

    def test_a_scaled_rate_past_float32_once_the_global_batch_is_known(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"^learning_rate=1e\+38 scaled linear to "
            r"global_batch_size=64 is .*beyond float32",
        ):
            tfdist.setup(
                _per_replica(32, learning_rate=1e38, lr_scaling="linear", base_batch_size=1)
            )


if __name__ == "__main__":
    tf.test.main()
