"""Rehearses an sbatch script on emulated Slurm nodes: the batch script runs on the first node
with the variables sbatch gives it, and an `srun` of ours on its PATH (`rehearsal.srun`) starts
each job step's tasks on their nodes with the variables srun gives a task (SLURM_PROCID,
SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, ...), tasks laid out in blocks as Slurm's default
distribution does. Nodes are named node01, node02, ... (text order is numeric order, as
TensorFlow's SlurmClusterResolver needs)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import stat
import threading

from tfdist.cluster import PYTHON
from tfdist.cluster import RehearsalError
from tfdist.cluster import processes
from tfdist.cluster import supervisor
from tfdist.cluster.rehearsal import hosts as hosts_lib
from tfdist.cluster.rehearsal import local_image
from tfdist.cluster.rehearsal.jobset_run import ANNOUNCER
from tfdist.cluster.rehearsal.jobset_run import Options

ENV_NODES = "TFDIST_REHEARSAL_NODES"  # [[hostname, address, namespace], ...] for our srun.
ENV_LOG_DIR = "TFDIST_REHEARSAL_LOG_DIR"
_DIRECTIVE_RE = re.compile(r"#SBATCH\s+(.*)")
_SHELLS = ("#!/bin/bash", "#!/usr/bin/env bash", "#!/bin/sh")
_MAX_NODES = 64


def read(text: str) -> dict[str, str]:
    """The script's #SBATCH options, long names without dashes ("ntasks": "3").

    Raises:
      RehearsalError: not a bash script with #SBATCH --ntasks.
    """
    lines = text.splitlines()
    if not lines or lines[0].strip() not in _SHELLS:
        raise RehearsalError(
            f"the script's first line is {lines[0][:40]!r}, not a "
            "shell's #!; rehearse a script written by `tfdist manifest "
            "--format=slurm`."
            if lines
            else "the script is empty."
        )
    options = {}
    for line in lines:
        match = _DIRECTIVE_RE.fullmatch(line.strip())
        if not match:
            continue
        for word in shlex.split(match.group(1)):
            name, _, value = word.lstrip("-").partition("=")
            options[{"n": "ntasks", "N": "nodes", "J": "job-name"}.get(name, name)] = value
    ntasks = options.get("ntasks", "")
    if not (ntasks.isascii() and ntasks.isdigit()) or not 0 < int(ntasks) <= 4096:
        raise RehearsalError(
            f"#SBATCH --ntasks={options.get('ntasks')!r} is not a "
            "count of tasks from 1 to 4096; set it in the script."
        )
    return options


def node_names(count: int) -> list[str]:
    width = max(2, len(str(count)))
    return [f"node{number:0{width}d}" for number in range(1, count + 1)]


def host_list(names: list[str]) -> str:
    """`names` (node01, node02, ...) as Slurm writes a host list: "node[01-02]"."""
    if len(names) == 1:
        return names[0]
    return f"node[{names[0][4:]}-{names[-1][4:]}]"


def block_layout(num_tasks: int, num_nodes: int) -> list[int]:
    """Tasks on each node under Slurm's default block distribution."""
    base, extra = divmod(num_tasks, num_nodes)
    return [base + (node < extra) for node in range(num_nodes)]


def tasks_per_node(layout: list[int]) -> str:
    """`layout` as Slurm writes SLURM_TASKS_PER_NODE: "2(x2),1"."""
    parts, index = [], 0
    while index < len(layout):
        run = 1
        while index + run < len(layout) and layout[index + run] == layout[index]:
            run += 1
        parts.append(f"{layout[index]}(x{run})" if run > 1 else str(layout[index]))
        index += run
    return ",".join(parts)


@dataclasses.dataclass(frozen=True)
class SlurmJob:
    """A batch script as the rehearsal runs it: its path, job name, tasks and node names."""

    script_path: str
    name: str
    num_tasks: int
    nodes: tuple[str, ...]


def job(script_path: str, text: str, *, nodes: int | None) -> SlurmJob:
    """The job of the batch script `text` on `nodes` nodes (else its #SBATCH --nodes, else one
    per task, at most 64).

    Raises:
      RehearsalError: the script or node count cannot be rehearsed.
    """
    directives = read(text)
    num_tasks = int(directives["ntasks"])
    declared = directives.get("nodes", "")
    if nodes is None and declared.isascii() and declared.isdigit():
        nodes = int(directives["nodes"])
    nodes = nodes or min(num_tasks, _MAX_NODES)
    if not 0 < nodes <= min(num_tasks, _MAX_NODES):
        raise RehearsalError(
            f"slurm_nodes={nodes} does not fit {num_tasks} task(s); pass "
            f"from 1 to {min(num_tasks, _MAX_NODES)} nodes."
        )
    return SlurmJob(
        os.path.abspath(script_path),
        directives.get("job-name") or os.path.basename(script_path),
        num_tasks,
        tuple(node_names(nodes)),
    )


def run(slurm_job: SlurmJob, options: Options) -> int:
    """Runs the batch script on emulated nodes with `options.made()`; returns its exit status
    (124 on the timeout, 128 + N on signal N).

    Raises:
      NoHosts: this machine cannot emulate hosts.
    """
    watcher = supervisor.Supervisor(ANNOUNCER, timeout_s=options.timeout_s, everything="the job")
    hosts_lib.clean_stale()
    nodes = len(slurm_job.nodes)

    def rehearse() -> int:
        with hosts_lib.Hosts(
            [(name,) for name in slurm_job.nodes], checkpoint=watcher.checkpoint
        ) as hosts:
            batch = processes.Process(
                "batch",
                [*hosts.hosts[0].enter(), "bash", slurm_job.script_path],
                local_image.environment(
                    _batch_environment(
                        hosts.hosts, slurm_job.name, slurm_job.num_tasks, options.log_dir
                    )
                ),
                os.path.join(options.log_dir, f"slurm-{os.getpid()}.out"),
                threading.Lock(),
                announcer=ANNOUNCER,
            )

            def start(_) -> processes.Process:
                batch.start(" on node 1 (the batch script)")
                return batch

            print(
                f"{ANNOUNCER}: Slurm job {slurm_job.name} on {nodes} emulated node(s); logs "
                f"in {options.log_dir}",
                flush=True,
            )
            return watcher.watch(
                supervisor.Group(
                    ("batch",),
                    start,
                    lambda *failure: None,
                    closing=lambda status, seconds: (
                        f"Slurm job {slurm_job.name}: the batch script exited {status} on {nodes} "
                        f"emulated node(s) in {seconds:.1f} s"
                    ),
                )
            )

    return watcher.run(
        rehearse, setting_up="the emulated nodes were still being set up; removed them"
    )


def _batch_environment(
    hosts: list[hosts_lib.Host], job_name: str, num_tasks: int, log_dir: str
) -> dict[str, str]:
    """What sbatch gives the batch script, and where our srun finds the nodes."""
    names = [host.hostname for host in hosts]
    return {
        "SLURM_JOB_ID": str(os.getpid()),
        "SLURM_JOB_NAME": job_name,
        "SLURM_NTASKS": str(num_tasks),
        "SLURM_NPROCS": str(num_tasks),
        "SLURM_JOB_NUM_NODES": str(len(names)),
        "SLURM_NNODES": str(len(names)),
        "SLURM_JOB_NODELIST": host_list(names),
        "SLURM_NODELIST": host_list(names),
        "SLURM_TASKS_PER_NODE": tasks_per_node(block_layout(num_tasks, len(names))),
        "SLURM_SUBMIT_DIR": os.getcwd(),
        "SLURMD_NODENAME": names[0],
        "SLURM_CLUSTER_NAME": "rehearsal",
        ENV_NODES: json.dumps([[host.hostname, host.address, host.namespace] for host in hosts]),
        ENV_LOG_DIR: log_dir,
        "PATH": f"{_srun_dir(log_dir)}{os.pathsep}{local_image.environment({})['PATH']}",
    }


def _srun_dir(log_dir: str) -> str:
    """A directory holding our `srun`, which runs a job step on the emulated nodes."""
    bin_dir = os.path.join(log_dir, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    path = os.path.join(bin_dir, "srun")
    with open(path, "w", encoding="utf-8") as shim:
        shim.write(
            f"#!/bin/sh\nexec {' '.join(map(shlex.quote, PYTHON))} -m "
            'tfdist.cluster.rehearsal.srun "$@"\n'
        )
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir
