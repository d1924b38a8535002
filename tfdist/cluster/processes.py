"""The processes tfdist supervises (`tfdist launch`'s tasks, `tfdist rehearse`'s pods): each in
its own session, its output prefixed on our stdout and copied to its log, stopped as a group with
a bounded grace period; and SIGINT/SIGTERM turned into an exception the supervisor handles.
Pure Python."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import TextIO

STOP_GRACE_S = 15.0


class Process:
    """One supervised process; `start` may be called again once it has ended (a restart).

    Attributes:
      name: how output lines and messages name it, e.g. "worker:1".
      process: the running (or last) process; None before `start`.
    """

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str],
                 log_path: str | None, output_lock: threading.Lock, *, announcer: str,
                 cwd: str | None = None):
        self.name = name
        self._argv, self._env, self._log_path, self._cwd = list(argv), env, log_path, cwd
        self._lock, self._announcer = output_lock, announcer
        self.process: subprocess.Popen | None = None
        self._pump: threading.Thread | None = None

    def start(self, note: str = "") -> None:
        """Starts the process; `note` goes into the announcement (and the log), e.g. where."""
        log_file = open(self._log_path, "a", encoding="utf-8") if self._log_path else None
        self.process = subprocess.Popen(  # pylint: disable=consider-using-with
            self._argv, env=self._env, cwd=self._cwd, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, errors="replace",
            start_new_session=True)
        self._pump = threading.Thread(target=self._copy_output, args=(log_file,), daemon=True)
        self._pump.start()
        print(f"{self._announcer}: started {self.name}{note} pid={self.process.pid}", flush=True)

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
        return self.process.poll() if self.process else None

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after a grace period; waits for it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            signal_group(self.process, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                signal_group(self.process, signal.SIGKILL)
                self.process.wait(timeout=STOP_GRACE_S)
        self._pump.join(timeout=STOP_GRACE_S)


def signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def stop_all(processes: Sequence[Process]) -> None:
    """Stops every running process, signalling them all before waiting for any."""
    for member in processes:
        if member.process and member.process.poll() is None:
            signal_group(member.process, signal.SIGTERM)
    for member in processes:
        member.stop()


class Stopped(Exception):
    """SIGINT or SIGTERM reached the supervisor."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame):
    del frame
    raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within it, SIGINT and SIGTERM raise `Stopped`; the previous handlers come back after."""
    previous = {signum: signal.signal(signum, _raise_stopped)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
