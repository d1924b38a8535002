"""What crosses machines, knowing nothing of training: the local launcher and its network
isolation, probes of a cluster's tasks, the chief's liveness, the multi-worker join deadline,
cluster manifests (JobSet, Slurm, TFJob) and their rehearsal on emulated hosts, and the cost
model of `tfdist plan`. Pure Python except where a
module says otherwise; the ground floor of tfdist's core (it imports only `tfdist.strategies`)."""

import errno
import os
import stat
import sys
from typing import BinaryIO

from tfdist import errors

# The interpreter that runs the processes tfdist starts itself (tasks of its own commands, the
# join deadline, network namespaces' holders, benchmark configurations): without the working
# directory on sys.path (`-P`, Python 3.11+), so that no module there shadows one of tfdist's.
PYTHON = (sys.executable, "-P") if sys.version_info >= (3, 11) else (sys.executable,)
# What each engine tfdist drives tells its tasks: the seconds from a preemption notice to SIGKILL
# (`tfdist launch --grace_s`, a JobSet's terminationGracePeriodSeconds, the Slurm script's
# --signal lead time, what `tfdist ray` waits), which a backup save must fit in.
GRACE_ENV = "TFDIST_GRACE_S"


class ClusterError(errors.UsageError):
    """A launch or manifest that cannot be made as asked; the message is one line: input, value,
    fix."""


class LaunchError(ClusterError):
    """A local launch that cannot start (`tfdist launch`); one line."""


class RehearsalError(ClusterError):
    """A manifest or option that `tfdist rehearse` cannot run as asked; one line."""


def open_log(path: str) -> BinaryIO:
    """The log `path` of a process tfdist supervises, opened to append to (made if missing):
    only a regular file, never through a link (planted in a shared log dir) or into a FIFO
    (which would stop the output's copy).

    Raises:
      OSError: it is a link or not a regular file (strerror "not a regular file of its own"),
        or it cannot be opened.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENXIO):  # A link; a FIFO without a reader.
            raise OSError(error.errno, "not a regular file of its own") from None
        raise
    if stat.S_ISREG(os.fstat(descriptor).st_mode):
        return os.fdopen(descriptor, "ab")
    os.close(descriptor)
    raise OSError(errno.EINVAL, "not a regular file of its own")
