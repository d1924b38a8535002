"""What stands in for the container image and the node in a rehearsal: this machine's Python
environment (the one running `tfdist rehearse`, its `bin` first on PATH), without the variables
that would tell a task where it stands (a cluster gives those); volumes mount on its directories."""

import os
import sys

from tfdist.cluster import RehearsalError

# Variables a task reads to find its cluster; a rehearsal sets them as the cluster would.
_CLUSTER_VARIABLES = ("TF_CONFIG", "JOB_COMPLETION_INDEX", "HOSTNAME")
_CLUSTER_PREFIXES = ("SLURM_", "TFDIST_JOBSET_", "TFDIST_REPLICATED_JOB", "TFDIST_JOB_INDEX")


def environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment minus cluster variables, this Python's `bin` first on PATH
    (where `tfdist` is), then `extra`."""
    base = {
        name: value
        for name, value in os.environ.items()
        if name not in _CLUSTER_VARIABLES and not name.startswith(_CLUSTER_PREFIXES)
    }
    bin_dir = os.path.dirname(sys.executable)
    base["PATH"] = os.pathsep.join(
        [
            bin_dir,
            *(part for part in base.get("PATH", "").split(os.pathsep) if part and part != bin_dir),
        ]
    )
    return {**base, **extra}


def check_mount_path(path: str) -> None:
    """Raises RehearsalError, in one line, if `path` is something other than a directory in the
    image (this machine), where no volume can be mounted; the pod makes a missing one in its
    own file system."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise RehearsalError(
            f"mount path {path} is not a directory in the image (this "
            "machine), so no volume can be mounted there; mount the volume "
            "elsewhere (tfdist manifest --mount_path=DIR)."
        )
