"""A Slurm batch script for a `tfdist train` command line (or a program of the user's): its `srun`
runs one task per Slurm task, and each task derives its cluster from the job step
(`tfdist.strategies.slurm.cluster_from_slurm`). The batch shell passes every notice that reaches
it on to the tasks, requeues a job that saved, keeps every attempt's output, and runs each array
task of a sweep in a model dir of its own."""

import re
from collections.abc import Sequence

from tfdist.cluster import GRACE_ENV
from tfdist.cluster.manifests import checks
from tfdist.cluster.manifests import sbatch_shell
from tfdist.cluster.manifests.jobset_checks import GRACE_S
from tfdist.cluster.manifests.jobset_checks import MAX_GRACE_S
from tfdist.cluster.manifests.sbatch_site import SlurmSite
from tfdist.cluster.manifests.sbatch_sweep import Sweep
from tfdist.strategies.slurm import JOB_SLOTS

SLURM_RESOLVER_FLAG = "--cluster_resolver=slurm"
SLURM_PORT_FLAG = "--slurm_port_base"
TIME_LIMIT = "01:00:00"

_MAX_TASKS_PER_NODE = 1024
_NOTICE_SIGNAL = "SIGUSR1"  # What --signal sends before the time limit; the tasks save on it.
_PYTHON_WORD = '"$PYTHON"'  # The interpreter's variable, expanded by the shell in each task.
_PORTS_WORD = '"${RESV_PORTS[@]}"'  # srun's --resv-ports where the site reserves step ports.
# slurm.conf's MpiParams=ports=A-B, without which srun --resv-ports fails the step.
_SITE_RESERVES_PORTS = (
    "scontrol show config 2>/dev/null | grep -E '^MpiParams *=.*ports=' >/dev/null"
)
_SLURM_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# ASCII digits: \d alone takes e.g. Arabic-Indic ones, which Slurm does not.
_SLURM_TIME_RE = re.compile(
    r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|unlimited|infinite", re.ASCII
)


def slurm(
    *,
    job_name: str,
    train_args: Sequence[str] | None,
    num_workers: int,
    num_ps: int = 0,
    chief: bool = False,
    time_limit: str = TIME_LIMIT,
    port: int = 8888,
    gpus_per_task: int = 0,
    tasks_per_node: int | None = None,
    nodes: int | None = None,
    python: str = "python3",
    program: Sequence[str] | None = None,
    grace_s: int = GRACE_S,
    site: SlurmSite = SlurmSite(),
    sweep: Sweep | None = None,
    expand_vars: bool = False,
) -> str:
    """Returns an sbatch script that runs one `tfdist train <train_args>` (or `program`) per
    Slurm task.

    The job has chief + num_workers + num_ps tasks. `srun` starts every task with
    `--cluster_resolver=slurm` and the cluster layout, so that each derives the same cluster from
    its job step (`tfdist.strategies.slurm`): ranks go to the chief (rank 0), then the
    parameter servers, then the workers; the n-th task on a node (counting from 0) listens on
    the n-th port `srun --resv-ports` reserved for the step where the site's slurm.conf has
    `MpiParams=ports=...`, else on `port + 1000 n + SLURM_JOB_ID mod 1000`. `srun
    --kill-on-bad-exit` ends every task when one fails, and `--label` prefixes each line with
    its rank. srun runs in the background: a notice that reaches the
    batch shell goes on to every task as SIGUSR1, the tasks save at one step and exit 75, and
    the script then requeues its own job (the array task's own, in an array). Without a model
    dir nothing is saved, so nothing is requeued: `tfdist train` needs one, and a program
    without `--model_dir` gets `#SBATCH --no-requeue`. The script exits with srun's status.

    Args:
        job_name: the Slurm job name (letters, digits, ".", "_" and "-").
        train_args: the flags after `tfdist train`, with a `--model_dir` every node shares;
          None with `program`.
        num_workers: the worker tasks (the chief, if any, comes on top).
        num_ps: the parameter-server tasks; they need a chief.
        chief: whether rank 0 is a chief (the ParameterServerStrategy coordinator).
        time_limit: the job's wall-clock limit in a Slurm time format, e.g. "01:00:00", "2-00:00".
        port: where the ports derived from the job id start, on a site that reserves none.
        gpus_per_task: GPUs Slurm binds to each task; 0 asks for none.
        tasks_per_node: tasks on each node (1: one per node; on GPU nodes, one per GPU); with
          `nodes`, the most on a node. None: 1, or as Slurm spreads them over `nodes`.
        nodes: the job's nodes, from 1 to the task count (fewer than the tasks: some nodes run
          more than one, as Slurm lays them out). None: as many as `tasks_per_node` needs.
        python: the interpreter every node runs (with tfdist installed: a virtual environment on
          a file system the nodes share); `TFDIST_PYTHON` overrides it when the job runs.
        program: a program of the user's (`python my_train.py ...`) instead of `tfdist train`;
          it takes tfdist's flags (`tfdist.define_flags`) and gets the Slurm ones appended.
        grace_s: how long before the time limit Slurm sends SIGUSR1 (`--signal`), which the
          tasks take as a preemption notice (`--preemption_signal=SIGUSR1`).
        site: the site's own options (partition, account, ...): `SlurmSite`.
        sweep: a job array, each array task with its own flag values and model dir
          (`<model_dir>/<array index>`) and its summary in `<that dir>/metrics.json`.
        expand_vars: write each argument in double quotes, so that the shell expands its
          `$NAME` and `${NAME}` (e.g. `--model_dir=runs/$SLURM_JOB_ID`); any other shell syntax
          is refused. False: every argument is passed as written.

    Raises:
        ManifestError: an argument is invalid.
    """
    _check_job(job_name, time_limit, port, grace_s, gpus_per_task, tasks_per_node)
    checks.check_layout("slurm", num_workers=num_workers, num_ps=num_ps, chief=chief)
    checks.require(isinstance(site, SlurmSite), "slurm site", site, "pass a SlurmSite")
    checks.require(
        sweep is None or isinstance(sweep, Sweep), "slurm sweep", sweep, "pass a Sweep or None"
    )
    num_tasks = int(chief) + num_workers + num_ps
    num_nodes, per_node, most = _layout(num_tasks, tasks_per_node, nodes)
    checks.require(
        port + JOB_SLOTS * most - 1 <= 65535,
        "slurm port",
        port,
        f"use a port of at most {65536 - JOB_SLOTS * most}",
        problem=f"gives the {most} tasks of a node ports up to "
        f"{port + JOB_SLOTS * most - 1} ({JOB_SLOTS} each: one per job id mod {JOB_SLOTS})",
    )
    args = checks.check_args("slurm", train_args if program is None else program)
    model_dir = _model_dir(args, program, sweep)
    words = _task_words(args, program, sweep, expand_vars, port, num_ps, chief)
    runs = "`tfdist train`" if program is None else f"`{' '.join(args[:2])}`"
    layout = checks.describe_layout(num_workers=num_workers, num_ps=num_ps, chief=chief)
    header = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --ntasks={num_tasks}",
        f"#SBATCH --nodes={num_nodes}",
        *([f"#SBATCH --ntasks-per-node={per_node}"] if per_node else []),
        f"#SBATCH --time={time_limit}",
        *([f"#SBATCH --gpus-per-task={gpus_per_task}"] if gpus_per_task else []),
        *([f"#SBATCH --array={sweep.spec}"] if sweep else []),
        "#SBATCH --open-mode=append",
        f"#SBATCH --signal={_NOTICE_SIGNAL.removeprefix('SIG')}@{grace_s}",
        "#SBATCH --requeue" if model_dir else "#SBATCH --no-requeue",
        *site.directives(),  # Last: a site's own --signal=B:... is the one sbatch takes.
        "",
        f"# {num_tasks} tasks of {runs}: {layout}, in rank order, on {num_nodes} node(s).",
        *_COMMENTS.format(port=port, grace_s=grace_s).splitlines(),
        *([] if model_dir else [_NOT_REQUEUED_COMMENT]),
    ]
    body = [
        "set -eo pipefail",
        *sbatch_shell.trap_lines(),
        *site.prologue,
        "set -u",
        f"export {GRACE_ENV}={grace_s}  # Each task checks its backup's save against it.",
        f'PYTHON="${{TFDIST_PYTHON:-{_shell_quote_inside(python)}}}"',
        *sbatch_shell.job_id_lines(),
        *(sbatch_shell.array_lines(sweep, model_dir, expand_vars) if sweep else []),
        "RESV_PORTS=()",
        f"if {_SITE_RESERVES_PORTS}; then RESV_PORTS=(--resv-ports={most}); fi",
        *sbatch_shell.run_lines(
            " ".join(["srun", "--kill-on-bad-exit=1", "--label", _PORTS_WORD, *words]),
            requeue=bool(model_dir),
        ),
    ]
    return "\n".join([*header, *body]) + "\n"


_COMMENTS = """\
# On GPU nodes, one task per GPU: tfdist manifest --slurm_tasks_per_node=GPUS_PER_NODE
# --gpus_per_task=1.
# Each task derives the cluster from its job step (SLURM_STEP_NODELIST,
# SLURM_STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION, SLURM_PROCID): block or cyclic layouts.
# Ports, this job step's own: where slurm.conf has MpiParams=ports=..., srun
# --resv-ports reserves them and the n-th task on a node takes the n-th; elsewhere it
# listens on {port} + 1000 n + SLURM_JOB_ID mod 1000 (jobs sharing nodes never share
# a port unless their ids differ by a multiple of 1000; a port taken is one line).
# TensorFlow's gRPC servers have no authentication: keep these ports on a private
# network, closed to everyone but this job's nodes.
# Every node runs $PYTHON, which must have tfdist installed: a virtual environment on a
# file system the nodes share (as --model_dir must be, for a requeued job to resume).
# --kill-on-bad-exit ends every task when one fails; --label prefixes lines with ranks.
# Preemption: the SIGUSR1 that --signal sends {grace_s} s before the time limit, a SIGTERM to
# the tasks (scancel, preemption), or a signal to this shell (scancel --batch or --full,
# --signal=B:...), which it passes on to every task as SIGUSR1 through srun, makes every
# task save at one step and exit 75; the script then requeues its own job (scontrol
# requeue), which resumes from --model_dir at that step. Every attempt appends to the
# job's output file, after a line saying which restart it is (SLURM_RESTART_COUNT).
# The script exits with srun's status: a failed task's exit code is the job's."""
_NOT_REQUEUED_COMMENT = (
    "# The program names no --model_dir, so a notice saves nothing: the job is never requeued."
)


def slurm_time_s(time_limit: str) -> int | None:
    """The seconds of the Slurm time `time_limit` (`_SLURM_TIME_RE`), as `sbatch --time` reads
    it: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; None when it is unlimited."""
    if not time_limit[0].isdigit():
        return None
    days, _, clock = time_limit.rpartition("-")
    parts = [int(part) for part in clock.split(":")]
    if days:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 3:  # HH:MM:SS
        hours, minutes, seconds = parts
    else:  # MM[:SS]
        hours, (minutes, seconds) = 0, (parts + [0])[:2]
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def _check_job(job_name, time_limit, port, grace_s, gpus_per_task, tasks_per_node) -> None:
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
    checks.check_port("slurm port", port)
    checks.require(
        checks.is_int(grace_s) and 1 <= grace_s <= MAX_GRACE_S,
        "slurm grace_s",
        grace_s,
        f"pass the seconds before the time limit to save in, 1 to {MAX_GRACE_S}",
        problem="is not a grace period",
    )
    limit_s = slurm_time_s(time_limit)
    checks.require(
        limit_s is None or grace_s < limit_s,
        "slurm grace_s",
        grace_s,
        f"pass fewer seconds than the time limit's {limit_s} (time_limit={time_limit}), e.g. "
        f"{max(1, (limit_s or 2) // 10)}, or a longer --time_limit",
        problem="leaves no time to train: every run would be told to save as it starts",
    )
    for name, value, lowest in (
        ("gpus_per_task", gpus_per_task, 0),
        ("tasks_per_node", 1 if tasks_per_node is None else tasks_per_node, 1),
    ):
        checks.require(
            checks.is_int(value) and lowest <= value <= _MAX_TASKS_PER_NODE,
            f"slurm {name}",
            value,
            f"pass a count from {lowest} to {_MAX_TASKS_PER_NODE}",
            problem="is not a count",
        )


def _layout(num_tasks: int, tasks_per_node: int | None, nodes: int | None):
    """(the job's nodes, its --ntasks-per-node or None, the most tasks a node may run)."""
    if nodes is None:
        per_node = min(tasks_per_node or 1, num_tasks)
        return -(-num_tasks // per_node), per_node, per_node
    checks.require(
        checks.is_int(nodes) and 1 <= nodes <= num_tasks,
        "slurm_nodes",
        nodes,
        f"pass from 1 to {num_tasks} nodes: each runs at least one of the {num_tasks} tasks",
        problem="is not a node count for the job",
    )
    if tasks_per_node is None:
        return nodes, None, num_tasks - nodes + 1
    checks.require(
        nodes * tasks_per_node >= num_tasks,
        "slurm_nodes",
        nodes,
        f"pass at least {-(-num_tasks // tasks_per_node)} nodes, or more tasks per node",
        problem=f"of at most {tasks_per_node} tasks each do not hold {num_tasks} tasks",
    )
    return nodes, tasks_per_node, min(tasks_per_node, num_tasks - nodes + 1)


def _model_dir(args: list[str], program, sweep: Sweep | None) -> str | None:
    """The `--model_dir` the job saves in and resumes from: needed by `tfdist train`, and by
    an array, whose tasks each save under it; a program may run without (never requeued)."""
    model_dir = checks.flag_value(args, "model_dir")
    source = "train_args" if program is None else "program"
    checks.require(
        bool(model_dir) or (program is not None and sweep is None),
        f"slurm {source}",
        args,
        "pass --model_dir=DIR on a file system every node shares: a preempted or timed-out "
        "job saves there and its requeued run resumes from it",
        problem="names no --model_dir",
    )
    checks.require(
        sweep is None or checks.flag_value(args, "metrics_json") is None,
        f"slurm {source}",
        args,
        "drop --metrics_json: each array task writes <model_dir>/<array index>/metrics.json",
        problem="sets --metrics_json in an array",
    )
    for flag, _ in sweep.grid if sweep else ():
        checks.require(
            checks.flag_value(args, flag) is None,
            f"slurm {source}",
            args,
            f"drop --{flag} from the command, or from --slurm_sweep",
            problem=f"sets --{flag}, which the sweep sets in each array task",
        )
    return model_dir


def _task_words(args, program, sweep, expand_vars, port, num_ps, chief) -> list[str]:
    """Each task's command, as shell words: the interpreter, the program or `-m tfdist train`,
    the Slurm flags, the args with the collective timeout unless they set it, and an array
    task's own model dir, metrics JSON and sweep values."""
    own = []
    if sweep is not None:
        args = _without(args, "model_dir")
        own = sbatch_shell.array_task_words(sweep)
    words = [*(sbatch_shell.shell_word(word, expand_vars) for word in checks.bounded(args)), *own]
    flags = [
        *slurm_train_flags(port=port, num_ps=num_ps, chief=chief),
        f"--preemption_signal={_NOTICE_SIGNAL}",
    ]
    if program is None:
        return [_PYTHON_WORD, "-m", "tfdist", "train", *flags, *words]
    first = _PYTHON_WORD if program[0] in ("python", "python3") else words[0]
    return [first, *words[1:], *flags]


def _without(args: list[str], name: str) -> list[str]:
    """`args` without absl flag `name` (`--name=V`, or `--name V`)."""
    kept, skip = [], False
    for word in args:
        flag, equals, _ = word.lstrip("-").partition("=")
        if skip or not (word.startswith("-") and flag == name):
            kept += [] if skip else [word]
            skip = False
            continue
        skip = not equals
    return kept


def _shell_quote_inside(path: str) -> str:
    """`path` for inside a double-quoted shell word: refused if it holds what would expand."""
    checks.require(
        isinstance(path, str) and bool(path) and not set(path) & set('"$`\\\n'),
        "slurm python",
        path,
        "install tfdist under a path without quotes, $, ` or backslashes",
        problem="cannot be written into the script",
    )
    return path


def slurm_train_flags(*, port: int, num_ps: int, chief: bool) -> list[str]:
    """The `tfdist train` flags that make a Slurm task resolve the cluster `slurm` asked for."""
    return [
        SLURM_RESOLVER_FLAG,
        f"{SLURM_PORT_FLAG}={port}",
        *([f"--num_ps={num_ps}"] if num_ps else []),
        *(["--chief"] if chief else []),
    ]
