"""`tfdist rehearse FILE`: runs a manifest `tfdist manifest` wrote (a JobSet, or a Slurm batch
script) on this machine as the cluster would, one emulated host per pod or node
(`tfdist.cluster.rehearsal`); exits with the job's status."""

import re

from absl import flags

from tfdist.cluster import rehearsal
from tfdist.cluster.rehearsal import slurm_run
from tfdist.commands import cli_flags
from tfdist.commands import flags as flags_lib
from tfdist.runtime import paths

MAX_PREEMPT_S = 7 * 24 * 3600.0  # --preempt's latest: a week after the pod starts.
_VOLUME_DIR = flags.DEFINE_string(
    "volume_dir",
    None,
    "rehearse: the directory that stands in for the JobSet's "
    "PersistentVolumeClaims, each as DIR/<claimName> (unset: "
    "<log_dir>/volumes).",
)
_PREEMPT = flags.DEFINE_list(
    "preempt",
    [],
    "rehearse: POD@SECONDS,...: delete each such JobSet pod (its hostname, e.g. "
    "train-worker-0-1) that long after it starts, as a spot reclaim or Kueue's preemption "
    "does: SIGTERM, SIGKILL after its terminationGracePeriodSeconds.",
)
flags_lib.register(
    "rehearse",
    flags_lib.group(
        cli_flags.LOG_DIR, _VOLUME_DIR, cli_flags.SLURM_NODES, _PREEMPT, cli_flags.TIMEOUT_S
    ),
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
        preempt=tuple(_preemption(entry) for entry in _PREEMPT.value),
    )
    return rehearsal.rehearse(files[0], options, nodes=_nodes(cli_flags.SLURM_NODES.value))


def _nodes(text: str | None) -> int | list[str] | None:
    """--slurm_nodes as a count or node names (`slurm_run.nodes_asked`)."""
    return None if text is None else slurm_run.nodes_asked(text)


def _preemption(entry: str) -> tuple[str, float]:
    """One --preempt entry, POD@SECONDS, as (pod, seconds)."""
    pod, at, seconds = entry.rpartition("@")
    # Digits as written (float() would also take "٣", "1_0" or " 3").
    after_s = float(seconds) if re.fullmatch(r"\d+(\.\d*)?", seconds, re.ASCII) else -1.0
    if not (pod and at and 0 <= after_s <= MAX_PREEMPT_S):
        raise flags_lib.UsageError(
            f"preempt={entry!r} is not POD@SECONDS; write e.g. --preempt=train-worker-0-1@30 "
            f"(seconds from 0 to {MAX_PREEMPT_S:g} after the pod starts)."
        )
    return pod, after_s
