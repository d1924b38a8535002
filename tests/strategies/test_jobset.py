"""Tests for strategies.jobset: a JobSet pod's environment as this task's ClusterConfig."""

from absl.testing import absltest
from absl.testing import parameterized

from tfdist.strategies import jobset
from tfdist.strategies.cluster import ClusterConfigError
from tfdist.strategies.cluster import Task
from tfdist.strategies.cluster import TaskType


def _pod(replicated_job="worker", index=0, layout="chief=1,worker=2,ps=1,evaluator=1", **extra):
    """The environment `tfdist manifest --format=jobset` gives a pod of JobSet "ctr"."""
    return {
        jobset.ENV_JOBSET_NAME: "ctr",
        jobset.ENV_REPLICATED_JOB: replicated_job,
        jobset.ENV_JOB_INDEX: "0",
        jobset.ENV_POD_INDEX: str(index),
        jobset.ENV_SUBDOMAIN: "ctr",
        jobset.ENV_PORT: "2222",
        jobset.ENV_LAYOUT: layout,
        **extra,
    }


class ClusterFromJobSetTest(parameterized.TestCase):
    def test_every_task_at_its_dns_name(self):
        cluster = jobset.cluster_from_jobset(_pod("worker", 1))
        self.assertEqual(
            dict(cluster.jobs),
            {
                "chief": ("ctr-chief-0-0.ctr:2222",),
                "worker": ("ctr-worker-0-0.ctr:2222", "ctr-worker-0-1.ctr:2222"),
                "ps": ("ctr-ps-0-0.ctr:2222",),
                "evaluator": ("ctr-evaluator-0-0.ctr:2222",),
            },
        )
        self.assertEqual(cluster.task, Task(TaskType.WORKER, 1))
        self.assertEqual(cluster.task_address, "ctr-worker-0-1.ctr:2222")

    def test_every_pod_sees_the_same_cluster_from_its_own_place(self):
        layout = {"chief": 1, "worker": 3, "ps": 2}
        clusters = [
            jobset.cluster_from_jobset(_pod(job, index, jobset.format_layout(layout)))
            for job, count in layout.items()
            for index in range(count)
        ]
        self.assertLen({tuple(cluster.jobs.items()) for cluster in clusters}, 1)
        self.assertLen({cluster.task for cluster in clusters}, 6)

    def test_the_data_service_pods_are_not_tasks(self):
        pod = jobset.from_environment(_pod("data-worker", 1, "worker=2,dispatcher=1,data-worker=2"))
        self.assertEqual(pod.address(jobset.DISPATCHER, 0), "ctr-dispatcher-0-0.ctr:2222")
        self.assertEqual(pod.own_address, "ctr-data-worker-0-1.ctr:2222")
        with self.assertRaisesRegex(
            ClusterConfigError,
            "tf.data service pod, not a TensorFlow task.*tfdist data serve --jobset_pod",
        ):
            pod.cluster()
        cluster = jobset.cluster_from_jobset(
            _pod("worker", 0, "worker=2,dispatcher=1,data-worker=2")
        )
        self.assertEqual(list(cluster.jobs), ["worker"])

    def test_sources_say_which_field_each_value_came_from(self):
        sources = jobset.from_environment(_pod()).sources
        self.assertIn(
            "TFDIST_JOBSET_NAME=ctr (from metadata.labels['jobset.sigs.k8s.io/jobset-name'])",
            sources,
        )
        self.assertIn(
            "JOB_COMPLETION_INDEX=0 (from metadata.annotations"
            "['batch.kubernetes.io/job-completion-index'])",
            sources,
        )

    def test_is_jobset_pod(self):
        self.assertTrue(jobset.is_jobset_pod(_pod()))
        self.assertFalse(jobset.is_jobset_pod({"TF_CONFIG": "{}"}))

    @parameterized.named_parameters(
        ("no_layout", {jobset.ENV_LAYOUT: ""}, "TFDIST_JOBSET_LAYOUT is not set"),
        ("no_index", {jobset.ENV_POD_INDEX: " "}, "JOB_COMPLETION_INDEX is not set"),
        ("no_name", {jobset.ENV_JOBSET_NAME: ""}, "TFDIST_JOBSET_NAME is not set"),
        (
            "huge_index",
            {jobset.ENV_POD_INDEX: "99999999999999999999"},
            "JOB_COMPLETION_INDEX='99999999999999999999' is not an index",
        ),
        ("index_out_of_range", {jobset.ENV_POD_INDEX: "2"}, "out of range for worker=2"),
        ("negative_index", {jobset.ENV_POD_INDEX: "-1"}, "is not an index"),
        ("job_index", {jobset.ENV_JOB_INDEX: "1"}, "TFDIST_JOB_INDEX='1' is not 0"),
        (
            "unknown_job",
            {jobset.ENV_REPLICATED_JOB: "launcher"},
            "'launcher' is not a replicated job",
        ),
        ("bad_layout", {jobset.ENV_LAYOUT: "worker=two"}, "has the entry 'worker=two'"),
        ("layout_twice", {jobset.ENV_LAYOUT: "worker=1,worker=2"}, "given once"),
        (
            "layout_without_worker",
            {jobset.ENV_LAYOUT: "chief=1", jobset.ENV_REPLICATED_JOB: "chief"},
            "has no worker",
        ),
        ("port", {jobset.ENV_PORT: "70000"}, "is not a port"),
        ("port_nan", {jobset.ENV_PORT: "nan"}, "is not a port"),
        ("subdomain", {jobset.ENV_SUBDOMAIN: "Not A Domain"}, "is not a DNS subdomain"),
        ("name", {jobset.ENV_JOBSET_NAME: "My_Set"}, "is not a DNS label"),
        ("long_name", {jobset.ENV_JOBSET_NAME: "a" * 50}, "shorten the JobSet's name"),
        ("ps_without_chief", {jobset.ENV_LAYOUT: "worker=2,ps=1"}, "no chief"),
    )
    def test_an_incomplete_or_wrong_environment_is_one_line(self, change, words):
        with self.assertRaises(ClusterConfigError) as raised:
            jobset.cluster_from_jobset({**_pod(), **change})
        message = str(raised.exception)
        self.assertNotIn("\n", message)
        self.assertIn(words, message)
        self.assertTrue(message.startswith("JobSet pod: "), message)


if __name__ == "__main__":
    absltest.main()
