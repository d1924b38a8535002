"""What stands in for the container image and the node in a rehearsal: this machine's Python
environment (the one running `tfdist rehearse`, its `bin` first on PATH), without the variables
that would tell a task where it stands (a cluster gives those), and mount points for volumes."""

import os
import sys

from tfdist.cluster import RehearsalError

# Variables a task reads to find its cluster; a rehearsal sets them as the cluster would.
_CLUSTER_VARIABLES = ("TF_CONFIG", "JOB_COMPLETION_INDEX", "HOSTNAME")
_CLUSTER_PREFIXES = ("SLURM_", "TFDIST_JOBSET_", "TFDIST_REPLICATED_JOB", "TFDIST_JOB_INDEX")


def environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment minus cluster variables, this Python's `bin` first on PATH
    (where `tfdist` is), then `extra`."""
    base = {name: value for name, value in os.environ.items()
            if name not in _CLUSTER_VARIABLES and not name.startswith(_CLUSTER_PREFIXES)}
    bin_dir = os.path.dirname(sys.executable)
    base["PATH"] = os.pathsep.join([bin_dir, *(part for part in base.get("PATH", "").split(
        os.pathsep) if part and part != bin_dir)])
    return {**base, **extra}


class MountPoints:
    """Directories that volumes are mounted on inside the emulated hosts: those missing on this
    machine are made (and said), and removed by `close` if still empty (never recursively)."""

    def __init__(self, announcer: str):
        self._announcer = announcer
        self._made: list[str] = []

    def ensure(self, path: str) -> None:
        """Makes `path` (and missing parents) unless it is there.

        Raises:
          RehearsalError: `path` is there but not a directory.
        """
        if os.path.exists(path) and not os.path.isdir(path):
            raise RehearsalError(f"mount path {path} is not a directory on this "
                                 "machine, so no volume can be mounted there; mount the volume "
                                 "elsewhere (tfdist manifest --mount_path=DIR).")
        missing = []
        current = os.path.normpath(path)
        while not os.path.exists(current):
            missing.append(current)
            current = os.path.dirname(current)
        for directory in reversed(missing):
            os.mkdir(directory)
            self._made.append(directory)
        if missing:
            print(f"{self._announcer}: made the mount point {path} on this machine (removed "
                  "again when empty)", flush=True)

    def close(self) -> None:
        made, self._made = self._made, []
        for directory in reversed(made):
            try:
                os.rmdir(directory)
            except OSError:
                pass
