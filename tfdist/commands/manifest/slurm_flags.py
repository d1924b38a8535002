"""The flags of `tfdist manifest --format=slurm`: the job's layout, a site's options and a
sweep, made into the arguments of `tfdist.cluster.manifests.slurm`."""

from absl import flags

from tfdist.cluster import manifests
from tfdist.cluster.manifests import ManifestError
from tfdist.cluster.manifests import sbatch_site
from tfdist.cluster.manifests import sbatch_sweep
from tfdist.commands import cli_flags
from tfdist.commands import flags as flags_lib

TIME_LIMIT = flags.DEFINE_string(
    "time_limit",
    manifests.SLURM_TIME_LIMIT,
    "manifest: the Slurm job's wall-clock limit (#SBATCH --time), e.g. 30, 04:00:00 or "
    f"2-00:00:00; {manifests.SLURM_TIME_LIMIT} unless given. A job that reaches it saves at "
    "one step (--grace_s before) and requeues itself.",
)
TASKS_PER_NODE = flags_lib.define_integer(
    "slurm_tasks_per_node",
    1,
    "manifest: Slurm tasks on each node (--ntasks-per-node); 1 puts one task per node, on GPU "
    "nodes give the GPUs per node with --gpus_per_task=1. With --slurm_nodes: the most on a "
    "node.",
    lower_bound=1,
    upper_bound=1024,
)
_PARTITION = flags.DEFINE_string(
    "slurm_partition", None, "manifest: the Slurm partition(s) (#SBATCH --partition), e.g. gpu."
)
_ACCOUNT = flags.DEFINE_string(
    "slurm_account", None, "manifest: the Slurm account to charge (#SBATCH --account)."
)
_QOS = flags.DEFINE_string("slurm_qos", None, "manifest: the Slurm QOS (#SBATCH --qos).")
_MEM = flags.DEFINE_string(
    "slurm_mem", None, "manifest: memory per node (#SBATCH --mem), e.g. 64G (units K, M, G, T)."
)
_CPUS_PER_TASK = flags_lib.define_integer(
    "slurm_cpus_per_task",
    None,
    "manifest: CPUs of each task (#SBATCH --cpus-per-task).",
    lower_bound=1,
    upper_bound=sbatch_site.MAX_CPUS_PER_TASK,
)
_EXCLUSIVE = flags.DEFINE_bool(
    "slurm_exclusive",
    False,
    "manifest: the job's nodes run no other job (#SBATCH --exclusive).",
)
_CONSTRAINT = flags.DEFINE_string(
    "slurm_constraint", None, "manifest: node features (#SBATCH --constraint), e.g. a100&ib."
)
_OUTPUT = flags.DEFINE_string(
    "slurm_output",
    None,
    "manifest: the job's output file (#SBATCH --output), e.g. logs/%x-%j.out (unset: Slurm's "
    "slurm-%j.out, slurm-%A_%a.out in an array); every attempt appends to it.",
)
_SBATCH = flags.DEFINE_multi_string(
    "slurm_sbatch",
    [],
    "manifest: one more #SBATCH option of your site's, e.g. --slurm_sbatch=--mail-type=END; "
    "repeat for more. The options of other flags are refused here.",
)
_PROLOGUE = flags.DEFINE_multi_string(
    "slurm_prologue",
    [],
    "manifest: one shell line the batch script runs before srun, e.g. "
    "--slurm_prologue='module load cuda/12.4'; repeat for more.",
)
_ARRAY = flags.DEFINE_string(
    "slurm_array",
    None,
    "manifest: a Slurm job array (#SBATCH --array), e.g. 0-3 or 0-7%2: each array task trains "
    "in <model_dir>/<index> and writes its summary to metrics.json there. With --slurm_sweep, "
    "indexes name its combinations (unset: all of them).",
)
_SWEEP = flags.DEFINE_multi_string(
    "slurm_sweep",
    [],
    "manifest: FLAG=V1,V2,...: a job array with one task per value, e.g. "
    "--slurm_sweep=learning_rate=0.1,0.3; several are a grid (every combination). Each task "
    "writes <model_dir>/<index>/sweep.json (its values) and metrics.json (its summary).",
)
_EXPAND_VARS = flags.DEFINE_bool(
    "slurm_expand_vars",
    False,
    "manifest: the batch shell expands $NAME and ${NAME} in the command's arguments (e.g. "
    "--model_dir=runs/$SLURM_JOB_ID); other shell syntax is refused. Unset: every argument "
    "is passed as written.",
)
FLAGS = flags_lib.group(
    TIME_LIMIT,
    TASKS_PER_NODE,
    cli_flags.SLURM_NODES,
    _PARTITION,
    _ACCOUNT,
    _QOS,
    _MEM,
    _CPUS_PER_TASK,
    _EXCLUSIVE,
    _CONSTRAINT,
    _OUTPUT,
    _SBATCH,
    _PROLOGUE,
    _ARRAY,
    _SWEEP,
    _EXPAND_VARS,
)


def options() -> dict:
    """The keyword arguments of `manifests.slurm` that these flags give.

    Raises:
      ManifestError: a flag's value is invalid (one line naming the flag).
    """
    sweep = None
    if _ARRAY.value is not None or _SWEEP.value:
        grid = sbatch_sweep.parse_grid(_SWEEP.value)
        sweep = manifests.Sweep(grid=grid, array=_ARRAY.value)
    site = manifests.SlurmSite(
        partition=_PARTITION.value,
        account=_ACCOUNT.value,
        qos=_QOS.value,
        mem=_MEM.value,
        cpus_per_task=_CPUS_PER_TASK.value,
        exclusive=_EXCLUSIVE.value,
        constraint=_CONSTRAINT.value,
        output=_OUTPUT.value,
        sbatch_lines=tuple(_SBATCH.value),
        prologue=tuple(_PROLOGUE.value),
    )
    return {
        "time_limit": TIME_LIMIT.value,
        "tasks_per_node": TASKS_PER_NODE.value if TASKS_PER_NODE.present else None,
        "nodes": _nodes(cli_flags.SLURM_NODES.value),
        "site": site,
        "sweep": sweep,
        "expand_vars": _EXPAND_VARS.value,
    }


def _nodes(text: str | None) -> int | None:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= 6):
        raise ManifestError(
            f"slurm_nodes={text!r} is not a node count; pass e.g. --slurm_nodes=3 (the job's "
            "#SBATCH --nodes, from 1 to its task count)."
        )
    return int(text)
