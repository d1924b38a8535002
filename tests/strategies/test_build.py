"""tfdist.strategies.build on CPU: one device, mirrored over 2 logical CPUs, single-worker
multi-worker.

The session's conftest splits the CPU into 2 logical devices before any op runs.
"""

import tensorflow as tf
from absl.testing import parameterized

from tfdist import strategies
from tfdist.strategies import StrategyConfig
from tfdist.strategies import StrategyConfigError
from tfdist.strategies import StrategyKind
from tests.tf_test_case import TfTestCase


def _sum_of_replica_ids(strategy: tf.distribute.Strategy) -> int:
    """All-reduces each replica's id: proves the replicas and the reduction work."""

    def replica_id():
        return tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)

    per_replica = strategy.run(tf.function(replica_id))
    return int(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None))


class BuildTest(TfTestCase, parameterized.TestCase):
    @parameterized.named_parameters(
        ("one_device", dict(strategy="one_device"), StrategyKind.ONE_DEVICE, 1),
        ("auto_single_cpu", dict(), StrategyKind.ONE_DEVICE, 1),
        ("auto_two_cpus", dict(num_cpu_devices=2), StrategyKind.MIRRORED, 2),
        ("mirrored", dict(strategy="mirrored", num_cpu_devices=2), StrategyKind.MIRRORED, 2),
        (
            "mirrored_reduce_to_one",
            dict(strategy="mirrored", num_cpu_devices=2, all_reduce="reduction_to_one_device"),
            StrategyKind.MIRRORED,
            2,
        ),
        (
            "multi_worker_single",
            dict(strategy="multi_worker_mirrored", collective="ring", collective_timeout_s=30.0),
            StrategyKind.MULTI_WORKER_MIRRORED,
            1,
        ),
    )
    def test_builds(self, kwargs, kind, num_replicas):
        strategy = strategies.build(StrategyConfig(**kwargs))
        self.assertIs(strategies.kind_of(strategy), kind)
        self.assertEqual(strategy.num_replicas_in_sync, num_replicas)
        self.assertEqual(_sum_of_replica_ids(strategy), sum(range(num_replicas)))

    def test_mirrored_replicas_sit_on_the_logical_cpus(self):
        strategy = strategies.build(StrategyConfig(strategy="mirrored", num_cpu_devices=2))
        self.assertEqual(
            [device.split("/")[-1] for device in strategy.extended.worker_devices],
            ["device:CPU:0", "device:CPU:1"],
        )

    def test_one_device_without_gpus_is_the_default_strategy(self):
        # No distributed iterator, so no teardown wait after fit (strategies/one_device.py).
        strategy = strategies.build(StrategyConfig(strategy="one_device"))
        self.assertIs(strategy, tf.distribute.get_strategy())
        self.assertEqual(strategies.replica_devices_of(strategy)[0].split("/")[-1], "device:CPU:0")
        mirrored = strategies.build(StrategyConfig(strategy="mirrored", num_cpu_devices=2))
        self.assertLen(strategies.replica_devices_of(mirrored), 2)

    @parameterized.named_parameters(
        (
            "nccl_on_cpu",
            dict(strategy="mirrored", num_cpu_devices=2, all_reduce="nccl"),
            r"all_reduce=nccl needs GPUs",
        ),
        (
            "collective_nccl_on_cpu",
            dict(strategy="multi_worker_mirrored", collective="nccl"),
            r"collective=nccl needs GPUs",
        ),
        ("missing_gpus", dict(num_gpus=1), r"num_gpus=1 but this machine shows 0 GPU"),
        (
            "logical_gpus_without_a_gpu",
            dict(num_logical_gpus=2),
            r"num_logical_gpus=2 needs a GPU, and this machine shows none; use num_cpu_devices=2",
        ),
        ("ps_without_cluster", dict(strategy="parameter_server"), r"needs ps tasks"),
        ("late_cpu_split", dict(num_cpu_devices=3), r"num_cpu_devices=3 came too late"),
    )
    def test_rejects(self, kwargs, message):
        with self.assertRaisesRegex(StrategyConfigError, message):
            strategies.build(StrategyConfig(**kwargs))

    def test_parameter_server_is_built_on_the_chief_only(self):
        cluster = strategies.make_cluster(
            num_workers=1, num_ps=1, chief=True, ports=[2001, 2002, 2003], task=("worker", 0)
        )
        with self.assertRaisesRegex(StrategyConfigError, r"coordinated by the chief.*worker:0"):
            strategies.build(StrategyConfig(strategy="parameter_server"), cluster)


if __name__ == "__main__":
    tf.test.main()
