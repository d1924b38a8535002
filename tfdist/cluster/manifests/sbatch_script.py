"""A Slurm batch script for a `tfdist train` command line (or a program of the user's): its `srun`
runs one task per Slurm task, and each task derives its cluster from the job step
(`tfdist.strategies.slurm.cluster_from_slurm`)."""

import re
import shlex
from collections.abc import Sequence

from tfdist.cluster import GRACE_ENV
from tfdist.cluster.manifests import checks
from tfdist.errors import EXIT_PREEMPTED
from tfdist.strategies.slurm import JOB_SLOTS
from tfdist.cluster.manifests.jobset_checks import GRACE_S
from tfdist.cluster.manifests.jobset_checks import MAX_GRACE_S

SLURM_RESOLVER_FLAG = "--cluster_resolver=slurm"
SLURM_PORT_FLAG = "--slurm_port_base"

_MAX_TASKS_PER_NODE = 1024
_NOTICE_SIGNAL = "SIGUSR1"  # What --signal sends before the time limit; the tasks save on it.
_PYTHON_WORD = '"$PYTHON"'  # The interpreter's variable, expanded by the shell in each task.
_PORTS_WORD = '"${RESV_PORTS[@]}"'  # srun's --resv-ports where the site reserves step ports.
_SHELL_WORDS = (_PYTHON_WORD, _PORTS_WORD)  # Written as they are; every other word is quoted.
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
    time_limit: str = "01:00:00",
    port: int = 8888,
    gpus_per_task: int = 0,
    tasks_per_node: int = 1,
    python: str = "python3",
    program: Sequence[str] | None = None,
    grace_s: int = GRACE_S,
) -> str:
    """Returns an sbatch script that runs one `tfdist train <train_args>` (or `program`) per
    Slurm task, `tasks_per_node` tasks on each node.

    The job has chief + num_workers + num_ps tasks. `srun` starts every task with
    `--cluster_resolver=slurm` and the cluster layout, so that each derives the same cluster from
    its job step (`tfdist.strategies.slurm`): ranks go to the chief (rank 0), then the
    parameter servers, then the workers; the n-th task on a node (counting from 0) listens on
    the n-th port `srun --resv-ports` reserved for the step where the site's slurm.conf has
    `MpiParams=ports=...`, else on `port + 1000 n + SLURM_JOB_ID mod 1000`. `srun
    --kill-on-bad-exit` ends every task when one fails, and `--label`
    prefixes each line with its rank.

    Args:
        job_name: the Slurm job name (letters, digits, ".", "_" and "-").
        train_args: the flags after `tfdist train`; each is shell-quoted in the script. None with
          `program`.
        num_workers: the worker tasks (the chief, if any, comes on top).
        num_ps: the parameter-server tasks; they need a chief.
        chief: whether rank 0 is a chief (the ParameterServerStrategy coordinator).
        time_limit: the job's wall-clock limit in a Slurm time format, e.g. "01:00:00", "2-00:00".
        port: where the ports derived from the job id start, on a site that reserves none.
        gpus_per_task: GPUs Slurm binds to each task; 0 asks for none.
        tasks_per_node: tasks on each node (1: one per node; on GPU nodes, one per GPU).
        python: the interpreter every node runs (with tfdist installed: a virtual environment on
          a file system the nodes share); `TFDIST_PYTHON` overrides it when the job runs.
        program: a program of the user's (`python my_train.py ...`) instead of `tfdist train`;
          it takes tfdist's flags (`tfdist.define_flags`) and gets the Slurm ones appended.
        grace_s: how long before the time limit Slurm sends SIGUSR1 (`--signal`), which the
          tasks take as a preemption notice (`--preemption_signal=SIGUSR1`): they save at one
          step and exit 75, and `--requeue` puts the job back in the queue to resume.

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
        checks.is_int(grace_s) and 1 <= grace_s <= MAX_GRACE_S,
        "slurm grace_s",
        grace_s,
        f"pass the seconds before the time limit to save in, 1 to {MAX_GRACE_S}",
        problem="is not a grace period",
    )
    for name, value, lowest in (
        ("gpus_per_task", gpus_per_task, 0),
        ("tasks_per_node", tasks_per_node, 1),
    ):
        checks.require(
            checks.is_int(value) and lowest <= value <= _MAX_TASKS_PER_NODE,
            f"slurm {name}",
            value,
            f"pass a count from {lowest} to {_MAX_TASKS_PER_NODE}",
            problem="is not a count",
        )
    num_tasks = int(chief) + num_workers + num_ps
    per_node = min(tasks_per_node, num_tasks)
    checks.require(
        port + JOB_SLOTS * per_node - 1 <= 65535,
        "slurm port",
        port,
        f"use a port of at most {65536 - JOB_SLOTS * per_node}",
        problem=f"gives the {per_node} tasks of a node ports up to "
        f"{port + JOB_SLOTS * per_node - 1} ({JOB_SLOTS} each: one per job id mod {JOB_SLOTS})",
    )
    layout = checks.describe_layout(num_workers=num_workers, num_ps=num_ps, chief=chief)
    flags = [
        *slurm_train_flags(port=port, num_ps=num_ps, chief=chief),
        f"--preemption_signal={_NOTICE_SIGNAL}",
    ]
    if program is None:
        task = [
            _PYTHON_WORD,
            "-m",
            "tfdist",
            "train",
            *flags,
            *checks.check_args("slurm", train_args),
        ]
        runs = "`tfdist train`"
    else:
        words = checks.check_args("slurm", program)
        interpreter = [_PYTHON_WORD] if words[0] in ("python", "python3") else [words[0]]
        task = [*interpreter, *words[1:], *flags]
        runs = f"`{' '.join(words[:2])}`"
    srun = ["srun", "--kill-on-bad-exit=1", "--label", _PORTS_WORD, *task]
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --ntasks={num_tasks}",
        f"#SBATCH --nodes={-(-num_tasks // per_node)}",
        f"#SBATCH --ntasks-per-node={per_node}",
        f"#SBATCH --time={time_limit}",
        *([f"#SBATCH --gpus-per-task={gpus_per_task}"] if gpus_per_task else []),
        f"#SBATCH --signal={_NOTICE_SIGNAL.removeprefix('SIG')}@{grace_s}",
        "#SBATCH --requeue",
        "",
        f"# {num_tasks} tasks of {runs}: {layout}, in rank order, {per_node} on each node.",
        "# On GPU nodes, one task per GPU: tfdist manifest --slurm_tasks_per_node=GPUS_PER_NODE",
        "# --gpus_per_task=1.",
        "# Each task derives the cluster from its job step (SLURM_STEP_NODELIST,",
        "# SLURM_STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION, SLURM_PROCID): block or cyclic layouts.",
        "# Ports, this job step's own: where slurm.conf has MpiParams=ports=..., srun",
        "# --resv-ports reserves them and the n-th task on a node takes the n-th; elsewhere it",
        f"# listens on {port} + 1000 n + SLURM_JOB_ID mod 1000 (jobs sharing nodes never share",
        "# a port unless their ids differ by a multiple of 1000; a port taken is one line).",
        "# TensorFlow's gRPC servers have no authentication: keep these ports on a private",
        "# network, closed to everyone but this job's nodes.",
        "# Every node runs $PYTHON, which must have tfdist installed: a virtual environment on a",
        "# file system the nodes share (as --model_dir must be, for a requeued job to resume).",
        "# --kill-on-bad-exit ends every task when one fails; --label prefixes lines with ranks.",
        f"# Preemption: a SIGTERM (scancel, preemption) or the {_NOTICE_SIGNAL} --signal sends",
        f"# {grace_s} s before the time limit makes every task save at one step and exit 75;",
        "# the script then queues the job again (scontrol requeue; --requeue lets Slurm do so",
        "# after a node failure or preemption), and it resumes from --model_dir at that step.",
        "set -euo pipefail",
        f"export {GRACE_ENV}={grace_s}  # Each task checks its backup's save against it.",
        f'PYTHON="${{TFDIST_PYTHON:-{_shell_quote_inside(python)}}}"',
        "RESV_PORTS=()",
        f"if {_SITE_RESERVES_PORTS}; then RESV_PORTS=(--resv-ports={per_node}); fi",
        "set +e",
        " ".join(_shell_word(word) for word in srun),
        "status=$?",
        "set -e",
        f'if [ "$status" -eq {EXIT_PREEMPTED} ]; then scontrol requeue "$SLURM_JOB_ID"; fi',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


def _shell_word(word: str) -> str:
    """`word` quoted for the shell, but for the script's own variables (by identity: an
    argument that reads the same is quoted)."""
    return word if any(word is own for own in _SHELL_WORDS) else shlex.quote(word)


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
