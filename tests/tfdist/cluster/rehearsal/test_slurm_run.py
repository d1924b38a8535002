"""Tests for tfdist.cluster.rehearsal.slurm_run's reading of a batch script and its Slurm
layouts (the rehearsal itself runs in tests/tfdist/commands/test_rehearse.py)."""

from absl.testing import absltest
from absl.testing import parameterized

from tfdist.cluster import RehearsalError
from tfdist.cluster import manifests
from tfdist.cluster.rehearsal import slurm_run


class SlurmLayoutTest(parameterized.TestCase):
    def test_reads_what_tfdist_manifest_writes(self):
        script = manifests.slurm(
            job_name="sl", train_args=["--epochs=1"], num_workers=3, num_ps=1, chief=True
        )
        self.assertEqual(
            slurm_run.read(script), {"job-name": "sl", "ntasks": "5", "time": "01:00:00"}
        )

    @parameterized.named_parameters(
        ("not_a_script", "apiVersion: v1\n", "first line"),
        ("no_ntasks", "#!/bin/bash\n#SBATCH --time=1\nsrun x\n", "--ntasks=None"),
        ("huge_ntasks", "#!/bin/bash\n#SBATCH --ntasks=99999999999999999999\n", "from 1 to"),
    )
    def test_refusals_are_one_line(self, text, words):
        with self.assertRaisesRegex(RehearsalError, words):
            slurm_run.read(text)

    @parameterized.named_parameters(
        ("even", 4, 2, [2, 2], "2(x2)"),
        ("uneven", 5, 2, [3, 2], "3,2"),
        ("runs", 7, 3, [3, 2, 2], "3,2(x2)"),
        ("one_each", 3, 3, [1, 1, 1], "1(x3)"),
    )
    def test_block_distribution(self, tasks, nodes, layout, text):
        self.assertEqual(slurm_run.block_layout(tasks, nodes), layout)
        self.assertEqual(slurm_run.tasks_per_node(layout), text)

    def test_node_names_sort_alike_as_text_and_as_numbers(self):
        names = slurm_run.node_names(12)
        self.assertEqual(names[:2], ["node01", "node02"])
        self.assertEqual(sorted(names), names)
        self.assertEqual(slurm_run.host_list(names), "node[01-12]")
        self.assertEqual(slurm_run.host_list(names[:1]), "node01")


if __name__ == "__main__":
    absltest.main()
