"""What crosses machines, knowing nothing of training: the local launcher and its network
isolation, probes of a cluster's tasks, the chief's liveness, the multi-worker join deadline,
cluster manifests (JobSet, Slurm, TFJob) and their rehearsal on emulated hosts, and the cost
model of `tfdist plan`. Pure Python except where a
module says otherwise; the ground floor of tfdist's core (it imports only `tfdist.strategies`)."""

import sys

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
