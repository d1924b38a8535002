"""`tfdist launch`: one process per task of a local cluster, each with its own TF_CONFIG.

Like torchrun for TensorFlow: ports come from portpicker, every address is 127.0.0.1, every output
line is prefixed with its task, and every wait is bounded. Pure Python: the launcher never imports
TensorFlow.

Network: TensorFlow's gRPC servers have no authentication and listen on every interface (TF 2.21
binds "0.0.0.0:<port>" in grpc_server_lib.cc and in the tf.data service's server_lib.cc; no
ServerDef, ConfigProto or environment setting picks another address). So by default (`auto`) the
tasks run in one network namespace of their own that has only loopback: they reach each other on
127.0.0.1, nothing else reaches them, and they cannot reach the network. Where this machine refuses
a namespace (no root and no unprivileged user namespaces, or no util-linux), `auto` runs them on
this machine's network and warns in one line which ports are open on which interfaces.

When the job is done: without ps tasks, when every chief and worker exited 0; with ps tasks, when
the chief (the coordinator) exited 0. Tasks still running then (ps and worker servers, the
evaluator) are stopped. When a task fails, the launcher restarts it up to `max_restarts` times:
the whole group without ps tasks (a lost peer breaks a collective group), only that task with
them. On a final failure it stops every task and exits with the failed task's status.
"""

import dataclasses
import enum
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from typing import TextIO

import portpicker

from tfdist import strategies
from tfdist.strategies import ClusterConfig
from tfdist.runtime import keras_env
from tfdist.cluster import network
from tfdist.runtime import paths
from tfdist.runtime.config import KERAS_VERSIONS
from tfdist.runtime.config import ConfigError

HOST = "127.0.0.1"
EXIT_TIMEOUT = 124
_POLL_S = 0.2
_STOP_GRACE_S = 15.0
_STRAGGLER_NOTICE_S = 60.0
_TRAIN = "train"
# A tfdist command that passes a URL (--tf_data_service=grpc://..., --model_dir=gs://...) or
# --download needs this machine's network: `auto` does not isolate such a job.
_URL_MARK = "://"
_DOWNLOAD = "--download"
_FALSE = ("0", "f", "false")  # absl's spellings of a false boolean, lower-cased.
# Measured with TF 2.21 on a 2-CPU machine (smaps_rollup, /proc/PID/status): each `tfdist train`
# task, one_device or a multi_worker_mirrored worker, holds ~340 MiB of private memory plus
# ~420 MiB of shared libraries that every task maps once, and runs ~130-180 threads (more with
# more CPUs), each of which RLIMIT_NPROC counts.
_TASK_PRIVATE_MIB = 340
_SHARED_MIB = 420
_TASK_THREADS = 180
_CGROUP_MEMORY_MAX = "/sys/fs/cgroup/memory.max"


class LaunchError(ConfigError):
    """A launch that cannot start; the message is one line: input, value, fix."""


class Network(str, enum.Enum):
    """Which network the tasks run on; TensorFlow's servers listen on every interface of it.

    AUTO: ISOLATED where this machine allows it, unless a tfdist command needs this machine's
      network (it passes a URL, e.g. --tf_data_service=grpc://... or --model_dir=gs://..., or
      --download); else HOST with a one-line warning.
    ISOLATED: one network namespace with loopback only, shared by the tasks; fails if refused.
    HOST: this machine's network: the tasks' ports are open on each of its interfaces.
    """
    AUTO = "auto"
    ISOLATED = "isolated"
    HOST = "host"


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """What `tfdist launch` starts.

    Attributes:
      command: the program each task runs; a tfdist command (`train ...`, `doctor`) runs as
        `python -m tfdist ...`.
      num_workers, num_ps, chief, evaluator: the local cluster's tasks.
      log_dir: where each task's output goes as `<type>-<index>.log`; None keeps no files.
      max_restarts: how many times a failed task (or group) is restarted.
      timeout_s: stop every task and fail after this long; None waits for the job to end.
      network: which network the tasks run on (see `Network`).
      keras: the Keras `tf.keras` is in every task (2: tf-keras, 3: Keras 3), through
        TF_USE_LEGACY_KERAS.
    """
    command: tuple[str, ...]
    num_workers: int = 1
    num_ps: int = 0
    chief: bool = False
    evaluator: bool = False
    log_dir: str | None = None
    max_restarts: int = 0
    timeout_s: float | None = None
    network: Network = Network.AUTO
    keras: int = 2

    def __post_init__(self):
        if not self.command:
            raise LaunchError("launch needs a command after `--`, e.g. `tfdist launch "
                              "--num_workers=2 -- train --strategy=multi_worker_mirrored`.")
        if self.num_ps and not self.chief:
            raise LaunchError(f"num_ps={self.num_ps} needs a coordinator: add --chief (the "
                              "chief runs ParameterServerStrategy's fit).")
        if self.timeout_s is not None and not (math.isfinite(self.timeout_s)
                                               and self.timeout_s > 0):
            raise LaunchError(f"timeout_s={self.timeout_s} is not a number of seconds above 0; "
                              "pass e.g. --timeout_s=3600, or leave it unset to wait for the "
                              "job to end.")
        if self.network not in tuple(Network):
            raise LaunchError(f"network={self.network!r} is not understood; pass 'auto', "
                              "'isolated' or 'host'.")
        object.__setattr__(self, "network", Network(self.network))
        if str(self.keras) not in KERAS_VERSIONS:
            raise LaunchError(f"keras={self.keras!r} is not a Keras tfdist trains with; pass "
                              "2 (tf-keras) or 3 (Keras 3).")
        object.__setattr__(self, "keras", int(self.keras))

    @property
    def num_tasks(self) -> int:
        return int(self.chief) + self.num_workers + self.num_ps + int(self.evaluator)


def resolve_command(command: tuple[str, ...],
                    tfdist_commands: Collection[str] = (_TRAIN,)) -> list[str]:
    """The argv every task runs: a tfdist command (`train ...`, `data check ...`) as
    `python -m tfdist ...`, else `command`.

    Args:
      command: the words after `--`.
      tfdist_commands: tfdist's command names (`cli.COMMANDS`; "data check" counts as "data").

    Raises:
      LaunchError: the program is neither a tfdist command nor an executable file or on PATH.
    """
    if _is_tfdist(command, tfdist_commands):
        return [sys.executable, "-m", "tfdist", *command]
    program = command[0]
    found = shutil.which(program)
    if found is None:
        raise LaunchError(f"command {program!r} is not an executable file or on PATH; give a "
                          "path or a program name, e.g. `-- python my_script.py`.")
    return [found, *command[1:]]


def _is_tfdist(command: tuple[str, ...], tfdist_commands: Collection[str]) -> bool:
    return command[0] in {name.split()[0] for name in tfdist_commands}


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
        if limit.isdigit() and int(limit) < memory:
            memory, source = int(limit), f"memory ({_CGROUP_MEMORY_MAX})"
        threads = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        unlimited = threads == resource.RLIM_INFINITY or os.getuid() == 0
        return cls(memory_bytes=memory, memory_source=source,
                   max_threads=None if unlimited else threads)

    def max_tasks(self) -> tuple[int, str]:
        """How many tasks fit, and how that number was derived (one phrase, for messages)."""
        by_memory = max(0, (self.memory_bytes >> 20) - _SHARED_MIB) // _TASK_PRIVATE_MIB
        if self.max_threads is not None and self.max_threads // _TASK_THREADS < by_memory:
            return (self.max_threads // _TASK_THREADS,
                    f"RLIMIT_NPROC={self.max_threads} threads at ~{_TASK_THREADS} threads per "
                    "TensorFlow task")
        return by_memory, (f"{self.memory_bytes / 2**30:.1f} GiB of {self.memory_source} at "
                           f"~{_TASK_PRIVATE_MIB} MiB per TensorFlow task plus {_SHARED_MIB} MiB "
                           "shared")


def check_capacity(config: LaunchConfig, limits: MachineLimits) -> None:
    """Raises LaunchError when `config` has more tasks than `limits` allow."""
    most, derivation = limits.max_tasks()
    if config.num_tasks > most:
        raise LaunchError(
            f"num_workers={config.num_workers} makes {config.num_tasks} task(s) in all, more "
            f"than this machine can run: at most {most}, from {derivation} (measured for "
            "`tfdist train`); launch fewer tasks, or spread them over machines with "
            "`tfdist manifest`.")


def _network_flag(command: tuple[str, ...]) -> str | None:
    """The first argument of a tfdist command that needs this machine's network, if any: a URL
    (a tf.data service, a gs:// or s3:// path) or --download."""
    for arg in command[1:]:
        name, _, value = arg.partition("=")
        if _URL_MARK in value or (name == _DOWNLOAD and value.lower() not in _FALSE):
            return arg
    return None


def _open_network(config: LaunchConfig, cluster: ClusterConfig, *,
                   tfdist: bool) -> network.Namespace | None:
    """The tasks' network namespace, or None for this machine's network; prints one line that
    says which ports can be reached from where (a warning when they are exposed by default).

    Raises:
      LaunchError: `network=isolated` on a machine that refuses a namespace.
    """
    ports = [int(address.rpartition(":")[2]) for job, addresses in cluster.jobs.items()
             if job != "evaluator" for address in addresses]
    if config.network is Network.HOST:
        print(f"tfdist launch: network=host: {network.exposure(ports, network.exposed_interfaces())}",
              flush=True)
        return None
    needed = _network_flag(config.command) if tfdist and config.network is Network.AUTO else None
    if needed:
        _warn_exposed(f"the command passes {needed}, which needs this machine's network",
                      ports, "pass --network=isolated to keep them local (they then reach "
                             "nothing outside their namespace)")
        return None
    try:
        namespace = network.open_namespace()
    except network.NoNamespace as refused:
        if config.network is Network.ISOLATED:
            raise LaunchError(
                f"network=isolated: this machine refuses the tasks a network namespace "
                f"({refused}); run as root or allow unprivileged user namespaces, or pass "
                "--network=host (the tasks' ports are then open on every interface).") from None
        _warn_exposed(f"could not isolate the tasks' network ({refused})", ports,
                      "run as root or allow unprivileged user namespaces, or firewall these "
                      "ports; --network=host accepts this without a warning")
        return None
    print(f"tfdist launch: network isolated: the tasks share a network namespace with loopback "
          f"only, so port(s) {', '.join(map(str, ports))} are reachable from the tasks alone, "
          "and the tasks cannot reach the network (--network=host shares this machine's); "
          f"run a command among them with `{' '.join(namespace.enter)} COMMAND`", flush=True)
    return namespace


def _warn_exposed(reason: str, ports: list[int], fix: str) -> None:
    """Says that the tasks run on this machine's network and what that exposes, in one line."""
    interfaces = network.exposed_interfaces()
    if interfaces:
        print(f"tfdist launch: warning: {reason}: {network.exposure(ports, interfaces)}; {fix}.",
              file=sys.stderr, flush=True)
    else:
        print(f"tfdist launch: network=host ({reason}): {network.exposure(ports, interfaces)}",
              flush=True)


def _pick_ports(num_tasks: int) -> list[int]:
    try:
        return [portpicker.pick_unused_port() for _ in range(num_tasks)]
    except portpicker.NoFreePortFoundError:
        raise LaunchError(f"no free ports for {num_tasks} tasks on {HOST}; launch fewer tasks "
                          "or free some ports.") from None


def _task_names(cluster: ClusterConfig) -> list[tuple[str, int]]:
    return [(job, index) for job, addresses in cluster.jobs.items()
            for index in range(len(addresses))]


class _Task:
    """One task's process, its output pumped to our stdout (prefixed) and to its log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: str | None,
                 output_lock: threading.Lock):
        self.name = name
        self._argv, self._env, self._log_path, self._lock = argv, env, log_path, output_lock
        self.process: subprocess.Popen | None = None
        self._pump: threading.Thread | None = None

    def start(self) -> None:
        log_file = open(self._log_path, "a", encoding="utf-8") if self._log_path else None
        self.process = subprocess.Popen(  # pylint: disable=consider-using-with
            self._argv, env=self._env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
        self._pump = threading.Thread(target=self._copy_output, args=(log_file,), daemon=True)
        self._pump.start()
        print(f"tfdist launch: started {self.name} pid={self.process.pid}", flush=True)

    def _copy_output(self, log_file: TextIO | None) -> None:
        for line in self.process.stdout:
            with self._lock:
                sys.stdout.write(f"[{self.name}] {line}")
                sys.stdout.flush()
            if log_file:
                log_file.write(line)
                log_file.flush()
        if log_file:
            log_file.close()

    def poll(self) -> int | None:
        return self.process.poll()

    def stop(self) -> None:
        """SIGTERM to the task's process group, SIGKILL after a grace period; waits for it."""
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            try:
                self.process.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(self.process, signal.SIGKILL)
                self.process.wait(timeout=_STOP_GRACE_S)
        self._pump.join(timeout=_STOP_GRACE_S)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


class _Stop(Exception):
    """SIGINT or SIGTERM reached the launcher."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum, frame):
    del frame
    raise _Stop(signum)


def _cluster(config: LaunchConfig) -> ClusterConfig:
    """The local cluster, every task on HOST at a port of its own."""
    return strategies.make_cluster(num_workers=config.num_workers, num_ps=config.num_ps,
                                   chief=config.chief, evaluator=config.evaluator,
                                   ports=_pick_ports(config.num_tasks), host=HOST)


def _tasks(config: LaunchConfig, cluster: ClusterConfig, argv: list[str]) -> list[_Task]:
    """One `_Task` per cluster task, each with its own TF_CONFIG."""
    if config.log_dir:
        os.makedirs(config.log_dir, exist_ok=True)
    lock = threading.Lock()
    tasks = []
    for job, index in _task_names(cluster):
        env = dict(os.environ, TF_CONFIG=cluster.for_task(job, index).to_json(),
                   **keras_env.environment(config.keras))
        log_path = os.path.join(config.log_dir, f"{job}-{index}.log") if config.log_dir else None
        tasks.append(_Task(f"{job}:{index}", argv, env, log_path, lock))
    return tasks


def _is_primary(task: _Task, config: LaunchConfig) -> bool:
    """Whether the job waits for this task: the chief under ps, else every chief and worker;
    the evaluator too, which stops after the last checkpoint or once the chief is gone."""
    job = task.name.split(":")[0]
    return job in ("chief", "evaluator") if config.num_ps else job != "ps"


def _stop_all(tasks: list[_Task]) -> None:
    for task in tasks:
        if task.process and task.process.poll() is None:
            _signal_group(task.process, signal.SIGTERM)
    for task in tasks:
        if task.process:
            task.stop()


class _Stragglers:
    """Says once, in a line, when tasks the job waits for still run `_STRAGGLER_NOTICE_S`
    after the first task finished: in a synchronous job, a task stuck or left behind, which
    would otherwise keep the launcher waiting without a word."""

    def __init__(self):
        self._first_done_s: float | None = None
        self._said = False

    def notice(self, done: set[str], waiting_for: list[str], *, timed: bool) -> None:
        if not done or not waiting_for or self._said:
            return
        now = time.monotonic()
        self._first_done_s = self._first_done_s or now
        if now - self._first_done_s < _STRAGGLER_NOTICE_S:
            return
        self._said = True
        print(f"tfdist launch: still waiting for {', '.join(waiting_for)}, "
              f"{_STRAGGLER_NOTICE_S:.0f} s after {', '.join(sorted(done))} exited 0"
              f"{'' if timed else ', with no time limit (--timeout_s=S bounds the job)'}",
              file=sys.stderr, flush=True)


def _supervise(config: LaunchConfig, tasks: list[_Task]) -> int:
    """Waits for the job, restarting failed tasks; returns the launcher's exit status."""
    start = time.monotonic()
    deadline = None if config.timeout_s is None else start + config.timeout_s
    restarts = 0
    done: set[str] = set()
    straggling = _Stragglers()
    while True:
        if deadline is not None and time.monotonic() > deadline:
            _stop_all(tasks)
            print(f"tfdist launch: timed out after {config.timeout_s:g} s; stopped every task",
                  file=sys.stderr, flush=True)
            return EXIT_TIMEOUT
        for task in tasks:
            status = task.poll()
            if status is None or task.name in done:
                continue
            if status == 0:
                done.add(task.name)
                continue
            if restarts >= config.max_restarts:
                _stop_all(tasks)
                print(f"tfdist launch: {task.name} exited with status {status} "
                      f"after {restarts} restart(s); stopped every task", file=sys.stderr,
                      flush=True)
                return status if status > 0 else 128 - status
            restarts += 1
            group = [task] if config.num_ps else tasks
            print(f"tfdist launch: {task.name} exited with status {status}; restarting "
                  f"{'it' if config.num_ps else 'every task'} ({restarts}/{config.max_restarts})",
                  file=sys.stderr, flush=True)
            _stop_all(group)
            done.difference_update(member.name for member in group)
            for member in group:
                member.start()
        waiting_for = [task.name for task in tasks
                       if _is_primary(task, config) and task.name not in done]
        straggling.notice(done, waiting_for, timed=deadline is not None)
        if not waiting_for:
            stopped = [task.name for task in tasks if task.poll() is None]
            _stop_all(tasks)
            print(f"tfdist launch: job done: {len(done)} task(s) exited 0"
                  f"{', stopped ' + ', '.join(stopped) if stopped else ''}"
                  f"{f', after {restarts} restart(s)' if restarts else ''} in "
                  f"{time.monotonic() - start:.1f} s", flush=True)
            return 0
        time.sleep(_POLL_S)


def main(config: LaunchConfig, *, tfdist_commands: Collection[str] = (_TRAIN,)) -> int:
    """Checks the launch, starts every task and supervises the job; returns the exit status.

    Every check runs before the first task starts.

    Args:
      config: what to start.
      tfdist_commands: tfdist's command names, run as `python -m tfdist ...` (the CLI passes
        `cli.COMMANDS`).

    Raises:
      LaunchError: the command is not runnable, the machine cannot run that many tasks, the log
        directory is not writable, there are not enough free ports, or `network=isolated` is
        refused.
    """
    argv = resolve_command(config.command, tfdist_commands)
    check_capacity(config, MachineLimits.of_this_machine())
    paths.check_output_dir("log_dir", config.log_dir)
    cluster = _cluster(config)
    namespace = _open_network(config, cluster,
                              tfdist=_is_tfdist(config.command, tfdist_commands))
    try:
        return _run(config, _tasks(config, cluster,
                                   [*namespace.enter, *argv] if namespace else argv))
    finally:
        if namespace:
            namespace.close()


def _run(config: LaunchConfig, tasks: list[_Task]) -> int:
    """Starts `tasks` and supervises them until the job ends or a signal stops it."""
    previous = {signum: signal.signal(signum, _raise_stop)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        for task in tasks:
            task.start()
        return _supervise(config, tasks)
    except _Stop as stop:
        _stop_all(tasks)
        print(f"tfdist launch: stopped every task on signal {stop.signum}", file=sys.stderr,
              flush=True)
        return 128 + stop.signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
