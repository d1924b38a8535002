"""`tfdist doctor`: the cluster it reads and the strategy auto picks, the parameter-server roles,
the Keras it trains with, peers that do not answer, and what this machine's network exposes."""

import json
from unittest import mock

import pytest
from absl.testing import parameterized

from tfdist import strategies
from tests.tfdist.cli_runner import run_tfdist
from tests.tfdist.cli_runner import run_tfdist_cases
from tfdist.commands import doctor
from tfdist.cluster import network

_PS_CLUSTER = {
    "cluster": {
        "chief": ["127.0.0.1:2001"],
        "worker": ["127.0.0.1:2002", "127.0.0.1:2003"],
        "ps": ["127.0.0.1:2004"],
    },
    "task": {"type": "worker", "index": 1},
}
_CHIEF_OF_PS_CLUSTER = json.dumps(
    {
        "cluster": {
            "chief": ["127.0.0.1:2001"],
            "worker": ["127.0.0.1:2002"],
            "ps": ["127.0.0.1:2003"],
        },
        "task": {"type": "chief", "index": 0},
    }
)


_JOBSET_POD = {
    "TFDIST_JOBSET_LAYOUT": "worker=2",
    "TFDIST_JOBSET_NAME": "mnist",
    "TFDIST_REPLICATED_JOB": "worker",
    "TFDIST_JOB_INDEX": "0",
    "JOB_COMPLETION_INDEX": "1",
    "TFDIST_JOBSET_SUBDOMAIN": "mnist",
    "TFDIST_JOBSET_PORT": "2222",
}
_DUPLICATE_ADDRESS = json.dumps(
    {"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}
)
# Every `tfdist doctor` run below that keeps tf-keras: (arguments, environment variables). They
# run in one child (TensorFlow imported once), the one that splits the CPU last.
_CASES = {
    "ps_worker": (["doctor", f"--tf_config={json.dumps(_PS_CLUSTER)}"], {}),
    "keras_2": (["doctor", "--keras=2"], {}),
    "sound": (["doctor", f"--tf_config={_CHIEF_OF_PS_CLUSTER}"], {}),
    "environment": (
        ["doctor"],
        {
            "TF_CONFIG": json.dumps(
                {
                    "cluster": {"worker": ["127.0.0.1:2001", "[::1]:2002"]},
                    "task": {"type": "worker", "index": 1},
                    "environment": "cloud",
                }
            ),
            **_JOBSET_POD,
        },
    ),
    "not_json": (["doctor", "--tf_config={worker"], {}),
    "duplicate_address": (["doctor", f"--tf_config={_DUPLICATE_ADDRESS}"], {}),
    "probe": (
        [
            "doctor",
            "--probe",
            "--probe_timeout_s=3",
            "--tf_config="
            + json.dumps(
                {
                    "cluster": {"worker": ["127.0.0.1:2001", "127.0.0.1:1"]},
                    "task": {"type": "worker", "index": 0},
                }
            ),
        ],
        {},
    ),
    "jobset_pod": (["doctor", "--probe_timeout_s=2"], _JOBSET_POD),
    "jobset_pod_without_index": (
        ["doctor", "--cluster_resolver=jobset"],
        {key: value for key, value in _JOBSET_POD.items() if key != "JOB_COMPLETION_INDEX"},
    ),
    "strategy_the_cluster_cannot_run": (
        ["doctor", "--strategy=multi_worker_mirrored", f"--tf_config={_CHIEF_OF_PS_CLUSTER}"],
        {},
    ),
    "slurm_step": (
        ["doctor", "--probe_timeout_s=1"],
        {
            "SLURM_PROCID": "1",
            "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_NODELIST": "node[9-10]",
            "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
            "SLURM_NODEID": "1",
            "SLURM_LOCALID": "0",
            "SLURM_JOB_ID": "42",
            "SLURM_STEP_ID": "0",
            "SLURM_STEP_RESV_PORTS": "12000",
        },
    ),
    "two_cpu_devices": (["doctor", "--num_cpu_devices=2"], {}),
}


@pytest.fixture(name="doctor_results", scope="module")
def _doctor_results():
    results = run_tfdist_cases(
        [args for args, _ in _CASES.values()],
        case_envs=[variables for _, variables in _CASES.values()],
    )
    return dict(zip(_CASES, results))


class _DoctorResults:
    @pytest.fixture(autouse=True)
    def _results(self, doctor_results):
        self.results = doctor_results


@pytest.mark.multiprocess
class StrategyLineTest(_DoctorResults, parameterized.TestCase):
    def test_parameter_server_counts_the_chief_as_the_coordinator(self):
        result = self.results["ps_worker"]
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(
            "strategy: auto picks parameter_server (1 coordinator, 2 worker(s), 1 ps, "
            "1 local replica device(s))",
            result.stdout,
        )
        self.assertIn("keras: tf-keras 2.21.", result.stdout)


@pytest.mark.multiprocess
class KerasLineTest(_DoctorResults, parameterized.TestCase):
    def test_says_which_keras_the_task_trains_with(self):
        for keras, result, expected in (
            (
                "2",
                self.results["keras_2"],
                "keras: tf-keras 2.21.0 (--keras=2): models are built with tf.keras or tf_keras "
                "and trained with Keras' fit",
            ),
            (
                "3",
                run_tfdist("doctor", "--keras=3"),  # Keras 3 needs a child of its own.
                "keras: Keras 3.15.1 (--keras=3): models are built with `import keras` and "
                "trained with tfdist's own distributed step; tf.keras is Keras 3 here",
            ),
        ):
            with self.subTest(keras=keras):
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn(expected, result.stdout)


class NetworkLineTest(parameterized.TestCase):
    def _line(self, cluster, interfaces, refusal=None):
        with (
            mock.patch.object(network, "exposed_interfaces", return_value=interfaces),
            mock.patch.object(network, "isolation_refusal", return_value=refusal),
        ):
            return doctor._network_line(cluster)  # pylint: disable=protected-access

    def test_task_exposed_beyond_loopback_warns(self):
        cluster = strategies.parse_tf_config(_PS_CLUSTER)
        self.assertEqual(
            self._line(cluster, ["eth0", "wlan0"]),
            (
                "warning: this task's gRPC server will listen on port 2003 of every interface "
                "(TensorFlow binds 0.0.0.0 and [::]), open without authentication through eth0, "
                "wlan0; run a one-machine job under `tfdist launch` (loopback-only network), else "
                "firewall port 2003 to the cluster's hosts (on Kubernetes, a NetworkPolicy that "
                "admits only the job's own pods)"
            ),
        )

    def test_task_in_a_loopback_only_namespace_is_fine(self):
        cluster = strategies.parse_tf_config(_PS_CLUSTER)
        self.assertEqual(
            self._line(cluster, []),
            "network: loopback only here, so this task's "
            "port 2003 is reachable from this network namespace alone",
        )

    def test_evaluator_serves_no_port(self):
        cluster = strategies.make_cluster(
            num_workers=1, evaluator=True, ports=[2001, 2002], task=("evaluator", 0)
        )
        self.assertIsNone(self._line(cluster, ["eth0"]))

    def test_without_a_cluster_it_checks_launchs_isolation(self):
        self.assertEqual(
            self._line(None, ["eth0"]),
            "network: `tfdist launch` runs its tasks in a network namespace with "
            "loopback only here, so nothing else reaches their ports",
        )
        self.assertEqual(
            self._line(None, ["eth0"], refusal="`unshare --net`: refused"),
            (
                "warning: `tfdist launch` cannot isolate its tasks here "
                "(`unshare --net`: refused), "
                "so their ports would accept unauthenticated connections through eth0 (TensorFlow "
                "binds every interface); run as root or allow unprivileged user namespaces, or "
                "firewall the ports"
            ),
        )


@pytest.mark.multiprocess
class DoctorTest(_DoctorResults, parameterized.TestCase):
    """Each case reads its run of `tfdist doctor` in the shared child (doctor lists the devices,
    so TensorFlow starts)."""

    def test_sound_cluster(self):
        result = self.results["sound"]
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("this task: chief:0 at 127.0.0.1:2001", result.stdout)
        self.assertIn("auto picks parameter_server", result.stdout)
        self.assertIn("local devices:", result.stdout)

    def test_reads_environment(self):
        result = self.results["environment"]  # TF_CONFIG, in a JobSet pod's environment.
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(
            "cluster: valid, from TF_CONFIG\n  ignored: the JobSet pod's "
            "TFDIST_JOBSET_NAME, TFDIST_REPLICATED_JOB, TFDIST_JOB_INDEX, "
            "JOB_COMPLETION_INDEX, TFDIST_JOBSET_SUBDOMAIN, TFDIST_JOBSET_PORT, "
            "TFDIST_JOBSET_LAYOUT (TF_CONFIG comes first; --cluster_resolver=jobset "
            "reads them instead)\n",
            result.stdout,
        )
        self.assertIn("this task: worker:1 at [::1]:2002", result.stdout)
        self.assertIn("auto picks multi_worker_mirrored", result.stdout)

    def test_no_tf_config_is_a_single_process_job(self):
        result = self.results["two_cpu_devices"]
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("auto picks mirrored", result.stdout)

    @parameterized.named_parameters(
        ("not_json", "not_json", "TF_CONFIG"), ("duplicate_address", "duplicate_address", '"a:1"')
    )
    def test_unsound_cluster(self, case, expected):
        result = self.results[case]
        self.assertEqual(result.returncode, 2)
        self.assertLen(result.stderr.strip().splitlines(), 1, result.stderr)
        self.assertIn(expected, result.stderr)

    def test_probe_finds_a_peer_that_does_not_answer(self):
        result = self.results["probe"]
        self.assertLess(result.seconds, 60)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("problem: worker:1 at 127.0.0.1:1 does not answer", result.stdout)
        self.assertIn("hint: pass --collective_timeout_s=300", result.stdout)

    def test_in_a_jobset_pod_each_field_and_where_it_came_from(self):
        result = self.results["jobset_pod"]
        self.assertEqual(result.returncode, 0, result.stderr)
        for line in (
            "cluster: valid, from the JobSet pod's environment (--cluster_resolver=auto: "
            "TF_CONFIG is unset and TFDIST_JOBSET_LAYOUT is set)",
            "  TFDIST_REPLICATED_JOB=worker (from metadata.labels"
            "['jobset.sigs.k8s.io/replicatedjob-name'])",
            "  worker: mnist-worker-0-0.mnist:2222, mnist-worker-0-1.mnist:2222",
            "this task: worker:1 at mnist-worker-0-1.mnist:2222",
        ):
            self.assertIn(line, result.stdout.splitlines())
        self.assertIn("names: 0 of 2 task(s) resolve within 2 s", result.stdout)
        result = self.results["jobset_pod_without_index"]
        self.assertEqual(result.returncode, 2)
        self.assertEqual(
            result.stderr.strip(),
            "tfdist doctor: error: JobSet pod: "
            "JOB_COMPLETION_INDEX is not set; run it in a pod of a JobSet that "
            "`tfdist manifest --format=jobset` wrote (its containers map the pod's "
            "JobSet labels into these variables), or set TF_CONFIG instead.",
        )

    def test_in_a_slurm_step_where_the_cluster_came_from(self):
        result = self.results["slurm_step"]  # `srun -n2 tfdist doctor`, TF_CONFIG unset.
        self.assertEqual(result.returncode, 0, result.stderr)
        for line in (
            "cluster: valid, from the Slurm job step (--cluster_resolver=auto: TF_CONFIG is "
            "unset and SLURM_STEP_NUM_TASKS=2)",
            "  Slurm job 42 step 0; ports 12000 reserved for the step by Slurm "
            "(SLURM_STEP_RESV_PORTS)",
            "this task: worker:1 at node10:12000",
        ):
            self.assertIn(line, result.stdout.splitlines())

    def test_strategy_the_cluster_cannot_run(self):
        result = self.results["strategy_the_cluster_cannot_run"]
        self.assertEqual(result.returncode, 2)
        self.assertIn("cannot use the cluster's 1 ps", result.stderr)
