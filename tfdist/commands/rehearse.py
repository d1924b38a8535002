"""`tfdist rehearse FILE`: runs a manifest `tfdist manifest` wrote (a JobSet, or a Slurm batch
script) on this machine as the cluster would, one emulated host per pod or node
(`tfdist.cluster.rehearsal`); exits with the job's status."""

from absl import flags

from tfdist.cluster import rehearsal
from tfdist.cluster.rehearsal import slurm_run
from tfdist.commands import cli_flags
from tfdist.commands import flags as flags_lib
from tfdist.runtime import paths

_VOLUME_DIR = flags.DEFINE_string(
    "volume_dir",
    None,
    "rehearse: the directory that stands in for the JobSet's "
    "PersistentVolumeClaims, each as DIR/<claimName> (unset: "
    "<log_dir>/volumes).",
)
_NODES = flags.DEFINE_string(
    "slurm_nodes",
    None,
    "rehearse: the nodes of the real Slurm cluster a Slurm script runs on: a count (named "
    "node1, node2, ...) or their names as a Slurm host list, e.g. gpu[9-10] (unset: its "
    "#SBATCH --nodes, else one per task).",
)
flags_lib.register(
    "rehearse", flags_lib.group(cli_flags.LOG_DIR, _VOLUME_DIR, _NODES, cli_flags.TIMEOUT_S)
)


def main(files: list[str]) -> int:
    """Rehearses the one manifest in `files`; returns the job's exit status.

    Raises:
      UsageError: not one file. RehearsalError, NoHosts: the manifest or this machine cannot
        rehearse, in one line.
    """
    if len(files) != 1:
        raise flags_lib.UsageError(
            f"rehearse takes one manifest file, not {' '.join(map(repr, files)) or 'none'}; "
            "e.g. `tfdist manifest --image=IMG -- train > job.yaml && tfdist rehearse job.yaml`."
        )
    paths.check_output_dir("log_dir", cli_flags.LOG_DIR.value)
    paths.check_output_dir("volume_dir", _VOLUME_DIR.value)
    options = rehearsal.Options(
        log_dir=cli_flags.LOG_DIR.value or None,
        volume_dir=_VOLUME_DIR.value,
        timeout_s=cli_flags.TIMEOUT_S.value,
    )
    return rehearsal.rehearse(files[0], options, nodes=_nodes(_NODES.value))


def _nodes(text: str | None) -> int | list[str] | None:
    """--slurm_nodes as a count or node names (`slurm_run.nodes_asked`)."""
    return None if text is None else slurm_run.nodes_asked(text)
