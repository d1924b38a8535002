"""Tests for tfdist.cluster.rehearsal.slurm_run's reading of a batch script and its nodes (the
rehearsal itself, on real Slurm, runs in tests/tfdist/commands/test_rehearse.py)."""

import os
import re
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

from tfdist.cluster import RehearsalError
from tfdist.cluster import manifests
from tfdist.cluster.rehearsal import slurm_cluster
from tfdist.cluster.rehearsal import slurm_run


class SlurmLayoutTest(parameterized.TestCase):
    def test_reads_what_tfdist_manifest_writes(self):
        script = manifests.slurm(
            job_name="sl", train_args=["--model_dir=/s/r"], num_workers=3, num_ps=1, chief=True
        )
        self.assertEqual(
            slurm_run.read(script),
            {
                "job-name": "sl",
                "ntasks": "5",
                "nodes": "5",
                "ntasks-per-node": "1",
                "time": "01:00:00",
                "open-mode": "append",
                "signal": "USR1@30",
                "requeue": "",
            },
        )

    @parameterized.named_parameters(
        ("not_a_script", "apiVersion: v1\n", "first line"),
        ("no_ntasks", "#!/bin/bash\n#SBATCH --time=1\nsrun x\n", "--ntasks=None"),
        ("huge_ntasks", "#!/bin/bash\n#SBATCH --ntasks=99999999999999999999\n", "from 1 to"),
    )
    def test_refusals_are_one_line(self, text, words):
        with self.assertRaisesRegex(RehearsalError, words):
            slurm_run.read(text)

    def test_short_and_spaced_options_are_read_as_sbatch_reads_them(self):
        script = "#!/bin/bash\n#SBATCH -n 2 -N1 --time 5 --requeue -J 'my job'\n#SBATCH -p gpu\n"
        self.assertEqual(
            slurm_run.read(script),
            {
                "ntasks": "2",
                "nodes": "1",
                "time": "5",
                "requeue": "",
                "job-name": "my job",
                "partition": "gpu",
            },
        )

    def test_an_unbalanced_quote_is_one_line_naming_its_line(self):
        with self.assertRaisesRegex(
            RehearsalError,
            r"^the script's #SBATCH line 3 cannot be read as sbatch reads it \(No closing "
            r"quotation\); balance its quotes\.$",
        ):
            slurm_run.read("#!/bin/bash\n#SBATCH --ntasks=1\n#SBATCH --job-name='x\n")

    @parameterized.named_parameters(
        ("absolute", "/etc/x", "_etc_x"),
        ("up", "../../escape", "_.._escape"),
        ("dots", "..", "job"),
        ("long", "a" * 300, "a" * 100),
        ("quoted", "a b;c", "a_b_c"),
    )
    def test_a_job_name_is_one_file_name_in_the_log_dir(self, name, safe):
        script = f"#!/bin/bash\n#SBATCH --ntasks=1\n#SBATCH --job-name='{name}'\n"
        self.assertEqual(slurm_run.job("job.sh", script, nodes=None).name, safe)

    def test_an_array_is_refused_in_one_line(self):
        script = "#!/bin/bash\n#SBATCH --ntasks=1\n#SBATCH -a 0-3\n"
        with self.assertRaisesRegex(
            RehearsalError, r"^#SBATCH --array='0-3': a job array is not rehearsed; rehearse"
        ):
            slurm_run.job("job.sh", script, nodes=None)

    def test_a_cluster_the_script_stopped_ends_the_rehearsal_in_one_line(self):
        cluster = mock.Mock(directory="/logs/slurm")
        for stopped, shown, state, said in (
            ("slurmctld on slurm-ctl", {}, "RUNNING", "slurmctld exited"),
            (None, {"Reason": "NodeDown"}, "PENDING", "its nodes are down (Reason=NodeDown)"),
        ):
            with self.subTest(said=said):
                cluster.stopped_daemon.return_value = stopped
                cluster.show.return_value = shown
                with self.assertRaisesRegex(
                    RehearsalError,
                    rf"^Slurm job 7 cannot end: {re.escape(said)}, by the script's own doing "
                    r"\(scontrol shutdown, a node set DOWN\) or a crash; read the logs in "
                    r"/logs/slurm, and rehearse a script that leaves its cluster up\.$",
                ):
                    slurm_run._refuse_a_stopped_cluster(  # pylint: disable=protected-access
                        cluster, 7, state
                    )
        cluster.stopped_daemon.return_value = None
        cluster.show.return_value = {"Reason": "BeginTime"}  # A requeued job's wait.
        slurm_run._refuse_a_stopped_cluster(cluster, 7, "PENDING")  # pylint: disable=protected-access

    def test_nodes_are_named_as_clusters_name_them(self):
        names = slurm_run.node_names(10)
        self.assertEqual(names[:2], ["node1", "node2"])
        self.assertNotEqual(sorted(names), names)  # node10 sorts before node2 as text.

    @parameterized.named_parameters(
        ("declared", "#SBATCH --ntasks=4\n#SBATCH --nodes=2\n", None, 2),
        ("one_per_task", "#SBATCH --ntasks=3\n", None, 3),
        ("asked", "#SBATCH --ntasks=4\n#SBATCH --nodes=2\n", 4, 4),
    )
    def test_node_count(self, directives, asked, count):
        job = slurm_run.job("job.sh", f"#!/bin/bash\n{directives}srun x\n", nodes=asked)
        self.assertEqual(job.nodes, tuple(slurm_run.node_names(count)))

    def test_nodes_named_as_the_user_asks(self):
        job = slurm_run.job("job.sh", "#!/bin/bash\n#SBATCH --ntasks=2\n", nodes=["gpu9", "gpu10"])
        self.assertEqual(job.nodes, ("gpu9", "gpu10"))

    def test_a_job_that_does_not_fit_its_nodes_is_refused(self):
        with self.assertRaisesRegex(RehearsalError, "3 node\\(s\\) do not fit 2 task"):
            slurm_run.job("job.sh", "#!/bin/bash\n#SBATCH --ntasks=2\n", nodes=["a1", "a2", "a3"])

    @parameterized.parameters(("2", 2), ("gpu[9-10]", ["gpu9", "gpu10"]), ("a,b-1", ["a", "b-1"]))
    def test_nodes_asked_as_a_count_or_names(self, text, nodes):
        self.assertEqual(slurm_run.nodes_asked(text), nodes)

    @parameterized.parameters("0", "", "-1", "99999999999999999999", "gpu[9-", "a_1,b", "a,a", "9a")
    def test_nodes_asked_refusals_are_one_line(self, text):
        with self.assertRaisesRegex(RehearsalError, r"^slurm_nodes=.* is neither a count"):
            slurm_run.nodes_asked(text)


class SlurmEnvironmentTest(absltest.TestCase):
    def test_a_rehearsal_inside_an_allocation_passes_on_none_of_its_slurm_variables(self):
        """`sudo tfdist rehearse` inside salloc: the outer job's id, step and reserved ports
        must not reach the rehearsed job (srun sets what it reserves, never unsets)."""
        outer = {"SLURM_JOB_ID": "7", "SLURM_STEP_RESV_PORTS": "12000", "PATH": "/bin"}
        cluster = mock.Mock(conf="/tmp/c/slurm.conf")
        with mock.patch.dict(os.environ, outer, clear=True):
            env = slurm_cluster.SlurmCluster.environment(cluster)
        self.assertEqual(env, {"PATH": "/bin", "SLURM_CONF": "/tmp/c/slurm.conf"})


if __name__ == "__main__":
    absltest.main()
