"""`tfdist rehearse FILE`: runs a manifest that `tfdist manifest` wrote on this machine as the
cluster would. A Slurm batch script runs on real Slurm (`slurm_run`: Debian's daemons, one
emulated host per node). Kubernetes cannot run here, so a JobSet is emulated, one emulated host
per pod: a network namespace with its own address on a private bridge, the pods' DNS names in
its hosts file, the same port on every host, the environment Kubernetes and JobSet give, the
manifest's own command (the local Python environment stands in for the image), and JobSet's
failure and success policies. Each pod runs in a sandbox of its own that cannot touch
this machine (`enter`): its own namespaces, a root file system whose writes are its own and
lost when it ends, and a container's capabilities. The buckets the pods name in `gs://` URLs
are served by an emulated Cloud Storage at Google's names (`cloud_storage`).

A rehearsal proves wiring: names, addresses, ports, environment, the derived TF_CONFIG, restarts,
resuming from the shared volume or bucket. It does not prove speed (every host shares this
machine's CPUs and a bridge without latency), scheduling (images, resources, quotas, node
selectors, tolerations are not looked at), or the cluster's DNS and storage. Linux, as root.
"""

import os
import stat
from collections.abc import Sequence

import yaml

from tfdist.cluster import RehearsalError
from tfdist.cluster import capacity
from tfdist.cluster.rehearsal import hosts
from tfdist.cluster.rehearsal import jobset_plan
from tfdist.cluster.rehearsal import jobset_run
from tfdist.cluster.rehearsal import slurm_run
from tfdist.cluster.rehearsal.jobset_run import Options

MAX_MANIFEST_BYTES = 1 << 20

__all__ = ["MAX_MANIFEST_BYTES", "Options", "rehearse"]


def rehearse(path: str, options: Options, *, nodes: int | Sequence[str] | None = None) -> int:
    """Rehearses the manifest at `path`; returns the job's exit status (0 when it completes).

    Args:
      path: a JobSet YAML or an sbatch script that `tfdist manifest` wrote.
      options: where logs and volumes go (made once the manifest and this machine are found
        fit), and the time limit.
      nodes: a Slurm script's node count or node names (else its #SBATCH --nodes, else one
        node per task).

    Raises:
      RehearsalError: the file cannot be read or rehearsed; NoHosts: this machine cannot
        emulate hosts. One line each.
    """
    text = _read(path)
    if text.startswith("#!"):
        if options.preempt:
            raise RehearsalError(
                f"preempt is for a JobSet, and {path} is a Slurm script; preempt a Slurm job as "
                "the cluster does: scancel --signal=TERM JOBID (or USR1), or scontrol requeue."
            )
        slurm_job = slurm_run.job(path, text, nodes=nodes)
        hosts.require_tools()
        return slurm_run.run(slurm_job, options.made())
    if nodes is not None:
        raise RehearsalError(
            f"slurm_nodes={nodes} is for a Slurm script, and {path} is not one; drop it."
        )
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        raise RehearsalError(
            f"{path} is not YAML{line} "
            f"({getattr(error, 'problem', None) or 'unreadable'}); pass a "
            "manifest written by `tfdist manifest`."
        ) from None
    if not isinstance(document, dict):
        raise RehearsalError(
            f"{path} holds {'nothing' if document is None else 'no YAML mapping'}; pass a "
            "manifest written by `tfdist manifest`."
        )
    plan = jobset_plan.read(document)
    jobset_run.check_fits(plan, capacity.MachineLimits.of_this_machine())
    jobset_run.check_storage(plan)
    hosts.require_tools()
    return jobset_run.run(plan, options.made())


def _read(path: str) -> str:
    """The manifest's text: a regular file of at most MAX_MANIFEST_BYTES of UTF-8."""
    try:
        info = os.stat(path)
    except OSError as error:
        raise RehearsalError(
            f"{path}: {error.strerror}; pass the path of a manifest written by `tfdist manifest`."
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise RehearsalError(
            f"{path} is not a regular file; pass a manifest written "
            "by `tfdist manifest` (e.g. tfdist manifest ... > job.yaml)."
        )
    if info.st_size > MAX_MANIFEST_BYTES:
        raise RehearsalError(
            f"{path} has {info.st_size} bytes, more than a manifest "
            f"({MAX_MANIFEST_BYTES} at most); pass the manifest itself."
        )
    try:
        with open(path, "rb") as manifest:
            data = manifest.read(MAX_MANIFEST_BYTES + 1)
    except OSError as error:
        raise RehearsalError(f"{path}: {error.strerror}.") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RehearsalError(
            f"{path} is not UTF-8 text (byte {error.start}); pass a "
            "manifest written by `tfdist manifest`."
        ) from None
