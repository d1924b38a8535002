"""What crosses machines, knowing nothing of training: the local launcher and its network
isolation, probes of a cluster's tasks, the chief's liveness, the multi-worker join deadline,
cluster manifests (TFJob, Slurm) and the cost model of `tfdist plan`. Pure Python except where a
module says otherwise; the ground floor of tfdist's core (it imports only `tfdist.strategies`)."""


class ClusterError(ValueError):
    """A launch or manifest that cannot be made as asked; the message is one line: input, value,
    fix."""


class LaunchError(ClusterError):
    """A local launch that cannot start (`tfdist launch`); one line."""
