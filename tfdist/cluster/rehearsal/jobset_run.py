"""Runs a JobSet plan on emulated hosts as the JobSet and Job controllers would: every pod at once,
each on its own host; a failed pod recreated while its Job's backoffLimit allows, else the whole
JobSet restarted (every pod, a new restart attempt) up to failurePolicy.maxRestarts, else
failed; done once the success policy holds, when the pods still running are stopped."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import threading
import time

from tfdist.cluster import RehearsalError
from tfdist.cluster import capacity
from tfdist.cluster import processes
from tfdist.cluster.rehearsal import hosts as hosts_lib
from tfdist.cluster.rehearsal import local_image
from tfdist.cluster.rehearsal.jobset_plan import JobSetPlan
from tfdist.cluster.rehearsal.jobset_plan import Pod
from tfdist.cluster.rehearsal.jobset_plan import expand

ANNOUNCER = "tfdist rehearse"
EXIT_TIMEOUT = 124
# What a pod takes at the least: its two processes of ours (`enter`, 18 MiB measured) and a
# small program; a pod that requests more memory counts its request.
POD_MEMORY_FLOOR_BYTES = 64 << 20
_POLL_S = 0.2


@dataclasses.dataclass(frozen=True)
class Options:
    """Where a rehearsal keeps things and how long it may take.

    Attributes:
      log_dir: each pod's output as `<hostname>.log`; None makes a new directory.
      volume_dir: each PersistentVolumeClaim as the directory `<volume_dir>/<claimName>`; None
        is `<log_dir>/volumes`.
      timeout_s: stop every pod and fail after this long; None waits.
    """
    log_dir: str | None = None
    volume_dir: str | None = None
    timeout_s: float | None = None

    def made(self) -> "Options":
        """These options with both directories there (made if missing), as absolute paths."""
        log_dir = os.path.abspath(self.log_dir or tempfile.mkdtemp(prefix="tfdist-rehearse-"))
        os.makedirs(log_dir, exist_ok=True)
        volume_dir = os.path.abspath(self.volume_dir or os.path.join(log_dir, "volumes"))
        os.makedirs(volume_dir, exist_ok=True)
        return dataclasses.replace(self, log_dir=log_dir, volume_dir=volume_dir)


class OutOfTime(Exception):
    """The rehearsal's time limit passed while it set up."""


class Clock:
    """The rehearsal's time limit, from its start: set-up, pods and clean-up."""

    def __init__(self, timeout_s: float | None):
        self.timeout_s, self.start = timeout_s, time.monotonic()

    def out_of_time(self) -> bool:
        return self.timeout_s is not None and time.monotonic() - self.start > self.timeout_s

    def checkpoint(self) -> None:
        """Raises `processes.Stopped` once a signal asked to stop, `OutOfTime` once the time is
        up: what set-up calls between its steps."""
        processes.raise_if_stopped()
        if self.out_of_time():
            raise OutOfTime()

    def say_out_of_time(self, what: str) -> int:
        print(f"{ANNOUNCER}: timed out after {self.timeout_s:g} s; {what}", file=sys.stderr,
              flush=True)
        return EXIT_TIMEOUT


class _Run:
    """The pods of one rehearsal and what the controllers track of them."""

    def __init__(self, plan: JobSetPlan, hosts: list[hosts_lib.Host], options: Options):
        self.plan, self.options = plan, options
        self.hosts = {pod.hostname: host for pod, host in zip(plan.pods, hosts)}
        self._lock = threading.Lock()
        # Each pod's sandbox is built on a directory here, and its emptyDirs are directories
        # here: all removed at the end.
        self._scratch = tempfile.mkdtemp(prefix="pods-", dir=options.log_dir)
        self.attempt = 0
        self.running: dict[str, processes.Process] = {}
        for pod in plan.pods:
            for path in (*(path for _, path in pod.claims), *pod.scratch):
                local_image.check_mount_path(path)
            for claim, _ in pod.claims:
                os.makedirs(os.path.join(options.volume_dir, claim), exist_ok=True)

    def start(self, pod: Pod) -> None:
        """Starts `pod` (anew, in a new sandbox) in the current restart attempt."""
        host = self.hosts[pod.hostname]
        env = self.plan.environment(pod, address=host.address, attempt=self.attempt)
        binds = [(os.path.join(self.options.volume_dir, claim), path)
                 for claim, path in pod.claims]
        # A fresh emptyDir for every pod that starts.
        binds += [(tempfile.mkdtemp(dir=self._scratch), path) for path in pod.scratch]
        staging = tempfile.mkdtemp(prefix=f"{pod.hostname}-", dir=self._scratch)
        argv = [*host.enter(staging=staging, binds=tuple(binds), working_dir=pod.working_dir),
                *(expand(word, env) for word in pod.command)]
        log_path = os.path.join(self.options.log_dir, f"{pod.hostname}.log")
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"{ANNOUNCER}: restart attempt {self.attempt}\n")
        process = processes.Process(pod.hostname, argv, local_image.environment(env), log_path,
                                    self._lock, announcer=ANNOUNCER)
        process.start(f" at {host.address} (netns {host.namespace})")
        self.running[pod.hostname] = process

    def stop_all(self) -> None:
        processes.stop_all(list(self.running.values()))

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)


def run(plan: JobSetPlan, options: Options) -> int:
    """Rehearses `plan` with `options.made()`; returns 0 when the JobSet completes, else the
    failed pod's status (124 on the timeout, 128 + N on signal N).

    Raises:
      NoHosts: this machine cannot emulate hosts.
      RehearsalError: a mount point that cannot be one.
    """
    clock = Clock(options.timeout_s)
    hosts_lib.clean_stale()
    try:
        with processes.stop_on_signals(), hosts_lib.Hosts(
                [plan.names(pod) for pod in plan.pods], checkpoint=clock.checkpoint) as hosts:
            pods = _Run(plan, hosts.hosts, options)
            try:
                return _supervise(pods, clock)
            finally:
                pods.stop_all()
                pods.close()
    except processes.Stopped as stop:
        print(f"{ANNOUNCER}: stopped every pod on signal {stop.signum}", file=sys.stderr,
              flush=True)
        return 128 + stop.signum
    except OutOfTime:
        return clock.say_out_of_time(f"{len(plan.pods)} emulated hosts were still being set "
                                     "up; removed them")


def check_fits(plan: JobSetPlan, limits: capacity.MachineLimits) -> None:
    """Raises RehearsalError, in one line, when the pods' memory (each its request, at least
    POD_MEMORY_FLOOR_BYTES) is more than this machine's (`limits`, as `tfdist launch` reads
    them): such a rehearsal would stall or be killed by the kernel part of the way through."""
    need = sum(max(pod.memory_bytes or 0, POD_MEMORY_FLOOR_BYTES) for pod in plan.pods)
    if need > limits.memory_bytes:
        raise RehearsalError(
            f"the manifest's {len(plan.pods)} pods need {need / 2 ** 30:.1f} GiB (their memory "
            f"requests, at least {POD_MEMORY_FLOOR_BYTES >> 20} MiB each), more than the "
            f"{limits.memory_bytes / 2 ** 30:.1f} GiB of {limits.memory_source} this machine "
            "has; rehearse fewer replicas (e.g. tfdist manifest --num_workers=2), or smaller "
            "requests.")


def _supervise(pods: _Run, clock: Clock) -> int:
    plan = pods.plan
    print(f"{ANNOUNCER}: JobSet {plan.name}: {len(plan.pods)} pod(s) on emulated hosts; "
          f"logs in {pods.options.log_dir}", flush=True)
    for pod in plan.pods:
        pods.start(pod)
    restarts = 0
    done: set[str] = set()
    failures: dict[tuple[str, int], int] = {}
    while True:
        processes.raise_if_stopped()
        if clock.out_of_time():
            pods.stop_all()
            return clock.say_out_of_time("stopped every pod")
        for pod in plan.pods:
            status = pods.running[pod.hostname].poll()
            if status is None or pod.hostname in done:
                continue
            if status == 0:
                done.add(pod.hostname)
                continue
            failures[pod.job] = failures.get(pod.job, 0) + 1
            if failures[pod.job] <= pod.backoff_limit:
                print(f"{ANNOUNCER}: {pod.hostname} exited with status {status}; its Job "
                      f"recreates it ({failures[pod.job]}/{pod.backoff_limit})",
                      file=sys.stderr, flush=True)
                pods.start(pod)
                continue
            if restarts >= plan.max_restarts:
                pods.stop_all()
                print(f"{ANNOUNCER}: {pod.hostname} exited with status {status}: JobSet "
                      f"{plan.name} failed after {restarts} restart(s) (maxRestarts "
                      f"{plan.max_restarts}); stopped every pod", file=sys.stderr, flush=True)
                return status if status > 0 else 128 - status
            restarts += 1
            print(f"{ANNOUNCER}: {pod.hostname} exited with status {status}: restarting JobSet "
                  f"{plan.name}, every pod ({restarts}/{plan.max_restarts})", file=sys.stderr,
                  flush=True)
            pods.stop_all()
            done.clear()
            failures.clear()
            pods.attempt = restarts
            for member in plan.pods:
                pods.start(member)
            break
        if _succeeded(plan, done):
            stopped = [name for name, process in pods.running.items() if process.poll() is None]
            pods.stop_all()
            print(f"{ANNOUNCER}: JobSet {plan.name} done: {len(done)} pod(s) exited 0"
                  f"{', stopped ' + ', '.join(stopped) if stopped else ''}"
                  f"{f', after {restarts} restart(s)' if restarts else ''} in "
                  f"{time.monotonic() - clock.start:.1f} s", flush=True)
            return 0
        time.sleep(_POLL_S)


def _succeeded(plan: JobSetPlan, done: set[str]) -> bool:
    """Whether the success policy holds: All (or Any) of the target replicated jobs' Jobs have
    every pod exited 0."""
    targets = set(plan.success_targets) or {pod.replicated_job for pod in plan.pods}
    jobs: dict[tuple[str, int], bool] = {}
    for pod in plan.pods:
        if pod.replicated_job in targets:
            jobs[pod.job] = jobs.get(pod.job, True) and pod.hostname in done
    return all(jobs.values()) if plan.success_operator == "All" else any(jobs.values())
