"""What a JobSet manifest asks the cluster to run, read as JobSet and Kubernetes would: its pods
(one per completion index of each Job of each replicated job), each pod's command, environment
(the downward API and `$(VAR)` references resolved against the pod's own metadata), volumes and
DNS names, and the JobSet's success and failure policies.

What decides where pods run and what they get from the node (image, resources, node selector,
tolerations, priority, service account, ports) is ignored: the rehearsal runs every pod on this
machine with the local environment standing in for the image. What would change how the job
runs and is not rehearsed (startup order, failure-policy rules, several containers, secrets,
volumes other than PersistentVolumeClaims and emptyDir) is refused in one line.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from tfdist.cluster import kubernetes_rules
from tfdist.cluster.rehearsal import pod_template
from tfdist.cluster.rehearsal.pod_template import Pod
from tfdist.strategies import jobset as jobset_pods

API_VERSION = "jobset.x-k8s.io/v1alpha2"
NAMESPACE = "default"  # Kubernetes' namespace when the manifest names none.
CLUSTER_DOMAIN = "svc.cluster.local"
_REFERENCE_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_REFUSED_SPEC = ("startupPolicy", "coordinator", "dependsOn", "volumeClaimPolicies")
# The failure policy's actions and the Job failure reasons its rules match.
RESTART, RESTART_UNCOUNTED, FAIL = (
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    "FailJobSet",
)
JOB_FAILURE_REASONS = ("PodFailurePolicy", "BackoffLimitExceeded", "DeadlineExceeded")


@dataclasses.dataclass(frozen=True)
class JobSetPlan:
    """A JobSet as the rehearsal runs it.

    Attributes:
      name: the JobSet's name.
      subdomain: its headless service, or None without DNS hostnames.
      pods: every pod, in the manifest's order.
      success_operator: "All" or "Any" of the Jobs of `success_targets` must succeed.
      success_targets: the replicated jobs the success policy watches (all when empty).
      max_restarts: how many times a failed Job restarts the whole JobSet.
      failure_rules: the failure policy's rules, in order: (action, the Job failure reasons it
        matches, none: any).
    """

    name: str
    subdomain: str | None
    pods: tuple[Pod, ...]
    success_operator: str
    success_targets: tuple[str, ...]
    max_restarts: int
    failure_rules: tuple[tuple[str, frozenset[str]], ...] = ()

    def on_job_failure(self, reason: str) -> str:
        """The failure policy's action for a Job that failed for `reason` (PodFailurePolicy,
        BackoffLimitExceeded, DeadlineExceeded): the first matching rule's, else RestartJobSet."""
        return next(
            (action for action, reasons in self.failure_rules if not reasons or reason in reasons),
            RESTART,
        )

    def names(self, pod: Pod) -> tuple[str, ...]:
        """The names `pod` is known by: its hostname, and with a subdomain its DNS names."""
        if self.subdomain is None:
            return (pod.hostname,)
        short = f"{pod.hostname}.{self.subdomain}"
        namespaced = f"{short}.{NAMESPACE}"
        return (pod.hostname, short, namespaced, f"{namespaced}.{CLUSTER_DOMAIN}")

    def environment(self, pod: Pod, *, address: str, attempt: int) -> dict[str, str]:
        """The variables Kubernetes gives `pod`'s container in restart attempt `attempt`: the
        Job controller's JOB_COMPLETION_INDEX, HOSTNAME, and its `env`, resolved in order."""
        metadata = self._metadata(pod, attempt)
        env = {"HOSTNAME": pod.hostname, jobset_pods.ENV_POD_INDEX: str(pod.pod_index)}
        for entry in pod.env:
            name = entry["name"]
            if "value" in entry:
                env[name] = expand(str(entry["value"]), env)
                continue
            field = entry["valueFrom"]["fieldRef"]["fieldPath"]
            env[name] = self._field(field, metadata, address, pod)
        return env

    def _metadata(self, pod: Pod, attempt: int) -> dict[str, dict[str, str]]:
        """The labels (and, alike, annotations) JobSet and the Job controller put on `pod`."""
        labels = {
            jobset_pods.JOBSET_NAME_LABEL: self.name,
            jobset_pods.REPLICATED_JOB_LABEL: pod.replicated_job,
            jobset_pods.JOB_INDEX_LABEL: str(pod.job_index),
            jobset_pods.RESTART_ATTEMPT_LABEL: str(attempt),
            jobset_pods.COMPLETION_INDEX_ANNOTATION: str(pod.pod_index),
        }
        return {"labels": labels, "annotations": dict(labels)}

    def _field(
        self, field: str, metadata: dict[str, dict[str, str]], address: str, pod: Pod
    ) -> str:
        match = pod_template.FIELD_RE.fullmatch(field)
        if match:
            return metadata[match.group(1)].get(match.group(2), "")
        plain = {
            "metadata.name": pod.hostname,
            "metadata.namespace": NAMESPACE,
            "status.podIP": address,
            "spec.nodeName": "rehearsal",
        }
        return plain[field]


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: a defined variable's value, `$$` for `$`, anything else
    left as written."""

    def replace(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE_RE.sub(replace, text)


def read(document: Any) -> JobSetPlan:
    """The plan of a JobSet `document` (its YAML, loaded).

    Raises:
      RehearsalError: not a JobSet, or one the rehearsal cannot run as written; one line that
        names the field.
    """
    pod_template.require(
        isinstance(document, dict), "the manifest", document, "is not a YAML mapping"
    )
    pod_template.require(
        document.get("apiVersion") == API_VERSION and document.get("kind") == "JobSet",
        "apiVersion/kind",
        f"{document.get('apiVersion')}/{document.get('kind')}",
        f"is not {API_VERSION}/JobSet; rehearse a JobSet written by `tfdist manifest`",
    )
    name = pod_template.get(document, "metadata.name", str)
    pod_template.follow(kubernetes_rules.dns1035_label(name), "metadata.name", name)
    spec = pod_template.get(document, "spec", dict)
    for key in _REFUSED_SPEC:
        pod_template.require(
            key not in spec, f"spec.{key}", spec.get(key), "is not rehearsed; remove it"
        )
    network = spec.get("network") or {}
    subdomain = (network.get("subdomain") or name) if network.get("enableDNSHostnames") else None
    if subdomain is not None:  # A DNS name, and the name of a Service.
        pod_template.follow(
            kubernetes_rules.dns1123_subdomain(subdomain)
            or kubernetes_rules.dns1035_label(subdomain),
            "spec.network.subdomain",
            subdomain,
        )
    failure = spec.get("failurePolicy") or {}
    rules = tuple(
        _failure_rule(rule, number) for number, rule in enumerate(failure.get("rules") or [])
    )
    max_restarts = failure.get("maxRestarts", 0)
    pod_template.require(
        pod_template.is_count(max_restarts),
        "spec.failurePolicy.maxRestarts",
        max_restarts,
        "is not a count",
    )
    success = spec.get("successPolicy") or {"operator": "All"}
    operator = success.get("operator")
    pod_template.require(
        operator in ("All", "Any"), "spec.successPolicy.operator", operator, "is not All or Any"
    )
    replicated_jobs = pod_template.get(document, "spec.replicatedJobs", list)
    pods = []
    for index, replicated_job in enumerate(replicated_jobs):
        pods += pod_template.pods(name, replicated_job, f"spec.replicatedJobs[{index}]")
    targets = tuple(success.get("targetReplicatedJobs") or ())
    known = {pod.replicated_job for pod in pods}
    for target in targets:
        pod_template.require(
            target in known,
            "spec.successPolicy.targetReplicatedJobs",
            target,
            f"is not a replicated job ({', '.join(sorted(known))})",
        )
    return JobSetPlan(
        name=name,
        subdomain=subdomain,
        pods=tuple(pods),
        success_operator=operator,
        success_targets=targets,
        max_restarts=max_restarts,
        failure_rules=rules,
    )


def _failure_rule(rule, number: int) -> tuple[str, frozenset[str]]:
    """(action, reasons) of the failure policy's rule `number`; refused where it asks for more
    than an action on Job failure reasons."""
    path = f"spec.failurePolicy.rules[{number}]"
    pod_template.require(isinstance(rule, dict), path, rule, "is not a mapping")
    pod_template.require(
        not set(rule) - {"name", "action", "onJobFailureReasons"},
        path,
        sorted(set(rule) - {"name", "action", "onJobFailureReasons"}),
        "are not rehearsed (an action on Job failure reasons is); remove them",
    )
    action = rule.get("action")
    pod_template.require(
        action in (RESTART, RESTART_UNCOUNTED, FAIL),
        f"{path}.action",
        action,
        f"is not one of {RESTART}, {RESTART_UNCOUNTED}, {FAIL}",
    )
    reasons = rule.get("onJobFailureReasons") or []
    pod_template.require(
        isinstance(reasons, list) and set(reasons) <= set(JOB_FAILURE_REASONS),
        f"{path}.onJobFailureReasons",
        reasons,
        f"are not among {', '.join(JOB_FAILURE_REASONS)}",
    )
    return action, frozenset(reasons)
