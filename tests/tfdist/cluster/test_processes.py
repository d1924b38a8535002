"""`tfdist.cluster.processes`: one grace period for all, and what ends with a supervised process
(its background jobs, its `setsid` daemons, our cgroups)."""

from tests.tfdist.cluster.process_checks import PARENT
from tests.tfdist.cluster.process_checks import alive
import contextlib
import io
import os
import signal
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from unittest import mock

import pytest

from tests import scratch_files
from tfdist.cluster import open_log
from tfdist.cluster import processes

# Ignores SIGTERM, starts a background job and a `setsid` daemon (both sleep), prints the three
# pids, then exits with argv[1] or, without it, sleeps.
_IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(120)"
)
_WAIT_S = 30.0


@pytest.mark.multiprocess
class StopTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.output = self.enterContext(contextlib.redirect_stdout(io.StringIO()))
        self.path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "parent.py")
        with open(self.path, "w", encoding="utf-8") as script:
            script.write(PARENT)

    def _started(self, name: str, *args: str, cgroup: str | None = None) -> processes.Process:
        """Process `name` running `PARENT` with `args`, or the program `args` after "-c"."""
        argv = [sys.executable, *(args if args[:1] == ("-c",) else (self.path, *args))]
        process = processes.Process(
            name,
            argv,
            dict(os.environ),
            None,
            threading.Lock(),
            announcer="test",
            **({"cgroup": cgroup} if cgroup else {}),
        )
        process.start()
        self.addCleanup(_kill, process.process.pid)
        return process

    def _line(self, name: str, start: str) -> str:
        """The first output line of process `name` that starts with `start`."""
        deadline = time.monotonic() + _WAIT_S
        while time.monotonic() < deadline:
            for line in self.output.getvalue().splitlines():
                if line.startswith(f"[{name}] {start}"):
                    return line
            time.sleep(0.01)
        self.fail(f"{name} printed no {start!r}: {self.output.getvalue()}")

    def _pids(self, name: str) -> list[int]:
        """The pids process `name` printed (it, its background job, its daemon)."""
        pids = [int(pid) for pid in self._line(name, "pids ").split()[2:]]
        for pid in pids:
            self.addCleanup(_kill, pid)
        return pids

    def test_one_grace_period_for_every_process_that_ignores_sigterm(self):
        members = [self._started(f"task:{index}", "-c", _IGNORES_SIGTERM) for index in range(3)]
        for member in members:
            self._line(member.name, "ready")
        with mock.patch.object(processes, "STOP_GRACE_S", 2.0):
            start = time.monotonic()
            processes.stop_all(members)
            took = time.monotonic() - start
        self.assertEqual([member.poll() for member in members], [-9] * 3)
        self.assertGreater(took, 1.9)  # They had their grace period...
        self.assertLess(took, 5.0)  # ...one for all, not one after another (6 s).

    def test_a_background_job_ends_with_its_process_that_exited(self):
        member = self._started("task:0", "0")
        leader, job, _ = self._pids("task:0")
        self.assertEqual(member.process.wait(timeout=_WAIT_S), 0)
        self.assertTrue(alive(job))
        with mock.patch.object(processes, "STOP_GRACE_S", 1.0):
            processes.stop_all([member])
        self.assertFalse(alive(leader) or alive(job))
        # Without a cgroup, its setsid daemon escapes (and `_kill` ends it).

    def test_a_setsid_daemon_ends_with_its_process_in_a_cgroup(self):
        cgroups = self.enterContext(processes.own_cgroups(announcer="test"))
        if cgroups is None:
            self.skipTest("no cgroup v2 that this process may write here")
        member = self._started("task:0", "0", cgroup=cgroups.child("task:0"))
        pids = self._pids("task:0")
        member.process.wait(timeout=_WAIT_S)
        self.assertTrue(alive(pids[2]))
        with mock.patch.object(processes, "STOP_GRACE_S", 1.0):
            processes.stop_all([member])
        self.assertFalse(any(alive(pid) for pid in pids))

    def test_cgroups_are_removed_with_what_runs_in_them_on_a_failure(self):
        with self.assertRaises(RuntimeError):
            with processes.own_cgroups(announcer="test") as cgroups:
                if cgroups is None:
                    self.skipTest("no cgroup v2 that this process may write here")
                root = cgroups.root
                self._started("task:0", "0", cgroup=cgroups.child("task:0"))
                pids = self._pids("task:0")
                raise RuntimeError("the supervisor failed")
        self.assertFalse(os.path.exists(root))
        self.assertFalse(any(alive(pid) for pid in pids))


@pytest.mark.multiprocess
class FullLogDiskTest(unittest.TestCase):
    def test_a_log_on_a_full_disk_is_said_once_and_the_output_still_drained(self):
        lines = 20_000  # Far past a pipe's 64 KiB: undrained, the process would block.
        output, errors = io.StringIO(), io.StringIO()
        with (
            scratch_files.small_tmpfs(16) as disk,
            contextlib.redirect_stdout(output),
            contextlib.redirect_stderr(errors),
        ):
            log_path = os.path.join(disk, "worker-0.log")
            process = processes.Process(
                "worker:0",
                [sys.executable, "-c", f"for i in range({lines}): print(i)"],
                dict(os.environ),
                log_path,
                threading.Lock(),
                announcer="test",
            )
            process.start()
            self.addCleanup(_kill, process.process.pid)
            self.assertEqual(process.process.wait(timeout=_WAIT_S), 0)
            process.wait_ended(time.monotonic() + _WAIT_S)
            self.assertLessEqual(os.path.getsize(log_path), 16 * 1024)
        self.assertIn(f"[worker:0] {lines - 1}\n", output.getvalue())
        warnings = errors.getvalue().splitlines()
        self.assertEqual(len(warnings), 1, warnings)
        self.assertRegex(
            warnings[0],
            r"^test: warning: worker:0's log .*worker-0\.log cannot be "
            r"written \(No space left on device\); its output goes on "
            "to stdout only",
        )


@pytest.mark.multiprocess
class OutputCopyTest(unittest.TestCase):
    def test_every_line_arrives_whole_prefixed_and_in_order(self):
        lines = 100_000
        long_line = 3 * 2**20  # No newline for 3 MiB: cut into 1 MiB lines.
        program = textwrap.dedent(f"""
            import sys
            for i in range({lines}):
                print("line", i)
            sys.stdout.flush()
            sys.stdout.buffer.write(b"bad \\xff\\xfe bytes\\n" + b"x" * {long_line} + b"\\n")
            sys.stdout.buffer.write(b"last, without a newline")
        """)
        stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        seen: list[str] = []
        with tempfile.TemporaryDirectory() as scratch, contextlib.redirect_stdout(stdout):
            log_path = os.path.join(scratch, "task.log")
            process = processes.Process(
                "task",
                [sys.executable, "-c", program],
                dict(os.environ),
                log_path,
                threading.Lock(),
                announcer="test",
                on_line=seen.append,
            )
            process.start()
            self.addCleanup(_kill, process.process.pid)
            self.assertEqual(process.process.wait(timeout=_WAIT_S), 0)
            process.wait_ended(time.monotonic() + _WAIT_S)
            with open(log_path, "rb") as log:
                logged = log.read().decode()
        stdout.flush()
        copied = stdout.buffer.getvalue().decode().splitlines()
        expected = [
            *(f"line {i}" for i in range(lines)),
            "bad \ufffd\ufffd bytes",
            *["x" * 2**20] * 3,
            "last, without a newline",
        ]
        announced = [line for line in copied if line.startswith("test: started task pid=")]
        self.assertEqual(len(announced), 1, copied[:3])  # Before or among the lines.
        copied.remove(announced[0])
        self.assertEqual(copied, [f"[task] {line}" for line in expected])
        self.assertEqual(logged, "".join(f"{line}\n" for line in expected))
        self.assertEqual(seen, [f"{line}\n" for line in expected])


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    unittest.main()


class OpenLogTest(unittest.TestCase):
    """A task's log is appended to a regular file of its own, never through a link or a FIFO
    someone left in the log dir."""

    def setUp(self):
        super().setUp()
        self.dir = self.enterContext(tempfile.TemporaryDirectory())
        self.victim = os.path.join(self.dir, "victim")
        with open(self.victim, "w", encoding="utf-8") as victim:
            victim.write("kept")

    def test_a_new_or_existing_regular_file_is_appended_to(self):
        path = os.path.join(self.dir, "worker-0.log")
        for line in (b"one\n", b"two\n"):
            with open_log(path) as log:
                log.write(line)
        with open(path, "rb") as log:
            self.assertEqual(log.read(), b"one\ntwo\n")

    def test_a_link_or_fifo_is_refused_and_its_target_untouched(self):
        link, fifo = os.path.join(self.dir, "link.log"), os.path.join(self.dir, "fifo.log")
        os.symlink(self.victim, link)
        os.mkfifo(fifo)
        for path in (link, fifo):
            with self.subTest(path=path):
                with self.assertRaisesRegex(OSError, "not a regular file of its own"):
                    open_log(path)
        with open(self.victim, encoding="utf-8") as victim:
            self.assertEqual(victim.read(), "kept")
