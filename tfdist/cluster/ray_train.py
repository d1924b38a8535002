"""Ray Train as the engine: every worker of a Ray Train `DataParallelTrainer` runs a tfdist
program (a tfdist command, `train ...`, or the user's own, `python my_train.py ...`, as `tfdist
launch` takes them) with the TF_CONFIG tfdist wrote for it from the workers' addresses.

Ray owns the workers: where they run, their CPUs and GPUs, restarting the group after a failure
(`FailureConfig`), the run's record. tfdist owns what runs in them. Each Ray worker runs the
program as its child process, which imports tfdist first, so gets tfdist's Keras flavour and
quiet logs, parses its flags from its own argv, and writes its lines once. A child that fails,
or is killed, fails its worker, so Ray restarts the group and the program resumes from its
`--model_dir` (which every worker must reach: on a cluster a shared file system or a `gs://`
path). The child dies with its worker. When the driver is asked to stop (`StopRequest`), each
worker sends its program SIGTERM, a preemption notice: the programs save at one step and exit
75, and their workers end without failing.

Ray's `TensorflowTrainer` is not used: it imports TensorFlow in the driver, Ray's controller and
every worker before any code of ours (four imports for 2 workers, two more at each restart, none
of which trains); the backend here writes the same TF_CONFIG without them.

Ray itself is imported only by `trainer` (`pip install -e '.[ray]'`).
"""

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Collection, Sequence

from tfdist.cluster import ClusterError
from tfdist.cluster import launcher
from tfdist.cluster import processes
from tfdist.errors import EXIT_PREEMPTED
from tfdist.strategies import ClusterConfig
from tfdist.strategies import Task
from tfdist.strategies import TaskType


_INSTALL = (
    "Ray Train is not installed here; install it with pip install -e '.[ray]' (or pip install "
    "'ray[train]')."
)


# How long Ray Train waits for a worker group's workers to start (read by its controller, which
# the driver's variable reaches).
START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"


class RayUnavailable(ClusterError):
    """Ray (with Ray Train) is not installed here; one line says how to install it."""


class StopRequest:
    """The driver's request that the run stop and save, how each worker's program ended then,
    and the nodes the workers ran on: a Ray actor (`ray.remote(StopRequest)`) that every worker
    polls."""

    POLL_S = 0.5  # How often a worker asks.

    def __init__(self):
        self.asked, self.statuses, self.nodes = False, {}, set()

    def placed(self, node_id: str, address: str) -> None:
        """Notes that a worker ran on the node `node_id`, at the IP `address`."""
        self.nodes.add((node_id, address))

    def worker_nodes(self) -> set[tuple[str, str]]:
        return set(self.nodes)

    def ask(self) -> None:
        self.asked = True

    def is_asked(self) -> bool:
        return self.asked

    def ended(self, rank: int, status: int) -> None:
        self.statuses[rank] = status

    def ended_statuses(self) -> dict[int, int]:
        """Each worker's program's status, by rank, once it ended after the request."""
        return dict(self.statuses)


def stop_request():
    """A `StopRequest` actor on this process's node (the driver's), which outlives the loss of
    any node that runs workers: the surviving workers keep asking it, and it still knows the
    nodes a lost one had."""
    # pylint: disable=import-outside-toplevel
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(num_cpus=0, scheduling_strategy=here)(StopRequest).remote()


class WorkerFailed(RuntimeError):
    """A Ray worker's program ended with a non-zero status: raised in the worker, so that Ray's
    failure policy (`FailureConfig`) restarts the group or ends the run."""


def require_ray() -> None:
    """Raises RayUnavailable, in one line, unless Ray Train is installed (before anything
    imports TensorFlow for it)."""
    try:
        found = importlib.util.find_spec("ray.train") is not None
    except (ImportError, ValueError):  # No `ray` package at all, or a broken one.
        found = False
    if not found:
        raise RayUnavailable(_INSTALL)


def train_loop_per_worker(config: dict) -> None:
    """Ray Train's function for each worker (in the worker's process): runs `config["command"]`
    as `tfdist launch` would run it as a task, with the TF_CONFIG Ray set, and waits for it.

    Args:
      config: "command" (the words after `--`), "tfdist_commands" (tfdist's command names),
        "env" (variables for the program, over the worker's) and "stop" (the driver's
        `StopRequest` actor; None: nobody asks). The program runs where Ray started the worker.

    Raises:
      WorkerFailed: the program ended with a non-zero status (a signal's: negative), but for
        a save on the driver's stop request (exit 75).
    """
    command = tuple(config["command"])
    argv = launcher.resolve_command(command, config["tfdist_commands"])
    if config["stop"] is not None:
        import ray  # pylint: disable=import-outside-toplevel  # This process is Ray's worker.

        node = ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()
        config["stop"].placed.remote(*node)
    env = {**os.environ, **config["env"]}  # Over Ray's: it sets TF_USE_LEGACY_KERAS=1.
    with subprocess.Popen(  # The worker's stdout and stderr: Ray sends them to the driver.
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        preexec_fn=processes.dies_with_this_thread(),
    ) as program:
        try:
            status, asked = wait_or_stop(program, _stop_asked(config["stop"]))
        finally:
            if program.poll() is None:  # Ray stopped this worker: its program goes too.
                program.kill()
    if asked:
        import ray  # pylint: disable=import-outside-toplevel

        ray.get(config["stop"].ended.remote(ray.train.get_context().get_world_rank(), status))
    if status and not (asked and status == EXIT_PREEMPTED):
        raise WorkerFailed(f"`{' '.join(command)[:200]}` exited with status {status}")


def _stop_asked(stop) -> Callable[[], bool]:
    """Whether the driver asked the run to stop: a question to `stop` (None: never)."""
    if stop is None:
        return lambda: False
    import ray  # pylint: disable=import-outside-toplevel

    return lambda: ray.get(stop.is_asked.remote())


def wait_or_stop(program: subprocess.Popen, stop_asked: Callable[[], bool]) -> tuple[int, bool]:
    """The program's status once it ended, and whether `stop_asked()` said yes (asked every
    `StopRequest.POLL_S`): then the program got SIGTERM, a preemption notice. A program that
    saved (75) before this worker's next question, on the notice a peer's program shared with
    it, is asked about once more after it ended."""
    asked = False
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            status = program.wait(timeout=StopRequest.POLL_S)
            return status, asked or (status == EXIT_PREEMPTED and stop_asked())
        if not asked and stop_asked():
            asked = True
            program.send_signal(signal.SIGTERM)


def worker_address() -> str:
    """HOST:PORT for this Ray worker's task: its node's address (as Ray knows it) and a port free
    now, which the program's server takes moments later (as Ray's TensorflowTrainer picks it)."""
    import ray  # pylint: disable=import-outside-toplevel  # This process is Ray's worker.

    host = ray.util.get_node_ip_address()
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def set_tf_config(addresses: Sequence[str], index: int) -> None:
    """Sets TF_CONFIG in this Ray worker: worker `index` of a cluster of `addresses`."""
    cluster = ClusterConfig({"worker": tuple(addresses)}, Task(TaskType.WORKER, index))
    os.environ["TF_CONFIG"] = cluster.to_json()


def _tf_config_backend():
    """A Ray Train `BackendConfig` whose backend gives each worker its TF_CONFIG when the group
    starts (and starts again), without importing TensorFlow anywhere."""
    # pylint: disable=import-outside-toplevel
    import ray
    from ray.train.backend import Backend
    from ray.train.backend import BackendConfig

    class TfConfigBackend(Backend):
        def on_start(self, worker_group, backend_config) -> None:
            addresses = worker_group.execute(worker_address)
            ray.get(
                [
                    worker_group.execute_single_async(index, set_tf_config, addresses, index)
                    for index in range(len(worker_group))
                ]
            )

    class TfConfig(BackendConfig):
        @property
        def backend_cls(self):
            return TfConfigBackend

    return TfConfig()


def trainer(
    command: Sequence[str],
    *,
    num_workers: int,
    gpus_per_worker: int = 0,
    cpus_per_worker: float = 1,
    max_failures: int = 0,
    name: str | None = None,
    runtime_env: dict | None = None,
    program_env: dict[str, str] | None = None,
    tfdist_commands: Collection[str] = ("train",),
    stop,
):
    """A Ray Train `DataParallelTrainer` whose `num_workers` workers each run `command` with
    their TF_CONFIG, with `runtime_env` (`tfdist.ray_runtime_env()`) and the program with
    `program_env` over its worker's variables; `trainer(...).fit()` runs it on the Ray that
    `ray.init` connected to; they poll `stop`, a `StopRequest` actor on it.

    Raises:
      RayUnavailable: Ray Train is not installed.
    """
    try:
        # pylint: disable=import-outside-toplevel
        from ray.train.v2.api.config import FailureConfig
        from ray.train.v2.api.config import RunConfig
        from ray.train.v2.api.config import ScalingConfig
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    except ImportError as error:
        raise RayUnavailable(f"{_INSTALL[:-1]} ({error}).") from None
    resources = {"CPU": cpus_per_worker, **({"GPU": gpus_per_worker} if gpus_per_worker else {})}
    return DataParallelTrainer(
        train_loop_per_worker,
        train_loop_config={
            "command": list(command),
            "tfdist_commands": sorted(tfdist_commands),
            "env": dict(program_env or {}),
            "stop": stop,
        },
        backend_config=_tf_config_backend(),
        scaling_config=ScalingConfig(
            num_workers=num_workers,
            use_gpu=gpus_per_worker > 0,
            resources_per_worker=resources,
        ),
        run_config=RunConfig(
            name=name,
            # A group that does not start in time (a lost node, no room) is a controller
            # failure to Ray, retried without end unless bounded: as often as a worker's.
            failure_config=FailureConfig(
                max_failures=max_failures, controller_failure_limit=max_failures
            ),
            worker_runtime_env=runtime_env or {},
        ),
    )


def did_not_start(error: Exception) -> bool:
    """Whether a failed run's `error` is Ray Train's worker group that did not start within its
    start-up timeout (`START_TIMEOUT_ENV`), the last time Ray tried."""
    return "worker group startup timed out" in str(error)


def lost_nodes(stop) -> list[str]:
    """The nodes a worker of the run ran on that Ray no longer has alive, each as "ID at IP"
    (the ID's first 8 digits, as `ray status` shows them)."""
    import ray  # pylint: disable=import-outside-toplevel

    alive = {node["NodeID"] for node in ray.nodes() if node.get("Alive")}
    ran_on = ray.get(stop.worker_nodes.remote(), timeout=10)
    return [
        f"{node_id[:8]} at {address}" for node_id, address in sorted(ran_on) if node_id not in alive
    ]


def cause(error: Exception) -> str:
    """What ended a failed Ray Train run, in one line: the first failed worker's rank and its
    error's last line (a tfdist program's: how it ended), else the error's first line."""
    failures = getattr(error, "worker_failures", None)  # ray.train.WorkerGroupError
    if failures:
        rank = min(failures)
        lines = str(failures[rank]).strip().splitlines() or [type(failures[rank]).__name__]
        return f"worker {rank}: {lines[-1]}"
    return first_line(error)


def first_line(error: BaseException) -> str:
    """`error`'s message's first line (its class's name when it has none)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def proc_stat(pid: int | str = "self") -> list[str]:
    """The fields of /proc/PID/stat after the command's name: the state (field 3) first."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
        return stat.read().rpartition(")")[2].split()


def kill_descendants() -> None:
    """SIGKILL to every process this one started and what they started (a local Ray's daemons
    and workers), as /proc shows them now: what left the tree, a daemon whose parent ended,
    is not found. Linux."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int(proc_stat(entry)[1])
            children.setdefault(parent, []).append(int(entry))
    found, pending = [], [os.getpid()]
    while pending:
        found += (kids := children.get(pending.pop(), []))
        pending += kids
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
