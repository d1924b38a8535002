"""This task's `ClusterConfig` from a Slurm job step, found by TensorFlow's `SlurmClusterResolver`.

Runs in every task that `srun` starts. TensorFlow's resolver (TF 2.21) reads the job step from the
environment and calls no Slurm command:

- `SLURM_PROCID`: this task's rank;
- `SLURM_STEP_NUM_TASKS`: the step's task count;
- `SLURM_STEP_NODELIST`: the step's hosts, as a Slurm host list such as "n[01-04]" (expanded in
  Python, without `scontrol show hostnames`);
- `SLURM_STEP_TASKS_PER_NODE`: tasks on each host, such as "2(x3),1".

`srun` sets all four inside a job step; `sbatch` and `salloc` alone do not. The resolver sorts the
hosts by name, gives the n-th task of a host the port `port_base + n` (n from 0), and hands out
ranks in job-name order: the chief (rank 0), then the parameter servers, then the workers.

The result goes through `parse_tf_config`, so a Slurm cluster is checked like a TF_CONFIG.
Errors are one-line `ClusterConfigError`s that name what is missing and the fix.
"""

from __future__ import annotations

import re
from typing import Any

from tfdist import errors

from . import cluster as cluster_lib
from .cluster import ClusterConfig
from .cluster import ClusterConfigError
from .cluster import parse_tf_config

_PREFIX = "Slurm cluster"
_SRUN_FIX = (
    "start each task with srun inside a Slurm allocation (sbatch or salloc), e.g. "
    "`srun tfdist train ...`, or set TF_CONFIG instead"
)
_STEP_FIX = "check this job step's SLURM_STEP_* variables (srun sets them) or set TF_CONFIG instead"
# TF's resolver pairs each task of a host with a slot of `gpus_per_task` GPUs and drops tasks
# without one; with 0 GPUs it fails ("range() arg 3 must not be zero") and without
# `gpus_per_node` it runs nvidia-smi. One slot per possible task (ports bound the tasks of a host)
# keeps every task; Slurm's own --gpus-per-task binding decides which GPUs a task sees.
_GPU_SLOTS = 65536
_MISSING_VAR_RE = re.compile(r"(SLURM_\w+) not found in environment")


def cluster_from_slurm(
    port_base: int = 8888, *, num_ps: int = 0, chief: bool = False, rpc_layer: str = "grpc"
) -> ClusterConfig:
    """Returns the cluster of the Slurm job step this process runs in, seen from this task.

    Call it in each task that `srun` started; every task of the step must pass the same
    arguments. Imports TensorFlow. Leaves CUDA_VISIBLE_DEVICES alone.

    Args:
        port_base: the port of the first task on each host; the n-th listens on port_base + n.
        num_ps: how many tasks are parameter servers (ranks 1.. after the chief).
        chief: whether rank 0 is the chief; parameter servers need one (the coordinator).
        rpc_layer: the protocol between tasks.

    Raises:
        ClusterConfigError: not in a Slurm job step, too few tasks for the layout, or the step's
            hosts are named so that TensorFlow's host order differs from Slurm's.
    """
    _check_arguments(port_base, num_ps, chief)
    probe = _resolver(None, port_base, rpc_layer)
    num_tasks = len(_cluster_spec(probe)["worker"])
    num_workers = num_tasks - int(chief) - num_ps
    if num_workers < 1:
        raise _error(
            f"the job step has {num_tasks} task(s), but chief={chief} and "
            f"num_ps={num_ps} leave no worker",
            f"ask for at least {int(chief) + num_ps + 1} tasks (sbatch --ntasks)",
        )
    jobs = {"chief": int(chief), "ps": num_ps, "worker": num_workers}
    resolver = (
        probe
        if num_workers == num_tasks
        else _resolver({job: n for job, n in jobs.items() if n}, port_base, rpc_layer)
    )
    spec = _cluster_spec(resolver)
    addresses = [address for addresses in spec.values() for address in addresses]
    highest = max(int(address.rpartition(":")[2]) for address in addresses)
    if highest > 65535:
        shared = highest - port_base + 1
        raise _error(
            f"port_base={port_base} gives the {shared} tasks that share a node ports up "
            f"to {highest}",
            f"use a port_base of at most {65536 - shared}",
        )
    _check_host_order(addresses)
    task_type, task_id = resolver.get_task_info()
    if task_type is None:
        raise _error(
            f"this task's rank (SLURM_PROCID) is not one of the step's {num_tasks} tasks", _STEP_FIX
        )
    tf_config = {
        "cluster": spec,
        "task": {"type": task_type, "index": task_id},
        "rpc_layer": rpc_layer,
    }
    try:
        return parse_tf_config(tf_config)
    except ClusterConfigError as exc:
        raise ClusterConfigError(f"{_PREFIX}: {exc}") from exc


def _check_arguments(port_base: Any, num_ps: Any, chief: Any) -> None:
    if (
        isinstance(port_base, bool)
        or not isinstance(port_base, int)
        or not (1 <= port_base <= 65535)
    ):
        raise _error(f"port_base={port_base!r} is not a port", "use an integer from 1 to 65535")
    if isinstance(num_ps, bool) or not isinstance(num_ps, int) or num_ps < 0:
        raise _error(f"num_ps={num_ps!r} is not a count", "pass 0 or more parameter servers")
    problem = cluster_lib.ps_without_chief(num_ps, bool(chief))
    if problem:
        raise _error(f"num_ps={num_ps}: {problem}", "pass chief=True")


def _resolver(jobs: dict[str, int] | None, port_base: int, rpc_layer: str):
    """Returns TF's resolver for this job step; `jobs` None makes every task a worker."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    try:
        return tf.distribute.cluster_resolver.SlurmClusterResolver(
            jobs=jobs,
            port_base=port_base,
            gpus_per_node=_GPU_SLOTS,
            gpus_per_task=1,
            auto_set_gpu=False,
            rpc_layer=rpc_layer,
        )
    except (RuntimeError, ValueError) as exc:
        raise _resolver_error(exc) from exc


def _cluster_spec(resolver) -> dict[str, list[str]]:
    """The resolver's cluster as {job: [host:port, ...]}; every listed job has a task."""
    return {job: list(addresses) for job, addresses in resolver.cluster_spec().as_dict().items()}


def _check_host_order(addresses: list[str]) -> None:
    """Rejects hosts whose text order (TF's) differs from their numeric order (Slurm's).

    TF's resolver sorts host names as text, so "n10" comes before "n9", while Slurm lists and
    fills nodes in numeric order: the addresses would not be where the ranks run.
    """
    hosts = sorted({address.rpartition(":")[0] for address in addresses})
    numeric = sorted(hosts, key=_natural_key)
    if hosts != numeric:
        raise _error(
            f"TensorFlow's SlurmClusterResolver orders hosts as text ({', '.join(hosts)})"
            f" but Slurm orders them as numbers ({', '.join(numeric)}), so task addresses "
            "would not match where the tasks run",
            "run on nodes whose names sort alike both ways (e.g. zero-padded, via sbatch "
            "--nodelist) or set TF_CONFIG instead",
        )


def _natural_key(host: str) -> list[tuple[int, int | str]]:
    return [
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", host) if part
    ]


def _resolver_error(exc: Exception) -> ClusterConfigError:
    """Turns the resolver's RuntimeError or ValueError into one line with a fix."""
    message = " ".join(str(exc).split())
    missing = _MISSING_VAR_RE.search(message)
    if missing:
        return _error(
            f"{missing.group(1)} is not set, so this process is not a task of a Slurm job step",
            _SRUN_FIX,
        )
    return _error(f"TensorFlow's SlurmClusterResolver failed: {message.rstrip('.')}", _STEP_FIX)


def _error(problem: str, fix: str) -> ClusterConfigError:
    return ClusterConfigError(errors.problem(_PREFIX, problem, fix))
