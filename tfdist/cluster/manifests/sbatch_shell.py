"""The batch shell's own logic in a Slurm batch script: shell words (literal, or expanding
`$NAME`), the job's own id and each attempt's first line, an array task's model dir and sweep
values, and the notice handler, srun's status and the requeue."""

import json
import re
import shlex

from tfdist.cluster.manifests import checks
from tfdist.cluster.manifests.sbatch_sweep import Sweep
from tfdist.errors import EXIT_PREEMPTED

# What may reach the batch shell (scancel --batch or --full, --signal=B:...): each is passed on
# to the tasks as the notice, through srun (which would turn a SIGTERM into a SIGKILL).
_TRAPPED = ("USR1", "USR2", "TERM", "INT", "HUP")
_REFERENCE_RE = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})", re.ASCII)
_EXPANDING = frozenset('$`"\\')  # What a double-quoted word would expand or end on.


def shell_word(word: str, expand_vars: bool = False) -> str:
    """`word` as one shell word: single-quoted, passed as written; with `expand_vars` and a `$`
    in it, double-quoted, so that the shell expands its `$NAME` and `${NAME}` references.

    Raises:
      ManifestError: with `expand_vars`, a word holding any other shell syntax (`$(`, a
        backtick, `${NAME:-...}`, a quote or a backslash).
    """
    if not expand_vars or "$" not in word:
        return shlex.quote(word)
    rest = _REFERENCE_RE.sub("", word)
    checks.require(
        not set(rest) & _EXPANDING and word.isprintable(),
        "slurm_expand_vars",
        word,
        "write variables as $NAME or ${NAME}, without $(...), backticks, quotes, backslashes "
        "or ${NAME:-...}; or drop --slurm_expand_vars to pass the word as written",
        problem="holds shell syntax other than $NAME",
    )
    return f'"{word}"'


def job_id_lines() -> list[str]:
    """The job's own id, for `scontrol requeue` (an array task's own: `scontrol requeue` of
    the array's id would requeue every task), and the line that starts each attempt."""
    return [
        'job="${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID:-}}"',
        'job="${job:-$SLURM_JOB_ID}"',
        "printf 'tfdist sbatch: job %s starts: restart %s (SLURM_RESTART_COUNT), on %s\\n' "
        '"$job" "${SLURM_RESTART_COUNT:-0}" "${SLURM_JOB_NODELIST:-}"',
    ]


def array_task_words(sweep: Sweep) -> list[str]:
    """An array task's own `--model_dir` and `--metrics_json` (in the dir `array_lines` sets)
    and, for a sweep, its flag values."""
    return [
        '"--model_dir=$run_dir"',
        '"--metrics_json=$run_dir/metrics.json"',
        *(['"${sweep[@]}"'] if sweep.grid else []),
    ]


def array_lines(sweep: Sweep, model_dir: str, expand_vars: bool) -> list[str]:
    """An array task's model dir (`<model_dir>/<index>`) and, for a sweep, its flag values,
    written beside its metrics as sweep.json."""
    lines = [f'run_dir={shell_word(model_dir, expand_vars)}/"$SLURM_ARRAY_TASK_ID"']
    if not sweep.grid:
        return lines
    lines.append('case "$SLURM_ARRAY_TASK_ID" in')
    for index, values in enumerate(sweep.runs()):
        flags = " ".join(shlex.quote(f"--{flag}={value}") for flag, value in values.items())
        record = json.dumps({"array_task_id": index, "flags": values}, ensure_ascii=False)
        lines.append(f"  {index}) sweep=({flags}); values={shlex.quote(record)} ;;")
    lines += [
        "  *) echo \"tfdist sbatch: array task $SLURM_ARRAY_TASK_ID is none of the sweep's "
        f'0-{sweep.count - 1}; submit with --array within 0-{sweep.count - 1}." >&2; exit 2 ;;',
        "esac",
        'mkdir -p "$run_dir"',
        'printf \'%s\\n\' "$values" > "$run_dir/sweep.json.tmp"',
        'mv -f "$run_dir/sweep.json.tmp" "$run_dir/sweep.json"',
    ]
    return lines


def trap_lines() -> list[str]:
    """The notice handler, set before anything runs: a signal to the batch shell goes on to
    every task as SIGUSR1 through srun; one before srun started leaves nothing to save."""
    return [
        "status=0",
        'srun_pid=""',
        'noticed=""',
        "notice() {",
        '  echo "tfdist sbatch: $1 reached the batch shell: SIGUSR1 to every task" >&2',
        '  noticed="$1"',
        "  interrupted=1",
        f'  if [ -n "$srun_pid" ]; then kill -USR1 "$srun_pid" 2>/dev/null || true; '
        f"else status={EXIT_PREEMPTED}; fi",
        "}",
        *(f"trap 'notice SIG{name}' {name}" for name in _TRAPPED),
    ]


def run_lines(srun: str, *, requeue: bool) -> list[str]:
    """srun in the background, waited for through any notice; the requeue; the script's
    status, srun's."""
    return [
        'if [ "$status" -eq 0 ]; then  # Else a notice came first: nothing ran to save.',
        f"  {srun} &",
        "  srun_pid=$!",
        "  # srun's own status: a `wait` that a notice ended (128 + its signal) is waited again;",
        "  # one that finds srun waited for already (127) keeps the status that wait returned.",
        '  code=""',
        "  while :; do",
        '    interrupted=""',
        '    rc=0; wait "$srun_pid" || rc=$?',
        '    if [ -n "$code" ] && [ "$rc" -eq 127 ]; then break; fi',
        '    code="$rc"',
        '    if [ -z "$interrupted" ]; then break; fi',
        "  done",
        '  status="$code"',
        "fi",
        *(_requeue_lines() if requeue else [_NOT_REQUEUED_LINE]),
        'exit "$status"',
    ]


_NOT_REQUEUED_LINE = (
    f'if [ "$status" -eq {EXIT_PREEMPTED} ]; then echo "tfdist sbatch: not requeued: nothing '
    'was saved (no --model_dir)" >&2; fi'
)


def _requeue_lines() -> list[str]:
    """The job requeues itself when its tasks saved (75), or when a notice to the batch shell
    ended in srun killing them (srun turns a SIGTERM it gets, from `scancel --full`, into a
    SIGKILL): they resume from the last backup. Only a job Slurm still runs: one that
    `scancel` ends (JobState=COMPLETING) stays ended."""
    return [
        'why=""',
        f'if [ "$status" -eq {EXIT_PREEMPTED} ]; then why="every task saved (exit 75)"',
        'elif [ -n "$noticed" ] && [ "$status" -gt 128 ]; then',
        '  why="srun ended $status after $noticed (srun kills its tasks on a SIGTERM of its '
        "own): they resume from the model dir's last backup\"",
        "fi",
        'if [ -n "$why" ]; then',
        '  state="$(scontrol show job --oneliner "$job" 2>/dev/null'
        " | grep -o 'JobState=[A-Z_]*' | head -n 1 || true)\"",
        '  if [ "$state" = JobState=RUNNING ]; then',
        '    echo "tfdist sbatch: $why: scontrol requeue $job"',
        '    scontrol requeue "$job" || echo "tfdist sbatch: scontrol requeue $job failed;'
        ' submit this script again to resume from the model dir" >&2',
        "  else",
        '    echo "tfdist sbatch: $why; not requeued: Slurm is ending the job'
        ' (${state:-its state unknown}: scancel)" >&2',
        "  fi",
        "fi",
    ]
