"""Cluster manifests for a `tfdist train` command line: a Kubeflow TFJob, or a Slurm batch script.

Security: TensorFlow's gRPC servers (workers, parameter servers, the chief) have no
authentication and no encryption. Anyone who can reach a task's port can run graphs in it. Run
the cluster on a private network, and never expose its ports to the internet or to other tenants.

`tfjob` writes a Kubeflow `TFJob` (kubeflow.org/v1). The Kubeflow training operator starts one pod
per replica and sets each pod's TF_CONFIG, which `tfdist train` reads, so the manifest needs no
cluster details of its own. `slurm` writes an sbatch script whose `srun` runs one `tfdist train`
per Slurm task. Each task finds its cluster with TensorFlow's `SlurmClusterResolver`
(`strategies.slurm.cluster_from_slurm`).

Both return text. Nothing here imports TensorFlow or YAML libraries: the YAML comes from a small
emitter for dicts, lists and scalars, and strings that are not plain words are double-quoted.

Every invalid argument raises `ManifestError`, one line naming the argument, the value and the
fix, e.g.::

    tfjob name: "My_Job" is not a Kubernetes name; use lowercase letters, digits and "-", ...
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from tfdist import strategies
from tfdist.cluster import ClusterError

TFJOB_API_VERSION = "kubeflow.org/v1"
TFJOB_CONTAINER_NAME = "tensorflow"  # The operator only manages a container of this name.
TFJOB_PORT_NAME = "tfjob-port"  # The operator reads the task port from this port name.
RESTART_POLICIES = ("OnFailure", "Never", "Always", "ExitCode")
SLURM_RESOLVER_FLAG = "--cluster_resolver=slurm"
SLURM_PORT_FLAG = "--slurm_port_base"

_K8S_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_K8S_NAME_MAX = 63
_SLURM_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SLURM_TIME_RE = re.compile(
    r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|unlimited|infinite")
_PLAIN_RE = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")
_YAML_WORDS = frozenset(("y", "n", "yes", "no", "true", "false", "on", "off", "null"))
_YAML_FLOATS = {"inf": ".inf", "-inf": "-.inf", "nan": ".nan"}


class ManifestError(ClusterError):
    """A manifest argument is invalid; the message is one line: argument, value, fix."""


def tfjob(*, name: str, image: str, train_args: Sequence[str], num_workers: int,
          num_ps: int = 0, chief: bool = False, evaluator: bool = False,
          restart_policy: str = "OnFailure", port: int = 2222) -> str:
    """Returns a Kubeflow TFJob YAML document that runs `tfdist train <train_args>` in each pod.

    Replica specs come in the order Chief, Worker, PS, Evaluator, each with its container
    `tensorflow` running `image`. The operator writes TF_CONFIG into every pod.

    Args:
        name: the TFJob's name, a lowercase RFC 1123 label (pods are named `<name>-worker-0`...).
        image: the container image; it must have `tfdist` on its PATH.
        train_args: the flags after `tfdist train`, e.g. ["--strategy=multi_worker_mirrored"].
        num_workers: the Worker replicas (the chief, if any, comes on top).
        num_ps: the PS (parameter server) replicas; they need a chief.
        chief: whether to add a Chief replica (the ParameterServerStrategy coordinator).
        evaluator: whether to add an Evaluator replica.
        restart_policy: the replicas' restart policy: OnFailure, Never, Always or ExitCode.
        port: the port every task's gRPC server listens on.

    Raises:
        ManifestError: an argument is invalid.
    """
    _check_k8s_name("tfjob name", name)
    _require(isinstance(image, str) and bool(image) and not any(c.isspace() for c in image),
             "tfjob image", image, 'pass a container image with tfdist installed, e.g. '
             '"registry.example.com/tfdist:0.1.0"', problem="is not an image name")
    _check_choice("tfjob restart_policy", restart_policy, RESTART_POLICIES)
    _check_layout("tfjob", num_workers=num_workers, num_ps=num_ps, chief=chief)
    _check_port("tfjob port", port)
    command = ["tfdist", "train", *_check_args("tfjob", train_args)]
    counts = {"Chief": int(chief), "Worker": num_workers, "PS": num_ps, "Evaluator": int(evaluator)}
    replica_specs = {kind: _replica_spec(replicas, restart_policy, image, command, port)
                     for kind, replicas in counts.items() if replicas}
    document = {
        "apiVersion": TFJOB_API_VERSION,
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": replica_specs},
    }
    return to_yaml(document)


def slurm(*, job_name: str, train_args: Sequence[str], num_workers: int, num_ps: int = 0,
          chief: bool = False, time_limit: str = "01:00:00", port: int = 8888,
          gpus_per_task: int = 0) -> str:
    """Returns an sbatch script that runs one `tfdist train <train_args>` per Slurm task.

    The job has chief + num_workers + num_ps tasks. `srun` starts every task with
    `--cluster_resolver=slurm` and the cluster layout, so that each resolves the same cluster with
    TensorFlow's `SlurmClusterResolver`: ranks are given out in TF's order (the chief is rank 0,
    then the parameter servers, then the workers), and the n-th task on a node listens on
    `port + n` (counting from 0).

    Args:
        job_name: the Slurm job name (letters, digits, ".", "_" and "-").
        train_args: the flags after `tfdist train`; each is shell-quoted in the script.
        num_workers: the worker tasks (the chief, if any, comes on top).
        num_ps: the parameter-server tasks; they need a chief.
        chief: whether rank 0 is a chief (the ParameterServerStrategy coordinator).
        time_limit: the job's wall-clock limit in a Slurm time format, e.g. "01:00:00", "2-00:00".
        port: the first task's port on each node.
        gpus_per_task: GPUs Slurm binds to each task; 0 asks for none.

    Raises:
        ManifestError: an argument is invalid.
    """
    _require(isinstance(job_name, str) and bool(_SLURM_NAME_RE.fullmatch(job_name)),
             "slurm job_name", job_name,
             'use letters, digits, ".", "_" and "-", e.g. "tfdist-train"')
    _require(isinstance(time_limit, str) and bool(_SLURM_TIME_RE.fullmatch(time_limit)),
             "slurm time_limit", time_limit,
             'use a Slurm time such as "30", "01:00:00" or "2-00:00:00"',
             problem="is not a Slurm time")
    _check_layout("slurm", num_workers=num_workers, num_ps=num_ps, chief=chief)
    _check_port("slurm port", port)
    _require(_is_int(gpus_per_task) and gpus_per_task >= 0, "slurm gpus_per_task",
             gpus_per_task, "pass 0 for no GPUs or a positive number of GPUs per task",
             problem="is not a count")
    args = _check_args("slurm", train_args)
    num_tasks = int(chief) + num_workers + num_ps
    layout = _describe_layout(num_workers=num_workers, num_ps=num_ps, chief=chief)
    flags = slurm_train_flags(port=port, num_ps=num_ps, chief=chief)
    command = ["srun", "tfdist", "train", *flags, *args]
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --ntasks={num_tasks}",
        f"#SBATCH --time={time_limit}",
        *([f"#SBATCH --gpus-per-task={gpus_per_task}"] if gpus_per_task else []),
        "",
        f"# {num_tasks} tasks of `tfdist train`: {layout}, in rank order.",
        "# Each task resolves the cluster with TensorFlow's SlurmClusterResolver from the job step",
        "# (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE).",
        f"# Ports: the 1st task on a node listens on {port}, the 2nd on {port + 1}, and so on.",
        "# TensorFlow's gRPC servers have no authentication: keep these ports on a private",
        "# network, closed to everyone but this job's nodes.",
        "set -euo pipefail",
        " ".join(shlex.quote(word) for word in command),
    ]
    return "\n".join(lines) + "\n"


def slurm_train_flags(*, port: int, num_ps: int, chief: bool) -> list[str]:
    """The `tfdist train` flags that make a Slurm task resolve the cluster `slurm` asked for."""
    return [SLURM_RESOLVER_FLAG, f"{SLURM_PORT_FLAG}={port}",
            *([f"--num_ps={num_ps}"] if num_ps else []), *(["--chief"] if chief else [])]


def to_yaml(value: Any) -> str:
    """Returns `value` (dicts, lists, str, int, float, bool, None) as block-style YAML text."""
    return "\n".join(_yaml_lines(value, 0)) + "\n"


def _replica_spec(replicas: int, restart_policy: str, image: str, command: list[str],
                  port: int) -> dict[str, Any]:
    container = {
        "name": TFJOB_CONTAINER_NAME,
        "image": image,
        "command": command,
        "ports": [{"name": TFJOB_PORT_NAME, "containerPort": port}],
    }
    return {"replicas": replicas, "restartPolicy": restart_policy,
            "template": {"spec": {"containers": [container]}}}


def _check_layout(where: str, *, num_workers: int, num_ps: int, chief: bool) -> None:
    _require(_is_int(num_workers) and num_workers >= 1, f"{where} num_workers", num_workers,
             "pass at least 1 worker", problem="is not a count of 1 or more")
    _require(_is_int(num_ps) and num_ps >= 0, f"{where} num_ps", num_ps,
             "pass 0 or more parameter servers", problem="is not a count of 0 or more")
    _require(isinstance(chief, bool), f"{where} chief", chief, "pass True or False",
             problem="is not a bool")
    problem = strategies.ps_without_chief(num_ps, chief)
    _require(not problem, f"{where} num_ps", num_ps, "add --chief", problem=f"means {problem}")


def _check_k8s_name(field: str, name: Any) -> None:
    valid = (isinstance(name, str) and len(name) <= _K8S_NAME_MAX
             and bool(_K8S_NAME_RE.fullmatch(name)))
    _require(valid, field, name, f'use at most {_K8S_NAME_MAX} lowercase letters, digits and "-", '
             'starting and ending with a letter or digit, e.g. "tfdist-train"',
             problem="is not a Kubernetes name")


def _check_choice(field: str, value: Any, choices: Sequence[str]) -> None:
    _require(value in choices, field, value, f"use one of {', '.join(choices)}",
             problem="is not a choice")


def _check_port(field: str, port: Any) -> None:
    _require(_is_int(port) and 1 <= port <= 65535, field, port,
             "use an integer port from 1 to 65535", problem="is not a port")


def _check_args(where: str, train_args: Any) -> list[str]:
    ok = (isinstance(train_args, Sequence) and not isinstance(train_args, str)
          and all(isinstance(arg, str) for arg in train_args))
    _require(ok, f"{where} train_args", train_args,
             'pass a list of strings, e.g. ["--strategy=multi_worker_mirrored"]',
             problem="is not a list of strings")
    return list(train_args)


def _describe_layout(*, num_workers: int, num_ps: int, chief: bool) -> str:
    parts = [("chief", int(chief)), ("ps", num_ps), ("worker", num_workers)]
    return ", ".join(f"{n} {job}" for job, n in parts if n)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(ok: bool, field: str, value: Any, fix: str, problem: str = "is invalid") -> None:
    """Raises the one-line `ManifestError` "<field>: <value> <problem>; <fix>." unless `ok`."""
    if not ok:
        shown = " ".join(repr(value).split())
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise ManifestError(f"{field}: {shown} {problem}; {fix}.")


def _yaml_lines(value: Any, indent: int) -> list[str]:
    """The lines of `value` in block style, each indented by `indent` spaces."""
    pad = " " * indent
    if isinstance(value, Mapping) and value:
        lines = []
        for key, item in value.items():
            head = f"{pad}{_yaml_scalar(str(key))}:"
            if _is_block(item):
                lines += [head, *_yaml_lines(item, indent + 2)]
            else:
                lines.append(f"{head} {_yaml_scalar(item)}")
        return lines
    if isinstance(value, (list, tuple)) and value:
        lines = []
        for item in value:
            if _is_block(item):  # "- " replaces the first line's indent: "- name: x".
                first, *rest = _yaml_lines(item, indent + 2)
                lines += [f"{pad}- {first[indent + 2:]}", *rest]
            else:
                lines.append(f"{pad}- {_yaml_scalar(item)}")
        return lines
    return [f"{pad}{_yaml_scalar(value)}"]


def _is_block(value: Any) -> bool:
    return isinstance(value, (Mapping, list, tuple)) and bool(value)


def _yaml_scalar(value: Any) -> str:
    """One YAML scalar; a string stays plain only when no YAML reader takes it for another type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else _YAML_FLOATS[repr(value)]
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, (list, tuple)):
        return "[]"
    if not isinstance(value, str):
        raise TypeError(f"to_yaml: {type(value).__name__} {value!r} is not a YAML scalar")
    if _PLAIN_RE.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return '"' + "".join(_yaml_char(c) for c in value) + '"'


def _yaml_char(char: str) -> str:
    """A character inside a double-quoted YAML scalar: printable ASCII as is, the rest escaped."""
    if char in '"\\':
        return "\\" + char
    if " " <= char <= "~":
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
