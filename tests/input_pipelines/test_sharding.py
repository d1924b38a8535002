"""The sharding plan (pure Python): who reads which files, and the errors and notices."""

import unittest

from absl.testing import parameterized

from tfdist.input_pipelines import AutoShard
from tfdist.input_pipelines import InputConfigError
from tfdist.input_pipelines import sharding


def _plans(policy: AutoShard, num_files: int, num_pipelines: int) -> list[sharding.ShardPlan]:
    return [
        sharding.plan(
            policy, num_files=num_files, num_pipelines=num_pipelines, pipeline_id=pipeline_id
        )
        for pipeline_id in range(num_pipelines)
    ]


class PlanTest(parameterized.TestCase):
    def test_file_sharding_gives_each_file_to_one_pipeline(self):
        plans = _plans(AutoShard.FILE, num_files=6, num_pipelines=2)
        self.assertEqual([plan.file_indices for plan in plans], [(0, 2, 4), (1, 3, 5)])
        self.assertEqual(
            plans[1].describe(),
            "input pipeline 1/2 reads files 1,3,5 of 6; each example once per epoch",
        )

    @parameterized.parameters((8, 2), (8, 3), (8, 8), (5, 4))
    def test_auto_shards_by_file_with_enough_files(self, num_files, num_pipelines):
        plans = _plans(AutoShard.AUTO, num_files, num_pipelines)
        self.assertTrue(all(plan.policy is AutoShard.FILE for plan in plans))
        self.assertTrue(all(plan.notice is None for plan in plans))
        files = sorted(index for plan in plans for index in plan.file_indices)
        self.assertEqual(files, list(range(num_files)))

    def test_auto_falls_back_to_data_with_a_notice(self):
        plans = _plans(AutoShard.AUTO, num_files=2, num_pipelines=4)
        self.assertTrue(
            all(plan.policy is AutoShard.DATA and plan.keeps_every_nth for plan in plans)
        )
        self.assertEqual(plans[0].file_indices, (0, 1))
        self.assertIn("write at least 4 files to shard by file", plans[0].notice)
        self.assertNotIn("\n", plans[0].notice)
        self.assertEqual(
            plans[3].describe(),
            "input pipeline 3/4 reads all 2 files and keeps every 4th example "
            "(offset 3); each example once per epoch",
        )

    def test_off_reads_everything_everywhere(self):
        plans = _plans(AutoShard.OFF, num_files=3, num_pipelines=2)
        self.assertEqual([plan.file_indices for plan in plans], [(0, 1, 2), (0, 1, 2)])
        self.assertIn("each example 2 times", plans[0].describe())

    def test_one_pipeline_keeps_everything(self):
        (plan,) = _plans(AutoShard.DATA, num_files=3, num_pipelines=1)
        self.assertFalse(plan.keeps_every_nth)
        self.assertIn("each example once per epoch", plan.describe())

    def test_file_with_too_few_files_is_one_line_error(self):
        with self.assertRaisesRegex(
            InputConfigError,
            r"^autoshard=file: 2 file\(s\) for 3 input pipelines .* use autoshard=data "
            r"or write at least 3 files\.$",
        ):
            sharding.plan(AutoShard.FILE, num_files=2, num_pipelines=3, pipeline_id=0)


if __name__ == "__main__":
    unittest.main()
