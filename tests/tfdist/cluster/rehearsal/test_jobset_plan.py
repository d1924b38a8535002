"""Tests for tfdist.cluster.rehearsal.jobset_plan: a JobSet read as JobSet and Kubernetes would,
and, through it, the manifest and the pod-side resolver agreeing on every pod's place."""

import re
import unittest

import yaml
from absl.testing import absltest
from absl.testing import parameterized

from tests.tfdist.cluster.manifests.layouts import LAYOUTS
from tfdist.cluster import RehearsalError
from tfdist.cluster import manifests
from tfdist.cluster.rehearsal import jobset_plan
from tfdist.strategies import jobset as jobset_pods


def _plan(**arguments) -> jobset_plan.JobSetPlan:
    arguments = {"name": "ctr", "pods": manifests.Pods(image="img"), **arguments}
    return jobset_plan.read(yaml.safe_load(manifests.jobset(**arguments)))


class ManifestToPodTest(parameterized.TestCase):
    @parameterized.named_parameters(
        *((name, arguments) for name, (arguments, _) in LAYOUTS.items())
    )
    def test_every_pod_derives_the_same_cluster_and_its_own_task(self, arguments):
        plan = _plan(**arguments)
        clusters = {}
        for number, pod in enumerate(plan.pods):
            env = plan.environment(pod, address=f"10.0.0.{number}", attempt=0)
            if pod.replicated_job in jobset_pods.SERVICE_JOBS:
                continue
            cluster = jobset_pods.cluster_from_jobset(env)
            clusters[pod.hostname] = cluster
            self.assertEqual(cluster.task.type.value, pod.replicated_job)
            self.assertEqual(cluster.task.index, pod.pod_index)
            if cluster.task_address:
                self.assertTrue(
                    cluster.task_address.startswith(f"{pod.hostname}.{plan.subdomain}:"),
                    cluster.task_address,
                )
            for address in (a for addresses in cluster.jobs.values() for a in addresses):
                host = address.rpartition(":")[0]
                self.assertIn(host, {name for member in plan.pods for name in plan.names(member)})
        self.assertLen({tuple(cluster.jobs.items()) for cluster in clusters.values()}, 1)

    def test_plan_of_a_parameter_server_jobset(self):
        arguments, _ = LAYOUTS["parameter_server_with_evaluator"]
        plan = _plan(**arguments)
        self.assertEqual(
            [pod.hostname for pod in plan.pods],
            [
                "ctr-chief-0-0",
                "ctr-worker-0-0",
                "ctr-worker-0-1",
                "ctr-ps-0-0",
                "ctr-evaluator-0-0",
            ],
        )
        self.assertEqual(
            (plan.success_operator, plan.success_targets, plan.max_restarts),
            ("All", ("chief", "evaluator"), 3),
        )
        self.assertEqual(plan.pods[0].claims, (("tfdist-runs", "/mnt/runs"),))
        self.assertEqual(plan.pods[0].backoff_limit, 0)
        self.assertEqual(
            plan.names(plan.pods[1]),
            (
                "ctr-worker-0-0",
                "ctr-worker-0-0.ctr",
                "ctr-worker-0-0.ctr.default",
                "ctr-worker-0-0.ctr.default.svc.cluster.local",
            ),
        )

    def test_the_restart_attempt_and_kubernetes_variables(self):
        plan = _plan(num_workers=2, train_args=[])
        env = plan.environment(plan.pods[1], address="10.0.0.3", attempt=2)
        self.assertEqual(
            (env["HOSTNAME"], env["JOB_COMPLETION_INDEX"], env[jobset_pods.ENV_REPLICATED_JOB]),
            ("ctr-worker-0-1", "1", "worker"),
        )
        document = yaml.safe_load(
            manifests.jobset(
                name="ctr", pods=manifests.Pods(image="i"), num_workers=1, train_args=[]
            )
        )
        container = document["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "containers"
        ][0]
        container["env"] += [
            {
                "name": "ATTEMPT",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"
                    }
                },
            },
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "WHO", "value": "$(HOSTNAME) at $(IP), $$(IP) and $(UNSET)"},
        ]
        plan = jobset_plan.read(document)
        env = plan.environment(plan.pods[0], address="10.0.0.9", attempt=4)
        self.assertEqual(
            (env["ATTEMPT"], env["WHO"]), ("4", "ctr-worker-0-0 at 10.0.0.9, $(IP) and $(UNSET)")
        )


class PreemptionPolicyTest(unittest.TestCase):
    def test_the_grace_period_and_what_fails_a_job_at_once_are_read(self):
        plan = jobset_plan.read(
            yaml.safe_load(
                manifests.jobset(
                    name="p",
                    pods=manifests.Pods(image="i", grace_s=90),
                    num_workers=1,
                    train_args=[],
                )
            )
        )
        (pod,) = plan.pods
        self.assertEqual(
            (pod.grace_s, pod.fail_job_codes, pod.fail_job_disrupted), (90, frozenset({75}), True)
        )
        self.assertEqual(
            plan.on_job_failure("PodFailurePolicy"), "RestartJobSetAndIgnoreMaxRestarts"
        )
        self.assertEqual(plan.on_job_failure("BackoffLimitExceeded"), "RestartJobSet")


class RefusalTest(parameterized.TestCase):
    def _document(self):
        return yaml.safe_load(
            manifests.jobset(
                name="ctr",
                pods=manifests.Pods(image="i", volume_claim="runs"),
                num_workers=2,
                train_args=[],
            )
        )

    @staticmethod
    def _container(document):
        return document["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "containers"
        ][0]

    @parameterized.named_parameters(
        ("not_a_jobset", lambda d: d.update(kind="TFJob"), "apiVersion/kind"),
        (
            "startup_policy",
            lambda d: d["spec"].update(startupPolicy={"startupPolicyOrder": "InOrder"}),
            "spec.startupPolicy",
        ),
        (
            "failure_rule_action",
            lambda d: d["spec"]["failurePolicy"].update(rules=[{"name": "x"}]),
            "spec.failurePolicy.rules[0].action: None is not one of RestartJobSet",
        ),
        (
            "failure_rule_targets",
            lambda d: d["spec"]["failurePolicy"]["rules"][0].update(targetReplicatedJobs=["w"]),
            "spec.failurePolicy.rules[0]: ['targetReplicatedJobs'] are not rehearsed",
        ),
        (
            "failure_rule_reason",
            lambda d: d["spec"]["failurePolicy"]["rules"][0].update(onJobFailureReasons=["Oom"]),
            "onJobFailureReasons: ['Oom'] are not among PodFailurePolicy",
        ),
        (
            "pod_failure_ignore",
            lambda d: d["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"][
                "rules"
            ][0].update(action="Ignore"),
            "is not rehearsed (FailJob on exit codes or on DisruptionTarget is)",
        ),
        (
            "pod_failure_not_in",
            lambda d: d["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"][
                "rules"
            ][0]["onExitCodes"].update(operator="NotIn"),
            "is not rehearsed (operator In with exit codes above 0 is)",
        ),
        (
            "grace",
            lambda d: d["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].update(
                terminationGracePeriodSeconds=-1
            ),
            "terminationGracePeriodSeconds: -1 is not a number of seconds",
        ),
        (
            "two_containers",
            lambda d: d["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
                "containers"
            ].append({"name": "sidecar"}),
            "containers",
        ),
        ("no_command", lambda d: RefusalTest._container(d).pop("command"), "command"),
        (
            "secret",
            lambda d: RefusalTest._container(d)["env"].append(
                {"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
            ),
            "valueFrom",
        ),
        (
            "env_from",
            lambda d: RefusalTest._container(d).update(envFrom=[{"configMapRef": {"name": "c"}}]),
            "envFrom",
        ),
        (
            "sub_path",
            lambda d: RefusalTest._container(d)["volumeMounts"][0].update(subPath="x"),
            "subPath",
        ),
        (
            "host_path",
            lambda d: (
                d["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["volumes"][
                    0
                ].update(hostPath={"path": "/"}, persistentVolumeClaim=None)
                or d["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
                    "volumes"
                ][0].pop("persistentVolumeClaim")
            ),
            "is not rehearsed",
        ),
        (
            "huge_completions",
            lambda d: d["spec"]["replicatedJobs"][0]["template"]["spec"].update(
                completions=10**20, parallelism=10**20
            ),
            "completions",
        ),
        (
            "unknown_target",
            lambda d: d["spec"]["successPolicy"].update(targetReplicatedJobs=["chief"]),
            "targetReplicatedJobs",
        ),
        # Names that become paths, namespaces and hostnames, by Kubernetes' own rules.
        ("name_a_path", lambda d: d["metadata"].update(name="../../etc"), "metadata.name"),
        ("name_with_semicolon", lambda d: d["metadata"].update(name="a;b"), "metadata.name"),
        ("name_of_300", lambda d: d["metadata"].update(name="a" * 300), "metadata.name"),
        (
            "pod_name_too_long",
            lambda d: d["metadata"].update(name="a" * 50),
            "spec.replicatedJobs[0].name",
        ),
        (
            "replicated_job_a_path",
            lambda d: d["spec"]["replicatedJobs"][0].update(name="../x"),
            "spec.replicatedJobs[0].name",
        ),
        (
            "subdomain",
            lambda d: d["spec"]["network"].update(subdomain="a/b"),
            "spec.network.subdomain",
        ),
        (
            "claim_a_path",
            lambda d: d["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
                "volumes"
            ][0]["persistentVolumeClaim"].update(claimName="x" * 300),
            "claimName",
        ),
        (
            "mount_over_etc",
            lambda d: RefusalTest._container(d)["volumeMounts"][0].update(mountPath="/mnt/../etc"),
            "mountPath",
        ),
        (
            "relative_working_dir",
            lambda d: RefusalTest._container(d).update(workingDir="w"),
            "workingDir",
        ),
    )
    def test_what_the_rehearsal_cannot_run_is_one_line(self, change, field):
        document = self._document()
        change(document)
        with self.assertRaises(RehearsalError) as raised:
            jobset_plan.read(document)
        message = str(raised.exception)
        self.assertNotIn("\n", message)
        self.assertRegex(message, rf"^manifest .*{re.escape(field)}")

    def test_not_a_mapping(self):
        with self.assertRaisesRegex(RehearsalError, "is not a YAML mapping"):
            jobset_plan.read(["a", "list"])


if __name__ == "__main__":
    absltest.main()
