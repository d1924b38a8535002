"""Runs a JobSet plan on emulated hosts as the JobSet and Job controllers would: every pod at once,
each on its own host; a failed pod recreated while its Job's backoffLimit allows, else its Job
failed (at once where the pod failure policy says so), and the failure policy's rule for why
restarts the whole JobSet (every pod, a new restart attempt; up to failurePolicy.maxRestarts
unless the rule ignores them) or fails it; done once the success policy holds, when the pods
still running are stopped. A pod may be preempted on the way (`Options.preempt`): deleted as a
spot reclaim or Kueue deletes it, SIGTERM, then SIGKILL after its grace period. The buckets
that pods name in `gs://` URLs are served to them by an emulated Cloud Storage (`cloud_storage`)
on a host of its own, its data kept in `<log_dir>/cloud-storage`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator

from tfdist import errors
from tfdist.cluster import RehearsalError
from tfdist.cluster import capacity
from tfdist.cluster import open_log
from tfdist.cluster import processes
from tfdist.cluster import supervisor
from tfdist.cluster.rehearsal import cloud_storage
from tfdist.cluster.rehearsal import hosts as hosts_lib
from tfdist.cluster.rehearsal import jobset_plan
from tfdist.cluster.rehearsal import local_image
from tfdist.cluster.rehearsal import pod_limits
from tfdist.cluster.rehearsal.jobset_plan import JobSetPlan
from tfdist.cluster.rehearsal.pod_template import Pod
from tfdist.cluster.rehearsal.jobset_plan import expand

ANNOUNCER = "tfdist rehearse"
# What a pod takes at the least: its two processes of ours (`enter`, 18 MiB measured) and a
# small program; a pod that requests more memory counts its request.
POD_MEMORY_FLOOR_BYTES = 64 << 20
_QUOTED = 200  # Characters of a pod's last line that the closing line quotes.


@dataclasses.dataclass(frozen=True)
class Options:
    """Where a rehearsal keeps things and how long it may take.

    Attributes:
      log_dir: each pod's output as `<hostname>.log`; None makes a new directory.
      volume_dir: each PersistentVolumeClaim as the directory `<volume_dir>/<claimName>`; None
        is `<log_dir>/volumes`.
      timeout_s: stop every pod and fail after this long; None waits.
      preempt: (pod hostname, seconds): delete that pod this long after it first starts, with
        Kubernetes' DisruptionTarget condition, as a preemption does.
    """

    log_dir: str | None = None
    volume_dir: str | None = None
    timeout_s: float | None = None
    preempt: tuple[tuple[str, float], ...] = ()

    def made(self) -> "Options":
        """These options with both directories there (made if missing), as absolute paths."""
        log_dir = os.path.abspath(self.log_dir or tempfile.mkdtemp(prefix="tfdist-rehearse-"))
        os.makedirs(log_dir, exist_ok=True)
        volume_dir = os.path.abspath(self.volume_dir or os.path.join(log_dir, "volumes"))
        os.makedirs(volume_dir, exist_ok=True)
        return dataclasses.replace(self, log_dir=log_dir, volume_dir=volume_dir)


class _Run:
    """The pods of one rehearsal and what the controllers track of them."""

    def __init__(
        self,
        plan: JobSetPlan,
        hosts: list[hosts_lib.Host],
        options: Options,
        storage_env: dict[str, str],
    ):
        self.plan, self.options, self.storage_env = plan, options, storage_env
        self.hosts = {pod.hostname: host for pod, host in zip(plan.pods, hosts)}
        self._lock = threading.Lock()
        # Each pod's sandbox is built on a directory here, and its emptyDirs are directories
        # here: all removed at the end.
        self._scratch = tempfile.mkdtemp(prefix="pods-", dir=options.log_dir)
        self._pids_cgroups: dict[str, str] = {}  # By pod: the pids cgroup it runs in.
        self.attempt = 0
        self.processes: dict[str, processes.Process] = {}
        # When each Job of this attempt started, and the Jobs past their activeDeadlineSeconds.
        self.job_started: dict[tuple[str, int], float] = {}
        self.past_deadline: set[tuple[str, int]] = set()
        # When each pod first started, and the pods a preemption deleted (once each).
        self.first_started: dict[str, float] = {}
        self.disrupted: set[str] = set()
        for pod in plan.pods:
            for path in (*(path for _, path in pod.claims), *pod.scratch):
                local_image.check_mount_path(path)
            for claim, _ in pod.claims:
                os.makedirs(os.path.join(options.volume_dir, claim), exist_ok=True)

    def start(self, pod: Pod) -> processes.Process:
        """Starts `pod` (anew, in a new sandbox) in the current restart attempt."""
        host = self.hosts[pod.hostname]
        env = self.plan.environment(pod, address=host.address, attempt=self.attempt)
        binds = [(os.path.join(self.options.volume_dir, claim), path) for claim, path in pod.claims]
        # A fresh emptyDir for every pod that starts.
        binds += [(tempfile.mkdtemp(dir=self._scratch), path) for path in pod.scratch]
        staging = tempfile.mkdtemp(prefix=f"{pod.hostname}-", dir=self._scratch)
        log_path = os.path.join(self.options.log_dir, f"{pod.hostname}.log")
        with open_log(log_path) as log:
            log.write(f"{ANNOUNCER}: restart attempt {self.attempt}\n".encode())
            pids = self._new_pids_cgroup(pod.hostname)
            if pids is None:
                log.write(f"{ANNOUNCER}: its processes are not counted (no pids cgroup)\n".encode())
        argv = [
            *pod_limits.joining(pids),
            *host.enter(
                staging=staging,
                binds=tuple(binds),
                working_dir=pod.working_dir,
                layer_bytes=pod.memory_bytes,
            ),
            *(expand(word, env) for word in pod.command),
        ]
        process = processes.Process(
            pod.hostname,
            argv,
            local_image.environment({**env, **self.storage_env}),
            log_path,
            self._lock,
            announcer=ANNOUNCER,
        )
        process.start(f" at {host.address} (netns {host.namespace})")
        self.processes[pod.hostname] = process
        self.job_started.setdefault(pod.job, time.monotonic())
        self.first_started.setdefault(pod.hostname, time.monotonic())
        return process

    def new_attempt(self, attempt: int) -> None:
        """The JobSet restarts: new Jobs, each with its own deadline from its start."""
        self.attempt = attempt
        self.job_started.clear()
        self.past_deadline.clear()

    def how(self, name: str, status: int) -> str:
        """How pod `name` ended, with why where known: its Job's deadline, or its last line."""
        pod = next(pod for pod in self.plan.pods if pod.hostname == name)
        if pod.job in self.past_deadline:
            why = f"its Job ran past activeDeadlineSeconds ({pod.deadline_s} s)"
        elif name in self.disrupted and status < 0:
            why = f"preempted, and still running {pod.grace_s} s after its SIGTERM"
        else:
            last = self.processes[name].last_line.strip() if name in self.processes else ""
            why = f'its last line: "{errors.cut(last, _QUOTED)}"' if last else "it printed nothing"
        return f"{name} {supervisor.ended(status)} ({why})"

    def stop_past_deadline(self, running) -> None:
        """Stops, as the Job controller does, the pods of each Job past its deadline (SIGTERM,
        then SIGKILL after a grace); their ends then fail the Job."""
        now = time.monotonic()
        by_name = {pod.hostname: pod for pod in self.plan.pods}
        late = [
            process
            for process in running
            if process.poll() is None
            and (pod := by_name[process.name]).deadline_s is not None
            and now - self.job_started.get(pod.job, now) > pod.deadline_s
        ]
        self.past_deadline.update(by_name[process.name].job for process in late)
        if late:
            processes.stop_all(late, max(by_name[process.name].grace_s for process in late))
        self._preempt(running, by_name, now)

    def _preempt(self, running, by_name: dict[str, Pod], now: float) -> None:
        """Deletes each pod due for preemption (`Options.preempt`), once: SIGTERM, SIGKILL after
        its terminationGracePeriodSeconds; it ends disrupted (DisruptionTarget)."""
        for hostname, after_s in self.options.preempt:
            process = next((member for member in running if member.name == hostname), None)
            started = self.first_started.get(hostname)
            if hostname in self.disrupted or process is None or started is None:
                continue
            if now - started < after_s or process.poll() is not None:
                continue
            self.disrupted.add(hostname)
            grace_s = by_name[hostname].grace_s
            print(
                f"{ANNOUNCER}: preempting pod {hostname} as a spot reclaim or Kueue deletes it: "
                f"SIGTERM, SIGKILL after its grace period ({grace_s} s)",
                flush=True,
            )
            processes.stop_all([process], grace_s)

    def job_failure(self, pod: Pod, status: int) -> str | None:
        """Why `pod`'s end fails its Job at once (DeadlineExceeded, PodFailurePolicy), or None:
        it counts against the Job's backoffLimit."""
        if pod.job in self.past_deadline:
            return "DeadlineExceeded"
        disrupted = pod.hostname in self.disrupted and pod.fail_job_disrupted
        if disrupted or supervisor.exit_status(status) in pod.fail_job_codes:
            return "PodFailurePolicy"
        return None

    def _new_pids_cgroup(self, hostname: str) -> str | None:
        """A new pids cgroup for the pod `hostname` (`pod_limits`), its last one removed."""
        if hostname in self._pids_cgroups:  # Its processes are gone with the last start.
            pod_limits.remove_pids_cgroup(self._pids_cgroups.pop(hostname))
        pids = pod_limits.pids_cgroup(hostname)
        if pids:
            self._pids_cgroups[hostname] = pids
        return pids

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)
        for pids in self._pids_cgroups.values():
            pod_limits.remove_pids_cgroup(pids)


def run(plan: JobSetPlan, options: Options) -> int:
    """Rehearses `plan` with `options.made()`; returns 0 when the JobSet completes, else the
    failed pod's status (124 on the timeout, 128 + N on signal N).

    Raises:
      NoHosts: this machine cannot emulate hosts.
      RehearsalError: a mount point that cannot be one; a pod to preempt that is not one; the
        emulated Cloud Storage did not start (`check_storage` says whether it can).
    """
    hostnames = [pod.hostname for pod in plan.pods]
    for hostname, _ in options.preempt:
        if hostname not in hostnames:
            raise RehearsalError(
                f"preempt={hostname!r} is not a pod of JobSet {plan.name}; name one of "
                f"{', '.join(hostnames[:4])}{', ...' if len(hostnames) > 4 else ''}."
            )
    buckets = _buckets(plan)
    storage = [cloud_storage.NAMES] if buckets else []
    watcher = supervisor.Supervisor(
        ANNOUNCER,
        timeout_s=options.timeout_s,
        everything="every pod",
        straggler_hint="--timeout_s=S bounds the rehearsal",
    )
    hosts_lib.clean_stale()

    def rehearse() -> int:
        names = [plan.names(pod) for pod in plan.pods]
        with (
            hosts_lib.Hosts([*names, *storage], checkpoint=watcher.checkpoint) as hosts,
            _cloud_storage(
                hosts.hosts[len(names) :], buckets, options.log_dir, watcher.checkpoint
            ) as storage_env,
        ):
            pods = _Run(plan, hosts.hosts[: len(names)], options, storage_env)
            try:
                print(
                    f"{ANNOUNCER}: JobSet {plan.name}: {len(plan.pods)} pod(s) on emulated "
                    f"hosts; logs in {options.log_dir}",
                    flush=True,
                )
                return watcher.watch(_group(pods))
            finally:
                pods.close()

    return watcher.run(
        rehearse,
        setting_up=f"{len(plan.pods) + len(storage)} emulated hosts were still being set up; "
        "removed them",
    )


def check_storage(plan: JobSetPlan) -> None:
    """Raises RehearsalError, in one line, when the pods name `gs://` paths and this machine
    cannot serve them an emulated Cloud Storage (`cloud_storage.require`)."""
    if _buckets(plan):
        cloud_storage.require()


def _buckets(plan: JobSetPlan) -> tuple[str, ...]:
    """The buckets the pods' commands and variables name in `gs://` URLs."""
    words = [
        str(word)
        for pod in plan.pods
        for word in (*pod.command, *(entry.get("value", "") for entry in pod.env))
    ]
    return cloud_storage.buckets_in(words)


@contextlib.contextmanager
def _cloud_storage(
    hosts: list[hosts_lib.Host],
    buckets: tuple[str, ...],
    log_dir: str,
    checkpoint: Callable[[], None],
) -> Iterator[dict[str, str]]:
    """Serves `buckets` from the storage host (`hosts`' one; none without buckets) until the
    block ends, its data in `<log_dir>/cloud-storage`; yields what each pod's environment needs
    to reach it (nothing without buckets)."""
    if not buckets:
        yield {}
        return
    directory = os.path.join(log_dir, "cloud-storage")
    with cloud_storage.CloudStorage(hosts[0], directory, buckets, checkpoint=checkpoint) as served:
        print(
            f"{ANNOUNCER}: {', '.join(f'gs://{bucket}' for bucket in buckets)} served by an "
            f"emulated Cloud Storage (the pods have no route out); its data in {directory}",
            flush=True,
        )
        yield served.env()


def check_fits(plan: JobSetPlan, limits: capacity.MachineLimits) -> None:
    """Raises RehearsalError, in one line, when the pods' memory (each its request, at least
    POD_MEMORY_FLOOR_BYTES) is more than this machine's (`limits`, as `tfdist launch` reads
    them): such a rehearsal would stall or be killed by the kernel part of the way through."""
    need = sum(max(pod.memory_bytes or 0, POD_MEMORY_FLOOR_BYTES) for pod in plan.pods)
    if need > limits.memory_bytes:
        raise RehearsalError(
            f"the manifest's {len(plan.pods)} pods need {need / 2**30:.1f} GiB (their memory "
            f"requests, at least {POD_MEMORY_FLOOR_BYTES >> 20} MiB each), more than the "
            f"{limits.memory_bytes / 2**30:.1f} GiB of {limits.memory_source} this machine "
            "has; rehearse fewer replicas (e.g. tfdist manifest --num_workers=2), or smaller "
            "requests."
        )


def _group(pods: _Run) -> supervisor.Group:
    """The pods as the JobSet and Job controllers treat them: a failed pod recreated while its
    Job's backoffLimit allows, else the whole JobSet restarted (every pod, a new restart
    attempt) up to maxRestarts, else failed; done once the success policy holds."""
    plan = pods.plan
    by_name = {pod.hostname: pod for pod in plan.pods}
    names = tuple(by_name)
    failures: dict[tuple[str, int], int] = {}

    def on_failure(name: str, status: int, restarts: int):
        pod = by_name[name]
        reason = pods.job_failure(pod, status)
        if reason is None:
            failures[pod.job] = failures.get(pod.job, 0) + 1
            if failures[pod.job] <= pod.backoff_limit:
                return supervisor.Restart(
                    (name,),
                    f"its Job recreates it ({failures[pod.job]}/{pod.backoff_limit})",
                    counted=False,
                )
            reason = "BackoffLimitExceeded"
        action = plan.on_job_failure(reason)
        if action == jobset_plan.FAIL:
            return supervisor.Fail(
                f"JobSet {plan.name} failed: its Job failed by {reason}, for which its failure "
                f"policy says {action}: {pods.how(name, status)}; stopped every pod"
            )
        if action == jobset_plan.RESTART and restarts >= plan.max_restarts:
            return supervisor.Fail(
                f"JobSet {plan.name} failed after {restarts} restart(s) (maxRestarts "
                f"{plan.max_restarts}): {pods.how(name, status)}; stopped every pod"
            )
        failures.clear()
        pods.new_attempt(pods.attempt + 1)
        if action == jobset_plan.RESTART_UNCOUNTED:
            return supervisor.Restart(
                names,
                f"its Job failed by {reason}; restarting JobSet {plan.name}, every pod, "
                f"without spending maxRestarts ({action})",
                counted=False,
            )
        return supervisor.Restart(
            names, f"restarting JobSet {plan.name}, every pod ({restarts + 1}/{plan.max_restarts})"
        )

    return supervisor.Group(
        names,
        lambda name: pods.start(by_name[name]),
        on_failure,
        job=f"JobSet {plan.name}",
        noun="pod",
        succeeded=lambda done: _succeeded(plan, done),
        on_poll=pods.stop_past_deadline,
    )


def _succeeded(plan: JobSetPlan, done: set[str]) -> bool:
    """Whether the success policy holds: All (or Any) of the target replicated jobs' Jobs have
    every pod exited 0."""
    targets = set(plan.success_targets) or {pod.replicated_job for pod in plan.pods}
    jobs: dict[tuple[str, int], bool] = {}
    for pod in plan.pods:
        if pod.replicated_job in targets:
            jobs[pod.job] = jobs.get(pod.job, True) and pod.hostname in done
    return all(jobs.values()) if plan.success_operator == "All" else any(jobs.values())
