"""Tests for strategies.slurm: a job step's SLURM_* variables as this task's ClusterConfig.

The environment is replaced for each test (no SLURM_* variable of the machine leaks in), and a
fake `scontrol` on PATH answers `scontrol show hostnames` and notes each call, so a test would
see if TensorFlow's resolver started asking Slurm instead of expanding the host list itself.
"""

import os
import stat
import tempfile
import unittest
from unittest import mock

from absl.testing import parameterized

from tfdist.strategies.cluster import ClusterConfigError
from tfdist.strategies.cluster import Task
from tfdist.strategies.cluster import TaskType
from tfdist.strategies.slurm import cluster_from_slurm

_FAKE_SCONTROL = """#!/bin/bash
# scontrol show hostnames n[1-2]: one host per line, as Slurm prints them.
echo "$@" >> "$(dirname "$0")/scontrol.calls"
[ "$1 $2" = "show hostnames" ] || exit 1
case "$3" in
  "n[1-2]") printf 'n1\\nn2\\n' ;;
  "n[9-10]") printf 'n9\\nn10\\n' ;;
  *) echo "$3" | tr ',' '\\n' ;;
esac
"""


def _step(procid, nodelist="n[1-2]", tasks_per_node="2(x2)", num_tasks=4):
    """The SLURM_* variables srun sets for one task of a job step."""
    return {
        "SLURM_PROCID": str(procid),
        "SLURM_STEP_NUM_TASKS": str(num_tasks),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_JOB_ID": "42",
        "SLURM_NODELIST": nodelist,
    }


class ClusterFromSlurmTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        tempdir = tempfile.TemporaryDirectory()  # pylint: disable=consider-using-with
        self.addCleanup(tempdir.cleanup)
        self.bin_dir = tempdir.name
        scontrol = os.path.join(self.bin_dir, "scontrol")
        with open(scontrol, "w", encoding="utf-8") as f:
            f.write(_FAKE_SCONTROL)
        os.chmod(scontrol, os.stat(scontrol).st_mode | stat.S_IXUSR)
        self.base_env = {
            key: value for key, value in os.environ.items() if not key.startswith("SLURM_")
        }
        self.base_env["PATH"] = f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        self.base_env["CUDA_VISIBLE_DEVICES"] = "untouched"

    def _resolve(self, env, **kwargs):
        with mock.patch.dict(os.environ, {**self.base_env, **env}, clear=True):
            cluster = cluster_from_slurm(**kwargs)
            self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], "untouched")
        return cluster

    def _assert_one_line_error(self, env, pattern, **kwargs):
        with self.assertRaisesRegex(ClusterConfigError, pattern) as raised:
            self._resolve(env, **kwargs)
        self.assertNotIn("\n", str(raised.exception))
        self.assertTrue(str(raised.exception).startswith("Slurm cluster: "), raised.exception)

    @parameterized.named_parameters(
        ("rank0", 0, 0, "n1:8888"),
        ("rank1", 1, 1, "n1:8889"),
        ("rank3", 3, 3, "n2:8889"),
    )
    def test_every_task_is_a_worker_by_default(self, procid, index, address):
        cluster = self._resolve(_step(procid))
        self.assertEqual(
            dict(cluster.jobs), {"worker": ("n1:8888", "n1:8889", "n2:8888", "n2:8889")}
        )
        self.assertEqual(cluster.task, Task(TaskType.WORKER, index))
        self.assertEqual(cluster.task_address, address)
        self.assertEqual(cluster.rpc_layer, "grpc")
        self.assertEqual(cluster.is_chief, procid == 0)

    @parameterized.named_parameters(
        ("chief", 0, Task(TaskType.CHIEF, 0), "n1:7000"),
        ("ps", 1, Task(TaskType.PS, 0), "n1:7001"),
        ("worker0", 2, Task(TaskType.WORKER, 0), "n2:7000"),
        ("worker1", 3, Task(TaskType.WORKER, 1), "n2:7001"),
    )
    def test_chief_then_ps_then_workers(self, procid, task, address):
        cluster = self._resolve(_step(procid), port_base=7000, num_ps=1, chief=True)
        self.assertEqual(
            dict(cluster.jobs),
            {"chief": ("n1:7000",), "worker": ("n2:7000", "n2:7001"), "ps": ("n1:7001",)},
        )
        self.assertEqual(cluster.task, task)
        self.assertEqual(cluster.task_address, address)
        self.assertEqual((cluster.num_workers, cluster.num_ps), (3, 1))

    def test_uneven_tasks_per_node_and_no_scontrol_call(self):
        env = _step(4, nodelist="gpu[01-02],cpu7", tasks_per_node="1,2,2", num_tasks=5)
        cluster = self._resolve(env, chief=True)
        # Hosts are sorted by name: cpu7 first.
        self.assertEqual(
            dict(cluster.jobs),
            {
                "chief": ("cpu7:8888",),
                "worker": ("cpu7:8889", "gpu01:8888", "gpu02:8888", "gpu02:8889"),
            },
        )
        self.assertEqual(cluster.task, Task(TaskType.WORKER, 3))
        self.assertFalse(
            os.path.exists(os.path.join(self.bin_dir, "scontrol.calls")),
            "TF's SlurmClusterResolver now calls scontrol; update strategies/slurm.py",
        )

    def test_not_in_a_slurm_step(self):
        self._assert_one_line_error(
            {},
            r"SLURM_PROCID is not set, so this process is not a task "
            r"of a Slurm job step; start each task with srun",
        )

    def test_sbatch_without_srun(self):
        env = {"SLURM_PROCID": "0", "SLURM_JOB_ID": "42", "SLURM_NTASKS": "2"}
        self._assert_one_line_error(env, r"SLURM_STEP_NUM_TASKS is not set.*srun")

    def test_too_few_tasks_for_the_layout(self):
        env = _step(0, nodelist="n1", tasks_per_node="2", num_tasks=2)
        self._assert_one_line_error(
            env,
            r"has 2 task\(s\), but chief=True and num_ps=1 leave no "
            r"worker; ask for at least 3 tasks",
            num_ps=1,
            chief=True,
        )

    def test_ps_needs_a_chief(self):
        self._assert_one_line_error(
            _step(0), r"num_ps=1: 1 ps task\(s\) but no chief.*chief=True", num_ps=1
        )

    def test_bad_port_base(self):
        self._assert_one_line_error(_step(0), r"port_base=0 is not a port", port_base=0)

    def test_a_port_base_too_high_for_the_tasks_sharing_a_node(self):
        self._assert_one_line_error(
            _step(0),
            r"port_base=65535 gives the 2 tasks that share a "
            r"node ports up to 65536; use a port_base of at "
            r"most 65534",
            port_base=65535,
        )

    def test_text_order_of_hosts_differs_from_slurm_order(self):
        env = _step(0, nodelist="n[9-10]", tasks_per_node="1(x2)", num_tasks=2)
        self._assert_one_line_error(
            env,
            r"orders hosts as text \(n10, n9\) but Slurm orders them "
            r"as numbers \(n9, n10\).*zero-padded",
        )

    def test_invalid_host_list(self):
        self._assert_one_line_error(
            _step(0, nodelist="n[1-"), r"SlurmClusterResolver failed: Invalid hostlist format"
        )

    def test_rank_outside_the_step(self):
        self._assert_one_line_error(_step(4), r"rank \(SLURM_PROCID\) is not one of the step's 4")

    def test_task_counts_disagree(self):
        self._assert_one_line_error(
            _step(0, num_tasks=3), r"Requested 3 tasks but only 4 were assigned"
        )


if __name__ == "__main__":
    unittest.main()
