"""A Slurm batch script for a `tfdist train` command line: its `srun` runs one `tfdist train` per
Slurm task, and each task finds its cluster with TensorFlow's `SlurmClusterResolver`
(`tfdist.strategies.slurm.cluster_from_slurm`)."""

import re
import shlex
from collections.abc import Sequence

from tfdist.cluster.manifests import checks

SLURM_RESOLVER_FLAG = "--cluster_resolver=slurm"
SLURM_PORT_FLAG = "--slurm_port_base"

_SLURM_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# ASCII digits: \d alone takes e.g. Arabic-Indic ones, which Slurm does not.
_SLURM_TIME_RE = re.compile(
    r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|unlimited|infinite", re.ASCII
)


def slurm(
    *,
    job_name: str,
    train_args: Sequence[str],
    num_workers: int,
    num_ps: int = 0,
    chief: bool = False,
    time_limit: str = "01:00:00",
    port: int = 8888,
    gpus_per_task: int = 0,
) -> str:
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
    checks.require(
        isinstance(job_name, str) and bool(_SLURM_NAME_RE.fullmatch(job_name)),
        "slurm job_name",
        job_name,
        'use letters, digits, ".", "_" and "-", e.g. "tfdist-train"',
    )
    checks.require(
        isinstance(time_limit, str) and bool(_SLURM_TIME_RE.fullmatch(time_limit)),
        "slurm time_limit",
        time_limit,
        'use a Slurm time such as "30", "01:00:00" or "2-00:00:00"',
        problem="is not a Slurm time",
    )
    checks.check_layout("slurm", num_workers=num_workers, num_ps=num_ps, chief=chief)
    checks.check_port("slurm port", port)
    checks.require(
        checks.is_int(gpus_per_task) and gpus_per_task >= 0,
        "slurm gpus_per_task",
        gpus_per_task,
        "pass 0 for no GPUs or a positive number of GPUs per task",
        problem="is not a count",
    )
    args = checks.check_args("slurm", train_args)
    num_tasks = int(chief) + num_workers + num_ps
    # Slurm may put every task on one node, whose n-th task listens on port + n.
    checks.require(
        port + num_tasks - 1 <= 65535,
        "slurm port",
        port,
        f"use a port of at most {65536 - num_tasks}",
        problem=f"gives {num_tasks} tasks that may share a node ports up to {port + num_tasks - 1}",
    )
    layout = checks.describe_layout(num_workers=num_workers, num_ps=num_ps, chief=chief)
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
    return [
        SLURM_RESOLVER_FLAG,
        f"{SLURM_PORT_FLAG}={port}",
        *([f"--num_ps={num_ps}"] if num_ps else []),
        *(["--chief"] if chief else []),
    ]
