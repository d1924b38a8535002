"""StrategyConfig: every rejected value, the options a picked strategy ignores, and the forms of
a variable partition."""

from absl.testing import absltest
from absl.testing import parameterized

from tfdist.strategies import StrategyConfig
from tfdist.strategies import StrategyConfigError
from tfdist.strategies import StrategyKind
from tfdist.strategies import VariablePartition


class StrategyConfigTest(parameterized.TestCase):
    def test_strings_become_enums(self):
        config = StrategyConfig(strategy="mirrored", all_reduce="hierarchical_copy", num_packs=2)
        self.assertIs(config.strategy, StrategyKind.MIRRORED)
        self.assertEqual(config.all_reduce.value, "hierarchical_copy")

    @parameterized.named_parameters(
        ("unknown_strategy", dict(strategy="mirroed"), r"strategy='mirroed'.*one_device\|mirrored"),
        ("unknown_all_reduce", dict(all_reduce="ring"), r"all_reduce='ring'.*nccl"),
        ("unknown_collective", dict(collective="gloo"), r"collective='gloo'.*ring"),
        ("negative_gpus", dict(num_gpus=-1), r"num_gpus=-1.*pass 0"),
        (
            "zero_cpu_devices",
            dict(num_cpu_devices=0),
            r"num_cpu_devices=0 is not an integer "
            r"from 1 to 1024",
        ),
        ("huge_cpu_devices", dict(num_cpu_devices=10**20), r"num_cpu_devices=10{20} is not"),
        ("float_cpu_devices", dict(num_cpu_devices=2.5), r"num_cpu_devices=2.5 is not an integer"),
        ("zero_packs", dict(num_packs=0), r"num_packs=0 is not an integer from 1"),
        (
            "zero_timeout",
            dict(collective_timeout_s=0.0),
            r"collective_timeout_s=0.0 is not a "
            r"number of seconds above 0",
        ),
        ("nan_timeout", dict(collective_timeout_s=float("nan")), r"collective_timeout_s=nan"),
        (
            "infinite_timeout",
            dict(collective_timeout_s=float("inf")),
            r"collective_timeout_s=inf .* at most 2592000",
        ),
        (
            "huge_partition",
            dict(variable_partition="max_shards:" + "9" * 20),
            r"variable_partition='max_shards:9{20}'.*at most 65536",
        ),
        ("gpus_and_cpus", dict(num_gpus=1, num_cpu_devices=2), r"num_cpu_devices=2.*num_gpus=1"),
        (
            "all_reduce_on_mwms",
            dict(strategy="multi_worker_mirrored", all_reduce="nccl"),
            r"all_reduce=nccl applies to strategy=mirrored, not multi_worker_mirrored; drop it",
        ),
        ("packs_without_nccl", dict(num_packs=2), r"num_packs=2.*nccl or hierarchical_copy"),
        (
            "collective_on_mirrored",
            dict(strategy="mirrored", collective="ring"),
            r"collective=ring applies to strategy=multi_worker_mirrored",
        ),
        (
            "partition_on_mirrored",
            dict(strategy="mirrored", variable_partition="max_shards:2"),
            r"variable_partition=max_shards:2 applies to strategy=parameter_server",
        ),
        (
            "cpus_on_mwms",
            dict(strategy="multi_worker_mirrored", num_cpu_devices=2),
            r"num_cpu_devices=2 applies to strategy=mirrored",
        ),
        (
            "bad_partition",
            dict(variable_partition="max_shards"),
            r"variable_partition='max_shards'",
        ),
        (
            "zero_partition",
            dict(variable_partition="min_size:0"),
            r"variable_partition='min_size:0'",
        ),
        ("unknown_partition", dict(variable_partition="fixed:2"), r"variable_partition='fixed:2'"),
        ("unknown_wire_dtype", dict(allreduce_dtype="int8"), r"allreduce_dtype='int8'.*bfloat16"),
        (
            "wire_dtype_on_ps",
            dict(strategy="parameter_server", allreduce_dtype="bfloat16"),
            r"allreduce_dtype=bfloat16 applies to strategy=mirrored or multi_worker_mirrored, not "
            r"parameter_server; drop it",
        ),
        (
            "wire_dtype_on_one_device",
            dict(strategy="one_device", allreduce_dtype="float16"),
            r"allreduce_dtype=float16 applies to .* not one_device",
        ),
        (
            "negative_pack",
            dict(allreduce_pack_mib=-1),
            r"allreduce_pack_mib=-1 is not an integer from 0",
        ),
        (
            "pack_on_mirrored",
            dict(strategy="mirrored", allreduce_pack_mib=16),
            r"allreduce_pack_mib=16 applies to strategy=multi_worker_mirrored, not mirrored",
        ),
        ("zero_logical_gpus", dict(num_logical_gpus=0), r"num_logical_gpus=0 is not an integer"),
        ("zero_gpu_memory", dict(logical_gpu_memory_mib=0), r"logical_gpu_memory_mib=0 is not"),
        (
            "logical_gpus_and_cpus",
            dict(num_logical_gpus=2, num_cpu_devices=2),
            r"num_logical_gpus=2 with num_cpu_devices=2",
        ),
        (
            "logical_gpus_of_several",
            dict(num_logical_gpus=2, num_gpus=2),
            r"num_logical_gpus=2 with num_gpus=2: logical GPUs split one GPU",
        ),
        (
            "nccl_on_logical_gpus",
            dict(num_logical_gpus=2, all_reduce="nccl"),
            r"all_reduce=nccl with num_logical_gpus=2: NCCL needs distinct physical GPUs",
        ),
        (
            "logical_gpus_on_mwms",
            dict(strategy="multi_worker_mirrored", num_logical_gpus=2),
            r"num_logical_gpus=2 applies to strategy=mirrored",
        ),
    )
    def test_rejects(self, kwargs, message):
        with self.assertRaisesRegex(StrategyConfigError, message) as raised:
            StrategyConfig(**kwargs)
        self.assertNotIn("\n", str(raised.exception))

    def test_options_auto_may_ignore_are_named_once_it_picks(self):
        config = StrategyConfig(
            variable_partition="max_shards:2", allreduce_pack_mib=16, allreduce_dtype="bfloat16"
        )
        self.assertEqual(
            config.ignored_by(StrategyKind.ONE_DEVICE),
            [
                "variable_partition=max_shards:2 applies to strategy=parameter_server, not "
                "one_device",
                "allreduce_dtype=bfloat16 applies to strategy=mirrored or multi_worker_mirrored, "
                "not one_device",
                "allreduce_pack_mib=16 applies to strategy=multi_worker_mirrored, not one_device",
            ],
        )
        self.assertEqual(
            config.ignored_by(StrategyKind.MULTI_WORKER_MIRRORED),
            [
                "variable_partition=max_shards:2 applies to strategy=parameter_server, not "
                "multi_worker_mirrored"
            ],
        )

    @parameterized.parameters(
        ("none", "none", 0), ("min_size:1024", "min_size", 1024), ("max_shards:4", "max_shards", 4)
    )
    def test_variable_partition_forms(self, text, kind, value):
        partition = VariablePartition.parse(text)
        self.assertEqual((partition.kind, partition.value), (kind, value))
        self.assertEqual(str(partition), text)


if __name__ == "__main__":
    absltest.main()
