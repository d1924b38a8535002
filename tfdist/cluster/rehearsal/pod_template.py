"""One replicated job of a JobSet as Kubernetes reads it: its Jobs' pods (`Pod`), each with its
container's command, environment, volumes, working directory, memory, grace period and its
Job's limits (backoffLimit, activeDeadlineSeconds, the pod failure policy's FailJob rules); and
the one-line `RehearsalError` of a field the rehearsal cannot run as written."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from tfdist.cluster import RehearsalError
from tfdist.cluster import kubernetes_rules
from tfdist.strategies import jobset as jobset_pods

FIELD_RE = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")
_MAX_PODS_PER_JOB = 1000
GRACE_S = 30  # Kubernetes' terminationGracePeriodSeconds when a pod names none.
_DISRUPTED = [{"type": "DisruptionTarget", "status": "True"}]


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
      deadline_s: its Job's activeDeadlineSeconds: the Job fails (its pods stopped) once it
        has run this long; None: no deadline.
      memory_bytes: the memory its container requests (else its limit), if any.
      grace_s: its terminationGracePeriodSeconds: from the SIGTERM that stops it to the SIGKILL.
      fail_job_codes: exit codes that fail its Job at once by the pod failure policy.
      fail_job_disrupted: whether a disruption (a preemption's deletion: Kubernetes'
        DisruptionTarget condition) fails its Job at once by the pod failure policy.
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
    deadline_s: int | None = None
    grace_s: int = GRACE_S
    fail_job_codes: frozenset[int] = frozenset()
    fail_job_disrupted: bool = False

    @property
    def job(self) -> tuple[str, int]:
        return self.replicated_job, self.job_index


def pods(name: str, replicated_job: Any, path: str) -> list[Pod]:
    require(isinstance(replicated_job, dict), path, replicated_job, "is not a mapping")
    rjob = get(replicated_job, "name", str, path)
    follow(kubernetes_rules.dns1035_label(rjob), f"{path}.name", rjob)
    require(
        "dependsOn" not in replicated_job,
        f"{path}.dependsOn",
        replicated_job.get("dependsOn"),
        "is not rehearsed; remove it",
    )
    replicas = replicated_job.get("replicas", 1)
    require(is_count(replicas), f"{path}.replicas", replicas, "is not a count")
    job = get(replicated_job, "template.spec", dict, path)
    completions = job.get("completions", job.get("parallelism", 1))
    require(
        is_count(completions) and 0 < completions <= _MAX_PODS_PER_JOB,
        f"{path}.template.spec.completions",
        completions,
        f"is not a count of pods from 1 to {_MAX_PODS_PER_JOB}",
    )
    require(
        job.get("parallelism", completions) == completions,
        f"{path}.template.spec.parallelism",
        job.get("parallelism"),
        "differs from completions, which is not rehearsed; make them equal",
    )
    backoff_limit = job.get("backoffLimit", 6)
    require(
        is_count(backoff_limit),
        f"{path}.template.spec.backoffLimit",
        backoff_limit,
        "is not a count",
    )
    deadline_s = job.get("activeDeadlineSeconds")
    require(
        deadline_s is None or (is_count(deadline_s) and deadline_s > 0),
        f"{path}.template.spec.activeDeadlineSeconds",
        deadline_s,
        "is not a number of seconds above 0",
    )
    fail_job_codes, fail_job_disrupted = _pod_failure_policy(job, f"{path}.template.spec")
    pod_spec = get(job, "template.spec", dict, f"{path}.template.spec")
    where = f"{path}.template.spec.template.spec"
    grace_s = pod_spec.get("terminationGracePeriodSeconds", GRACE_S)
    require(
        is_count(grace_s),
        f"{where}.terminationGracePeriodSeconds",
        grace_s,
        "is not a number of seconds",
    )
    require(
        not pod_spec.get("initContainers"),
        f"{where}.initContainers",
        pod_spec.get("initContainers"),
        "are not rehearsed; remove them",
    )
    containers = get(pod_spec, "containers", list, where)
    require(
        len(containers) == 1,
        f"{where}.containers",
        len(containers),
        "containers are not rehearsed, one is; run one container per pod",
    )
    container = containers[0]
    cpath = f"{where}.containers[0]"
    command = [*(container.get("command") or ()), *(container.get("args") or ())]
    require(
        bool(container.get("command")),
        f"{cpath}.command",
        container.get("command"),
        "is missing, and a rehearsal cannot know the image's entrypoint; set command",
    )
    require(
        all(isinstance(word, str) for word in command),
        f"{cpath}.command",
        command,
        "is not a list of strings",
    )
    require(
        not container.get("envFrom"),
        f"{cpath}.envFrom",
        container.get("envFrom"),
        "is not rehearsed (ConfigMaps and Secrets are the cluster's); use env",
    )
    env = container.get("env") or []
    require(isinstance(env, list), f"{cpath}.env", env, "is not a list")
    for number, entry in enumerate(env):
        _check_env(entry, f"{cpath}.env[{number}]")
    claims, scratch = _volumes(pod_spec, container, where, cpath)
    memory_bytes = _memory_bytes(container, cpath)
    working_dir = container.get("workingDir")
    require(
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
    follow(
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
            deadline_s=deadline_s,
            grace_s=grace_s,
            fail_job_codes=fail_job_codes,
            fail_job_disrupted=fail_job_disrupted,
        )
        for job_index in range(replicas)
        for pod_index in range(completions)
    ]


def _memory_bytes(container: dict, cpath: str) -> int | None:
    resources = container.get("resources") or {}
    require(isinstance(resources, dict), f"{cpath}.resources", resources, "is not a mapping")
    for kind in ("requests", "limits"):
        memory = (resources.get(kind) or {}).get("memory")
        if memory is not None:
            amount = kubernetes_rules.quantity_value(str(memory))
            require(
                amount is not None and 0 < amount < 2**63,
                f"{cpath}.resources.{kind}.memory",
                memory,
                "is not a memory quantity",
            )
            return int(amount)
    return None


def _pod_failure_policy(job: Mapping[str, Any], path: str) -> tuple[frozenset[int], bool]:
    """The exit codes, and whether a disruption, fail the Job at once by its podFailurePolicy:
    FailJob rules on exit codes (operator In) and on the DisruptionTarget condition, the rules
    `tfdist manifest` writes; any other rule is refused."""
    rules = (job.get("podFailurePolicy") or {}).get("rules") or []
    require(isinstance(rules, list), f"{path}.podFailurePolicy.rules", rules, "is not a list")
    codes: set[int] = set()
    disrupted = False
    for number, rule in enumerate(rules):
        where = f"{path}.podFailurePolicy.rules[{number}]"
        require(
            isinstance(rule, dict) and rule.get("action") == "FailJob",
            where,
            rule,
            "is not rehearsed (FailJob on exit codes or on DisruptionTarget is); remove it",
        )
        on_codes, on_conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
        if on_codes is not None:
            values = on_codes.get("values") if isinstance(on_codes, dict) else None
            require(
                isinstance(values, list)
                and on_codes.get("operator") == "In"
                and all(is_count(value) and value > 0 for value in values),
                f"{where}.onExitCodes",
                on_codes,
                "is not rehearsed (operator In with exit codes above 0 is); remove it",
            )
            codes.update(values)
        if on_conditions is not None:
            require(
                on_conditions == _DISRUPTED,
                f"{where}.onPodConditions",
                on_conditions,
                f"is not rehearsed ({_DISRUPTED} is); remove it",
            )
            disrupted = True
    return frozenset(codes), disrupted


def _check_env(entry: Any, path: str) -> None:
    require(
        isinstance(entry, dict) and isinstance(entry.get("name"), str),
        path,
        entry,
        "is not an env entry with a name",
    )
    if "valueFrom" not in entry:
        return
    field = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    require(
        isinstance(field, str)
        and (
            bool(FIELD_RE.fullmatch(field))
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
        require(isinstance(mount, dict), path, mount, "is not a mount")
        follow(
            kubernetes_rules.mount_path(mount.get("mountPath")),
            f"{path}.mountPath",
            mount.get("mountPath"),
        )
        require(
            "subPath" not in mount and "subPathExpr" not in mount,
            f"{path}.subPath",
            mount.get("subPath"),
            "is not rehearsed; mount the whole volume",
        )
        volume = volumes.get(mount.get("name"))
        require(
            volume is not None,
            f"{path}.name",
            mount.get("name"),
            f"names no volume of {where}.volumes",
        )
        if "persistentVolumeClaim" in volume:
            claim = (volume["persistentVolumeClaim"] or {}).get("claimName")
            follow(
                kubernetes_rules.dns1123_subdomain(claim),
                f"{where}.volumes.{mount['name']}.persistentVolumeClaim.claimName",
                claim,
            )
            claims.append((claim, mount["mountPath"]))
        elif "emptyDir" in volume:
            scratch.append(mount["mountPath"])
        else:
            require(
                False,
                f"{where}.volumes.{mount['name']}",
                volume,
                "is not rehearsed; use a persistentVolumeClaim or an emptyDir",
            )
    return tuple(claims), tuple(scratch)


def get(mapping: dict, dotted: str, kind: type, base: str = "") -> Any:
    """The value at `dotted` in `mapping`, which must be a `kind`."""
    value: Any = mapping
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    path = f"{base}.{dotted}" if base else dotted
    require(
        isinstance(value, kind) and bool(value),
        path,
        value,
        f"is not a non-empty {kind.__name__}" if value is not None else "is missing",
    )
    return value


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def follow(problem: str | None, field: str, value: Any) -> None:
    """Raises RehearsalError when a rule of `kubernetes_rules` found a `problem`, which
    Kubernetes would refuse too."""
    require(problem is None, field, value, f"{problem}, which Kubernetes refuses")


def require(ok: bool, field: str, value: Any, problem: str) -> None:
    if not ok:
        shown = " ".join(repr(value).split())
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise RehearsalError(f"manifest {field}: {shown} {problem}.")
