"""`tfdist launch`'s supervision without processes: `launcher._supervise` (the supervisor with
launch's policy) and `processes.stop_all`
over fake tasks whose runs follow a script, on a fake clock that only sleeps and waits move.

Restarts, back-off, the final lines and the order of signals, exactly; `test_launcher` keeps what
only real processes show (prefixed output, logs, TF_CONFIG per task, a real restart and stop).
"""

import contextlib
import functools
import io
import os
import signal
import subprocess
import threading
import unittest
from unittest import mock

from absl.testing import parameterized

from tfdist.cluster import launcher as launch
from tfdist.cluster import processes
from tfdist.cluster import supervisor
from tfdist.cluster.rehearsal import jobset_plan
from tfdist.cluster.rehearsal import jobset_run
from tfdist.cluster.rehearsal import pod_template

# Powers of two (the back-off too), so the fake clock adds them up without rounding.
_POLL_S = 0.125
_FOREVER = None  # A run that goes on until signalled.
# A time limit on the fake clock far past a test's end: a broken policy that restarts without end
# fails the test instead of hanging it.
_BOUND_S = 64.0


class _Host:
    """The clock that launcher and processes read as `time`, and what happened when."""

    def __init__(self):
        self.now = 0.0
        self.events: list[str] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def note(self, name: str, what: str) -> None:
        self.events.append(f"{self.now:g} {name} {what}")

    def starts(self) -> list[str]:
        return [event for event in self.events if event.endswith(" start")]


class _Run:
    """One run of a `_Task`: the part of `subprocess.Popen` that `stop_all` uses."""

    def __init__(
        self,
        host: _Host,
        name: str,
        script: tuple[float, int] | None,
        ignores_sigterm: bool,
        on_sigterm: int = -signal.SIGTERM,
    ):
        self._host, self._name, self._ignores_sigterm = host, name, ignores_sigterm
        self._exit = None if script is None else (host.now + script[0], script[1])
        self._on_sigterm = on_sigterm
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._exit and self._host.now >= self._exit[0]:
            self.returncode = self._exit[1]
        return self.returncode

    def signalled(self, signum: int) -> None:
        if self.poll() is None and signum == signal.SIGKILL:
            self.returncode = -signum
        elif self.poll() is None and not self._ignores_sigterm:
            self.returncode = self._on_sigterm

    def wait(self, timeout: float) -> int:
        self._host.note(self._name, f"wait {timeout:g}")
        if self.poll() is None:
            self._host.sleep(timeout)
            raise subprocess.TimeoutExpired(self._name, timeout)
        return self.returncode


class _Task:
    """A `processes.Process` whose n-th start runs `runs[n]` (the last repeats): (after_s,
    status) exits with `status` after_s after its start; _FOREVER runs until signalled. It ends
    on SIGTERM (with `on_sigterm`, by default as killed by it) unless `ignores_sigterm`, on
    SIGKILL always."""

    def __init__(
        self,
        host: _Host,
        name: str,
        runs: list,
        *,
        ignores_sigterm: bool = False,
        on_sigterm: int = -signal.SIGTERM,
    ):
        self.name, self.process = name, None
        self._host, self._runs, self._ignores_sigterm = host, runs, ignores_sigterm
        self._on_sigterm = on_sigterm
        self._starts = 0

    def start(self, note: str = "") -> None:
        del note
        script = self._runs[min(self._starts, len(self._runs) - 1)]
        self._starts += 1
        self.process = _Run(self._host, self.name, script, self._ignores_sigterm, self._on_sigterm)
        self._host.note(self.name, "start")

    def poll(self) -> int | None:
        return self.process.poll() if self.process else None

    def send_signal(self, signum: int) -> None:
        self._host.note(self.name, signal.Signals(signum).name)
        self.process.signalled(signum)

    def wait_ended(self, deadline: float) -> None:
        self._host.note(self.name, f"ended by {deadline:g}")


class StopAllTest(parameterized.TestCase):
    @parameterized.named_parameters(
        (
            "one_ignores_sigterm",
            False,
            [
                "0 worker:0 SIGTERM",
                "0 worker:1 SIGTERM",
                "0 worker:0 wait 15",
                "0 worker:1 wait 15",
                "15 worker:0 SIGKILL",
                "15 worker:1 SIGKILL",
                "15 worker:0 ended by 30",
                "15 worker:1 ended by 30",
            ],
            (-15, -9),
        ),
        # One grace period for all: the second wait has nothing left of it.
        (
            "both_ignore_sigterm",
            True,
            [
                "0 worker:0 SIGTERM",
                "0 worker:1 SIGTERM",
                "0 worker:0 wait 15",
                "15 worker:1 wait 0",
                "15 worker:0 SIGKILL",
                "15 worker:1 SIGKILL",
                "15 worker:0 ended by 30",
                "15 worker:1 ended by 30",
            ],
            (-9, -9),
        ),
    )
    def test_sigterm_to_all_then_sigkill_after_the_grace_period(
        self, first_ignores, expected, statuses
    ):
        host = _Host()
        tasks = [
            _Task(host, "worker:0", [_FOREVER], ignores_sigterm=first_ignores),
            _Task(host, "worker:1", [_FOREVER], ignores_sigterm=True),
            _Task(host, "ps:0", [_FOREVER]),  # Never started: left alone.
        ]
        for task in tasks[:2]:
            task.start()
        host.events.clear()
        with mock.patch.object(processes, "time", host):
            processes.stop_all(tasks)
        self.assertEqual(host.events, expected)
        self.assertEqual(tuple(task.poll() for task in tasks), (*statuses, None))

    def test_a_process_signals_its_group_and_waits_for_its_output(self):
        host = _Host()
        host.now = 2.0
        task = processes.Process("worker:0", ["true"], {}, None, threading.Lock(), announcer="test")
        task.process = mock.Mock(pid=4321)
        task._pump = mock.Mock()  # pylint: disable=protected-access
        with (
            mock.patch.object(os, "killpg", side_effect=[None, ProcessLookupError]) as killpg,
            mock.patch.object(processes, "time", host),
        ):
            task.send_signal(signal.SIGTERM)
            task.send_signal(signal.SIGKILL)  # Its group is gone already: nothing raised.
            task.wait_ended(12.0)
        self.assertEqual(
            killpg.call_args_list,
            [mock.call(4321, signal.SIGTERM), mock.call(4321, signal.SIGKILL)],
        )
        task.process.wait.assert_called_once_with(timeout=processes.STOP_GRACE_S)
        task._pump.join.assert_called_once_with(timeout=10.0)  # pylint: disable=protected-access


class SuperviseTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        self.host = _Host()

    def _supervise(self, tasks: list[_Task], **options) -> tuple[int, list[str], list[str]]:
        """Starts `tasks` and supervises them as `tfdist launch` does; its status, stdout and
        stderr lines."""
        config = launch.LaunchConfig(command=("python",), **options)
        stdout, stderr = io.StringIO(), io.StringIO()
        with (
            mock.patch.object(supervisor, "time", self.host),
            mock.patch.object(processes, "time", self.host),
            mock.patch.object(jobset_run, "time", self.host),
            mock.patch.object(supervisor, "POLL_S", _POLL_S),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            status = launch._supervise(config, tasks, None)  # pylint: disable=protected-access
        return status, stdout.getvalue().splitlines(), stderr.getvalue().splitlines()

    def _workers(self, *runs: list) -> list[_Task]:
        return [_Task(self.host, f"worker:{index}", run) for index, run in enumerate(runs)]

    @parameterized.named_parameters(
        ("no_restarts", 0, [(0.0, 3)], 3, "worker:1 exited with status 3 after 0 restart(s)"),
        (
            "killed",
            0,
            [(0.0, -9)],
            137,
            "worker:1 was killed by signal 9 (SIGKILL) after 0 restart(s)",
        ),
        (
            "after_restarts",
            2,
            [(0.0, 3)],
            3,
            "worker:1 exited with status 3 first; after 2 restart(s), worker:1 exited with "
            "status 3",
        ),
    )
    def test_fails_after_exactly_max_restarts(self, max_restarts, runs, status, last):
        result, stdout, stderr = self._supervise(
            self._workers([_FOREVER], runs),
            num_workers=2,
            max_restarts=max_restarts,
            restart_backoff_s=0.25,
        )
        self.assertEqual(result, status)
        self.assertEqual(stdout, [])
        self.assertLen(stderr, max_restarts + 1)
        self.assertEqual(stderr[-1], f"tfdist launch: {last}; stopped every task")
        self.assertLen(self.host.starts(), 2 * (max_restarts + 1))

    def test_a_usage_error_is_not_restarted(self):
        # Exit 2 is a refused command: restarting it would spend the restarts on the same line.
        status, _, stderr = self._supervise(
            self._workers([_FOREVER], [(0.0, 2)]), num_workers=2, max_restarts=3
        )
        self.assertEqual(status, 2)
        self.assertEqual(
            stderr,
            [
                "tfdist launch: worker:1 exited with status 2, a usage error that a restart "
                "would repeat; stopped every task: fix the command and run again"
            ],
        )
        self.assertLen(self.host.starts(), 2)

    def test_the_final_line_names_the_first_failure(self):
        # worker:1 fails first; 0.25 s after the restart, worker:0 fails.
        status, _, stderr = self._supervise(
            self._workers([_FOREVER, (0.25, 5)], [(0.0, 3), _FOREVER]),
            num_workers=2,
            max_restarts=1,
            restart_backoff_s=0.25,
        )
        self.assertEqual(status, 5)
        self.assertEqual(
            stderr,
            [
                "tfdist launch: worker:1 exited with status 3; restarting "
                "every task (1/1) in 0.25 s",
                "tfdist launch: worker:1 exited with status 3 first; after 1 restart(s), worker:0 "
                "exited with status 5; stopped every task",
            ],
        )

    def test_restarts_back_off_doubling(self):
        status, _, stderr = self._supervise(
            self._workers([(0.0, 3)]), num_workers=1, max_restarts=3, restart_backoff_s=0.25
        )
        self.assertEqual(status, 3)
        self.assertEqual(
            stderr[:-1],
            [
                f"tfdist launch: worker:0 exited with status 3; restarting every task ({count}/3) "
                f"in {delay} s{bound}"
                for count, delay, bound in (
                    (
                        1,
                        "0.25",
                        " (the back-off doubles up to 30 s: at most 2 s over 3 restarts; "
                        "--timeout_s=S bounds the whole job)",
                    ),
                    (2, "0.5", ""),
                    (3, "1", ""),
                )
            ],
        )
        # Each run fails as it starts: the next starts its back-off later.
        self.assertEqual(
            self.host.starts(),
            [
                "0 worker:0 start",
                "0.25 worker:0 start",
                "0.75 worker:0 start",
                "1.75 worker:0 start",
            ],
        )

    def test_the_first_restart_states_the_back_offs_total(self):
        _, _, stderr = self._supervise(
            self._workers([(0.0, 3)]),
            num_workers=1,
            max_restarts=50,
            restart_backoff_s=1.0,
            timeout_s=5.0,
        )
        self.assertTrue(
            stderr[0].endswith(
                "restarting every task (1/50) in 1 s (the back-off doubles up to 30 s: at most "
                "1,381 s over 50 restarts)"
            ),
            stderr[0],
        )

    @parameterized.named_parameters(
        (
            "ps",
            "ps:0",
            ["0.5 chief:0 start", "0.5 worker:0 start", "0.5 worker:1 start", "0.5 ps:0 start"],
            "restarting every task (1/1) in 0.5 s: a ps task loses its variables with it",
            "1.5",
        ),
        ("worker", "worker:1", ["0.5 worker:1 start"], "restarting it (1/1) in 0.5 s", "1.0"),
    )
    def test_a_lost_ps_task_restarts_every_task_a_lost_worker_only_itself(
        self, failing, restarted, restarting, done_s
    ):
        tasks = [
            _Task(
                self.host,
                name,
                [(0.0, 3), _FOREVER]
                if name == failing
                else [(1.0, 0)]
                if name == "chief:0"
                else [_FOREVER],
            )
            for name in ("chief:0", "worker:0", "worker:1", "ps:0")
        ]
        status, stdout, stderr = self._supervise(
            tasks, num_workers=2, num_ps=1, chief=True, max_restarts=1, restart_backoff_s=0.5
        )
        self.assertEqual(status, 0)
        self.assertEqual(stderr, [f"tfdist launch: {failing} exited with status 3; {restarting}"])
        self.assertEqual(self.host.starts()[4:], restarted)
        self.assertEqual(
            stdout,
            [
                "tfdist launch: job done: 1 task(s) exited 0, stopped worker:0, worker:1, ps:0, "
                f"after 1 restart(s) in {done_s} s"
            ],
        )

    @parameterized.named_parameters(("no_restarts", 0), ("two_restarts", 2))
    def test_a_preempted_group_starts_again_exactly_max_restarts_times(self, max_restarts):
        # worker:1 saves and exits 75 half a second into each of its first N + 1 runs: the
        # (N+1)-th preemption ends the job with its status (a next run would finish it).
        preempted = [(0.5, 75)] * (max_restarts + 1) + [(0.5, 0)]
        status, stdout, stderr = self._supervise(
            self._workers([(1.0, 0)], preempted),
            num_workers=2,
            max_restarts=max_restarts,
            timeout_s=_BOUND_S,
        )
        self.assertEqual(status, 75)
        self.assertEqual(stdout, [])
        self.assertEqual(
            stderr,
            [
                "tfdist launch: worker:1 exited with status 75; restarting every task from the "
                f"saved state (preemption {count}/{max_restarts}, apart from failures)"
                for count in range(1, max_restarts + 1)
            ]
            + [
                "tfdist launch: worker:1 was preempted (it saved its state; exit 75) after "
                f"{max_restarts} preemption restart(s) of --max_restarts={max_restarts}; "
                "stopped every task: run again to resume"
            ],
        )
        self.assertLen(self.host.starts(), 2 * (max_restarts + 1))

    def test_a_group_preempted_max_restarts_times_goes_on_to_finish(self):
        status, stdout, stderr = self._supervise(
            self._workers([(0.5, 75), (0.5, 75), (0.5, 0)]),
            num_workers=1,
            max_restarts=2,
            timeout_s=_BOUND_S,
        )
        self.assertEqual(status, 0)
        self.assertLen(stderr, 2)
        self.assertEqual(
            self.host.starts(), ["0 worker:0 start", "0.625 worker:0 start", "1.25 worker:0 start"]
        )
        # Not counted among the restarts of failures.
        self.assertEqual(stdout, ["tfdist launch: job done: 1 task(s) exited 0 in 1.8 s"])

    @parameterized.named_parameters(
        ("preempted_first", [(0.5, 75), (0.5, 3), (0.5, 0)]),
        ("failed_first", [(0.5, 3), (0.5, 75), (0.5, 0)]),
    )
    def test_preemptions_do_not_spend_the_restarts_of_failures(self, runs):
        # One of each with --max_restarts=1: neither spends the other's.
        status, stdout, stderr = self._supervise(
            self._workers(runs),
            num_workers=1,
            max_restarts=1,
            restart_backoff_s=0.25,
            timeout_s=_BOUND_S,
        )
        self.assertEqual(status, 0)
        self.assertEqual(
            sorted(line.split("; ", 1)[1] for line in stderr),
            [
                "restarting every task (1/1) in 0.25 s",
                "restarting every task from the saved state (preemption 1/1, apart from failures)",
            ],
        )
        self.assertEqual(
            stdout, ["tfdist launch: job done: 1 task(s) exited 0, after 1 restart(s) in 1.9 s"]
        )

    @parameterized.named_parameters(
        ("worker", "worker:1", ["worker:1"], "it"),
        ("chief", "chief:0", ["chief:0", "worker:0", "worker:1", "ps:0"], "every task"),
        ("ps", "ps:0", ["chief:0", "worker:0", "worker:1", "ps:0"], "every task"),
    )
    def test_under_ps_a_preempted_worker_starts_again_alone_a_chief_or_ps_with_every_task(
        self, preempted, restarted, which
    ):
        # The chief ends the job 1 s into its run; the preempted task exits 75 in its first.
        runs = {"chief:0": [(1.0, 0)], "worker:0": [_FOREVER], "worker:1": [_FOREVER]}
        runs["ps:0"] = [_FOREVER]
        runs[preempted] = [(0.25, 75), runs[preempted][0]]
        status, _, stderr = self._supervise(
            [_Task(self.host, name, task_runs) for name, task_runs in runs.items()],
            num_workers=2,
            num_ps=1,
            chief=True,
            max_restarts=1,
            timeout_s=_BOUND_S,
        )
        self.assertEqual(status, 0)
        self.assertEqual(
            stderr,
            [
                f"tfdist launch: {preempted} exited with status 75; restarting {which} from the "
                "saved state (preemption 1/1, apart from failures)"
            ],
        )
        self.assertEqual([event.split()[1] for event in self.host.starts()[4:]], restarted)

    def test_job_done_once_every_worker_exited_0(self):
        status, stdout, stderr = self._supervise(
            self._workers([(0.5, 0)], [(1.0, 0)]), num_workers=2
        )
        self.assertEqual(status, 0)
        self.assertEqual(stderr, [])
        self.assertEqual(stdout, ["tfdist launch: job done: 2 task(s) exited 0 in 1.0 s"])
        self.assertEqual(self.host.now, 1.0)

    def test_timeout_stops_every_task(self):
        status, stdout, stderr = self._supervise(
            self._workers([_FOREVER], [_FOREVER]), num_workers=2, timeout_s=1.0
        )
        self.assertEqual(status, supervisor.EXIT_TIMEOUT)
        self.assertEqual(stdout, [])
        self.assertEqual(stderr, ["tfdist launch: timed out after 1 s; stopped every task"])
        self.assertEqual(
            [event for event in self.host.events if "SIG" in event],
            [
                "1.125 worker:0 SIGTERM",
                "1.125 worker:1 SIGTERM",
                "1.125 worker:0 SIGKILL",
                "1.125 worker:1 SIGKILL",
            ],
        )

    def test_says_once_which_tasks_it_still_waits_for_a_minute_after_the_first_exited_0(self):
        status, _, stderr = self._supervise(self._workers([(0.5, 0)], [(62.0, 0)]), num_workers=2)
        self.assertEqual(status, 0)
        self.assertEqual(
            stderr,
            [
                "tfdist launch: still waiting for worker:1, 60 s after worker:0 exited 0, with no "
                "time limit (--timeout_s=S bounds the job)"
            ],
        )


def _pod(
    name: str,
    replicated_job: str,
    backoff_limit: int = 0,
    deadline_s: int | None = None,
    fail_job_codes: frozenset[int] = frozenset(),
) -> pod_template.Pod:
    return pod_template.Pod(
        name,
        replicated_job,
        0,
        int(name[-1]),
        (),
        (),
        (),
        (),
        None,
        backoff_limit,
        None,
        deadline_s=deadline_s,
        fail_job_codes=fail_job_codes,
    )


class OtherPoliciesTest(parameterized.TestCase):
    """The same supervisor under the JobSet rehearsal's policy and one that fails fast or lets
    the rest go on."""

    def setUp(self):
        super().setUp()
        self.host = _Host()

    def _watch(self, watcher: supervisor.Supervisor, group: supervisor.Group):
        stdout, stderr = io.StringIO(), io.StringIO()
        with (
            mock.patch.object(supervisor, "time", self.host),
            mock.patch.object(processes, "time", self.host),
            mock.patch.object(jobset_run, "time", self.host),
            mock.patch.object(supervisor, "POLL_S", _POLL_S),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            status = watcher.run(lambda: watcher.watch(group))
        return status, stdout.getvalue().splitlines(), stderr.getvalue().splitlines()

    def _jobset(
        self,
        runs: dict[str, list],
        *,
        backoff_limit: int,
        max_restarts: int,
        deadline_s: int | None = None,
        preempted_exit: int | None = None,
    ):
        codes = frozenset() if preempted_exit is None else frozenset({preempted_exit})
        plan = jobset_plan.JobSetPlan(
            "js",
            None,
            tuple(
                _pod(name, name.rsplit("-", 1)[0], backoff_limit, deadline_s, codes)
                for name in runs
            ),
            "All",
            ("worker",),
            max_restarts,
            failure_rules=((jobset_plan.RESTART_UNCOUNTED, frozenset({"PodFailurePolicy"})),)
            if codes
            else (),
        )
        tasks = {name: _Task(self.host, name, run) for name, run in runs.items()}
        # The rehearsal's own bookkeeping (`jobset_run._Run`) over fake pods on a fake clock.
        pods = mock.Mock(
            plan=plan,
            attempt=0,
            processes={},
            job_started={},
            past_deadline=set(),
            disrupted=set(),
            options=jobset_run.Options(),
        )
        for method in ("how", "new_attempt", "stop_past_deadline", "job_failure", "_preempt"):
            real = getattr(jobset_run._Run, method)  # pylint: disable=protected-access
            getattr(pods, method).side_effect = functools.partial(real, pods)

        def start(pod):
            tasks[pod.hostname].start()
            pods.job_started.setdefault(pod.job, self.host.monotonic())
            return tasks[pod.hostname]

        pods.start.side_effect = start
        with mock.patch.object(supervisor, "time", self.host):
            watcher = supervisor.Supervisor(
                jobset_run.ANNOUNCER, timeout_s=None, everything="every pod"
            )
        return watcher, jobset_run._group(pods), pods  # pylint: disable=protected-access

    def test_a_jobs_backoff_limit_recreates_its_pod_then_the_jobset_restarts_then_fails(self):
        watcher, group, pods = self._jobset(
            {"worker-0": [(0.5, 3)], "ps-0": [_FOREVER]}, backoff_limit=1, max_restarts=1
        )
        status, stdout, stderr = self._watch(watcher, group)
        self.assertEqual((status, stdout), (3, []))
        self.assertEqual(
            stderr,
            [
                "tfdist rehearse: worker-0 exited with status 3; its Job recreates it (1/1)",
                "tfdist rehearse: worker-0 exited with status 3; restarting JobSet js, every pod "
                "(1/1)",
                "tfdist rehearse: worker-0 exited with status 3; its Job recreates it (1/1)",
                "tfdist rehearse: JobSet js failed after 1 restart(s) (maxRestarts 1): worker-0 "
                "exited with status 3 (it printed nothing); stopped every pod",
            ],
        )
        self.assertEqual(pods.attempt, 1)
        self.assertEqual(
            [event.split()[1] for event in self.host.starts()],
            ["worker-0", "ps-0", "worker-0", "worker-0", "ps-0", "worker-0"],
        )

    def test_a_preempted_pod_restarts_the_jobset_without_spending_max_restarts(self):
        # Exit 75 fails the Job at once by its pod failure policy (backoffLimit 3 unused), and
        # the rule for PodFailurePolicy restarts the JobSet with maxRestarts 0.
        watcher, group, pods = self._jobset(
            {"worker-0": [(0.5, 75), (0.5, 0)]}, backoff_limit=3, max_restarts=0, preempted_exit=75
        )
        status, _, stderr = self._watch(watcher, group)
        self.assertEqual(status, 0)
        self.assertEqual(
            stderr[0],
            "tfdist rehearse: worker-0 exited with status 75; its Job failed by PodFailurePolicy; "
            "restarting JobSet js, every pod, without spending maxRestarts "
            "(RestartJobSetAndIgnoreMaxRestarts)",
        )
        self.assertEqual(pods.attempt, 1)

    def test_a_job_past_its_deadline_is_stopped_and_fails_the_jobset(self):
        watcher, group, pods = self._jobset(
            {"worker-0": [_FOREVER], "worker-1": [_FOREVER]},
            backoff_limit=3,
            max_restarts=1,
            deadline_s=2,
        )
        status, _, stderr = self._watch(watcher, group)
        self.assertEqual(status, 128 + signal.SIGTERM)
        self.assertEqual(
            stderr,
            [
                "tfdist rehearse: worker-0 was killed by signal 15 (SIGTERM); restarting JobSet "
                "js, every pod (1/1)",
                "tfdist rehearse: JobSet js failed after 1 restart(s) (maxRestarts 1): worker-0 "
                "was killed by signal 15 (SIGTERM) (its Job ran past activeDeadlineSeconds "
                "(2 s)); stopped every pod",
            ],
        )
        self.assertEqual(pods.attempt, 1)
        self.assertLess(self.host.now, 5.0)  # Each attempt ended its deadline's poll after 2 s.

    def test_the_success_policy_ends_the_jobset_and_stops_the_rest(self):
        watcher, group, _ = self._jobset(
            {"worker-0": [(0.5, 0)], "ps-0": [_FOREVER]}, backoff_limit=0, max_restarts=0
        )
        status, stdout, stderr = self._watch(watcher, group)
        self.assertEqual((status, stderr), (0, []))
        self.assertEqual(
            stdout, ["tfdist rehearse: JobSet js done: 1 pod(s) exited 0, stopped ps-0 in 0.5 s"]
        )

    @parameterized.named_parameters(
        ("kill_on_bad_exit", True, 3, 1.0), ("waits_for_every_task", False, 3, 2.0)
    )
    def test_a_bad_exit_fails_the_group_or_lets_the_rest_go_on(self, kill, status, ended_s):
        tasks = {
            "task 0": _Task(self.host, "task 0", [(1.0, 3)]),
            "task 1": _Task(self.host, "task 1", [(2.0, 0)]),
        }
        watcher = supervisor.Supervisor("step", timeout_s=None, everything="the step")

        def start(name):
            tasks[name].start()
            return tasks[name]

        def on_failure(name, failed, restarts):
            del restarts
            return supervisor.Fail(f"{name} {supervisor.ended(failed)}") if kill else None

        result, _, stderr = self._watch(
            watcher, supervisor.Group(tuple(tasks), start, on_failure, closing=lambda *ended: None)
        )
        self.assertEqual(result, status)
        self.assertEqual(stderr, ["step: task 0 exited with status 3"] if kill else [])
        self.assertEqual(self.host.now, ended_s)

    def test_a_signal_stops_everything_with_one_line(self):
        task = _Task(self.host, "batch", [_FOREVER])
        watcher = supervisor.Supervisor("tfdist rehearse", timeout_s=None, everything="the job")

        def start(name):
            task.start()
            return task

        with mock.patch.object(processes, "raise_if_stopped", side_effect=processes.Stopped(15)):
            status, _, stderr = self._watch(
                watcher, supervisor.Group(("batch",), start, lambda *failure: None)
            )
        self.assertEqual(status, 143)
        self.assertEqual(stderr, ["tfdist rehearse: stopped the job on signal 15"])
        self.assertEqual(task.poll(), -15)

    @parameterized.named_parameters(
        (
            "finished",
            0,
            0,
            "stopped every task on signal 15; the job had finished (every task exited 0)",
        ),
        (
            "saved",
            75,
            75,
            "stopped every task on signal 15; the training saved its state at one "
            "step (exit 75): run the same command again to resume there",
        ),
        ("killed", -15, 143, "stopped every task on signal 15"),
    )
    def test_a_stop_says_whether_the_tasks_had_finished_or_saved(self, on_sigterm, status, line):
        """A signal in the last step: the tasks finish and exit 0, and the job is done (it
        used to end 143 though both had finished)."""
        tasks = {
            name: _Task(self.host, name, [_FOREVER], on_sigterm=on_sigterm)
            for name in ("worker:0", "worker:1")
        }
        watcher = supervisor.Supervisor("tfdist launch", timeout_s=None)

        def start(name):
            tasks[name].start()
            return tasks[name]

        with mock.patch.object(processes, "raise_if_stopped", side_effect=processes.Stopped(15)):
            result, stdout, stderr = self._watch(
                watcher, supervisor.Group(tuple(tasks), start, lambda *failure: None)
            )
        self.assertEqual(result, status)
        self.assertEqual(stdout + stderr, [f"tfdist launch: {line}"])

    def test_a_second_signal_does_not_cut_the_stop_short(self):
        """Ctrl-C twice: the second comes while the first's stop sends SIGTERM (and the tasks
        would save), or a third once the stop is over, while the launcher cleans up and exits;
        each is ignored, so the stop ends as the first asked."""
        task = _Task(self.host, "worker:0", [_FOREVER])
        watcher = supervisor.Supervisor("tfdist launch", timeout_s=None)
        second = []
        sent = task.send_signal

        def send_signal(signum):
            if signum == signal.SIGTERM:
                os.kill(os.getpid(), signal.SIGINT)  # Handled at once, in this thread.
            sent(signum)

        def start(name):
            task.start()
            task.send_signal = send_signal
            return task

        def cut_short(signum, frame):
            second.append(signum)
            raise AssertionError("the second signal cut the stop short")

        for signum in (signal.SIGINT, signal.SIGTERM):  # Put back after the test (conftest).
            signal.signal(signum, cut_short)
        with mock.patch.object(processes, "raise_if_stopped", side_effect=processes.Stopped(2)):
            status, _, stderr = self._watch(
                watcher, supervisor.Group(("worker:0",), start, lambda *failure: None)
            )
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        self.assertEqual(second, [])
        self.assertEqual(status, 130)
        self.assertEqual(stderr, ["tfdist launch: stopped every task on signal 2"])
        self.assertEqual(task.poll(), -15)


if __name__ == "__main__":
    unittest.main()
