"""What a JobSet's pods need from the cluster (`Pods`) and the checks a JobSet is held to before
it is written: the pods' fields, a model dir every pod shares where a restart or an evaluator
needs one, and where a program of the user's lives in the image."""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from tfdist.cluster import kubernetes_rules
from tfdist.cluster.manifests import checks
from tfdist.cluster.manifests.checks import require

TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
CPU_RANGE = ("1m", "100000")  # Per pod; a quantity outside is a typo.
MEMORY_RANGE = ("6Mi", "1Pi")  # runc's least memory limit, and more than any node has.
_URL_MARK = "://"


GRACE_S = 30  # Kubernetes' default terminationGracePeriodSeconds.
MAX_GRACE_S = 3600


@dataclasses.dataclass(frozen=True)
class Pods:
    """What the pods need from the cluster, and no more.

    Attributes:
      image: the container image; it must have `tfdist` (and the program) on its PATH.
      cpu, memory: each pod's request (Kubernetes quantities, e.g. "4", "16Gi"); memory is also
        its limit. None asks for nothing.
      gpus: `nvidia.com/gpu` for each pod that trains (workers, and the chief without ps).
      queue: the Kueue LocalQueue that admits the JobSet; None without Kueue.
      priority_class: the pods' PriorityClass.
      service_account: the pods' ServiceAccount.
      node_selector: node labels the pods need.
      tolerations: taints the pods tolerate, each "key[=value][:Effect]".
      volume_claim: a PersistentVolumeClaim every pod mounts at `mount_path` (ReadWriteMany:
        the model directory all tasks share).
      mount_path: where the claim is mounted.
      working_dir: the container's working directory, where the image holds the program (a
        relative program path means a file there); None keeps the image's WORKDIR.
      grace_s: the pods' terminationGracePeriodSeconds: from a preemption's SIGTERM to its
        SIGKILL, the time training has to save at one step (Kubernetes' default, 30 s, is what
        GKE spot nodes give; AWS spot gives 120 s).
    """

    image: str
    cpu: str | None = None
    memory: str | None = None
    gpus: int = 0
    queue: str | None = None
    priority_class: str | None = None
    service_account: str | None = None
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tolerations: tuple[str, ...] = ()
    volume_claim: str | None = None
    mount_path: str = "/mnt/tfdist"
    working_dir: str | None = None
    grace_s: int = GRACE_S


def toleration(text: str) -> dict[str, str]:
    """ "key[=value][:Effect]" as a toleration: Equal with a value, else Exists."""
    rest, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, equals, value = rest.partition("=")
    toleration = {"key": key, "operator": "Equal" if equals else "Exists"}
    if equals:
        toleration["value"] = value
    if effect:
        toleration["effect"] = effect
    return toleration


def check_pods(pods: Any) -> None:
    require(
        isinstance(pods, Pods),
        "jobset pods",
        pods,
        "pass a manifests.Pods(image=...)",
        problem="is not a Pods",
    )
    checks.check_image("jobset image", pods.image)
    for field, (least, most) in (("cpu", CPU_RANGE), ("memory", MEMORY_RANGE)):
        value = getattr(pods, field)
        if value is not None:
            checks.follow(
                kubernetes_rules.quantity(value, least=least, most=most),
                f"jobset {field}",
                value,
                f'use a Kubernetes quantity from {least} to {most}, e.g. "4", "500m" or "16Gi"',
            )
    require(
        checks.is_int(pods.gpus) and pods.gpus >= 0,
        "jobset gpus",
        pods.gpus,
        "pass 0 or more GPUs per pod",
        problem="is not a count",
    )
    require(
        checks.is_int(pods.grace_s) and 1 <= pods.grace_s <= MAX_GRACE_S,
        "jobset grace_s",
        pods.grace_s,
        f"pass the seconds from a preemption's SIGTERM to its SIGKILL, 1 to {MAX_GRACE_S}",
        problem="is not a grace period",
    )
    for field in ("queue", "priority_class", "service_account", "volume_claim"):
        value = getattr(pods, field)
        if value is not None:
            checks.follow(
                kubernetes_rules.dns1123_subdomain(value),
                f"jobset {field}",
                value,
                'use lowercase letters, digits, "-" and ".", e.g. "team-a"',
            )
    if pods.queue is not None:  # Also the value of the JobSet's queue label.
        checks.follow(
            kubernetes_rules.label_value(pods.queue),
            "jobset queue",
            pods.queue,
            f"use a LocalQueue name of at most {kubernetes_rules.LABEL_MAX} characters",
        )
    for key, value in dict(pods.node_selector).items():
        _check_label("jobset node_selector", key, value)
    for text in pods.tolerations:
        require(
            isinstance(text, str),
            "jobset tolerations",
            text,
            'write each as "key[=value][:Effect]", e.g. "gpu=true:NoSchedule"',
            problem="is not a string",
        )
        parsed = toleration(text)
        _check_label("jobset tolerations", parsed["key"], parsed.get("value", ""))
        checks.check_choice(
            "jobset tolerations effect", parsed.get("effect", "NoSchedule"), TOLERATION_EFFECTS
        )
    if pods.working_dir is not None:
        checks.follow(
            kubernetes_rules.absolute_path(pods.working_dir),
            "jobset working_dir",
            pods.working_dir,
            'use an absolute directory of the image, e.g. "/app"',
        )
    checks.follow(
        kubernetes_rules.mount_path(pods.mount_path),
        "jobset mount_path",
        pods.mount_path,
        'use a directory of its own, e.g. "/mnt/tfdist"',
    )


def check_volume(
    pods: Pods, *, max_restarts: int, evaluator: bool, model_dir: str | None, source: str
) -> None:
    """A restarted JobSet resumes, and an evaluator reads checkpoints, from `model_dir`, so it
    must be one every pod shares: on the claim's volume, or a URL (gs://...); and a model_dir
    under `mount_path` needs the claim there. `source` says where the model_dir came from
    ("train" flags, or the "program"'s argv), for the fix."""
    mount = posixpath.normpath(pods.mount_path)
    on_mount = bool(model_dir) and posixpath.normpath(model_dir).startswith(mount + "/")
    require(
        not on_mount or bool(pods.volume_claim),
        "jobset model_dir",
        model_dir,
        "pass volume_claim (a ReadWriteMany PersistentVolumeClaim) to mount one there, or a "
        "gs:// model_dir",
        problem=f"is under mount_path {mount}, where no volume is mounted: each pod would "
        "write its own disk, lost when it restarts",
    )
    needs = (
        ("max_restarts", max_restarts)
        if max_restarts
        else (("evaluator", evaluator) if evaluator else None)
    )
    if not needs or on_mount or (bool(model_dir) and _URL_MARK in model_dir):
        return
    named = f"not {model_dir!r}" if model_dir else f"and the {source} names no --model_dir"
    require(
        False,
        f"jobset {needs[0]}",
        needs[1],
        f"pass volume_claim (a ReadWriteMany PersistentVolumeClaim mounted at {mount}) and "
        f"--model_dir on it {'after the program ' if source == 'program' else ''}"
        f"(e.g. {mount}/run1), or a gs:// --model_dir",
        problem=f"needs a model_dir every pod shares, {named}",
    )


def check_program(pods: Pods, program: Sequence[str]) -> None:
    """A program's file given by a relative path is looked up in the container's working
    directory: unless the manifest sets one, the image's WORKDIR decides, unseen here."""
    script = _script(program)
    if pods.working_dir is None and script is not None and not script.startswith("/"):
        require(
            False,
            "jobset program",
            script,
            "pass --working_dir=DIR where the image holds it (e.g. /app), or its absolute path",
            problem="is a relative path and the container's working directory is unset (the "
            "image's WORKDIR, often /, decides)",
        )


def _script(program: Sequence[str]) -> str | None:
    """The file a program's argv runs: `python FILE ...`'s FILE, or the program itself when it
    is a path (`./run.sh`); None for `python -m ...` or a command on PATH."""
    if posixpath.basename(program[0]) in ("python", "python3"):
        return next((word for word in program[1:2] if not word.startswith("-")), None)
    return program[0] if "/" in program[0] else None


def _check_label(field: str, key: Any, value: Any) -> None:
    checks.follow(
        kubernetes_rules.label_key(key),
        field,
        key,
        'use a label key such as "cloud.google.com/gke-accelerator"',
    )
    checks.follow(
        kubernetes_rules.label_value(value),
        f"{field} {key}",
        value,
        f'use at most {kubernetes_rules.LABEL_MAX} letters, digits, "-", "_" and ".", '
        'e.g. "nvidia-h100-80gb"',
    )
