"""Tests for tfdist.cluster.manifests.jobset_yaml: every JobSet it writes validates against the
v1alpha2 schema of kubernetes-sigs/jobset v0.12.0 with unknown fields refused (jobset_crd), and
a broken one does not."""

from tests.tfdist.cluster.manifests.layouts import LAYOUTS
from tests.tfdist.cluster.manifests.layouts import SHARED
import copy
import re

import jsonschema
import yaml
from absl.testing import absltest
from absl.testing import parameterized

from tests.tfdist.cluster.manifests import jobset_crd
from tfdist.cluster import manifests
from tfdist.cluster.manifests import ManifestError
from tfdist.cluster.rehearsal.jobset_plan import expand
from tfdist.strategies import jobset as jobset_pods

_VALIDATOR = jobset_crd.validator()
# Every layout a user asks for, as (manifest arguments, replicated jobs and their pods).


def _jobset(**kwargs) -> str:
    kwargs = {
        "name": "mnist",
        "pods": manifests.Pods(image="registry.example.com/tfdist:0.2"),
        **kwargs,
    }
    return manifests.jobset(**kwargs)


def _pod(document: dict, job: str) -> dict:
    (found,) = [rjob for rjob in document["spec"]["replicatedJobs"] if rjob["name"] == job]
    return found["template"]["spec"]["template"]["spec"]


class SchemaTest(parameterized.TestCase):
    @parameterized.named_parameters(*((name,) + layout for name, layout in LAYOUTS.items()))
    def test_every_layout_validates_against_the_jobset_schema(self, arguments, pods):
        document = yaml.safe_load(_jobset(**arguments))
        _VALIDATOR.validate(document)
        self.assertEqual(jobset_crd.webhook_problems(document), [])
        self.assertEqual(
            {
                job["name"]: job["template"]["spec"]["completions"]
                for job in document["spec"]["replicatedJobs"]
            },
            pods,
        )

    @parameterized.named_parameters(
        (
            "unknown_field",
            lambda d: d["spec"]["replicatedJobs"][0]["template"]["spec"].update(parallelizm=2),
            "parallelizm",
        ),
        ("wrong_type", lambda d: d["spec"]["replicatedJobs"][0].update(replicas="two"), "two"),
        ("unknown_operator", lambda d: d["spec"]["successPolicy"].update(operator="Most"), "Most"),
        (
            "container_typo",
            lambda d: _pod(d, "worker")["containers"][0].update(comand=["x"]),
            "comand",
        ),
    )
    def test_a_broken_manifest_fails_the_check(self, break_it, word):
        document = yaml.safe_load(_jobset(num_workers=2, train_args=[]))
        break_it(document)
        with self.assertRaisesRegex(jsonschema.ValidationError, word):
            _VALIDATOR.validate(document)

    def test_the_webhook_check_can_fail(self):
        document = yaml.safe_load(_jobset(num_workers=2, train_args=[]))
        document["metadata"]["name"] = "x" * 50
        document["spec"]["successPolicy"]["targetReplicatedJobs"] = ["chief"]
        self.assertLen(jobset_crd.webhook_problems(document), 2)  # A pod name, the target.

    def test_the_label_quantity_mount_and_image_check_can_fail(self):
        document = yaml.safe_load(_jobset(**LAYOUTS["gpus_and_queue"][0]))
        pod = _pod(document, "worker")
        pod["nodeSelector"]["cloud.google.com/gke-accelerator"] = "n" * 64
        pod["containers"][0]["resources"]["requests"]["cpu"] = "0"
        pod["containers"][0]["resources"]["limits"]["memory"] = "1e400"
        pod["containers"][0]["volumeMounts"] = [{"name": "v", "mountPath": "/etc"}]
        pod["containers"][0]["image"] = "$(id)"
        self.assertLen(jobset_crd.webhook_problems(document), 5)


class LayoutTest(absltest.TestCase):
    def test_multi_worker(self):
        document = yaml.safe_load(
            _jobset(num_workers=3, train_args=["--epochs=2"], port=3000, max_restarts=0)
        )
        self.assertEqual(document["metadata"], {"name": "mnist"})
        self.assertEqual(
            document["spec"]["network"],
            {"enableDNSHostnames": True, "subdomain": "mnist", "publishNotReadyAddresses": True},
        )
        self.assertEqual(
            document["spec"]["successPolicy"],
            {"operator": "All", "targetReplicatedJobs": ["worker"]},
        )
        self.assertEqual(document["spec"]["failurePolicy"]["maxRestarts"], 0)
        # A preempted pod (evicted, or saved on notice with exit 75) fails its Job by the pod
        # failure policy, which restarts the JobSet without spending maxRestarts.
        self.assertEqual(
            document["spec"]["failurePolicy"]["rules"],
            [
                {
                    "name": "preempted",
                    "action": "RestartJobSetAndIgnoreMaxRestarts",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                }
            ],
        )
        (worker,) = document["spec"]["replicatedJobs"]
        self.assertEqual(worker["replicas"], 1)
        job = worker["template"]["spec"]
        self.assertEqual(
            (job["parallelism"], job["completions"], job["completionMode"], job["backoffLimit"]),
            (3, 3, "Indexed", 0),
        )
        self.assertEqual(job["activeDeadlineSeconds"], 86400)  # Nothing waits for ever.
        self.assertEqual(
            job["podFailurePolicy"]["rules"],
            [
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": "tfdist", "operator": "In", "values": [75]},
                },
                {
                    "action": "FailJob",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
            ],
        )
        pod = job["template"]["spec"]
        self.assertEqual(pod["restartPolicy"], "Never")
        self.assertEqual(pod["terminationGracePeriodSeconds"], 30)  # Kubernetes' default.
        (container,) = pod["containers"]
        self.assertEqual(
            container["command"],
            [
                "tfdist",
                "train",
                "--cluster_resolver=jobset",
                "--epochs=2",
                "--collective_timeout_s=600",
            ],
        )
        self.assertEqual(
            container["ports"], [{"name": "tfdist", "containerPort": 3000, "protocol": "TCP"}]
        )
        env = {entry["name"]: entry for entry in container["env"]}
        for name, field in jobset_pods.DOWNWARD_API.items():
            self.assertEqual(env[name]["valueFrom"], {"fieldRef": {"fieldPath": field}})
        self.assertEqual(env[jobset_pods.ENV_LAYOUT]["value"], "worker=3")
        self.assertEqual(env[jobset_pods.ENV_PORT]["value"], "3000")
        self.assertEqual(env[jobset_pods.ENV_SUBDOMAIN]["value"], "mnist")
        self.assertEqual(env["TFDIST_GRACE_S"]["value"], "30", "the grace, told to the task")

    def test_parameter_server_waits_for_the_chief_and_the_evaluator(self):
        arguments, _ = LAYOUTS["parameter_server_with_evaluator"]
        document = yaml.safe_load(_jobset(**arguments))
        self.assertEqual(
            document["spec"]["successPolicy"]["targetReplicatedJobs"], ["chief", "evaluator"]
        )
        self.assertEqual(document["spec"]["failurePolicy"]["maxRestarts"], 3)
        for job in ("chief", "worker", "ps", "evaluator"):
            pod = _pod(document, job)
            self.assertEqual(
                pod["volumes"],
                [{"name": "model-dir", "persistentVolumeClaim": {"claimName": "tfdist-runs"}}],
            )
            self.assertEqual(
                pod["containers"][0]["volumeMounts"],
                [{"name": "model-dir", "mountPath": "/mnt/runs"}],
            )
        self.assertNotIn("ports", _pod(document, "evaluator")["containers"][0])

    def test_gpus_go_to_the_pods_that_train(self):
        arguments, _ = LAYOUTS["gpus_and_queue"]
        document = yaml.safe_load(_jobset(**arguments))
        self.assertEqual(document["metadata"]["labels"], {"kueue.x-k8s.io/queue-name": "team-a"})
        pod = _pod(document, "worker")
        self.assertEqual(
            pod["containers"][0]["resources"],
            {
                "requests": {"cpu": "8", "memory": "64Gi"},
                "limits": {"memory": "64Gi", "nvidia.com/gpu": 8},
            },
        )
        self.assertEqual(
            pod["tolerations"],
            [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
                {"key": "spot", "operator": "Exists"},
            ],
        )
        self.assertEqual((pod["priorityClassName"], pod["serviceAccountName"]), ("high", "trainer"))
        ps = yaml.safe_load(
            _jobset(
                num_workers=2,
                num_ps=1,
                chief=True,
                train_args=[],
                pods=manifests.Pods(image="i", gpus=2),
            )
        )
        self.assertNotIn("resources", _pod(ps, "chief")["containers"][0])  # Coordinates only.
        self.assertNotIn("resources", _pod(ps, "ps")["containers"][0])
        self.assertEqual(
            _pod(ps, "worker")["containers"][0]["resources"], {"limits": {"nvidia.com/gpu": 2}}
        )

    def test_train_reads_through_the_data_service_pods(self):
        arguments, _ = LAYOUTS["data_service"]
        document = yaml.safe_load(_jobset(**arguments))
        self.assertEqual(
            _pod(document, "worker")["containers"][0]["command"][-1],
            "--tf_data_service=grpc://mnist-dispatcher-0-0.mnist:2222",
        )
        for job in ("dispatcher", "data-worker"):
            self.assertEqual(
                _pod(document, job)["containers"][0]["command"],
                ["tfdist", "data", "serve", "--jobset_pod"],
            )
        self.assertEqual(document["spec"]["successPolicy"]["targetReplicatedJobs"], ["worker"])

    def test_a_program_runs_as_given(self):
        arguments, _ = LAYOUTS["program"]
        document = yaml.safe_load(_jobset(**arguments))
        container = _pod(document, "worker")["containers"][0]
        self.assertEqual(
            container["command"],
            ["python", "my_train.py", "--epochs=3", "--collective_timeout_s=600"],
        )
        self.assertEqual(container["workingDir"], "/app")

    def test_hostile_arguments_survive_the_yaml_and_kubernetes_expansion(self):
        hostile = [
            "yes",
            "null",
            "1.5",
            'it\'s "quoted" $HOME #x',
            "a: b",
            "- c",
            "é😀",
            "line\nbreak",
            "*alias",
            "{flow}",
            "$(HOME)",
            "$$(HOME)",
            "$",
            "$$",
        ]
        pods = manifests.Pods(image="i", working_dir="/app")
        for arguments in (dict(train_args=hostile), dict(program=["python", *hostile])):
            document = yaml.safe_load(_jobset(num_workers=1, pods=pods, **arguments))
            written = _pod(document, "worker")["containers"][0]["command"]
            # What the container gets once Kubernetes has expanded $(VAR) and $$.
            received = [expand(word, {"HOME": "/root"}) for word in written]
            self.assertEqual(received[-len(hostile) - 1 : -1], hostile, arguments)
            self.assertEqual(received[-1], "--collective_timeout_s=600")


class ErrorsTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("name_upper", dict(name="My_Job"), "jobset name", "'My_Job'", "lowercase"),
        ("name_digit_first", dict(name="1job"), "jobset name", "'1job'", "starting with a letter"),
        ("name_too_long", dict(name="a" * 50), "jobset name", "'aaaa", "shorter name"),
        (
            "image",
            dict(pods=manifests.Pods(image="a b")),
            "jobset image",
            "'a b'",
            "container image",
        ),
        (
            "cpu",
            dict(pods=manifests.Pods(image="i", cpu="-1")),
            "jobset cpu",
            "'-1'",
            "Kubernetes quantity",
        ),
        (
            "memory",
            dict(pods=manifests.Pods(image="i", memory="16 GB")),
            "jobset memory",
            "'16 GB'",
            "16Gi",
        ),
        ("gpus", dict(pods=manifests.Pods(image="i", gpus=-1)), "jobset gpus", "-1", "0 or more"),
        (
            "grace",
            dict(pods=manifests.Pods(image="i", grace_s=float("nan"))),
            "jobset grace_s",
            "nan",
            "1 to 3600",
        ),
        (
            "queue",
            dict(pods=manifests.Pods(image="i", queue="Team A")),
            "jobset queue",
            "'Team A'",
            "lowercase",
        ),
        (
            "toleration",
            dict(pods=manifests.Pods(image="i", tolerations=("gpu:Sometimes",))),
            "jobset tolerations effect",
            "'Sometimes'",
            "NoSchedule",
        ),
        (
            "node_selector",
            dict(pods=manifests.Pods(image="i", node_selector={"a b": "c"})),
            "jobset node_selector",
            "'a b'",
            "label key",
        ),
        (
            "node_selector_prefix",
            dict(pods=manifests.Pods(image="i", node_selector={"Bad_Prefix/pool": "gpu"})),
            "jobset node_selector",
            "'Bad_Prefix/pool' is not a label key",
            "label key",
        ),
        (
            "toleration_prefix",
            dict(pods=manifests.Pods(image="i", tolerations=("-x.example.com/gpu:NoSchedule",))),
            "jobset tolerations",
            "'-x.example.com/gpu' is not a label key",
            "label key",
        ),
        (
            "mount_path",
            dict(pods=manifests.Pods(image="i", mount_path="relative")),
            "jobset mount_path",
            "'relative' is not an absolute path",
            "directory of its own",
        ),
        # What Kubernetes would refuse, or take to mean something else.
        *(
            (
                f"image_{name}",
                dict(pods=manifests.Pods(image=image)),
                "jobset image",
                repr(image)[:20],
                "container image",
            )
            for name, image in (
                ("ampersand", "&a"),
                ("command", "$(id)"),
                ("not_ascii", "ünï/img:1"),
                ("bad_digest", "img@sha256:abc"),
                ("short_sha256", "img@sha256:" + "a" * 40),
                ("long", "a" * 10_000),
                ("right_to_left", "img\u202e:1"),
                ("upper", "Img:1"),
            )
        ),
        *(
            (
                f"cpu_{name}",
                dict(pods=manifests.Pods(image="i", cpu=cpu)),
                "jobset cpu",
                repr(cpu)[:20],
                "from 1m to 100000",
            )
            for name, cpu in (
                ("huge_exponent", "1e400"),
                ("twenty_digits", "99999999999999999999"),
                ("zero", "0"),
                ("below_a_millicore", "0.1m"),
                ("hundred_chars", "1" * 100),
            )
        ),
        *(
            (
                f"memory_{name}",
                dict(pods=manifests.Pods(image="i", memory=memory)),
                "jobset memory",
                repr(memory),
                "from 6Mi to 1Pi",
            )
            for name, memory in (("huge_exponent", "1e400"), ("zero", "0"), ("a_byte", "1"))
        ),
        (
            "queue_too_long",
            dict(pods=manifests.Pods(image="i", queue="q" * 100)),
            "jobset queue",
            "'qqq",
            "at most 63",
        ),
        (
            "toleration_value_too_long",
            dict(pods=manifests.Pods(image="i", tolerations=("gpu=" + "v" * 64,))),
            "jobset tolerations gpu",
            "'vvv",
            "at most 63",
        ),
        *(
            (
                f"mount_path_{name}",
                dict(pods=manifests.Pods(image="i", mount_path=path)),
                "jobset mount_path",
                repr(path)[:10],
                "directory of its own",
            )
            for name, path in (
                ("etc", "/etc"),
                ("under_usr", "/usr/local/data"),
                ("dot_dot", "/mnt/../etc"),
                ("newline", "/mnt/a\nb"),
                ("root", "/"),
                ("double_slash", "//mnt"),
                ("trailing_slash", "/mnt/runs/"),
            )
        ),
        (
            "empty_program",
            dict(train_args=None, program=[""]),
            "jobset program",
            "['']",
            "my_train.py",
        ),
        ("ps_without_chief", dict(num_ps=1), "jobset num_ps", "1", "add --chief"),
        ("port", dict(port=0), "jobset port", "0", "from 1 to 65535"),
        (
            "restarts_without_volume",
            dict(max_restarts=2, model_dir="/tmp/run"),
            "jobset max_restarts",
            "2",
            "volume_claim",
        ),
        (
            "evaluator_without_volume",
            dict(evaluator=True),
            "jobset evaluator",
            "True",
            "volume_claim",
        ),
        (
            "model_dir_off_the_volume",
            dict(max_restarts=1, pods=SHARED, model_dir="/tmp/run"),
            "jobset max_restarts",
            "1",
            "/mnt/runs/run1",
        ),
        (
            "resolver_given",
            dict(train_args=["--cluster_resolver=tf_config"]),
            "jobset train_args",
            "'--cluster_resolver=tf_config'",
            "the manifest sets it",
        ),
        (
            "service_given",
            dict(data_service_workers=1, train_args=["--tf_data_service=grpc://x:1"]),
            "jobset train_args",
            "'--tf_data_service=grpc://x:1'",
            "the manifest sets it",
        ),
        (
            "program_with_service",
            dict(train_args=None, program=["python", "x.py"], data_service_workers=1),
            "jobset data_service_workers",
            "1",
            "run `-- train ...`",
        ),
        ("both", dict(program=["python"]), "jobset train_args", "[]", "not both"),
    )
    def test_errors_are_one_line(self, override, field, value, fix):
        kwargs = {"num_workers": 1, "train_args": [], **override}
        with self.assertRaises(ManifestError) as raised:
            _jobset(**kwargs)
        message = str(raised.exception)
        self.assertNotIn("\n", message)
        self.assertRegex(
            message,
            rf"^{re.escape(field)}: {re.escape(value)}.*; "
            rf".*{re.escape(fix)}",
        )

    def test_a_gs_model_dir_needs_no_volume(self):
        document = yaml.safe_load(
            _jobset(
                num_workers=2,
                max_restarts=2,
                model_dir="gs://b/run",
                train_args=["--model_dir=gs://b/run"],
            )
        )
        self.assertEqual(document["spec"]["failurePolicy"]["maxRestarts"], 2)

    def test_documents_do_not_share_state(self):
        first = _jobset(num_workers=2, train_args=["--epochs=1"])
        copy.deepcopy(yaml.safe_load(first))
        self.assertEqual(first, _jobset(num_workers=2, train_args=["--epochs=1"]))


if __name__ == "__main__":
    absltest.main()
