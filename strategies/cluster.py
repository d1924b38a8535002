"""Parses and validates TF_CONFIG, the JSON that configures multi-worker TensorFlow.

Pure Python on purpose: the CLI imports this module before TensorFlow, so `tfdist --help` stays
fast. It is also the only module of the project that reads `os.environ` (only `TF_CONFIG`).

Every rejection is a `ClusterConfigError` whose message is one line naming the field, the value
received and the fix, e.g.::

    TF_CONFIG cluster.worker[1]: "localhost" is not host:port; write addresses as "host:port",
    e.g. "localhost:2222".

Example:
    >>> config = parse_tf_config(
    ...     '{"cluster": {"worker": ["localhost:2222"]}, "task": {"type": "worker", "index": 0}}')
    >>> config.num_workers, config.is_chief, config.task_address
    (1, True, 'localhost:2222')
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import types
from collections.abc import Mapping
from typing import Any

from .addresses import address_problem
from .addresses import endpoint
from .addresses import why_the_same
from .messages import problem
from .messages import shown_json

_ENV_VAR = "TF_CONFIG"
_JOB_ORDER = ("chief", "worker", "ps", "evaluator")
_ALIASES = {"master": "chief"}
_MISSING = object()
_CLUSTER_EXAMPLE = '"cluster": {"worker": ["localhost:2222"]}'
_TASK_EXAMPLE = '"task": {"type": "worker", "index": 0}'
_OBJECT_FIX = f"set TF_CONFIG to a JSON object, e.g. {{{_CLUSTER_EXAMPLE}, {_TASK_EXAMPLE}}}"
_JOB_NAMES = '"chief", "worker", "ps" or "evaluator" ("master" means "chief")'
_TYPE_FIX = f"set task.type to {_JOB_NAMES}"
_INDEX_FIX = "set task.index to this task's position in its job's address list, counting from 0"


class ClusterConfigError(ValueError):
    """TF_CONFIG is invalid; the message is one user-facing line."""


class TaskType(str, enum.Enum):
    """The job a process runs in the cluster."""

    CHIEF = "chief"
    WORKER = "worker"
    PS = "ps"
    EVALUATOR = "evaluator"


@dataclasses.dataclass(frozen=True)
class Task:
    """One process's place in the cluster.

    Attributes:
        type: the job the process runs.
        index: the process's position in that job's address list.
    """

    type: TaskType
    index: int


@dataclasses.dataclass(frozen=True)
class Origin:
    """Who a cluster belongs to and how its ports were chosen, where the engine that started
    its tasks says (a Slurm job step: `strategies.slurm`).

    Attributes:
        job: the job every task of the cluster belongs to, e.g. "Slurm job 42 step 0"; tasks
            check each other's at join (`strategies.job_check`).
        ports: how the tasks' ports were chosen, in words.
        port_fix: what to do when another process holds one of them.
    """

    job: str
    ports: str
    port_fix: str


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """A validated TF_CONFIG.

    Build it with `parse_tf_config`, `from_environment` or `make_cluster`, which validate; the
    constructor only freezes `jobs`. Equal configs compare equal and hash alike.

    Attributes:
        jobs: read-only mapping of job name to addresses, in the order chief, worker, ps,
            evaluator; only jobs with addresses appear, and "master" is stored as "chief".
        task: this process's task.
        rpc_layer: the RPC protocol between tasks.
        origin: who the cluster belongs to and how its ports were chosen; None where nothing
            says (TF_CONFIG).
    """

    jobs: Mapping[str, tuple[str, ...]]
    task: Task
    rpc_layer: str = "grpc"
    origin: Origin | None = None

    def __post_init__(self) -> None:
        frozen = {job: tuple(addresses) for job, addresses in self.jobs.items()}
        object.__setattr__(self, "jobs", types.MappingProxyType(frozen))

    def __hash__(self) -> int:
        return hash((frozenset(self.jobs.items()), self.task, self.rpc_layer, self.origin))

    @property
    def num_workers(self) -> int:
        """The number of training workers: the chief plus the "worker" job."""
        return len(self.jobs.get("chief", ())) + len(self.jobs.get("worker", ()))

    @property
    def num_ps(self) -> int:
        """The number of parameter servers."""
        return len(self.jobs.get("ps", ()))

    @property
    def has_chief(self) -> bool:
        """Whether the cluster has a "chief" (or legacy "master") job."""
        return "chief" in self.jobs

    @property
    def is_chief(self) -> bool:
        """Whether this task leads training: the chief, or worker 0 when there is no chief."""
        if self.task.type is TaskType.CHIEF:
            return True
        return not self.has_chief and self.task == Task(TaskType.WORKER, 0)

    @property
    def task_address(self) -> str | None:
        """This task's host:port; None for an evaluator that the cluster does not list."""
        addresses = self.jobs.get(self.task.type.value)
        return addresses[self.task.index] if addresses else None

    def to_dict(self) -> dict[str, Any]:
        """Returns the TF_CONFIG-shaped dict, with lists for addresses and "chief" for "master"."""
        return {
            "cluster": {job: list(addresses) for job, addresses in self.jobs.items()},
            "task": {"type": self.task.type.value, "index": self.task.index},
            "rpc_layer": self.rpc_layer,
        }

    def to_json(self) -> str:
        """Returns the config as a TF_CONFIG JSON string."""
        return json.dumps(self.to_dict())

    def for_task(self, task_type: str | TaskType, index: int) -> ClusterConfig:
        """Returns the same cluster as seen by another task.

        Args:
            task_type: the other task's job ("master" is accepted for "chief").
            index: the other task's position in its job.

        Raises:
            ClusterConfigError: the task is not part of this cluster.
        """
        task = _parse_task({"type": task_type, "index": index}, self.jobs)
        return dataclasses.replace(self, task=task)


def parse_tf_config(value: str | Mapping[str, Any]) -> ClusterConfig:
    """Parses and validates a TF_CONFIG.

    Args:
        value: the TF_CONFIG JSON text, or the already-decoded object. Keys other than "cluster",
            "task" and "rpc_layer" (such as Kubeflow's "environment") are ignored.

    Raises:
        ClusterConfigError: `value` is not a valid TF_CONFIG.
    """
    data = _decode(value)
    jobs = _parse_cluster(data.get("cluster", _MISSING))
    task = _parse_task(data.get("task", _MISSING), jobs)
    rpc_layer = data.get("rpc_layer", "grpc")
    if not isinstance(rpc_layer, str):
        raise _error(
            "rpc_layer",
            f"{shown_json(rpc_layer)} is not a string",
            'use a protocol name such as "grpc", or leave rpc_layer out',
        )
    return ClusterConfig(jobs=jobs, task=task, rpc_layer=rpc_layer)


def from_environment(environ: Mapping[str, str] | None = None) -> ClusterConfig | None:
    """Reads TF_CONFIG from the environment.

    Args:
        environ: the environment to read; `os.environ` when None.

    Returns:
        The parsed config, or None when TF_CONFIG is unset or blank (a single-process job).

    Raises:
        ClusterConfigError: TF_CONFIG is set but invalid.
    """
    value = (os.environ if environ is None else environ).get(_ENV_VAR, "")
    if not value.strip():
        return None
    return parse_tf_config(value)


def ps_without_chief(num_ps: int, has_chief: bool) -> str | None:
    """The rule that parameter-server tasks need a chief, for every cluster tfdist reads or makes
    (TF_CONFIG, a Slurm step, a launch, a manifest): None when a layout of `num_ps` ps tasks
    keeps it, else the problem, in words each caller puts in its own one-line error."""
    if num_ps and not has_chief:
        return (
            f"{num_ps} ps task(s) but no chief, which coordinates ParameterServerStrategy "
            "(workers and ps tasks only serve it)"
        )
    return None


def _decode(value: Any) -> Mapping[str, Any]:
    """Returns TF_CONFIG as a mapping, decoding JSON text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError) as exc:  # The last: nested too deeply.
            why = (
                f"{exc.msg} at char {exc.pos}"
                if isinstance(exc, json.JSONDecodeError)
                else "nested too deeply to read"
            )
            raise _error(
                "", f"{shown_json(value)} is not valid JSON ({why})", _OBJECT_FIX
            ) from None
    if not isinstance(value, Mapping):
        raise _error("", f"{shown_json(value)} is not a JSON object", _OBJECT_FIX)
    return value


def _parse_cluster(raw: Any) -> dict[str, tuple[str, ...]]:
    """Validates "cluster"; returns its non-empty jobs in `_JOB_ORDER`, "master" as "chief"."""
    if raw is _MISSING:
        raise _error("cluster", "missing", f"add the cluster, e.g. {_CLUSTER_EXAMPLE}")
    if not isinstance(raw, Mapping):
        raise _error(
            "cluster",
            f"{shown_json(raw)} is not an object",
            f"map job names to address lists, e.g. {_CLUSTER_EXAMPLE}",
        )
    jobs: dict[str, list[str]] = {}
    seen: dict[tuple[str, int], tuple[str, str]] = {}
    for name, addresses in raw.items():
        job = _ALIASES.get(name, name)
        if job not in _JOB_ORDER:
            raise _error(
                "cluster", f"job {shown_json(name)} is unknown", f"name each job {_JOB_NAMES}"
            )
        jobs.setdefault(job, []).extend(_parse_job(f"cluster.{name}", addresses, seen))
    chiefs = jobs.get("chief", [])
    if len(chiefs) > 1:
        raise _error(
            "cluster.chief",
            f'{shown_json(chiefs)} has {len(chiefs)} chiefs ("master" counts as chief)',
            'keep one chief and list the others under "worker"',
        )
    evaluators = jobs.get("evaluator", [])
    if len(evaluators) > 1:
        raise _error(
            "cluster.evaluator",
            f"{shown_json(evaluators)} has {len(evaluators)} evaluators",
            "keep one: TensorFlow runs at most one evaluator task",
        )
    problem = ps_without_chief(len(jobs.get("ps", ())), bool(chiefs))
    if problem:
        raise _error("cluster", f"has {problem}", 'add a "chief" job')
    ordered = {job: tuple(jobs[job]) for job in _JOB_ORDER if jobs.get(job)}
    if not ordered:
        raise _error(
            "cluster",
            f"{shown_json(raw)} has no addresses",
            f"list at least one task, e.g. {_CLUSTER_EXAMPLE}",
        )
    return ordered


def _parse_job(
    path: str, addresses: Any, seen: dict[tuple[str, int], tuple[str, str]]
) -> list[str]:
    """Validates one job's address list; `seen` maps endpoints already used to their path and
    spelling (`endpoint`)."""
    if not isinstance(addresses, (list, tuple)):
        raise _error(
            path,
            f"{shown_json(addresses)} is not a list",
            'write each job as a list of "host:port" strings, e.g. ["localhost:2222"]',
        )
    for i, address in enumerate(addresses):
        where = f"{path}[{i}]"
        wrong = address_problem(address)
        if wrong:
            raise _error(where, *wrong)
        key = endpoint(address)
        if key in seen:
            other, other_address = seen[key]
            why = why_the_same(key)
            same = "" if other_address == address else f" ({shown_json(other_address)}; {why})"
            raise _error(
                where,
                f"{shown_json(address)} is also used by {other}{same}",
                "give every task its own host:port",
            )
        seen[key] = (where, address)
    return list(addresses)


def _parse_task(raw: Any, jobs: Mapping[str, tuple[str, ...]]) -> Task:
    """Validates "task" against the cluster's `jobs`."""
    if raw is _MISSING:
        raise _error("task", "missing", f"add this process's task, e.g. {_TASK_EXAMPLE}")
    if not isinstance(raw, Mapping):
        raise _error(
            "task",
            f"{shown_json(raw)} is not an object",
            f"give the task a type and an index, e.g. {_TASK_EXAMPLE}",
        )
    task_type = _parse_task_type(raw.get("type", _MISSING), jobs)
    index = raw.get("index", _MISSING)
    if index is _MISSING:
        raise _error("task.index", "missing", _INDEX_FIX)
    if isinstance(index, bool) or not isinstance(index, int):
        raise _error(
            "task.index",
            f"{shown_json(index)} is not an integer",
            "write the index as a JSON number without quotes, e.g. 0",
        )
    addresses = jobs.get(task_type.value)
    size = len(addresses) if addresses else 1  # An unlisted evaluator is evaluator 0.
    if not 0 <= index < size:
        job = (
            f"cluster.{task_type.value} ({size} addresses)"
            if addresses
            else ("an evaluator not listed in cluster")
        )
        fix = "use index 0" if size == 1 else f"use an index from 0 to {size - 1}"
        raise _error("task.index", f"{index} is out of range for {job}", fix)
    return Task(task_type, index)


def _parse_task_type(raw: Any, jobs: Mapping[str, tuple[str, ...]]) -> TaskType:
    """Validates "task.type"; only an evaluator may be missing from the cluster."""
    if raw is _MISSING:
        raise _error("task.type", "missing", _TYPE_FIX)
    if isinstance(raw, TaskType):
        raw = raw.value  # Python 3.10 hashes enum members by name, so use the plain string.
    name = _ALIASES.get(raw, raw) if isinstance(raw, str) else None
    if name not in _JOB_ORDER:
        raise _error("task.type", f"{shown_json(raw)} is not a task type", _TYPE_FIX)
    if name not in jobs and name != "evaluator":
        raise _error(
            "task.type",
            f"{shown_json(raw)} is not a job of the cluster (it has {', '.join(jobs)})",
            f'add a "{name}" job to cluster or fix task.type',
        )
    return TaskType(name)


def _error(path: str, what: str, fix: str) -> ClusterConfigError:
    """The one-line error "TF_CONFIG <path>: <what>; <fix>."."""
    return ClusterConfigError(problem(f"TF_CONFIG {path}".rstrip(), what, fix))
