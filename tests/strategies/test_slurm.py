"""Tests for strategies.slurm: a job step's SLURM_* variables as this task's ClusterConfig,
derived in Python from what Slurm says of the step (no Slurm command, no TensorFlow)."""

import unittest

from absl.testing import parameterized

from tfdist.strategies import slurm
from tfdist.strategies.cluster import ClusterConfigError
from tfdist.strategies.cluster import Task
from tfdist.strategies.cluster import TaskType


def _step(procid, nodelist="n[1-2]", tasks_per_node="2(x2)", num_tasks=4, **more):
    """The SLURM_* variables srun sets for one task of a job step laid out by block."""
    counts = slurm.expand_counts(tasks_per_node)
    layout = "cyclic" if more.get("SLURM_DISTRIBUTION") == "cyclic" else "block"
    places = slurm.task_places(counts, layout)
    place = places[procid] if procid < len(places) else (0, 0)
    return {
        "SLURM_PROCID": str(procid),
        "SLURM_STEP_NUM_TASKS": str(num_tasks),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_NODEID": str(place[0]),
        "SLURM_LOCALID": str(place[1]),
        "SLURM_JOB_ID": "42",
        **more,
    }


class ClusterFromSlurmTest(parameterized.TestCase):
    def _assert_one_line_error(self, env, pattern, **kwargs):
        with self.assertRaisesRegex(ClusterConfigError, pattern) as raised:
            slurm.cluster_from_slurm(environ=env, **kwargs)
        self.assertNotIn("\n", str(raised.exception))
        self.assertTrue(str(raised.exception).startswith("Slurm cluster: "), raised.exception)

    @parameterized.named_parameters(
        ("rank0", 0, 0, "n1:8888"),
        ("rank1", 1, 1, "n1:8889"),
        ("rank3", 3, 3, "n2:8889"),
    )
    def test_every_task_is_a_worker_by_default(self, procid, index, address):
        cluster = slurm.cluster_from_slurm(environ=_step(procid))
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
        cluster = slurm.cluster_from_slurm(7000, num_ps=1, chief=True, environ=_step(procid))
        self.assertEqual(
            dict(cluster.jobs),
            {"chief": ("n1:7000",), "worker": ("n2:7000", "n2:7001"), "ps": ("n1:7001",)},
        )
        self.assertEqual(cluster.task, task)
        self.assertEqual(cluster.task_address, address)
        self.assertEqual((cluster.num_workers, cluster.num_ps), (3, 1))

    def test_nodes_in_slurms_order_numeric_names_included(self):
        env = _step(1, nodelist="node[9-10]", tasks_per_node="1(x2)", num_tasks=2)
        cluster = slurm.cluster_from_slurm(environ=env)
        self.assertEqual(dict(cluster.jobs), {"worker": ("node9:8888", "node10:8888")})
        self.assertEqual(cluster.task_address, "node10:8888")

    def test_uneven_tasks_per_node_in_the_node_lists_order(self):
        env = _step(4, nodelist="gpu[01-02],cpu7", tasks_per_node="1,2,2", num_tasks=5)
        cluster = slurm.cluster_from_slurm(chief=True, environ=env)
        self.assertEqual(
            dict(cluster.jobs),
            {
                "chief": ("gpu01:8888",),
                "worker": ("gpu02:8888", "gpu02:8889", "cpu7:8888", "cpu7:8889"),
            },
        )
        self.assertEqual(cluster.task, Task(TaskType.WORKER, 3))

    @parameterized.named_parameters(
        ("rank0", 0, "n1:8888"),
        ("rank1", 1, "n2:8888"),
        ("rank2", 2, "n1:8889"),
        ("rank3", 3, "n2:8889"),
    )
    def test_cyclic_distribution(self, procid, address):
        env = _step(procid, SLURM_DISTRIBUTION="cyclic")
        cluster = slurm.cluster_from_slurm(environ=env)
        self.assertEqual(
            dict(cluster.jobs), {"worker": ("n1:8888", "n2:8888", "n1:8889", "n2:8889")}
        )
        self.assertEqual(cluster.task_address, address)

    def test_a_task_slurm_placed_elsewhere_is_refused(self):
        env = _step(1, SLURM_NODEID="1", SLURM_LOCALID="0")  # Cyclic's place, block's name.
        self._assert_one_line_error(
            env,
            r"SLURM_PROCID=1 runs on node 1 as its task 0 .* but SLURM_DISTRIBUTION='block' "
            r"puts it on node 0 as task 1, so its address would be another task's; run the "
            r"step with srun's default distribution",
        )

    @parameterized.parameters("plane=2", "arbitrary")
    def test_a_distribution_it_cannot_derive(self, distribution):
        env = _step(0, SLURM_DISTRIBUTION=distribution)
        self._assert_one_line_error(env, rf"SLURM_DISTRIBUTION='{distribution}' lays tasks out")

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

    @parameterized.parameters("n[1-", "n[a-b]", "n[1-2]x[3]", ",", "n[1-99999999]")
    def test_invalid_host_list(self, nodelist):
        self._assert_one_line_error(
            _step(0, nodelist=nodelist), r"SLURM_STEP_NODELIST=.* (is not a Slurm host list|names)"
        )

    def test_rank_outside_the_step(self):
        self._assert_one_line_error(_step(4), r"rank \(SLURM_PROCID\) is not one of the step's 4")

    @parameterized.parameters(("2(x2)", 3), ("2,x", 4), ("0(x2)", 0))
    def test_task_counts_disagree(self, tasks_per_node, num_tasks):
        env = _step(0, num_tasks=num_tasks)
        env["SLURM_STEP_TASKS_PER_NODE"] = tasks_per_node
        self._assert_one_line_error(env, r"SLURM_STEP_TASKS_PER_NODE=")


class HostListTest(parameterized.TestCase):
    @parameterized.parameters(
        ("n1", ["n1"]),
        ("n[01-03]", ["n01", "n02", "n03"]),
        ("gpu[9-10,12],login1", ["gpu9", "gpu10", "gpu12", "login1"]),
        ("a[1-2]-ib,b7", ["a1-ib", "a2-ib", "b7"]),
    )
    def test_expands_as_slurm_writes_them(self, text, hosts):
        self.assertEqual(slurm.expand_hostlist(text), hosts)

    def test_counts(self):
        self.assertEqual(slurm.expand_counts("2(x3),1"), [2, 2, 2, 1])


if __name__ == "__main__":
    unittest.main()
