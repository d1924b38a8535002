"""`tfdist launch`: one process per task of a local cluster, each with its own TF_CONFIG.

Like torchrun for TensorFlow: ports come from portpicker, every address is 127.0.0.1 (TF's gRPC
servers have no authentication), every output line is prefixed with its task, and every wait is
bounded. Pure Python: the launcher never imports TensorFlow.

When the job is done: without ps tasks, when every chief and worker exited 0; with ps tasks, when
the chief (the coordinator) exited 0. Tasks still running then (ps and worker servers, the
evaluator) are stopped. When a task fails, the launcher restarts it up to `max_restarts` times:
the whole group without ps tasks (a lost peer breaks a collective group), only that task with
them. On a final failure it stops every task and exits with the failed task's status.
"""

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import TextIO

import portpicker

import strategies
from strategies import ClusterConfig
from tfdist.config import ConfigError

HOST = "127.0.0.1"
EXIT_TIMEOUT = 124
_POLL_S = 0.2
_STOP_GRACE_S = 15.0
_TRAIN = "train"


class LaunchError(ConfigError):
    """A launch that cannot start; the message is one line: input, value, fix."""


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """What `tfdist launch` starts.

    Attributes:
      command: the program each task runs; `train ...` means `tfdist train ...`.
      num_workers, num_ps, chief, evaluator: the local cluster's tasks.
      log_dir: where each task's output goes as `<type>-<index>.log`; None keeps no files.
      max_restarts: how many times a failed task (or group) is restarted.
      timeout_s: stop every task and fail after this long; None waits for the job to end.
    """
    command: tuple[str, ...]
    num_workers: int = 1
    num_ps: int = 0
    chief: bool = False
    evaluator: bool = False
    log_dir: str | None = None
    max_restarts: int = 0
    timeout_s: float | None = None

    def __post_init__(self):
        if not self.command:
            raise LaunchError("launch needs a command after `--`, e.g. `tfdist launch "
                              "--num_workers=2 -- train --strategy=multi_worker_mirrored`.")
        if self.num_ps and not self.chief:
            raise LaunchError(f"num_ps={self.num_ps} needs a coordinator: add --chief (the "
                              "chief runs ParameterServerStrategy's fit).")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise LaunchError(f"timeout_s={self.timeout_s} must be positive, e.g. 3600.")

    @property
    def num_tasks(self) -> int:
        return int(self.chief) + self.num_workers + self.num_ps + int(self.evaluator)


def resolve_command(command: tuple[str, ...]) -> list[str]:
    """The argv every task runs: `train ...` as `python -m tfdist train ...`, else `command`.

    Raises:
      LaunchError: the program is not an executable file or on PATH.
    """
    if command[0] == _TRAIN:
        return [sys.executable, "-m", "tfdist", *command]
    program = command[0]
    found = shutil.which(program)
    if found is None:
        raise LaunchError(f"command {program!r} is not an executable file or on PATH; give a "
                          "path or a program name, e.g. `-- python my_script.py`.")
    return [found, *command[1:]]


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


def _tasks(config: LaunchConfig, argv: list[str]) -> list[_Task]:
    """One `_Task` per cluster task, each with its own TF_CONFIG."""
    cluster = strategies.make_cluster(num_workers=config.num_workers, num_ps=config.num_ps,
                                      chief=config.chief, evaluator=config.evaluator,
                                      ports=_pick_ports(config.num_tasks), host=HOST)
    if config.log_dir:
        os.makedirs(config.log_dir, exist_ok=True)
    lock = threading.Lock()
    tasks = []
    for job, index in _task_names(cluster):
        env = dict(os.environ, TF_CONFIG=cluster.for_task(job, index).to_json())
        env.setdefault("TF_USE_LEGACY_KERAS", "1")
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


def _supervise(config: LaunchConfig, tasks: list[_Task]) -> int:
    """Waits for the job, restarting failed tasks; returns the launcher's exit status."""
    deadline = None if config.timeout_s is None else time.monotonic() + config.timeout_s
    restarts = 0
    done: set[str] = set()
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
        if all(task.name in done for task in tasks if _is_primary(task, config)):
            _stop_all(tasks)
            return 0
        time.sleep(_POLL_S)


def main(config: LaunchConfig) -> int:
    """Starts every task and supervises the job; returns the launcher's exit status.

    Raises:
      LaunchError: the command is not runnable or there are not enough free ports.
    """
    tasks = _tasks(config, resolve_command(config.command))
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
