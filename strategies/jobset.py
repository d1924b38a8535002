"""This task's `ClusterConfig` inside a pod of a Kubernetes JobSet, from what the pod is given.

A JobSet (`jobset.x-k8s.io/v1alpha2`) with `network.enableDNSHostnames` runs each replicated job
as Indexed Jobs and names every pod `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>` inside the
headless service `<subdomain>`, so every task's address follows from the layout alone:
`<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>:<port>`. A pod learns where it stands
from its environment, which `tfdist manifest --format=jobset` sets up:

- through the downward API, from the labels and annotation JobSet and the Job controller put on
  each pod (`DOWNWARD_API`): the JobSet's name, the replicated job's name, the job index, and the
  pod's completion index (`JOB_COMPLETION_INDEX`, which Kubernetes also sets itself);
- as fixed values: the subdomain, the one port every pod listens on, and the layout, the pods of
  each replicated job: `chief=1,worker=2,ps=1,evaluator=1` (and `dispatcher=1,data-worker=2` for
  a tf.data service, whose pods are not TensorFlow tasks).

Each replicated job is one Job (`replicas: 1`) of as many pods as its tasks, so a task's index is
its pod's completion index. Pure Python (no TensorFlow). Errors are one-line
`ClusterConfigError`s naming the variable, its value and the fix.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping

from .cluster import ClusterConfig
from .cluster import ClusterConfigError
from .cluster import parse_tf_config
from .messages import problem as one_line

# The labels and annotation a JobSet pod carries (kubernetes-sigs/jobset v0.12.0,
# api/jobset/v1alpha2/jobset_types.go; the Job controller's completion index).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

ENV_JOBSET_NAME = "TFDIST_JOBSET_NAME"
ENV_REPLICATED_JOB = "TFDIST_REPLICATED_JOB"
ENV_JOB_INDEX = "TFDIST_JOB_INDEX"
ENV_POD_INDEX = "JOB_COMPLETION_INDEX"
ENV_SUBDOMAIN = "TFDIST_JOBSET_SUBDOMAIN"
ENV_PORT = "TFDIST_JOBSET_PORT"
ENV_LAYOUT = "TFDIST_JOBSET_LAYOUT"
# Every variable the manifest gives a pod for its place (a JobSet pod has them all).
ENV_VARIABLES = (
    ENV_JOBSET_NAME,
    ENV_REPLICATED_JOB,
    ENV_JOB_INDEX,
    ENV_POD_INDEX,
    ENV_SUBDOMAIN,
    ENV_PORT,
    ENV_LAYOUT,
)
# Each variable the manifest fills from the pod's own metadata, and the field it reads.
DOWNWARD_API = {
    ENV_JOBSET_NAME: f"metadata.labels['{JOBSET_NAME_LABEL}']",
    ENV_REPLICATED_JOB: f"metadata.labels['{REPLICATED_JOB_LABEL}']",
    ENV_JOB_INDEX: f"metadata.labels['{JOB_INDEX_LABEL}']",
    ENV_POD_INDEX: f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']",
}

# Replicated jobs that are TensorFlow tasks (named as TF_CONFIG's jobs), in TF_CONFIG's order,
# and those of a tf.data service.
TASK_JOBS = ("chief", "worker", "ps", "evaluator")
DISPATCHER = "dispatcher"
DATA_WORKER = "data-worker"
SERVICE_JOBS = (DISPATCHER, DATA_WORKER)
MAX_HOSTNAME = 63  # A pod's hostname is one DNS label.

_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_COUNT_RE = re.compile(r"[1-9][0-9]{0,3}")
_INDEX_RE = re.compile(r"0|[1-9][0-9]{0,3}")
_PORT_RE = re.compile(r"[1-9][0-9]{0,4}")
_FIX = (
    "run it in a pod of a JobSet that `tfdist manifest --format=jobset` wrote (its containers "
    "map the pod's JobSet labels into these variables), or set TF_CONFIG instead"
)


def hostname(jobset: str, replicated_job: str, pod_index: int, job_index: int = 0) -> str:
    """The hostname JobSet gives a pod: `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`."""
    return f"{jobset}-{replicated_job}-{job_index}-{pod_index}"


def variables_set(environ: Mapping[str, str] | None = None) -> list[str]:
    """Which of ENV_VARIABLES the environment sets."""
    environ = os.environ if environ is None else environ
    return [name for name in ENV_VARIABLES if name in environ]


def is_jobset_pod(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment is a pod's of a JobSet that `tfdist manifest` wrote."""
    return ENV_LAYOUT in (os.environ if environ is None else environ)


def format_layout(pods: Mapping[str, int]) -> str:
    """`pods` (replicated job: pod count) as the layout variable's value."""
    return ",".join(f"{job}={count}" for job, count in pods.items())


@dataclasses.dataclass(frozen=True)
class JobSetPod:
    """Where a pod stands in its JobSet. Build it with `from_environment`, which validates.

    Attributes:
      jobset: the JobSet's name.
      replicated_job: the replicated job this pod belongs to.
      pod_index: the pod's completion index in its Job: its task index.
      subdomain: the headless service the pods' hostnames live in.
      port: the port every pod listens on.
      layout: the pods of each replicated job, in the JobSet's order.
      sources: each field's variable and what set it, for `tfdist doctor`.
    """

    jobset: str
    replicated_job: str
    pod_index: int
    subdomain: str
    port: int
    layout: Mapping[str, int]
    sources: tuple[str, ...] = ()

    def address(self, replicated_job: str, pod_index: int) -> str:
        """`host:port` of pod `pod_index` of `replicated_job`."""
        return f"{hostname(self.jobset, replicated_job, pod_index)}.{self.subdomain}:{self.port}"

    @property
    def own_address(self) -> str:
        return self.address(self.replicated_job, self.pod_index)

    def addresses(self, replicated_job: str) -> list[str]:
        """Every pod's address in `replicated_job`, by index."""
        return [
            self.address(replicated_job, index)
            for index in range(self.layout.get(replicated_job, 0))
        ]

    def cluster(self) -> ClusterConfig:
        """The TensorFlow cluster of the JobSet's task pods, seen from this pod.

        Raises:
          ClusterConfigError: this pod runs a tf.data service, not a TensorFlow task.
        """
        if self.replicated_job not in TASK_JOBS:
            raise _error(
                ENV_REPLICATED_JOB,
                self.replicated_job,
                f"is a tf.data service pod, not a TensorFlow task (one of {', '.join(TASK_JOBS)})",
                "run `tfdist data serve --jobset_pod` there, and train in the task pods",
            )
        jobs = {job: self.addresses(job) for job in TASK_JOBS if job in self.layout}
        tf_config = {
            "cluster": jobs,
            "task": {"type": self.replicated_job, "index": self.pod_index},
        }
        try:
            return parse_tf_config(tf_config)
        except ClusterConfigError as error:
            raise ClusterConfigError(f"JobSet pod: {error}") from error


def from_environment(environ: Mapping[str, str] | None = None) -> JobSetPod:
    """Reads this pod's place in its JobSet from the environment (`os.environ` when None).

    Raises:
      ClusterConfigError: a variable is missing or invalid, or the pod's index does not fit the
        layout; one line.
    """
    env = os.environ if environ is None else environ
    layout = _layout(_require(env, ENV_LAYOUT))
    jobset = _label(env, ENV_JOBSET_NAME)
    replicated_job = _label(env, ENV_REPLICATED_JOB)
    if replicated_job not in layout:
        raise _error(
            ENV_REPLICATED_JOB,
            replicated_job,
            f"is not a replicated job of {ENV_LAYOUT} ({', '.join(layout)})",
            _FIX,
        )
    job_index = _index(env, ENV_JOB_INDEX)
    if job_index != 0:
        raise _error(
            ENV_JOB_INDEX,
            env[ENV_JOB_INDEX],
            "is not 0, but tfdist runs each "
            "replicated job as one Job (replicas: 1) of one pod per task",
            "regenerate the manifest with `tfdist manifest --format=jobset`",
        )
    pod_index = _index(env, ENV_POD_INDEX)
    if pod_index >= layout[replicated_job]:
        raise _error(
            ENV_POD_INDEX,
            env[ENV_POD_INDEX],
            f"is out of range for {replicated_job}={layout[replicated_job]} in {ENV_LAYOUT}",
            _FIX,
        )
    subdomain = _require(env, ENV_SUBDOMAIN)
    if len(subdomain) > 253 or not _SUBDOMAIN_RE.fullmatch(subdomain):
        raise _error(ENV_SUBDOMAIN, subdomain, "is not a DNS subdomain", _FIX)
    port = _require(env, ENV_PORT)
    if not _PORT_RE.fullmatch(port) or int(port) > 65535:
        raise _error(ENV_PORT, port, "is not a port from 1 to 65535", _FIX)
    longest = max((hostname(jobset, job, count - 1) for job, count in layout.items()), key=len)
    if len(longest) > MAX_HOSTNAME:
        raise _error(
            ENV_JOBSET_NAME,
            jobset,
            f"makes hostnames such as {longest!r} longer than {MAX_HOSTNAME} characters",
            "shorten the JobSet's name",
        )
    sources = tuple(
        f"{name}={env[name]}" + (f" (from {DOWNWARD_API[name]})" if name in DOWNWARD_API else "")
        for name in (
            ENV_JOBSET_NAME,
            ENV_REPLICATED_JOB,
            ENV_JOB_INDEX,
            ENV_POD_INDEX,
            ENV_SUBDOMAIN,
            ENV_PORT,
            ENV_LAYOUT,
        )
    )
    return JobSetPod(
        jobset=jobset,
        replicated_job=replicated_job,
        pod_index=pod_index,
        subdomain=subdomain,
        port=int(port),
        layout=layout,
        sources=sources,
    )


def cluster_from_jobset(environ: Mapping[str, str] | None = None) -> ClusterConfig:
    """This task's cluster, read from its JobSet pod's environment (`from_environment`)."""
    return from_environment(environ).cluster()


def _require(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value.strip():
        raise ClusterConfigError(f"JobSet pod: {name} is not set; {_FIX}.")
    return value.strip()


def _label(env: Mapping[str, str], name: str) -> str:
    value = _require(env, name)
    if len(value) > MAX_HOSTNAME or not _LABEL_RE.fullmatch(value):
        raise _error(name, value, "is not a DNS label (lowercase letters, digits and '-')", _FIX)
    return value


def _index(env: Mapping[str, str], name: str) -> int:
    value = _require(env, name)
    if not _INDEX_RE.fullmatch(value):
        raise _error(name, value, "is not an index from 0 to 9999", _FIX)
    return int(value)


def _layout(value: str) -> dict[str, int]:
    """`chief=1,worker=2,...` as {replicated job: pods}; needs a worker."""
    layout: dict[str, int] = {}
    for entry in value.split(","):
        job, equals, count = entry.strip().partition("=")
        if (
            not equals
            or job not in TASK_JOBS + SERVICE_JOBS
            or job in layout
            or not _COUNT_RE.fullmatch(count)
        ):
            raise _error(
                ENV_LAYOUT,
                value,
                f"has the entry {entry!r}, not one of "
                f"{', '.join(TASK_JOBS + SERVICE_JOBS)}=PODS given once",
                _FIX,
            )
        layout[job] = int(count)
    if "worker" not in layout:
        raise _error(ENV_LAYOUT, value, "has no worker", _FIX)
    return layout


def _error(name: str, value: str, problem: str, fix: str) -> ClusterConfigError:
    return ClusterConfigError(one_line(f"JobSet pod: {name}", problem, fix, value=value))
