"""A Kubernetes JobSet (`jobset.x-k8s.io/v1alpha2`, kubernetes-sigs/jobset) that runs a training
job: the way to run tf.distribute on a current Kubernetes cluster, optionally queued by Kueue.

One replicated job per TensorFlow job (chief, worker, ps, evaluator), each one Indexed Job of one
pod per task, plus `dispatcher` and `data-worker` for a tf.data service. JobSet's headless
service gives each pod a DNS name, `<name>-<replicatedJob>-0-<index>.<name>`, and every pod
listens on the same port; each container learns its place through the downward API and derives
TF_CONFIG itself (`tfdist.strategies.jobset`), so nothing in the manifest depends on where pods
land. The success policy waits for the tasks that end (the chief, or every worker; the
evaluator), the failure policy restarts the whole JobSet up to `max_restarts` times, and
BackupAndRestore resumes from `--model_dir` on a shared PersistentVolumeClaim.

TensorFlow's gRPC servers have no authentication: the pods' port must stay inside the cluster
network (a NetworkPolicy that admits only this JobSet's pods closes it to other tenants).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfdist.cluster import GRACE_ENV
from tfdist.cluster import kubernetes_rules
from tfdist.cluster.manifests import checks
from tfdist.cluster.manifests import jobset_checks
from tfdist.errors import EXIT_PREEMPTED
from tfdist.cluster.manifests.checks import require
from tfdist.cluster.manifests.jobset_checks import Pods
from tfdist.strategies import jobset as jobset_pods

API_VERSION = "jobset.x-k8s.io/v1alpha2"
CONTAINER_NAME = "tfdist"
PORT_NAME = "tfdist"
VOLUME_NAME = "model-dir"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPU_RESOURCE = "nvidia.com/gpu"
JOBSET_RESOLVER_FLAG = "--cluster_resolver=jobset"
DATA_SERVICE_COMMAND = ("tfdist", "data", "serve", "--jobset_pod")
DATA_SERVICE_FLAG = "--tf_data_service"

_POD_NAME_SUFFIX = "-xxxxx"  # The Job controller's random suffix on each pod's name.
# And each restart attempt's Jobs end after this long (activeDeadlineSeconds): a day, unless
# the manifest says otherwise.
DEADLINE_S = 24 * 3600
MAX_DEADLINE_S = 366 * 24 * 3600


def jobset(
    *,
    name: str,
    pods: Pods,
    num_workers: int,
    num_ps: int = 0,
    chief: bool = False,
    evaluator: bool = False,
    data_service_workers: int = 0,
    port: int = 2222,
    max_restarts: int = 0,
    deadline_s: int = DEADLINE_S,
    train_args: Sequence[str] | None = None,
    program: Sequence[str] | None = None,
    model_dir: str | None = None,
) -> str:
    """Returns a JobSet YAML document that runs `tfdist train <train_args>` (or `program`) in
    every task pod.

    Args:
      name: the JobSet's name, also its headless service (pods' hostnames must stay within 63
        characters).
      pods: what the pods need from the cluster.
      num_workers, num_ps, chief, evaluator: the TensorFlow tasks.
      data_service_workers: tf.data service workers; above 0 also adds a dispatcher, and
        `tfdist train` reads its input through them (`--tf_data_service`).
      port: the port every pod listens on.
      max_restarts: how many times a failed pod restarts the whole JobSet.
      deadline_s: each restart attempt's Jobs fail after this many seconds (their
        activeDeadlineSeconds), so the JobSet ends within (max_restarts + 1) times it.
      train_args: the flags after `tfdist train`; `--cluster_resolver=jobset` is added.
      program: instead of `train_args`, a program of the user's that calls
        `tfdist.config_from_flags()` (which finds the JobSet by itself).
      model_dir: `--model_dir` of the train flags, checked against the shared volume.

    Raises:
      ManifestError: an argument is invalid.
    """
    checks.follow(
        kubernetes_rules.dns1035_label(name),
        "jobset name",
        name,
        'use lowercase letters, digits and "-", starting with a letter, e.g. "tfdist-train"',
    )
    checks.check_layout("jobset", num_workers=num_workers, num_ps=num_ps, chief=chief)
    require(
        isinstance(evaluator, bool),
        "jobset evaluator",
        evaluator,
        "pass True or False",
        problem="is not a bool",
    )
    require(
        checks.is_int(data_service_workers) and data_service_workers >= 0,
        "jobset data_service_workers",
        data_service_workers,
        "pass 0 for no tf.data service or the number of its workers",
        problem="is not a count",
    )
    checks.check_port("jobset port", port)
    require(
        checks.is_int(max_restarts) and max_restarts >= 0,
        "jobset max_restarts",
        max_restarts,
        "pass 0 or more restarts",
        problem="is not a count",
    )
    require(
        checks.is_int(deadline_s) and 0 < deadline_s <= MAX_DEADLINE_S,
        "jobset deadline_s",
        deadline_s,
        f"pass the seconds a run may take, at most {MAX_DEADLINE_S} (a year)",
        problem="is not a number of seconds above 0",
    )
    jobset_checks.check_pods(pods)
    layout = {
        "chief": int(chief),
        "worker": num_workers,
        "ps": num_ps,
        "evaluator": int(evaluator),
        jobset_pods.DISPATCHER: int(data_service_workers > 0),
        jobset_pods.DATA_WORKER: data_service_workers,
    }
    layout = {job: count for job, count in layout.items() if count}
    longest = max(
        (jobset_pods.hostname(name, job, count - 1) for job, count in layout.items()), key=len
    )
    require(
        len(longest) + len(_POD_NAME_SUFFIX) <= kubernetes_rules.LABEL_MAX,
        "jobset name",
        name,
        f"use a shorter name: pods are named <name>-<replicatedJob>-0-<index>"
        f"{_POD_NAME_SUFFIX}, at most {kubernetes_rules.LABEL_MAX} characters",
        problem=f"makes pod names such as {longest + _POD_NAME_SUFFIX!r} too long",
    )
    command = _task_command(name, port, data_service_workers, train_args, program)
    if program is not None:
        jobset_checks.check_program(pods, program)
        model_dir = checks.flag_value(program, "model_dir")
    jobset_checks.check_volume(
        pods,
        max_restarts=max_restarts,
        evaluator=evaluator,
        model_dir=model_dir,
        source="train flags" if program is None else "program",
    )
    env = _environment(name, port, layout, pods.grace_s)
    replicated_jobs = []
    for job, count in layout.items():
        service = job in jobset_pods.SERVICE_JOBS
        container = _container(
            pods,
            list(DATA_SERVICE_COMMAND) if service else command,
            env,
            port=None if job == "evaluator" else port,
            gpus=0 if service or not _trains(job, num_ps) else pods.gpus,
        )
        replicated_jobs.append(_replicated_job(job, count, _pod_spec(pods, container), deadline_s))
    metadata: dict[str, Any] = {"name": name}
    if pods.queue:
        metadata["labels"] = {QUEUE_LABEL: pods.queue}
    document = {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "network": {
                "enableDNSHostnames": True,
                "subdomain": name,
                "publishNotReadyAddresses": True,
            },
            "successPolicy": {
                "operator": "All",
                "targetReplicatedJobs": _ending_jobs(layout, num_ps),
            },
            "failurePolicy": {
                "maxRestarts": max_restarts,
                # A Job that failed by its pod failure policy was preempted: restarting it does
                # not spend maxRestarts (JobSet v0.12's rules; anything else does).
                "rules": [
                    {
                        "name": "preempted",
                        "action": "RestartJobSetAndIgnoreMaxRestarts",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
            "replicatedJobs": replicated_jobs,
        },
    }
    return checks.to_yaml(document)


# How a Job tells a preempted pod from a failed one (`_replicated_job`).
_PREEMPTED_POD_RULES = {
    "rules": [
        {
            "action": "FailJob",
            "onExitCodes": {
                "containerName": CONTAINER_NAME,
                "operator": "In",
                "values": [EXIT_PREEMPTED],
            },
        },
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
}


def _trains(job: str, num_ps: int) -> bool:
    """Whether `job`'s pods run replicas: workers, and the chief unless it only coordinates."""
    return job == "worker" or (job == "chief" and not num_ps)


def _ending_jobs(layout: Mapping[str, int], num_ps: int) -> list[str]:
    """The replicated jobs whose pods all exit 0 when training is done: the chief under ps
    (workers and ps tasks serve until stopped), else the chief and the workers; the evaluator,
    which stops after the last checkpoint. The data service serves until stopped."""
    ending = ("chief", "evaluator") if num_ps else ("chief", "worker", "evaluator")
    return [job for job in layout if job in ending]


def _task_command(
    name: str,
    port: int,
    data_service_workers: int,
    train_args: Sequence[str] | None,
    program: Sequence[str] | None,
) -> list[str]:
    require(
        (train_args is None) != (program is None),
        "jobset train_args",
        train_args,
        "pass train_args (the flags after `tfdist train`) or program, not both",
        problem="and program are both given or both missing",
    )
    if program is not None:
        program = checks.check_args("jobset", program, field="program")
        require(
            bool(program) and bool(program[0].strip()),
            "jobset program",
            program,
            'pass the program\'s argv, e.g. ["python", "my_train.py"]',
            problem="has no program to run",
        )
        require(
            not data_service_workers,
            "jobset data_service_workers",
            data_service_workers,
            "run `-- train ...` to read input through the tf.data service, or start the "
            "service yourself",
            problem="needs a tfdist train command, not a program",
        )
        return [checks.kubernetes_literal(word) for word in checks.bounded(program)]
    args = checks.check_args("jobset", train_args)
    for flag in (
        JOBSET_RESOLVER_FLAG.partition("=")[0],
        *([DATA_SERVICE_FLAG] if data_service_workers else []),
    ):
        given = [arg for arg in args if arg.lstrip("-").partition("=")[0] == flag.lstrip("-")]
        require(
            not given,
            "jobset train_args",
            given[0] if given else None,
            "leave it out: the manifest sets it for the JobSet",
            problem="is set",
        )
    command = [
        "tfdist",
        "train",
        JOBSET_RESOLVER_FLAG,
        *map(checks.kubernetes_literal, checks.bounded(args)),
    ]
    if data_service_workers:
        dispatcher = f"{jobset_pods.hostname(name, jobset_pods.DISPATCHER, 0)}.{name}:{port}"
        command.append(f"{DATA_SERVICE_FLAG}=grpc://{dispatcher}")
    return command


def _environment(
    name: str, port: int, layout: Mapping[str, int], grace_s: int
) -> list[dict[str, Any]]:
    """The variables from which each pod derives its place (`tfdist.strategies.jobset`), and
    its grace period (terminationGracePeriodSeconds), which its backups' save must fit in."""
    env = [
        {"name": variable, "valueFrom": {"fieldRef": {"fieldPath": field}}}
        for variable, field in jobset_pods.DOWNWARD_API.items()
    ]
    return env + [
        {"name": jobset_pods.ENV_SUBDOMAIN, "value": name},
        {"name": jobset_pods.ENV_PORT, "value": str(port)},
        {"name": jobset_pods.ENV_LAYOUT, "value": jobset_pods.format_layout(layout)},
        {"name": GRACE_ENV, "value": str(grace_s)},
    ]


def _container(
    pods: Pods, command: list[str], env: list[dict[str, Any]], *, port: int | None, gpus: int
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": pods.image,
        "command": command,
        "env": env,
    }
    if port is not None:
        container["ports"] = [{"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}]
    requests = {key: value for key, value in (("cpu", pods.cpu), ("memory", pods.memory)) if value}
    limits = {key: value for key, value in (("memory", pods.memory), (GPU_RESOURCE, gpus)) if value}
    if requests or limits:
        container["resources"] = {
            key: value for key, value in (("requests", requests), ("limits", limits)) if value
        }
    if pods.volume_claim:
        container["volumeMounts"] = [{"name": VOLUME_NAME, "mountPath": pods.mount_path}]
    if pods.working_dir:
        container["workingDir"] = pods.working_dir
    return container


def _pod_spec(pods: Pods, container: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": pods.grace_s,
        "containers": [container],
    }
    if pods.volume_claim:
        spec["volumes"] = [
            {"name": VOLUME_NAME, "persistentVolumeClaim": {"claimName": pods.volume_claim}}
        ]
    optional = (
        ("priorityClassName", pods.priority_class),
        ("serviceAccountName", pods.service_account),
        ("nodeSelector", dict(pods.node_selector)),
        ("tolerations", [jobset_checks.toleration(text) for text in pods.tolerations]),
    )
    spec.update((key, value) for key, value in optional if value)
    return spec


def _replicated_job(
    job: str, pods: int, pod_spec: dict[str, Any], deadline_s: int
) -> dict[str, Any]:
    """One Indexed Job of `pods` pods; a failed pod fails it (backoffLimit 0), and so does its
    deadline, and the JobSet's failure policy restarts everything. A pod preempted (Kubernetes'
    DisruptionTarget condition: an eviction, Kueue's preemption, a node drain) or that saved its
    state on a preemption notice (exit 75) fails it by its pod failure policy, which the JobSet
    restarts without spending maxRestarts."""
    return {
        "name": job,
        "replicas": 1,
        "template": {
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "completionMode": "Indexed",
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline_s,
                "podFailurePolicy": _PREEMPTED_POD_RULES,
                "template": {"spec": pod_spec},
            }
        },
    }
