"""`tfdist launch`: one process per task of a local cluster, each with its own TF_CONFIG.

Like torchrun for TensorFlow: ports come from portpicker, every address is 127.0.0.1, every output
line is prefixed with its task, and every wait is bounded. Pure Python: the launcher never imports
TensorFlow.

Network: by default (`auto`) the tasks run in a network namespace of their own with loopback
only, since TensorFlow's gRPC servers listen on every interface without authentication
(`tfdist.cluster.network` says why and when it falls back to this machine's network, with a
warning naming the open ports).

When the job is done: without ps tasks, when every chief and worker exited 0; with ps tasks, when
the chief (the coordinator) exited 0. Tasks still running then (ps and worker servers, the
evaluator) are stopped. When a task fails, the launcher restarts it up to `max_restarts` times,
after a back-off (`supervisor.backoff_s`): the whole group without ps tasks (a lost peer breaks a
collective group) or when a ps task failed (its variables are gone with it), else only that
task. On a final failure, or a usage error (exit 2: a restart would repeat it), it stops every
task, names the first failure and exits with the last failed task's status. Stopping and what
ends with the tasks (process groups, cgroups, the launcher's death): `tfdist.cluster.processes`.
"""

import contextlib
import dataclasses
import math
import os
import shutil
import sys
import threading
from collections.abc import Collection

import portpicker

from tfdist import strategies
from tfdist.cluster import GRACE_ENV
from tfdist.cluster import LaunchError
from tfdist.cluster import PYTHON
from tfdist.cluster import open_log
from tfdist.cluster import capacity
from tfdist.cluster import joining
from tfdist.cluster import network
from tfdist.cluster import processes
from tfdist.cluster import supervisor
from tfdist.errors import EXIT_PREEMPTED
from tfdist.errors import EXIT_USAGE
from tfdist.cluster.manifests import GRACE_S
from tfdist.cluster.network import Network
from tfdist.strategies.config import check_seconds
from tfdist.strategies import ClusterConfig

HOST = "127.0.0.1"
_ANNOUNCER = "tfdist launch"
_TRAIN = "train"


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """What `tfdist launch` starts.

    Attributes:
      command: the program each task runs; a tfdist command (`train ...`, `doctor`) runs as
        `python -m tfdist ...`.
      num_workers, num_ps, chief, evaluator: the local cluster's tasks.
      log_dir: where each task's output goes as `<type>-<index>.log`; None keeps no files.
      max_restarts: how many times a failed task (or group) is restarted; apart from that,
        how many times a preempted one (exit 75, its state saved) starts again.
      restart_backoff_s: the wait before the first restart, doubled before each next one, at
        most supervisor.MAX_BACKOFF_S; 0 restarts at once.
      grace_s: from the SIGTERM that stops the tasks (a preemption, a restart after one) to the
        SIGKILL; each task is told (GRACE_ENV) and checks its backup's save against it.
      timeout_s: stop every task and fail after this long; None waits for the job to end.
      network: which network the tasks run on (see `Network`).
      env: variables every task gets on top of this process's environment (`tfdist launch`
        passes TF_USE_LEGACY_KERAS, the Keras `tf.keras` is in every task).
      keras: that Keras (2 or 3); under 3, a task of a program that crashes in Keras 3's own
        multi-worker `fit` is told to train through `tfdist.fit`.
      join_check_s: a program's task that does not listen on its TF_CONFIG port this many
        seconds after its start is named in a warning (it did not join); 0 only checks when the
        task exits.
    """

    command: tuple[str, ...]
    num_workers: int = 1
    num_ps: int = 0
    chief: bool = False
    evaluator: bool = False
    log_dir: str | None = None
    max_restarts: int = 0
    restart_backoff_s: float = 1.0
    grace_s: float = GRACE_S
    timeout_s: float | None = None
    network: Network = Network.AUTO
    env: tuple[tuple[str, str], ...] = ()
    keras: int = 2
    join_check_s: float = joining.JOIN_CHECK_S

    def __post_init__(self):
        if not self.command:
            raise LaunchError(
                "launch needs a command after `--`, e.g. `tfdist launch "
                "--num_workers=2 -- train --strategy=multi_worker_mirrored`."
            )
        problem = strategies.ps_without_chief(self.num_ps, self.chief)
        if problem:
            raise LaunchError(f"num_ps={self.num_ps}: {problem}; add --chief.")
        if self.timeout_s is not None:
            check_seconds(
                "timeout_s",
                self.timeout_s,
                "pass e.g. --timeout_s=3600, or leave it unset to wait for the job to end",
                error=LaunchError,
            )
        check_seconds("grace_s", self.grace_s, f"pass e.g. --grace_s={GRACE_S}", LaunchError)
        if not (math.isfinite(self.restart_backoff_s) and self.restart_backoff_s >= 0):
            raise LaunchError(
                f"restart_backoff_s={self.restart_backoff_s} is not a number of seconds of 0 "
                "or more; pass e.g. --restart_backoff_s=1, or 0 to restart at once."
            )
        if not (math.isfinite(self.join_check_s) and self.join_check_s >= 0):
            raise LaunchError(
                f"join_check_s={self.join_check_s} is not a number of seconds of 0 or more; "
                f"pass e.g. --join_check_s={joining.JOIN_CHECK_S:g}, or 0 to check only when a "
                "task exits."
            )
        if self.keras not in (2, 3):
            raise LaunchError(f"keras={self.keras!r} is not a Keras; pass 2 or 3.")
        if self.network not in tuple(Network):
            raise LaunchError(
                f"network={self.network!r} is not understood; pass 'auto', 'isolated' or 'host'."
            )
        object.__setattr__(self, "network", Network(self.network))

    @property
    def num_tasks(self) -> int:
        return int(self.chief) + self.num_workers + self.num_ps + int(self.evaluator)


PYTHON_NAMES = ("python", "python3")


def resolve_command(
    command: tuple[str, ...], tfdist_commands: Collection[str] = (_TRAIN,)
) -> list[str]:
    """The argv every task runs: a tfdist command (`train ...`, `data check ...`) as
    `python -m tfdist ...`; `python` or `python3` as the interpreter tfdist runs under (PATH's
    may be another, without this environment's packages: an unactivated venv); else `command`.

    Args:
      command: the words after `--`.
      tfdist_commands: tfdist's command names (`cli.COMMANDS`; "data check" counts as "data").

    Raises:
      LaunchError: the program is neither a tfdist command nor an executable file or on PATH.
    """
    if _is_tfdist(command, tfdist_commands):
        return [*PYTHON, "-m", "tfdist", *command]
    program = command[0]
    if program in PYTHON_NAMES:
        return [sys.executable, *command[1:]]
    found = shutil.which(program)
    if found is None:
        raise LaunchError(
            f"command {program!r} is not an executable file or on PATH; give a "
            "path or a program name, e.g. `-- python my_script.py`."
        )
    return [found, *command[1:]]


def _is_tfdist(command: tuple[str, ...], tfdist_commands: Collection[str]) -> bool:
    return command[0] in {name.split()[0] for name in tfdist_commands}


def _pick_ports(num_tasks: int) -> list[int]:
    try:
        return [portpicker.pick_unused_port() for _ in range(num_tasks)]
    except portpicker.NoFreePortFoundError:
        raise LaunchError(
            f"no free ports for {num_tasks} tasks on {HOST}; launch fewer tasks or free some ports."
        ) from None


def _task_names(cluster: ClusterConfig) -> list[tuple[str, int]]:
    return [
        (job, index) for job, addresses in cluster.jobs.items() for index in range(len(addresses))
    ]


def _cluster(config: LaunchConfig) -> ClusterConfig:
    """The local cluster, every task on HOST at a port of its own."""
    return strategies.make_cluster(
        num_workers=config.num_workers,
        num_ps=config.num_ps,
        chief=config.chief,
        evaluator=config.evaluator,
        ports=_pick_ports(config.num_tasks),
        host=HOST,
    )


def _tasks(
    config: LaunchConfig,
    cluster: ClusterConfig,
    argv: list[str],
    cgroups: processes.Cgroups | None,
    crashes: joining.Keras3FitCrash | None,
) -> list[processes.Process]:
    """One `processes.Process` per cluster task, each with its own TF_CONFIG (and cgroup, and
    its output read by `crashes`)."""
    if config.log_dir:
        os.makedirs(config.log_dir, exist_ok=True)
    lock = threading.Lock()
    tasks = []
    for job, index in _task_names(cluster):
        task_env = {"TF_CONFIG": cluster.for_task(job, index).to_json()}
        env = {**os.environ, **dict(config.env), **task_env, GRACE_ENV: f"{config.grace_s:g}"}
        log_path = os.path.join(config.log_dir, f"{job}-{index}.log") if config.log_dir else None
        try:  # A link or FIFO planted in the log dir: refused before any task starts.
            if log_path:
                open_log(log_path).close()
        except OSError as error:
            raise LaunchError(
                f"log_dir={config.log_dir!r}: {log_path} is {error.strerror}, where a task's "
                "log goes; remove it, or pass another --log_dir."
            ) from None
        name = f"{job}:{index}"
        tasks.append(
            processes.Process(
                name,
                argv,
                env,
                log_path,
                lock,
                announcer=_ANNOUNCER,
                cgroup=cgroups.child(name) if cgroups else None,
                on_line=crashes.reader(name) if crashes else None,
            )
        )
    return tasks


def _is_primary(name: str, config: LaunchConfig) -> bool:
    """Whether the job waits for this task: the chief under ps, else every chief and worker;
    the evaluator too, which stops after the last checkpoint or once the chief is gone."""
    job = name.split(":")[0]
    return job in ("chief", "evaluator") if config.num_ps else job != "ps"


# A failed task's group stops with this grace, not STOP_GRACE_S: its survivors cannot save (their
# collective or their ps is gone), and the restart resumes from the last backup anyway.
FAILED_GROUP_GRACE_S = 2.0


class _Restarts:
    """`tfdist launch`'s answer to a failed task (a `supervisor.Policy`): restart the whole
    group without ps tasks (a lost peer breaks a collective group) or when a ps task failed
    (its variables are gone with it), else only that task, after a doubling back-off, up to
    `max_restarts` times; then fail, naming the first failure."""

    def __init__(self, config: LaunchConfig, names: list[str]):
        self.config, self.names = config, names
        self.first_failure: str | None = None
        self.preemptions = 0

    def __call__(
        self, name: str, status: int, restarts: int
    ) -> supervisor.Restart | supervisor.Fail:
        config = self.config
        if status == EXIT_PREEMPTED:
            return self._preempted(name)
        if status == EXIT_USAGE:  # The same command would be refused again.
            return supervisor.Fail(
                f"{name} exited with status {EXIT_USAGE}, a usage error that a restart would "
                "repeat; stopped every task: fix the command and run again"
            )
        failure = f"{name} {supervisor.ended(status)}"
        if restarts >= config.max_restarts:
            last = (
                f"{self.first_failure} first; after {restarts} restart(s), {failure}"
                if self.first_failure
                else f"{failure} after {restarts} restart(s)"
            )
            return supervisor.Fail(f"{last}; stopped every task")
        self.first_failure = self.first_failure or failure
        lost_ps = name.startswith("ps:")
        every_task = lost_ps or not config.num_ps
        delay = supervisor.backoff_s(config.restart_backoff_s, restarts + 1)
        bound = (
            supervisor.backoff_bound(
                config.restart_backoff_s, config.max_restarts, timed=bool(config.timeout_s)
            )
            if restarts == 0
            else ""
        )
        return supervisor.Restart(
            tuple(self.names) if every_task else (name,),
            f"restarting {'every task' if every_task else 'it'} ({restarts + 1}/"
            f"{config.max_restarts}) in {delay:g} s"
            f"{': a ps task loses its variables with it' if lost_ps else ''}{bound}",
            delay,
            grace_s=FAILED_GROUP_GRACE_S,
        )

    def _preempted(self, name: str) -> supervisor.Restart | supervisor.Fail:
        """A task that saved its state on a preemption notice (exit 75): its group starts again
        at once, which does not spend `max_restarts` (up to as many preemptions)."""
        config = self.config
        if self.preemptions >= config.max_restarts:
            return supervisor.Fail(
                f"{name} was preempted (it saved its state; exit {EXIT_PREEMPTED}) after "
                f"{self.preemptions} preemption restart(s) of --max_restarts="
                f"{config.max_restarts}; stopped every task: run again to resume"
            )
        self.preemptions += 1
        every_task = name.startswith(("ps:", "chief:")) or not config.num_ps
        return supervisor.Restart(
            tuple(self.names) if every_task else (name,),
            f"restarting {'every task' if every_task else 'it'} from the saved state "
            f"(preemption {self.preemptions}/{config.max_restarts}, apart from failures)",
            counted=False,
            grace_s=config.grace_s,  # The others save at the same step.
        )


def _supervise(
    config: LaunchConfig, tasks: list[processes.Process], joins: joining.JoinWatch | None
) -> int:
    """Starts `tasks` and supervises them until the job ends, the time limit passes or a
    signal stops it (watching that they join, with `joins`); returns the exit status."""
    by_name = {task.name: task for task in tasks}

    def start(name: str) -> processes.Process:
        by_name[name].start()
        return by_name[name]

    names = list(by_name)
    watcher = supervisor.Supervisor(
        _ANNOUNCER,
        timeout_s=config.timeout_s,
        straggler_hint="--timeout_s=S bounds the job",
        grace_s=config.grace_s,
    )
    group = supervisor.Group(
        names,
        start,
        _Restarts(config, names),
        awaited=lambda name: _is_primary(name, config),
        on_poll=joins.notice if joins else None,
    )
    return watcher.run(lambda: watcher.watch(group))


def main(config: LaunchConfig, *, tfdist_commands: Collection[str] = (_TRAIN,)) -> int:
    """Checks the launch, starts every task and supervises the job; returns the exit status.

    Every check runs before the first task starts (the caller checks that `config.log_dir` can
    be written). Call it from the main thread: the tasks die with the thread that started them.

    Args:
      config: what to start.
      tfdist_commands: tfdist's command names, run as `python -m tfdist ...` (the CLI passes
        `cli.COMMANDS`).

    Raises:
      LaunchError: the command is not runnable, the machine cannot run that many tasks, there
        are not enough free ports, or `network=isolated` is refused.
    """
    argv = resolve_command(config.command, tfdist_commands)
    capacity.check_capacity(
        num_workers=config.num_workers,
        num_tasks=config.num_tasks,
        limits=capacity.MachineLimits.of_this_machine(),
    )
    cluster = _cluster(config)
    namespace = _open_network(config, cluster, tfdist=_is_tfdist(config.command, tfdist_commands))
    with contextlib.ExitStack() as cleanup:
        if namespace:
            cleanup.callback(namespace.close)
        cgroups = cleanup.enter_context(processes.own_cgroups(announcer=_ANNOUNCER))
        if config.command[0] in PYTHON_NAMES:  # Once every check has passed.
            print(
                f"{_ANNOUNCER}: `{config.command[0]}` runs as {sys.executable}, the "
                "interpreter tfdist runs under",
                flush=True,
            )
        # tfdist's own commands know whether they join (`data check` never does) and train
        # Keras 3 models through tfdist's step.
        program = not _is_tfdist(config.command, tfdist_commands)
        ports = joining.serving_ports(cluster)
        joins = (
            joining.JoinWatch(ports, check_s=config.join_check_s, announcer=_ANNOUNCER)
            if program and len(ports) > 1
            else None
        )
        crashes = (
            joining.Keras3FitCrash(announcer=_ANNOUNCER) if program and config.keras == 3 else None
        )
        return _supervise(
            config,
            _tasks(
                config, cluster, [*namespace.enter, *argv] if namespace else argv, cgroups, crashes
            ),
            joins,
        )


def _open_network(
    config: LaunchConfig, cluster: ClusterConfig, *, tfdist: bool
) -> network.Namespace | None:
    """The tasks' network (`network.for_tasks`) for the ports the cluster's servers use."""
    ports = [
        int(address.rpartition(":")[2])
        for job, addresses in cluster.jobs.items()
        if job != "evaluator"
        for address in addresses
    ]
    return network.for_tasks(
        config.network,
        ports,
        needs_host=network.host_network_flag(config.command) if tfdist else None,
    )
