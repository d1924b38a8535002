"""One supervisor for a group of processes: `tfdist launch`'s tasks and the JobSet rehearsal's
pods (the Slurm rehearsal, which follows a job of real Slurm, takes its signal and time handling).

It starts every process, polls them every POLL_S, asks its caller's policy what a failure means
(restart some of them after a back-off, fail the job, or let the rest go on), says once when the
job waits on stragglers, and ends with one closing line and the exit status: 0 when the job is
done, the failed process's status (128 + N for signal N), EXIT_TIMEOUT at the time limit, 128 + N
when signal N stops the supervisor, or EXIT_PREEMPTED when a process it stopped saved its state
on the way out (tfdist's training does on SIGTERM: `tfdist.training.preemption`). What differs
between callers is options, not copies of the loop. Pure Python.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence

from tfdist.cluster import processes
from tfdist.errors import EXIT_PREEMPTED

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

POLL_S = 0.2
EXIT_TIMEOUT = 124
STRAGGLER_NOTICE_S = 60.0
MAX_BACKOFF_S = 30.0


def exit_status(status: int) -> int:
    """A process's status as a shell's exit status: a signal's death -N as 128 + N."""
    return status if status >= 0 else 128 - status


def ended(status: int) -> str:
    """How a process ended, for a line: "exited with status 3" or, for -9, "was killed by
    signal 9 (SIGKILL)", which says what happened rather than leaving a reader to decode it."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        name = f" ({signal.Signals(-status).name})"
    except ValueError:
        name = ""
    return f"was killed by signal {-status}{name}"


def backoff_s(first_s: float, restarts: int) -> float:
    """The wait before restart number `restarts` (1 for the first): `first_s`, doubled each
    time, at most MAX_BACKOFF_S."""
    return min(first_s * 2.0 ** min(restarts - 1, 32), MAX_BACKOFF_S)


def backoff_bound(first_s: float, max_restarts: int, *, timed: bool) -> str:
    """What the back-off of `max_restarts` restarts can add up to, as the end of the first
    restart's line ("" when there is nothing to add); `timed`: a time limit bounds the job."""
    total = sum(backoff_s(first_s, number) for number in range(1, max_restarts + 1))
    if max_restarts < 2 or not total:
        return ""
    return (
        f" (the back-off doubles up to {MAX_BACKOFF_S:g} s: at most {total:,.0f} s over "
        f"{max_restarts} restarts{'' if timed else '; --timeout_s=S bounds the whole job'})"
    )


@dataclasses.dataclass(frozen=True)
class Restart:
    """A policy's answer: stop `names` (the failed process among them) and start them again
    `delay_s` later. `why` ends the line ("restarting every task (1/3) in 1 s"); `counted`:
    whether it counts as one of the job's restarts (a Job recreating its pod does not);
    `grace_s`: from the stopping SIGTERM to the SIGKILL (None: `processes.STOP_GRACE_S`)."""

    names: tuple[str, ...]
    why: str
    delay_s: float = 0.0
    counted: bool = True
    grace_s: float | None = None


@dataclasses.dataclass(frozen=True)
class Fail:
    """A policy's answer: stop everything; `line` (after the announcer) says why."""

    line: str


# A policy's answer None: the failed process stays ended and the rest go on; the job's status
# is then the worst one.
Policy = Callable[[str, int, int], "Restart | Fail | None"]


@dataclasses.dataclass(frozen=True)
class Group:
    """The processes a supervisor watches and the caller's options.

    Attributes:
      names: every process's name, in the order they start and are named in lines.
      start: starts the named process (again, after a restart) and returns it.
      on_failure: (name, status, restarts so far) -> Restart, Fail or None (go on).
      job: the closing line's subject ("job", "JobSet mwc").
      noun: what a process is called in the closing line ("task", "pod").
      awaited: whether the job waits for the named process (ps servers: not).
      succeeded: whether the job is done, given the processes that exited 0; None: once every
        awaited process ended.
      closing: the closing line from (status, seconds), replacing the usual one; its None
        prints nothing.
      on_poll: called with the running processes at every poll (a join watch).
    """

    names: Sequence[str]
    start: Callable[[str], processes.Process]
    on_failure: Policy
    job: str = "job"
    noun: str = "task"
    awaited: Callable[[str], bool] = lambda name: True
    succeeded: Callable[[set[str]], bool] | None = None
    closing: Callable[[int, float], str | None] | None = None
    on_poll: Callable[[Iterable[processes.Process]], None] | None = None

    def is_done(self, exited_0: set[str]) -> bool:
        """Whether the job is done once the processes `exited_0` have exited 0."""
        if self.succeeded is not None:
            return self.succeeded(exited_0)
        return all(name in exited_0 for name in self.names if self.awaited(name))


def _ignore_stop_signals() -> None:
    """SIGINT and SIGTERM ignored from here on in this process, once a stop has begun: a second
    signal (Ctrl-C twice, a manager that repeats its SIGTERM) cuts short neither the stop, while
    the processes save, nor what follows it up to the exit (the caller's removal of its cgroups
    and network namespaces, about 0.1 s for `tfdist launch`), and the process ends with the
    status the stop gave it (75 after a save, not 143)."""
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


class OutOfTime(Exception):
    """The time limit passed; the argument says what was stopped (None: during set-up)."""


class Supervisor:
    """Watches one `Group` under a time limit and signals, as `announcer` ("tfdist launch").

    `everything` names all of it in lines ("every task", "the job"); `straggler_hint` ends the
    straggler notice when there is no time limit (None: no notice); `grace_s`: from the SIGTERM
    that stops them to the SIGKILL (None: `processes.STOP_GRACE_S`).
    """

    def __init__(
        self,
        announcer: str,
        *,
        timeout_s: float | None,
        everything: str = "every task",
        straggler_hint: str | None = None,
        grace_s: float | None = None,
    ):
        self.announcer, self.timeout_s, self.everything = announcer, timeout_s, everything
        self.straggler_hint, self.grace_s = straggler_hint, grace_s
        self.start_s = time.monotonic()
        self.running: dict[str, processes.Process] = {}
        self.stopped: list[processes.Process] = []  # By `stop_all`, as they ended.
        self._group: Group | None = None  # The one `watch` watches.

    def out_of_time(self) -> bool:
        return self.timeout_s is not None and time.monotonic() - self.start_s > self.timeout_s

    def checkpoint(self) -> None:
        """What set-up calls between its steps: raises `processes.Stopped` once a signal asked
        to stop, `OutOfTime` once the time is up."""
        processes.raise_if_stopped()
        if self.out_of_time():
            raise OutOfTime(None)

    def say(self, line: str, *, error: bool = True) -> None:
        print(f"{self.announcer}: {line}", file=sys.stderr if error else sys.stdout, flush=True)

    def run(
        self,
        body: Callable[[], int],
        *,
        setting_up: str = "",
        ended_on_stop: Callable[[], set[int]] = set,
    ) -> int:
        """`body()`'s status, run with signals turned into `processes.Stopped`: on a signal or
        the time limit, everything is stopped and one line says so; `setting_up` says what the
        time limit ended before any process started. On a signal, how the processes it stopped
        ended (or `ended_on_stop()`'s statuses, for processes an engine runs) tells whether they
        had finished the job (0 each) or saved their state (75). After such a stop SIGINT and
        SIGTERM stay ignored: the caller cleans up and exits."""
        try:
            with processes.stop_on_signals():
                return body()
        except processes.Stopped as stop:
            _ignore_stop_signals()
            self.stop_all()
            return self._stopped(stop.signum, ended_on_stop)
        except OutOfTime as out:
            _ignore_stop_signals()
            self.stop_all()
            self.say(f"timed out after {self.timeout_s:g} s; {out.args[0] or setting_up}")
            return EXIT_TIMEOUT

    def _stopped(self, signum: int, ended_on_stop: Callable[[], set[int]]) -> int:
        """The status of a job a signal stopped: 0 when its processes had finished it (the
        signal came as they did), 75 when they saved, else 128 + `signum`."""
        ended = {
            member.name: member.process.returncode
            for member in self.stopped
            if member.process is not None
        }
        if ended:
            done = self._group.is_done({name for name, status in ended.items() if status == 0})
            statuses = set(ended.values())
        else:
            statuses = ended_on_stop()
            done = statuses == {0}
        if done:
            self.say(
                f"stopped {self.everything} on signal {signum}; the job had finished (every "
                "task exited 0)",
                error=False,
            )
            return 0
        if EXIT_PREEMPTED in statuses:
            self.say(
                f"stopped {self.everything} on signal {signum}; the training saved its state at "
                f"one step (exit {EXIT_PREEMPTED}): run the same command again to resume there"
            )
            return EXIT_PREEMPTED
        self.say(f"stopped {self.everything} on signal {signum}")
        return 128 + signum

    def stop_all(self) -> None:
        """Stops every process still running and collects the output of those that ended;
        forgets them, so stopping again stops nothing."""
        stopping = list(self.running.values())
        processes.stop_all(stopping, self.grace_s)
        self.stopped.extend(stopping)
        self.running.clear()

    def watch(self, group: Group) -> int:
        """Starts `group` and supervises it until it is done or fails; returns the status.

        Raises:
          processes.Stopped: a signal asked to stop (everything is stopped by then).
          OutOfTime: the time limit passed (everything is stopped by then).
        """
        self._group = group
        try:
            for name in group.names:
                self.running[name] = group.start(name)
            return _Watch(self, group).until_done()
        finally:
            self.stop_all()


class _Watch:
    """The state of one `Supervisor.watch`: which processes ended (and how), the restarts so
    far, and the processes waiting out a restart's back-off."""

    def __init__(self, supervisor: Supervisor, group: Group):
        self.supervisor, self.group = supervisor, group
        self.ended: dict[str, int] = {}
        self.restarts = 0
        self._pending: list[str] = []
        self._restart_at = 0.0
        self._first_done_s: float | None = None
        self._straggling_said = supervisor.straggler_hint is None

    def until_done(self) -> int:
        supervisor, group = self.supervisor, self.group
        while True:
            processes.raise_if_stopped()
            if supervisor.out_of_time():  # `watch` stops everything.
                raise OutOfTime(f"stopped {supervisor.everything}")
            self._start_due()
            status = self._poll()
            if status is not None:
                return status
            if group.on_poll:  # After `_poll`: it sees the processes that ended by the close.
                group.on_poll(supervisor.running.values())
            done = {name for name, status in self.ended.items() if status == 0}
            waiting_for = [
                name for name in group.names if group.awaited(name) and name not in self.ended
            ]
            if group.succeeded(done) if group.succeeded else not waiting_for:
                return self._close(done)
            self._notice_stragglers(done, waiting_for)
            time.sleep(POLL_S)

    def _poll(self) -> int | None:
        """Records the processes that ended and acts on failures; a status once the job
        failed."""
        for name in self.group.names:
            status = self.supervisor.running[name].poll()
            if status is None or name in self.ended or name in self._pending:
                continue
            self.ended[name] = status
            if status == 0:
                continue
            decision = self.group.on_failure(name, status, self.restarts)
            if isinstance(decision, Fail):
                self.supervisor.stop_all()
                self.supervisor.say(decision.line)
                return exit_status(status)
            if isinstance(decision, Restart):
                self._restart(name, status, decision)
        return None

    def _restart(self, name: str, status: int, restart: Restart) -> None:
        self.restarts += restart.counted
        self.supervisor.say(f"{name} {ended(status)}; {restart.why}")
        processes.stop_all(
            [self.supervisor.running[member] for member in restart.names], restart.grace_s
        )
        for member in restart.names:
            self.ended.pop(member, None)
        self._pending = [
            member
            for member in self.group.names
            if member in restart.names or member in self._pending
        ]
        self._restart_at = time.monotonic() + restart.delay_s

    def _start_due(self) -> None:
        """Starts the processes whose restart's back-off has passed."""
        if self._pending and time.monotonic() >= self._restart_at:
            for name in self._pending:
                self.supervisor.running[name] = self.group.start(name)
            self._pending = []

    def _close(self, done: set[str]) -> int:
        """Stops what still runs (ps servers, an evaluator) and says how the job ended."""
        supervisor, group = self.supervisor, self.group
        stopped = [name for name in group.names if supervisor.running[name].poll() is None]
        supervisor.stop_all()
        status = max((exit_status(status) for status in self.ended.values()), default=0)
        seconds = time.monotonic() - supervisor.start_s
        if group.closing:
            line = group.closing(status, seconds)
        else:
            line = (
                f"{group.job} {'done' if status == 0 else 'failed'}: {len(done)} "
                f"{group.noun}(s) exited 0"
                f"{', stopped ' + ', '.join(stopped) if stopped else ''}"
                f"{f', after {self.restarts} restart(s)' if self.restarts else ''} in "
                f"{seconds:.1f} s"
            )
        if line is not None:
            supervisor.say(line, error=status != 0)
        return status

    def _notice_stragglers(self, done: set[str], waiting_for: list[str]) -> None:
        """Says once, in a line, when processes the job waits for still run STRAGGLER_NOTICE_S
        after the first one exited 0: in a synchronous job, one stuck or left behind, which
        would otherwise keep the supervisor waiting without a word."""
        if not done or not waiting_for or self._straggling_said:
            return
        now = time.monotonic()
        if self._first_done_s is None:
            self._first_done_s = now
        if now - self._first_done_s < STRAGGLER_NOTICE_S:
            return
        self._straggling_said = True
        untimed = (
            ""
            if self.supervisor.timeout_s is not None
            else (f", with no time limit ({self.supervisor.straggler_hint})")
        )
        self.supervisor.say(
            f"still waiting for {', '.join(waiting_for)}, "
            f"{STRAGGLER_NOTICE_S:.0f} s after {', '.join(sorted(done))} exited "
            f"0{untimed}"
        )
