"""The flags that several `tfdist` commands share and users' programs never see (`cli` imports
the command modules that define and read them; a user's program imports only the train flags)."""

from absl import flags
from absl import logging  # noqa: F401  (defines --log_dir, which launch and rehearse write to)

from tfdist.cluster import manifests
from tfdist.commands import flags as flags_lib
from tfdist.fields import MAX_COUNT
from tfdist.strategies.config import MAX_REPLICA_DEVICES

NUM_WORKERS = flags_lib.define_integer(
    "num_workers",
    2,
    "launch: worker tasks to start; manifest: worker tasks of the job; "
    "data check: workers to simulate; data serve: tf.data service "
    "workers to start.",
    lower_bound=1,
    upper_bound=flags_lib.MAX_TASKS,
)
EVALUATOR = flags.DEFINE_bool(
    "evaluator", False, "launch: start an evaluator task; manifest: add one."
)
MAX_RESTARTS = flags_lib.define_integer(
    "max_restarts",
    0,
    "launch: restart up to K times after a task fails, backing off "
    "(--restart_backoff_s): every task, or in a job with ps tasks only a "
    "failed task that is not a ps (not a usage error: exit 2 ends the job); "
    "manifest: restart the whole JobSet up to K times after a pod fails "
    "(failurePolicy.maxRestarts); ray: restart the worker group up to K times after a worker "
    "fails (FailureConfig.max_failures).",
    lower_bound=0,
    upper_bound=MAX_COUNT,
)
TIMEOUT_S = flags_lib.define_duration(
    "timeout_s",
    None,
    "launch, rehearse, ray: stop every task (pod, Ray worker) and exit 124 after this many "
    "seconds; unset waits.",
)
NAME = flags.DEFINE_string(
    "name",
    "tfdist",
    "manifest: the JobSet, Slurm job or TFJob name; ray: the Ray Train run's name.",
)
GPUS_PER_TASK = flags_lib.define_integer(
    "gpus_per_task",
    0,
    "manifest: GPUs of each task: Slurm --gpus-per-task; JobSet nvidia.com/gpu of each pod that "
    "trains (the workers, and the chief without ps); ray: GPUs Ray reserves for each worker.",
    lower_bound=0,
    upper_bound=MAX_REPLICA_DEVICES,
)
LOG_DIR = flags.FlagHolder(flags.FLAGS, flags.FLAGS["log_dir"])  # absl.logging's flag.
flags.FLAGS["log_dir"].help = (
    "launch: write each task's output to DIR/<type>-<index>.log; "
    "rehearse: each pod's to DIR/<hostname>.log (unset: a new "
    "directory, named at the start)."
)
JSON = flags.DEFINE_string(
    "json", None, "data check, benchmark, plan: also write the report as JSON to this path."
)
PLOT = flags.DEFINE_string(
    "plot",
    None,
    "benchmark: write a PNG of throughput and efficiency vs replicas; plan: of "
    "efficiency and step time vs GPUs (needs matplotlib: pip install -e "
    "'.[plot]').",
)
GRACE_S = flags_lib.define_integer(
    "grace_s",
    manifests.GRACE_S,
    "Seconds a preempted task has to save at one step, from the notice to SIGKILL (each task "
    "is told, and checks its first backup's save against it). manifest: a JobSet pod's "
    "terminationGracePeriodSeconds (GKE spot gives 30, AWS spot 120); for Slurm, how long "
    "before the time limit --signal sends SIGUSR1. launch: from its SIGTERM to the tasks to "
    "its SIGKILL.",
    lower_bound=1,
    upper_bound=manifests.MAX_GRACE_S,
)
SLURM_NODES = flags.DEFINE_string(
    "slurm_nodes",
    None,
    "manifest: the Slurm job's node count (#SBATCH --nodes), from 1 to its task count: fewer "
    "nodes than tasks is an uneven layout (e.g. 3 nodes for 4 tasks), which Slurm lays out and "
    "each task derives (unset: as --slurm_tasks_per_node needs). rehearse: the nodes of the "
    "real Slurm cluster a Slurm script runs on: a count (named node1, node2, ...) or their "
    "names as a Slurm host list, e.g. gpu[9-10] (unset: its #SBATCH --nodes, else one per "
    "task).",
)
