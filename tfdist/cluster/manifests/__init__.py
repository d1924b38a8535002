"""Cluster manifests for a `tfdist train` command line, as text: a Kubernetes JobSet (the way on a
current cluster), a Slurm batch script, or a Kubeflow TFJob (legacy, training-operator 1.9).

Security: TensorFlow's gRPC servers (workers, parameter servers, the chief, the tf.data service)
have no authentication and no encryption. Anyone who can reach a task's port can run graphs in
it. Run the cluster on a private network, and never expose its ports to the internet or to other
tenants.

Every invalid argument raises `ManifestError`, one line naming the argument, the value and the
fix, e.g.::

    jobset name: 'My_Job' is not a Kubernetes name; use lowercase letters, digits and "-", ...
"""

from tfdist.cluster.manifests.checks import ManifestError
from tfdist.cluster.manifests.checks import to_yaml
from tfdist.cluster.manifests.jobset_checks import GRACE_S
from tfdist.cluster.manifests.jobset_checks import MAX_GRACE_S
from tfdist.cluster.manifests.jobset_checks import Pods
from tfdist.cluster.manifests.jobset_yaml import jobset
from tfdist.cluster.manifests.sbatch_script import TIME_LIMIT as SLURM_TIME_LIMIT
from tfdist.cluster.manifests.sbatch_script import slurm
from tfdist.cluster.manifests.sbatch_script import slurm_train_flags
from tfdist.cluster.manifests.sbatch_site import SlurmSite
from tfdist.cluster.manifests.sbatch_sweep import Sweep
from tfdist.cluster.manifests.tfjob_yaml import RESTART_POLICIES
from tfdist.cluster.manifests.tfjob_yaml import tfjob

__all__ = [
    "GRACE_S",
    "MAX_GRACE_S",
    "ManifestError",
    "Pods",
    "RESTART_POLICIES",
    "SLURM_TIME_LIMIT",
    "SlurmSite",
    "Sweep",
    "jobset",
    "slurm",
    "slurm_train_flags",
    "tfjob",
    "to_yaml",
]
