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

from tfdist.cluster import RehearsalError
from tfdist.cluster import kubernetes_rules
from tfdist.strategies import jobset as jobset_pods

API_VERSION = "jobset.x-k8s.io/v1alpha2"
NAMESPACE = "default"  # Kubernetes' namespace when the manifest names none.
CLUSTER_DOMAIN = "svc.cluster.local"
_FIELD_RE = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")
_REFERENCE_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_REFUSED_SPEC = ("startupPolicy", "coordinator", "dependsOn", "volumeClaimPolicies")
_MAX_PODS_PER_JOB = 1000


@dataclasses.dataclass(frozen=True)
class Pod:
    """One pod of the JobSet, before it runs.

    Attributes:
      hostname: `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`.
      replicated_job, job_index, pod_index: where it stands.
      command: its container's command and args, `$(VAR)`s not yet expanded.
      env: its container's `env` entries, as written.
      claims: (claimName, mountPath) of each PersistentVolumeClaim it mounts.
      scratch: mountPath of each emptyDir it mounts.
      working_dir: the container's workingDir, if any.
      backoff_limit: how often its Job recreates a failed pod before the Job fails.
      memory_bytes: the memory its container requests (else its limit), if any.
    """

    hostname: str
    replicated_job: str
    job_index: int
    pod_index: int
    command: tuple[str, ...]
    env: tuple[Mapping[str, Any], ...]
    claims: tuple[tuple[str, str], ...]
    scratch: tuple[str, ...]
    working_dir: str | None
    backoff_limit: int
    memory_bytes: int | None = None

    @property
    def job(self) -> tuple[str, int]:
        return self.replicated_job, self.job_index


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
    """

    name: str
    subdomain: str | None
    pods: tuple[Pod, ...]
    success_operator: str
    success_targets: tuple[str, ...]
    max_restarts: int

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
        match = _FIELD_RE.fullmatch(field)
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
    _require(isinstance(document, dict), "the manifest", document, "is not a YAML mapping")
    _require(
        document.get("apiVersion") == API_VERSION and document.get("kind") == "JobSet",
        "apiVersion/kind",
        f"{document.get('apiVersion')}/{document.get('kind')}",
        f"is not {API_VERSION}/JobSet; rehearse a JobSet written by `tfdist manifest`",
    )
    name = _get(document, "metadata.name", str)
    _follow(kubernetes_rules.dns1035_label(name), "metadata.name", name)
    spec = _get(document, "spec", dict)
    for key in _REFUSED_SPEC:
        _require(key not in spec, f"spec.{key}", spec.get(key), "is not rehearsed; remove it")
    network = spec.get("network") or {}
    subdomain = (network.get("subdomain") or name) if network.get("enableDNSHostnames") else None
    if subdomain is not None:  # A DNS name, and the name of a Service.
        _follow(
            kubernetes_rules.dns1123_subdomain(subdomain)
            or kubernetes_rules.dns1035_label(subdomain),
            "spec.network.subdomain",
            subdomain,
        )
    failure = spec.get("failurePolicy") or {}
    _require(
        not failure.get("rules"),
        "spec.failurePolicy.rules",
        failure.get("rules"),
        "are not rehearsed (every failure restarts the JobSet); remove them",
    )
    max_restarts = failure.get("maxRestarts", 0)
    _require(
        _is_count(max_restarts), "spec.failurePolicy.maxRestarts", max_restarts, "is not a count"
    )
    success = spec.get("successPolicy") or {"operator": "All"}
    operator = success.get("operator")
    _require(
        operator in ("All", "Any"), "spec.successPolicy.operator", operator, "is not All or Any"
    )
    replicated_jobs = _get(document, "spec.replicatedJobs", list)
    pods = []
    for index, replicated_job in enumerate(replicated_jobs):
        pods += _pods(name, replicated_job, f"spec.replicatedJobs[{index}]")
    targets = tuple(success.get("targetReplicatedJobs") or ())
    known = {pod.replicated_job for pod in pods}
    for target in targets:
        _require(
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
    )


def _pods(name: str, replicated_job: Any, path: str) -> list[Pod]:
    _require(isinstance(replicated_job, dict), path, replicated_job, "is not a mapping")
    rjob = _get(replicated_job, "name", str, path)
    _follow(kubernetes_rules.dns1035_label(rjob), f"{path}.name", rjob)
    _require(
        "dependsOn" not in replicated_job,
        f"{path}.dependsOn",
        replicated_job.get("dependsOn"),
        "is not rehearsed; remove it",
    )
    replicas = replicated_job.get("replicas", 1)
    _require(_is_count(replicas), f"{path}.replicas", replicas, "is not a count")
    job = _get(replicated_job, "template.spec", dict, path)
    completions = job.get("completions", job.get("parallelism", 1))
    _require(
        _is_count(completions) and 0 < completions <= _MAX_PODS_PER_JOB,
        f"{path}.template.spec.completions",
        completions,
        f"is not a count of pods from 1 to {_MAX_PODS_PER_JOB}",
    )
    _require(
        job.get("parallelism", completions) == completions,
        f"{path}.template.spec.parallelism",
        job.get("parallelism"),
        "differs from completions, which is not rehearsed; make them equal",
    )
    backoff_limit = job.get("backoffLimit", 6)
    _require(
        _is_count(backoff_limit),
        f"{path}.template.spec.backoffLimit",
        backoff_limit,
        "is not a count",
    )
    pod_spec = _get(job, "template.spec", dict, f"{path}.template.spec")
    where = f"{path}.template.spec.template.spec"
    _require(
        not pod_spec.get("initContainers"),
        f"{where}.initContainers",
        pod_spec.get("initContainers"),
        "are not rehearsed; remove them",
    )
    containers = _get(pod_spec, "containers", list, where)
    _require(
        len(containers) == 1,
        f"{where}.containers",
        len(containers),
        "containers are not rehearsed, one is; run one container per pod",
    )
    container = containers[0]
    cpath = f"{where}.containers[0]"
    command = [*(container.get("command") or ()), *(container.get("args") or ())]
    _require(
        bool(container.get("command")),
        f"{cpath}.command",
        container.get("command"),
        "is missing, and a rehearsal cannot know the image's entrypoint; set command",
    )
    _require(
        all(isinstance(word, str) for word in command),
        f"{cpath}.command",
        command,
        "is not a list of strings",
    )
    _require(
        not container.get("envFrom"),
        f"{cpath}.envFrom",
        container.get("envFrom"),
        "is not rehearsed (ConfigMaps and Secrets are the cluster's); use env",
    )
    env = container.get("env") or []
    _require(isinstance(env, list), f"{cpath}.env", env, "is not a list")
    for number, entry in enumerate(env):
        _check_env(entry, f"{cpath}.env[{number}]")
    claims, scratch = _volumes(pod_spec, container, where, cpath)
    memory_bytes = _memory_bytes(container, cpath)
    working_dir = container.get("workingDir")
    _require(
        working_dir is None
        or (
            isinstance(working_dir, str)
            and working_dir.startswith("/")
            and working_dir.isprintable()
        ),
        f"{cpath}.workingDir",
        working_dir,
        "is not an absolute path",
    )
    # The JobSet webhook's rule: every Job's and pod's name (with the Job controller's
    # 5-character suffix) is a DNS-1035 label.
    longest = jobset_pods.hostname(name, rjob, completions - 1, replicas - 1) + "-abcde"
    _follow(
        kubernetes_rules.dns1035_label(longest),
        f"{path}.name",
        f"{name} and {rjob}, whose longest pod name is {longest}",
    )
    return [
        Pod(
            hostname=jobset_pods.hostname(name, rjob, pod_index, job_index),
            replicated_job=rjob,
            job_index=job_index,
            pod_index=pod_index,
            command=tuple(command),
            env=tuple(env),
            claims=claims,
            scratch=scratch,
            working_dir=working_dir,
            backoff_limit=backoff_limit,
            memory_bytes=memory_bytes,
        )
        for job_index in range(replicas)
        for pod_index in range(completions)
    ]


def _memory_bytes(container: dict, cpath: str) -> int | None:
    resources = container.get("resources") or {}
    _require(isinstance(resources, dict), f"{cpath}.resources", resources, "is not a mapping")
    for kind in ("requests", "limits"):
        memory = (resources.get(kind) or {}).get("memory")
        if memory is not None:
            amount = kubernetes_rules.quantity_value(str(memory))
            _require(
                amount is not None and 0 < amount < 2**63,
                f"{cpath}.resources.{kind}.memory",
                memory,
                "is not a memory quantity",
            )
            return int(amount)
    return None


def _check_env(entry: Any, path: str) -> None:
    _require(
        isinstance(entry, dict) and isinstance(entry.get("name"), str),
        path,
        entry,
        "is not an env entry with a name",
    )
    if "valueFrom" not in entry:
        return
    field = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    _require(
        isinstance(field, str)
        and (
            bool(_FIELD_RE.fullmatch(field))
            or field in ("metadata.name", "metadata.namespace", "status.podIP", "spec.nodeName")
        ),
        f"{path}.valueFrom",
        entry.get("valueFrom"),
        "is not rehearsed; use a value or a fieldRef to metadata.labels, metadata.annotations, "
        "metadata.name, metadata.namespace, status.podIP or spec.nodeName",
    )


def _volumes(
    pod_spec: dict, container: dict, where: str, cpath: str
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    volumes = {
        volume.get("name"): volume
        for volume in pod_spec.get("volumes") or ()
        if isinstance(volume, dict)
    }
    claims, scratch = [], []
    for number, mount in enumerate(container.get("volumeMounts") or ()):
        path = f"{cpath}.volumeMounts[{number}]"
        _require(isinstance(mount, dict), path, mount, "is not a mount")
        _follow(
            kubernetes_rules.mount_path(mount.get("mountPath")),
            f"{path}.mountPath",
            mount.get("mountPath"),
        )
        _require(
            "subPath" not in mount and "subPathExpr" not in mount,
            f"{path}.subPath",
            mount.get("subPath"),
            "is not rehearsed; mount the whole volume",
        )
        volume = volumes.get(mount.get("name"))
        _require(
            volume is not None,
            f"{path}.name",
            mount.get("name"),
            f"names no volume of {where}.volumes",
        )
        if "persistentVolumeClaim" in volume:
            claim = (volume["persistentVolumeClaim"] or {}).get("claimName")
            _follow(
                kubernetes_rules.dns1123_subdomain(claim),
                f"{where}.volumes.{mount['name']}.persistentVolumeClaim.claimName",
                claim,
            )
            claims.append((claim, mount["mountPath"]))
        elif "emptyDir" in volume:
            scratch.append(mount["mountPath"])
        else:
            _require(
                False,
                f"{where}.volumes.{mount['name']}",
                volume,
                "is not rehearsed; use a persistentVolumeClaim or an emptyDir",
            )
    return tuple(claims), tuple(scratch)


def _get(mapping: dict, dotted: str, kind: type, base: str = "") -> Any:
    """The value at `dotted` in `mapping`, which must be a `kind`."""
    value: Any = mapping
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    path = f"{base}.{dotted}" if base else dotted
    _require(
        isinstance(value, kind) and bool(value),
        path,
        value,
        f"is not a non-empty {kind.__name__}" if value is not None else "is missing",
    )
    return value


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _follow(problem: str | None, field: str, value: Any) -> None:
    """Raises RehearsalError when a rule of `kubernetes_rules` found a `problem`, which
    Kubernetes would refuse too."""
    _require(problem is None, field, value, f"{problem}, which Kubernetes refuses")


def _require(ok: bool, field: str, value: Any, problem: str) -> None:
    if not ok:
        shown = " ".join(repr(value).split())
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise RehearsalError(f"manifest {field}: {shown} {problem}.")
