"""How many TensorFlow tasks this machine can run at once, for `tfdist launch` to refuse a
cluster that does not fit before any task starts. Pure Python."""

import dataclasses
import os
import resource

from tfdist.cluster import LaunchError

# Measured with TF 2.21 on a 2-CPU machine (smaps_rollup, /proc/PID/status): each `tfdist train`
# task, one_device or a multi_worker_mirrored worker, holds ~340 MiB of private memory plus
# ~420 MiB of shared libraries that every task maps once, and runs ~130-180 threads (more with
# more CPUs), each of which RLIMIT_NPROC counts.
_TASK_PRIVATE_MIB = 340
_SHARED_MIB = 420
_TASK_THREADS = 180
_CGROUP_MEMORY_MAX = "/sys/fs/cgroup/memory.max"


@dataclasses.dataclass(frozen=True)
class MachineLimits:
    """What bounds the number of TensorFlow tasks this machine can run at once.

    Attributes:
      memory_bytes: physical memory, or the cgroup's memory limit when lower.
      memory_source: which of the two `memory_bytes` is, for messages.
      max_threads: RLIMIT_NPROC's soft limit (Linux counts threads against it); None where it
        does not apply (unlimited, or root).
    """

    memory_bytes: int
    memory_source: str
    max_threads: int | None

    @classmethod
    def of_this_machine(cls) -> "MachineLimits":
        """Reads physical memory, cgroup v2's memory.max and RLIMIT_NPROC."""
        memory, source = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "memory"
        try:
            with open(_CGROUP_MEMORY_MAX, encoding="utf-8") as limit_file:
                limit = limit_file.read().strip()
        except OSError:
            limit = "max"
        if limit.isascii() and limit.isdigit() and int(limit) < memory:
            memory, source = int(limit), f"memory ({_CGROUP_MEMORY_MAX})"
        threads = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        unlimited = threads == resource.RLIM_INFINITY or os.getuid() == 0
        return cls(
            memory_bytes=memory, memory_source=source, max_threads=None if unlimited else threads
        )

    def max_tasks(self) -> tuple[int, str]:
        """How many tasks fit, and how that number was derived (one phrase, for messages)."""
        by_memory = max(0, (self.memory_bytes >> 20) - _SHARED_MIB) // _TASK_PRIVATE_MIB
        if self.max_threads is not None and self.max_threads // _TASK_THREADS < by_memory:
            return (
                self.max_threads // _TASK_THREADS,
                f"RLIMIT_NPROC={self.max_threads} threads at ~{_TASK_THREADS} threads per "
                "TensorFlow task",
            )
        return by_memory, (
            f"{self.memory_bytes / 2**30:.1f} GiB of {self.memory_source} at "
            f"~{_TASK_PRIVATE_MIB} MiB per TensorFlow task plus {_SHARED_MIB} MiB "
            "shared"
        )


def check_capacity(*, num_workers: int, num_tasks: int, limits: MachineLimits) -> None:
    """Raises LaunchError when a launch of `num_tasks` tasks (`num_workers` workers and the rest)
    needs more than `limits` allow."""
    most, derivation = limits.max_tasks()
    if num_tasks > most:
        raise LaunchError(
            f"num_workers={num_workers} makes {num_tasks} task(s) in all, more "
            f"than this machine can run: at most {most}, from {derivation} (measured for "
            "`tfdist train`); launch fewer tasks, or spread them over machines with "
            "`tfdist manifest`."
        )
