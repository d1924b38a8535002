"""This task's `ClusterConfig` from the Slurm job step it runs in, derived from what Slurm says
about that step. Pure Python: no Slurm command, no TensorFlow.

`srun` sets, in every task of a step:

- `SLURM_STEP_NODELIST`: the step's nodes as a Slurm host list ("gpu[9-10]", "n[01-04],x7"), in
  Slurm's order, which is the order tasks are laid out in (numeric: gpu9 before gpu10);
- `SLURM_STEP_TASKS_PER_NODE`: tasks on each of those nodes ("2(x3),1");
- `SLURM_STEP_NUM_TASKS` and `SLURM_PROCID`: the step's task count and this task's rank;
- `SLURM_DISTRIBUTION`: how ranks go onto the nodes (unset: `block`); `SLURM_NODEID` and
  `SLURM_LOCALID`: this task's node (an index into the node list) and its place on the node.

Ranks are laid out `block` (node by node) or `cyclic` (one per node in turn). tfdist checks the
layout it derives against this task's own `SLURM_NODEID` and `SLURM_LOCALID`: a distribution it
cannot derive (`plane`, `arbitrary`, or one whose ranks land elsewhere) is one line before any
server starts, not a task listening on the wrong node while its peers wait. Ranks are given to
jobs in order: the chief (rank 0), the parameter servers, then the workers.

Ports are per job step, so that jobs sharing nodes never share one: the n-th task of a node
listens on the n-th port of `SLURM_STEP_RESV_PORTS` (what `srun --resv-ports` reserved for the
step, where slurm.conf has `MpiParams=ports=...`), else on `port_base + 1000 n + SLURM_JOB_ID
mod 1000` (jobs whose ids differ by less than 1000 never collide). A port still taken is one
line when the server starts (`strategies.server`), and the tasks check each other's job at join
(`strategies.job_check`).

The result goes through `parse_tf_config`, so a Slurm cluster is checked like a TF_CONFIG.
Errors are one-line `ClusterConfigError`s that name what is missing and the fix.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

from . import cluster as cluster_lib
from .cluster import ClusterConfig
from .cluster import ClusterConfigError
from .cluster import Origin
from .cluster import parse_tf_config
from .messages import cut
from .messages import problem as one_line

_PREFIX = "Slurm cluster"
_SRUN_FIX = (
    "start each task with srun inside a Slurm allocation (sbatch or salloc), e.g. "
    "`srun tfdist train ...`, or set TF_CONFIG instead"
)
_STEP_FIX = "check this job step's SLURM_STEP_* variables (srun sets them) or set TF_CONFIG instead"
_DISTRIBUTION_FIX = (
    "run the step with srun's default distribution (block, or -m cyclic), e.g. drop -m/"
    "--distribution, or set TF_CONFIG instead"
)
_LAYOUTS = ("block", "cyclic")
_COUNT_RE = re.compile(r"(\d+)(?:\(x(\d+)\))?")
_HOST_RE = re.compile(r"([^\[\],]*)(?:\[([^\]]*)\])?([^\[\],]*)")
_MAX_NODES = 65536
RESERVED_PORTS = "SLURM_STEP_RESV_PORTS"
JOB_SLOTS = 1000  # Ports per place on a node, one per job id modulo this.
_RESERVED_FIX = (
    "end what holds it, or keep slurm.conf's MpiParams=ports range for Slurm alone (Slurm "
    "reserved the port for this step)"
)
_DERIVED_FIX = (
    "run the step with srun --resv-ports, which reserves ports per step where slurm.conf has "
    "MpiParams=ports=12000-12999, or give the job whole nodes (sbatch --exclusive), or another "
    "port_base (--slurm_port_base)"
)


def cluster_from_slurm(
    port_base: int = 8888,
    *,
    num_ps: int = 0,
    chief: bool = False,
    rpc_layer: str = "grpc",
    environ: Mapping[str, str] | None = None,
) -> ClusterConfig:
    """Returns the cluster of the Slurm job step this process runs in, seen from this task.

    Call it in each task that `srun` started; every task of the step must pass the same
    arguments. Leaves CUDA_VISIBLE_DEVICES alone (Slurm's GPU binding decides what a task sees).

    Args:
        port_base: without reserved ports, where the ports derived from the job id start.
        num_ps: how many tasks are parameter servers (ranks 1.. after the chief).
        chief: whether rank 0 is the chief; parameter servers need one (the coordinator).
        rpc_layer: the protocol between tasks.
        environ: the environment to read; `os.environ` when None.

    Raises:
        ClusterConfigError: not in a Slurm job step, too few tasks for the layout, ports that
            cannot be derived (`step_ports`), or a task layout tfdist cannot derive.
    """
    _check_arguments(port_base, num_ps, chief)
    env = os.environ if environ is None else environ
    rank, num_tasks = _int(env, "SLURM_PROCID"), _int(env, "SLURM_STEP_NUM_TASKS")
    nodes = expand_hostlist(_require(env, "SLURM_STEP_NODELIST"))
    counts = expand_counts(_require(env, "SLURM_STEP_TASKS_PER_NODE"))
    if len(counts) != len(nodes) or sum(counts) != num_tasks:
        raise _error(
            f"SLURM_STEP_TASKS_PER_NODE={env['SLURM_STEP_TASKS_PER_NODE']!r} does not lay "
            f"SLURM_STEP_NUM_TASKS={num_tasks} task(s) onto the {len(nodes)} node(s) of "
            f"SLURM_STEP_NODELIST={env['SLURM_STEP_NODELIST']!r}",
            _STEP_FIX,
        )
    if not 0 <= rank < num_tasks:
        raise _error(
            f"this task's rank (SLURM_PROCID) is not one of the step's {num_tasks}", _STEP_FIX
        )
    places = task_places(counts, env.get("SLURM_DISTRIBUTION", "") or "block")
    _check_own_place(env, places[rank])
    num_workers = num_tasks - int(chief) - num_ps
    if num_workers < 1:
        raise _error(
            f"the job step has {num_tasks} task(s), but chief={chief} and num_ps={num_ps} leave "
            "no worker",
            f"ask for at least {int(chief) + num_ps + 1} tasks (sbatch --ntasks)",
        )
    ports, origin = step_ports(env, port_base, max(counts))
    addresses = [f"{nodes[node]}:{ports[local]}" for node, local in places]
    jobs = [("chief", int(chief)), ("ps", num_ps), ("worker", num_workers)]
    spec, first = {}, 0
    for job, size in jobs:
        if size:
            spec[job] = addresses[first : first + size]
        if first <= rank < first + size:
            task = {"type": job, "index": rank - first}
        first += size
    tf_config = {"cluster": spec, "task": task, "rpc_layer": rpc_layer}
    try:
        return dataclasses.replace(parse_tf_config(tf_config), origin=origin)
    except ClusterConfigError as exc:
        raise ClusterConfigError(f"{_PREFIX}: {exc}") from exc


def step_ports(env: Mapping[str, str], port_base: int, per_node: int) -> tuple[list[int], Origin]:
    """The port of each place on a node (the n-th task of a node listens on the n-th), for
    `per_node` tasks on the busiest node, and the step's `Origin`: the ports srun reserved for
    the step, else ports derived from the job id (see the module's docstring).

    Raises:
        ClusterConfigError: reserved ports that are not a port list or too few, a job id that is
            not a number, or a port_base whose ports pass 65535.
    """
    job_id, job = _int(env, "SLURM_JOB_ID"), job_of(env)
    reserved = env.get(RESERVED_PORTS, "").strip()
    if reserved:
        ports = expand_ports(reserved)
        if len(ports) < per_node:
            raise _error(
                f"{RESERVED_PORTS}={cut(repr(reserved))} reserves {len(ports)} port(s), but "
                f"{per_node} tasks share a node",
                "run the step with srun --resv-ports (one port per task on a node), or unset "
                f"{RESERVED_PORTS}",
            )
        said = f"ports {cut(reserved)} reserved for the step by Slurm ({RESERVED_PORTS})"
        return ports[:per_node], Origin(job, said, _RESERVED_FIX)
    highest = port_base + JOB_SLOTS * per_node - 1
    if highest > 65535:
        raise _error(
            f"port_base={port_base} gives the {per_node} tasks that share a node ports up to "
            f"{highest} ({JOB_SLOTS} per task, one for each job id modulo {JOB_SLOTS})",
            f"use a port_base of at most {65536 - JOB_SLOTS * per_node}, or srun --resv-ports",
        )
    slot = job_id % JOB_SLOTS
    said = (
        f"ports from the job id, srun having reserved none: {port_base} + SLURM_JOB_ID mod "
        f"{JOB_SLOTS} ({slot}) + {JOB_SLOTS} n for the n-th task on a node"
    )
    ports = [port_base + JOB_SLOTS * local + slot for local in range(per_node)]
    return ports, Origin(job, said, _DERIVED_FIX)


def job_of(env: Mapping[str, str]) -> str:
    """ "Slurm job J step S": the job step of the task whose environment is `env`.

    Raises:
        ClusterConfigError: `env` is not a Slurm job step task's.
    """
    return f"Slurm job {_int(env, 'SLURM_JOB_ID')} step {_int(env, 'SLURM_STEP_ID')}"


def expand_ports(text: str) -> list[int]:
    """SLURM_STEP_RESV_PORTS ("12000-12001", "12000,12005") as its ports, in order.

    Raises:
        ClusterConfigError: not such a list, or a port outside 1..65535.
    """
    ports: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        numbers = (low, high if dash else low)
        if not all(n.isascii() and n.isdigit() and len(n) <= 5 for n in numbers) or not (
            1 <= int(low) <= int(numbers[1]) <= 65535
        ):
            raise _error(
                f"{RESERVED_PORTS}={cut(repr(text))} is not a list of ports such as "
                "'12000-12003' or '12000,12005'",
                f"run the step with srun --resv-ports, or unset {RESERVED_PORTS}",
            )
        ports.extend(range(int(low), int(numbers[1]) + 1))
    return ports


def step_tasks(environ: Mapping[str, str] | None = None) -> int:
    """How many tasks the Slurm job step this process runs in has (SLURM_STEP_NUM_TASKS): 0
    outside a step, 2 for a value that is not a count (so that `cluster_from_slurm` says what is
    wrong with it)."""
    value = (os.environ if environ is None else environ).get("SLURM_STEP_NUM_TASKS", "").strip()
    if not value:
        return 0
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else 2


def expand_hostlist(text: str, source: str = "SLURM_STEP_NODELIST") -> list[str]:
    """A Slurm host list ("gpu[9-10,12],login1") as its host names, in Slurm's order.

    Raises:
        ClusterConfigError: not a host list Slurm writes.
    """
    hosts: list[str] = []
    position = 0
    while position < len(text):
        match = _HOST_RE.match(text, position)
        prefix, ranges, suffix = match.groups()
        if match.end() == position or not (prefix or ranges):
            break
        if ranges is None:
            hosts.append(prefix + suffix)
        else:
            hosts.extend(
                f"{prefix}{number}{suffix}" for number in _expand_ranges(text, ranges, source)
            )
        position = match.end()
        if position < len(text) and text[position] != ",":
            break
        position += 1
    if position < len(text) or not hosts or len(hosts) > _MAX_NODES:
        raise _error(f"{source}={cut(repr(text))} is not a Slurm host list", _STEP_FIX)
    return hosts


def _expand_ranges(text: str, ranges: str, source: str) -> list[str]:
    """ "01-03,7" as ["01", "02", "03", "7"]: each range keeps its zero padding."""
    numbers = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        if not (
            low.isascii() and low.isdigit() and (not high or (high.isascii() and high.isdigit()))
        ):
            raise _error(f"{source}={cut(repr(text))} is not a Slurm host list", _STEP_FIX)
        width = len(low) if low.startswith("0") else 0
        last = int(high) if high else int(low)
        if last - int(low) > _MAX_NODES:
            raise _error(f"{source}={cut(repr(text))} names too many hosts", _STEP_FIX)
        numbers.extend(f"{number:0{width}d}" for number in range(int(low), last + 1))
    return numbers


def expand_counts(text: str) -> list[int]:
    """SLURM_STEP_TASKS_PER_NODE ("2(x3),1") as tasks per node ([2, 2, 2, 1]).

    Raises:
        ClusterConfigError: not such a list.
    """
    counts = []
    for part in text.split(","):
        match = _COUNT_RE.fullmatch(part.strip())
        repeat = int(match.group(2) or 1) if match else 0
        if not match or not 0 < repeat <= _MAX_NODES or int(match.group(1)) < 1:
            raise _error(
                f"SLURM_STEP_TASKS_PER_NODE={cut(repr(text))} is not a list of task counts "
                "such as '2(x3),1'",
                _STEP_FIX,
            )
        counts.extend([int(match.group(1))] * repeat)
    return counts


def task_places(counts: list[int], distribution: str) -> list[tuple[int, int]]:
    """(node index, place on the node) of every rank, as Slurm lays out `counts` under
    `distribution` (SLURM_DISTRIBUTION: "block" or "cyclic", with an optional ":..." for sockets,
    which leaves nodes alone).

    Raises:
        ClusterConfigError: a distribution tfdist cannot derive (plane, arbitrary).
    """
    layout = distribution.split(":")[0].split(",")[0]
    if layout not in _LAYOUTS:
        raise _error(
            f"SLURM_DISTRIBUTION={cut(repr(distribution))} lays tasks out in a way tfdist "
            "cannot derive (it knows block and cyclic)",
            _DISTRIBUTION_FIX,
        )
    if layout == "block":
        return [(node, local) for node, count in enumerate(counts) for local in range(count)]
    places, placed = [], [0] * len(counts)
    while len(places) < sum(counts):
        for node, count in enumerate(counts):
            if placed[node] < count:
                places.append((node, placed[node]))
                placed[node] += 1
    return places


def _check_own_place(env: Mapping[str, str], place: tuple[int, int]) -> None:
    """Refuses a layout that puts this task where Slurm did not: its address would be another
    node's, and its peers would wait for it there."""
    said = (env.get("SLURM_NODEID"), env.get("SLURM_LOCALID"))
    if None in said or said == (str(place[0]), str(place[1])):
        return
    raise _error(
        f"SLURM_PROCID={env['SLURM_PROCID']} runs on node {said[0]} as its task {said[1]} "
        f"(SLURM_NODEID, SLURM_LOCALID), but SLURM_DISTRIBUTION="
        f"{env.get('SLURM_DISTRIBUTION', 'block')!r} puts it on node {place[0]} as task "
        f"{place[1]}, so its address would be another task's",
        _DISTRIBUTION_FIX,
    )


def _require(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value.strip():
        raise _error(
            f"{name} is not set, so this process is not a task of a Slurm job step", _SRUN_FIX
        )
    return value.strip()


def _int(env: Mapping[str, str], name: str) -> int:
    value = _require(env, name)
    if not (value.isascii() and value.isdigit() and len(value) <= 9):
        raise _error(f"{name}={cut(repr(value))} is not a task number", _STEP_FIX)
    return int(value)


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


def _error(problem: str, fix: str) -> ClusterConfigError:
    return ClusterConfigError(one_line(_PREFIX, problem, fix))
