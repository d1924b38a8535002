"""This task's `ClusterConfig` from the Slurm job step it runs in, derived from what Slurm says
about that step. Pure Python: no Slurm command, no TensorFlow.

`srun` sets, in every task of a step:

- `SLURM_STEP_NODELIST`: the step's nodes as a Slurm host list ("gpu[9-10]", "n[01-04],x7"), in
  Slurm's order, which is the order tasks are laid out in (numeric: gpu9 before gpu10);
- `SLURM_STEP_TASKS_PER_NODE`: tasks on each of those nodes ("2(x3),1");
- `SLURM_STEP_NUM_TASKS` and `SLURM_PROCID`: the step's task count and this task's rank;
- `SLURM_DISTRIBUTION`: how ranks go onto the nodes (unset: `block`); `SLURM_NODEID` and
  `SLURM_LOCALID`: this task's node (an index into the node list) and its place on the node.

Ranks are laid out `block` (node by node) or `cyclic` (one per node in turn); the n-th task of a
node listens on `port_base + n`. tfdist checks the layout it derives against this task's own
`SLURM_NODEID` and `SLURM_LOCALID`: a distribution it cannot derive (`plane`, `arbitrary`, or one
whose ranks land elsewhere) is one line before any server starts, not a task listening on the
wrong node while its peers wait. Ranks are given to jobs in order: the chief (rank 0), the
parameter servers, then the workers.

The result goes through `parse_tf_config`, so a Slurm cluster is checked like a TF_CONFIG.
Errors are one-line `ClusterConfigError`s that name what is missing and the fix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from . import cluster as cluster_lib
from .cluster import ClusterConfig
from .cluster import ClusterConfigError
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
        port_base: the port of the first task on each node; the n-th listens on port_base + n.
        num_ps: how many tasks are parameter servers (ranks 1.. after the chief).
        chief: whether rank 0 is the chief; parameter servers need one (the coordinator).
        rpc_layer: the protocol between tasks.
        environ: the environment to read; `os.environ` when None.

    Raises:
        ClusterConfigError: not in a Slurm job step, too few tasks for the layout, a port past
            65535, or a task layout tfdist cannot derive.
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
    highest = port_base + max(counts) - 1
    if highest > 65535:
        raise _error(
            f"port_base={port_base} gives the {max(counts)} tasks that share a node ports up to "
            f"{highest}",
            f"use a port_base of at most {65536 - max(counts)}",
        )
    addresses = [f"{nodes[node]}:{port_base + local}" for node, local in places]
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
        return parse_tf_config(tf_config)
    except ClusterConfigError as exc:
        raise ClusterConfigError(f"{_PREFIX}: {exc}") from exc


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
