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
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_RESV_PORTS": "8888-8889",
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
        env = _step(procid, SLURM_STEP_RESV_PORTS="7000,7001")
        cluster = slurm.cluster_from_slurm(num_ps=1, chief=True, environ=env)
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
        env = _step(0)
        del env["SLURM_STEP_RESV_PORTS"]
        self._assert_one_line_error(
            env,
            r"port_base=65000 gives the 2 tasks that share a node ports up to 66999 \(1000 per "
            r"task, one for each job id modulo 1000\); use a port_base of at most 63536, or "
            r"srun --resv-ports\.$",
            port_base=65000,
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


def _addresses(job_id, tasks_per_node, reserved=None, port_base=8888):
    """The addresses of a block-laid step of `job_id` on n1 and n2."""
    counts = slurm.expand_counts(tasks_per_node)
    env = _step(0, tasks_per_node=tasks_per_node, num_tasks=sum(counts), SLURM_JOB_ID=str(job_id))
    env.pop("SLURM_STEP_RESV_PORTS")
    env.update({} if reserved is None else {"SLURM_STEP_RESV_PORTS": reserved})
    return slurm.cluster_from_slurm(port_base, environ=env).jobs["worker"]


class PortsTest(parameterized.TestCase):
    """A step's ports: those srun reserved for it, else derived from the job id."""

    @parameterized.named_parameters(
        ("range", "12000-12001", ("n1:12000", "n1:12001", "n2:12000", "n2:12001")),
        ("list", "12000,12005", ("n1:12000", "n1:12005", "n2:12000", "n2:12005")),
        ("more_than_needed", " 12003-12009 ", ("n1:12003", "n1:12004", "n2:12003", "n2:12004")),
    )
    def test_the_nth_task_of_a_node_takes_the_nth_reserved_port(self, reserved, addresses):
        self.assertEqual(_addresses(42, "2(x2)", reserved), addresses)

    def test_reserved_ports_say_so(self):
        env = _step(1, SLURM_STEP_RESV_PORTS="12000-12001", SLURM_STEP_ID="3")
        origin = slurm.cluster_from_slurm(environ=env).origin
        self.assertEqual(origin.job, "Slurm job 42 step 3")
        self.assertIn("ports 12000-12001 reserved for the step by Slurm", origin.ports)
        self.assertIn("MpiParams=ports range", origin.port_fix)

    def test_ports_from_the_job_id_without_reserved_ports(self):
        self.assertEqual(_addresses(42, "2(x2)"), ("n1:8930", "n1:9930", "n2:8930", "n2:9930"))
        self.assertEqual(_addresses(1042, "1(x2)", port_base=20000), ("n1:20042", "n2:20042"))
        env = _step(0, SLURM_JOB_ID="42")
        del env["SLURM_STEP_RESV_PORTS"]
        origin = slurm.cluster_from_slurm(environ=env).origin
        self.assertIn(
            "ports from the job id, srun having reserved none: 8888 + SLURM_JOB_ID mod 1000 "
            "(42) + 1000 n for the n-th task on a node",
            origin.ports,
        )
        self.assertIn("srun --resv-ports", origin.port_fix)
        self.assertIn("sbatch --exclusive", origin.port_fix)

    def test_jobs_whose_ids_differ_by_less_than_1000_never_share_a_port(self):
        """Whatever each job's tasks per node: the n-th task's ports are base + 1000 n + slot."""
        taken = {}
        for job_id, per_node in [(7, "3(x2)"), (8, "1(x2)"), (9, "2(x2)"), (1006, "4(x2)")]:
            for address in _addresses(job_id, per_node):
                self.assertNotIn(address, taken, f"job {job_id} and job {taken.get(address)}")
                taken[address] = job_id

    @parameterized.parameters("12000-", "abc", "0", "70000", "12001-12000", "1,,2", "١٢٠٠٠")
    def test_reserved_ports_that_are_not_a_port_list(self, reserved):
        with self.assertRaisesRegex(
            ClusterConfigError,
            r"^Slurm cluster: SLURM_STEP_RESV_PORTS=.* is not a list of ports such as "
            r"'12000-12003' or '12000,12005'; run the step with srun --resv-ports",
        ):
            _addresses(42, "2(x2)", reserved)

    def test_too_few_reserved_ports_for_the_tasks_of_a_node(self):
        with self.assertRaisesRegex(
            ClusterConfigError,
            r"SLURM_STEP_RESV_PORTS='12000' reserves 1 port\(s\), but 2 tasks share a node; run "
            r"the step with srun --resv-ports",
        ):
            _addresses(42, "2(x2)", "12000")

    @parameterized.parameters("SLURM_JOB_ID", "SLURM_STEP_ID")
    def test_a_job_or_step_that_is_not_a_number(self, name):
        env = _step(0, **{name: "4x"})
        with self.assertRaisesRegex(ClusterConfigError, rf"{name}='4x' is not a task number"):
            slurm.cluster_from_slurm(environ=env)

    @parameterized.parameters(
        ({}, 0),
        ({"SLURM_STEP_NUM_TASKS": "1"}, 1),
        ({"SLURM_STEP_NUM_TASKS": "3"}, 3),
        ({"SLURM_STEP_NUM_TASKS": "x"}, 2),
    )
    def test_step_tasks(self, env, tasks):
        self.assertEqual(slurm.step_tasks(env), tasks)


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
