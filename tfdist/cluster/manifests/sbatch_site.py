"""What a site's Slurm asks of every job (partition, account, QOS, memory, CPUs, node features,
the output file, lines of its own and a prologue such as `module load`), as typed, checked
options that the batch script writes as `#SBATCH` lines and shell lines."""

from __future__ import annotations

import dataclasses
import re

from tfdist.cluster.manifests import checks

MAX_CPUS_PER_TASK = 1024
# Slurm names (partitions, accounts, QOS), comma-separated where Slurm takes a list.
_NAMES_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(,[A-Za-z0-9_][A-Za-z0-9._-]*)*", re.ASCII)
_MEM_RE = re.compile(r"[1-9][0-9]{0,11}[KMGT]?", re.ASCII)
# Features joined by Slurm's operators: & | , [ ] * : ( ) !
_CONSTRAINT_RE = re.compile(r"[A-Za-z0-9_.&|,\[\]*:()!-]+", re.ASCII)
# A file name pattern (%j, %A, %a, %x, ...): no white space, quotes, `$` or backslashes, which
# sbatch's directive reader or the shell would take apart.
_OUTPUT_RE = re.compile(r"[A-Za-z0-9_./%@+=:,-]+", re.ASCII)
_OPTION_RE = re.compile(r"--[a-z][a-z0-9-]*(=[!-~]+)?", re.ASCII)
# The #SBATCH options the script writes from a typed flag: a line of one's own is refused.
OWNED = {
    "job-name": "--name",
    "ntasks": "--num_workers, --num_ps and --chief",
    "nodes": "--slurm_nodes",
    "ntasks-per-node": "--slurm_tasks_per_node",
    "time": "--time_limit",
    "gpus-per-task": "--gpus_per_task",
    "partition": "--slurm_partition",
    "account": "--slurm_account",
    "qos": "--slurm_qos",
    "mem": "--slurm_mem",
    "cpus-per-task": "--slurm_cpus_per_task",
    "exclusive": "--slurm_exclusive",
    "constraint": "--slurm_constraint",
    "output": "--slurm_output",
    "open-mode": "nothing: every attempt's output is appended",
    "requeue": "nothing: the script requeues a job that saved",
    "no-requeue": "nothing: the script requeues a job that saved",
    "array": "--slurm_array",
}


@dataclasses.dataclass(frozen=True)
class SlurmSite:
    """A site's options for a job; each field unset (None, False, empty) writes nothing.

    Attributes:
      partition: `--partition`, e.g. "gpu" (or "gpu,cpu").
      account: `--account` to charge.
      qos: `--qos`.
      mem: `--mem`, memory per node, e.g. "64G".
      cpus_per_task: `--cpus-per-task`.
      exclusive: `--exclusive`: the job's nodes run nothing else.
      constraint: `--constraint`, node features, e.g. "a100&ib".
      output: `--output`, e.g. "logs/%x-%j.out" (Slurm's default: slurm-%j.out, or
        slurm-%A_%a.out for an array); every attempt appends to it.
      sbatch_lines: more `#SBATCH` options, e.g. ("--mail-type=END",); the options above and
        those the script derives are refused here.
      prologue: shell lines run before `srun`, e.g. ("module load cuda/12.4",).
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    mem: str | None = None
    cpus_per_task: int | None = None
    exclusive: bool = False
    constraint: str | None = None
    output: str | None = None
    sbatch_lines: tuple[str, ...] = ()
    prologue: tuple[str, ...] = ()

    def __post_init__(self):
        for field, pattern, example in (
            ("partition", _NAMES_RE, "gpu"),
            ("account", _NAMES_RE, "my-project"),
            ("qos", _NAMES_RE, "normal"),
            ("mem", _MEM_RE, "64G"),
            ("constraint", _CONSTRAINT_RE, "a100&ib"),
            ("output", _OUTPUT_RE, "logs/%x-%j.out"),
        ):
            _check_text(field, getattr(self, field), pattern, example)
        checks.require(
            self.cpus_per_task is None
            or (checks.is_int(self.cpus_per_task) and 1 <= self.cpus_per_task <= MAX_CPUS_PER_TASK),
            "slurm_cpus_per_task",
            self.cpus_per_task,
            f"pass a count from 1 to {MAX_CPUS_PER_TASK}",
            problem="is not a count",
        )
        checks.require(
            isinstance(self.exclusive, bool),
            "slurm_exclusive",
            self.exclusive,
            "pass True or False",
            problem="is not a bool",
        )
        for line in _strings("slurm_sbatch", self.sbatch_lines):
            _check_option(line)
        for line in _strings("slurm_prologue", self.prologue):
            checks.require(
                bool(line.strip()) and line.isprintable(),
                "slurm_prologue",
                line,
                "pass one shell line per --slurm_prologue, e.g. 'module load cuda/12.4'",
                problem="is not one line",
            )

    def directives(self) -> list[str]:
        """The `#SBATCH` lines of the options that are set, then the site's own lines."""
        options = [
            f"--{name.replace('_', '-')}={value}"
            for name in ("partition", "account", "qos", "mem", "cpus_per_task", "constraint")
            if (value := getattr(self, name)) is not None
        ]
        options += ["--exclusive"] * self.exclusive
        options += [f"--output={self.output}"] if self.output is not None else []
        return [f"#SBATCH {option}" for option in (*options, *self.sbatch_lines)]


def _check_text(field: str, value, pattern: re.Pattern, example: str) -> None:
    checks.require(
        value is None or (isinstance(value, str) and bool(pattern.fullmatch(value))),
        f"slurm_{field}",
        value,
        f'pass e.g. "{example}"',
        problem="is not what Slurm takes there",
    )


def _strings(field: str, values) -> tuple[str, ...]:
    checks.require(
        isinstance(values, (tuple, list)) and all(isinstance(value, str) for value in values),
        field,
        values,
        'pass a sequence of strings, e.g. ("--mail-type=END",)',
        problem="is not a sequence of strings",
    )
    return tuple(values)


def _check_option(line: str) -> None:
    """One `#SBATCH` option of a site's own: `--name` or `--name=value`, not one of OWNED."""
    checks.require(
        bool(_OPTION_RE.fullmatch(line)),
        "slurm_sbatch",
        line,
        "pass one long sbatch option per --slurm_sbatch, e.g. --slurm_sbatch=--mail-type=END",
        problem="is not one --option[=value] without spaces",
    )
    name = line[2:].partition("=")[0]
    checks.require(
        name not in OWNED,
        "slurm_sbatch",
        line,
        f"drop it and use {OWNED.get(name)}",
        problem="sets an option the script writes itself",
    )
