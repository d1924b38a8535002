"""Rehearses an sbatch script on a real Slurm cluster built on this machine
(`slurm_cluster.SlurmCluster`: Debian's slurmctld and one slurmd per node, on emulated hosts
named node1, node2, ...): the script is submitted as written with sbatch, its output followed
on stdout, and its end said in one line with the job's state and exit code. A signal or the time
limit cancels the job (scancel) before the cluster is taken down. Where Slurm is not installed,
one line says how to install it."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import sys
import time
from collections.abc import Sequence

from tfdist import errors
from tfdist.strategies import slurm
from tfdist.cluster import RehearsalError
from tfdist.cluster import processes
from tfdist.cluster import supervisor
from tfdist.cluster.rehearsal import hosts as hosts_lib
from tfdist.cluster.rehearsal import slurm_cluster
from tfdist.cluster.rehearsal.jobset_run import ANNOUNCER
from tfdist.cluster.rehearsal.jobset_run import Options

_DIRECTIVE_RE = re.compile(r"#SBATCH\s+(.*)")
_SHELLS = ("#!/bin/bash", "#!/usr/bin/env bash", "#!/bin/sh")
_MAX_NODES = 64
_NODE_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,62}")
_POLL_S = 0.25


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
    for number, line in enumerate(lines, 1):
        match = _DIRECTIVE_RE.fullmatch(line.strip())
        if match:
            options.update(_directive(match.group(1), number))
    ntasks = options.get("ntasks", "")
    if not (ntasks.isascii() and ntasks.isdigit()) or not 0 < int(ntasks) <= 4096:
        raise RehearsalError(
            f"#SBATCH --ntasks={options.get('ntasks')!r} is not a "
            "count of tasks from 1 to 4096; set it in the script."
        )
    return options


def _directive(text: str, number: int) -> dict[str, str]:
    """The options of one #SBATCH line (its `number`), read as sbatch reads them: `--name=value`,
    `--name value`, `-n value` and `-nvalue` (short names as their long ones), flags without a
    value as "".

    Raises:
      RehearsalError: its quoting is unbalanced.
    """
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise RehearsalError(
            f"the script's #SBATCH line {number} cannot be read as sbatch reads it ({error}); "
            "balance its quotes."
        ) from None
    options = {}
    while words:
        word = words.pop(0)
        if word.startswith("--"):
            name, equals, value = word[2:].partition("=")
        elif word.startswith("-") and len(word) > 1:
            name, value = _SHORT.get(word[1], word[1]), word[2:]
            equals = "=" if value else ""
        else:
            continue  # Not an option: sbatch stops reading the line's options at it.
        if not equals and name not in _FLAGS and words and not words[0].startswith("-"):
            value = words.pop(0)
        options[name] = value
    return options


# sbatch's short options as their long names, and its options that take no value.
_SHORT = {
    "n": "ntasks", "N": "nodes", "J": "job-name", "o": "output", "e": "error", "a": "array",
    "t": "time", "p": "partition", "A": "account", "c": "cpus-per-task", "G": "gpus",
    "D": "chdir", "q": "qos", "C": "constraint", "w": "nodelist", "x": "exclude",
    "d": "dependency", "i": "input", "L": "licenses", "M": "clusters", "m": "distribution",
    "H": "hold", "O": "overcommit", "Q": "quiet", "s": "oversubscribe", "v": "verbose",
    "W": "wait", "h": "help", "V": "version",
}  # fmt: skip
_FLAGS = {
    "hold", "overcommit", "quiet", "oversubscribe", "verbose", "wait", "help", "version",
    "requeue", "no-requeue", "exclusive", "contiguous", "parsable", "test-only", "spread-job",
    "use-min-nodes", "ignore-pbs", "no-kill", "usage", "reboot",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SlurmJob:
    """A batch script as the rehearsal runs it: its path, job name, tasks and node names."""

    script_path: str
    name: str
    num_tasks: int
    nodes: tuple[str, ...]


def job(script_path: str, text: str, *, nodes: int | Sequence[str] | None) -> SlurmJob:
    """The job of the batch script `text` on `nodes` (a count of nodes named node1, node2, ...,
    or their names; else its #SBATCH --nodes, else one per task, at most 64).

    Raises:
      RehearsalError: the script or node count cannot be rehearsed.
    """
    directives = read(text)
    num_tasks = int(directives["ntasks"])
    declared = directives.get("nodes", "")
    if nodes is None and declared.isascii() and declared.isdigit():
        nodes = int(directives["nodes"])
    if nodes is None:
        nodes = min(num_tasks, _MAX_NODES)
    names = list(nodes) if _is_list(nodes) else node_names(nodes)
    if not 0 < len(names) <= min(num_tasks, _MAX_NODES):
        raise RehearsalError(
            f"slurm_nodes={len(names)} node(s) do not fit {num_tasks} task(s); pass from 1 to "
            f"{min(num_tasks, _MAX_NODES)} nodes."
        )
    if "array" in directives:
        raise RehearsalError(
            f"#SBATCH --array={directives['array']!r}: a job array is not rehearsed; rehearse "
            "the script `tfdist manifest` writes without --slurm_sweep and --slurm_array (one "
            "of its runs), or run the array on Slurm."
        )
    return SlurmJob(
        os.path.abspath(script_path),
        _safe_name(directives.get("job-name") or os.path.basename(script_path)),
        num_tasks,
        tuple(names),
    )


def _safe_name(name: str) -> str:
    """`name` (the script's job name) as one file name in the log dir: its letters, digits, '.',
    '_' and '-' (others as '_'), at most 100 of them, never '.' or '..' alone."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100].lstrip(".")
    return safe or "job"


def _is_list(nodes) -> bool:
    return nodes is not None and not isinstance(nodes, int)


def nodes_asked(text: str) -> int | list[str]:
    """`--slurm_nodes`: a count of nodes (named node1, node2, ...) or their names as a Slurm host
    list ("gpu[9-10]").

    Raises:
      RehearsalError: neither, or names that are not host names or name a node twice.
    """
    if text.isascii() and text.isdigit() and len(text) <= 4 and 0 < int(text) <= _MAX_NODES:
        return int(text)
    try:
        names = slurm.expand_hostlist(text, source="slurm_nodes")
    except slurm.ClusterConfigError:
        names = []
    bad = next((name for name in names if not _NODE_NAME_RE.fullmatch(name)), None)
    if not names or bad is not None or len(set(names)) < len(names) or len(names) > _MAX_NODES:
        raise RehearsalError(
            f"slurm_nodes={errors.shown(text)} is neither a count from 1 to {_MAX_NODES} nor a "
            "Slurm host list of distinct host names (letters, digits and '-'); pass e.g. "
            "--slurm_nodes=2 or --slurm_nodes=gpu[9-10]."
        )
    return names


def node_names(count: int) -> list[str]:
    """node1, node2, ...: named as clusters are, so text and numeric order differ past 9."""
    return [f"node{number}" for number in range(1, count + 1)]


def run(slurm_job: SlurmJob, options: Options) -> int:
    """Submits the batch script to a real Slurm cluster of `slurm_job.nodes` with
    `options.made()`; returns its exit code (124 on the timeout, 128 + N on signal N).

    Raises:
      NoHosts: this machine cannot emulate hosts, or Slurm is not installed (how to install it).
    """
    watcher = supervisor.Supervisor(ANNOUNCER, timeout_s=options.timeout_s, everything="the job")
    hosts_lib.clean_stale()
    slurm_cluster.require_slurm()
    cpus = max(2, -(-slurm_job.num_tasks // len(slurm_job.nodes)))

    def rehearse() -> int:
        with slurm_cluster.SlurmCluster(
            slurm_job.nodes,
            os.path.join(options.log_dir, "slurm"),
            cpus_per_node=cpus,
            checkpoint=watcher.checkpoint,
        ) as cluster:
            print(
                f"{ANNOUNCER}: Slurm job {slurm_job.name} on real Slurm ({cluster.version}: "
                f"slurmctld and {len(slurm_job.nodes)} slurmd on emulated hosts "
                f"{', '.join(slurm_job.nodes)}); logs in {options.log_dir}",
                flush=True,
            )
            output = os.path.join(options.log_dir, f"{slurm_job.name}.out")
            job_id = cluster.submit(
                slurm_job.script_path, f"--chdir={os.getcwd()}", f"--output={output}"
            )
            try:
                state = _follow(cluster, job_id, output, watcher)
            finally:
                cluster.command("scancel", str(job_id))  # Nothing once it ended.
            code = cluster.exit_code(job_id)
            why = (
                f" (Slurm could not start it on its nodes: read slurmd-NODE.log in "
                f"{cluster.directory})"
                if state == "LAUNCH_FAILED"
                else ""
            )
            watcher.say(
                f"Slurm job {slurm_job.name} (job {job_id}) {state}{why}, exit code {code}, on "
                f"real Slurm with {len(slurm_job.nodes)} node(s) in "
                f"{time.monotonic() - watcher.start_s:.1f} s",
                error=state != "COMPLETED",
            )
            return code if state != "COMPLETED" or code else 0

    return watcher.run(rehearse, setting_up="the Slurm cluster was still being set up; removed it")


def _follow(cluster, job_id: int, output: str, watcher: supervisor.Supervisor) -> str:
    """Copies the job's output to stdout as it is written until the job ends; its state.

    Raises:
      processes.Stopped, supervisor.OutOfTime: a signal, or the time limit (the caller cancels
        the job).
    """
    offset = 0
    while True:
        state = cluster.state(job_id)
        offset = _copy(output, offset)
        if state in slurm_cluster.DONE_STATES:
            _copy(output, offset)
            return state
        _refuse_a_stopped_cluster(cluster, job_id, state)
        processes.raise_if_stopped()
        if watcher.out_of_time():
            raise supervisor.OutOfTime("cancelled the job")
        time.sleep(_POLL_S)


def _refuse_a_stopped_cluster(cluster, job_id: int, state: str) -> None:
    """Raises RehearsalError when the job (in `state`) cannot end on its own: a daemon of its
    cluster exited (the script's `scontrol shutdown`), or it waits for nodes that are down (the
    script set them DOWN)."""
    stopped = cluster.stopped_daemon()
    pending = stopped is None and state == "PENDING"
    reason = cluster.show(job_id).get("Reason", "") if pending else ""
    if stopped is None and reason not in ("NodeDown", "ReqNodeNotAvail"):
        return
    what = f"{stopped.split()[0]} exited" if stopped else f"its nodes are down (Reason={reason})"
    raise RehearsalError(
        f"Slurm job {job_id} cannot end: {what}, by the script's own doing (scontrol shutdown, "
        f"a node set DOWN) or a crash; read the logs in {cluster.directory}, and rehearse a "
        "script that leaves its cluster up."
    )


def _copy(path: str, offset: int) -> int:
    """Writes what `path` holds past `offset` to stdout; the new offset."""
    try:
        with open(path, "rb") as output:
            output.seek(offset)
            data = output.read()
    except FileNotFoundError:
        return offset
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return offset + len(data)
