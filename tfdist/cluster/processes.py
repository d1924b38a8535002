"""The processes tfdist supervises (`tfdist launch`'s tasks, `tfdist rehearse`'s pods): each in
its own session, its output prefixed on our stdout and copied to its log; and SIGINT/SIGTERM
turned into an exception the supervisor handles. Pure Python; the guarantees below need Linux.

What ends with a supervised process:
  - on a stop (`stop_all`): its process group, i.e. it and every process it started that stayed
    in the group (background jobs included), SIGTERM to all at once and SIGKILL to what is left
    one grace period later; with a cgroup (`Cgroups`, `tfdist launch`), also what left the group
    (`setsid` daemons, double forks): only a process that may write our cgroup files (root)
    moves itself out of one.
  - when the supervisor dies, SIGKILL included: the process itself (PR_SET_PDEATHSIG, set for
    the thread that started it, so start processes from the main thread; the kernel drops it
    when the process changes credentials, e.g. `nsenter --user` when launch isolates without
    root); with a cgroup, also everything it started, killed by the cgroups' guardian process.
Without a writable cgroup v2 (not Linux, not root, cgroups mounted read-only), a daemon that
called setsid survives, as do a process's children when the supervisor is SIGKILLed.
"""

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

from tfdist.cluster import PYTHON
from tfdist.cluster import open_log

STOP_GRACE_S = 15.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
_MOUNTS, _OWN_CGROUP = "/proc/self/mounts", "/proc/self/cgroup"
_TEARDOWN_S = 10.0
_READ_BYTES = 1 << 16
_LONGEST_LINE = 1 << 20
_GUARDIAN = "import sys; from tfdist.cluster import processes; processes.guard(sys.argv[1])"


class Process:
    """One supervised process; `start` may be called again once it has ended (a restart).

    Attributes:
      name: how output lines and messages name it, e.g. "worker:1".
      process: the running (or last) process; None before `start`.
      started_s: when it was last started (time.monotonic()); None before `start`.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str],
        log_path: str | None,
        output_lock: threading.Lock,
        *,
        announcer: str,
        cwd: str | None = None,
        cgroup: str | None = None,
        on_line: Callable[[str], None] | None = None,
    ):
        """`cgroup`: a cgroup v2 directory of the caller's own (`Cgroups.child`) that the
        process runs in from before its program starts; None leaves it in ours. `on_line`: called
        with each line of its output (on the thread that copies the output), e.g. to recognise
        a traceback."""
        self.name = name
        self._argv, self._env, self._log_path, self._cwd = list(argv), env, log_path, cwd
        self._lock, self._announcer, self._cgroup = output_lock, announcer, cgroup
        self._on_line = on_line
        self.process: subprocess.Popen | None = None
        self.started_s: float | None = None
        self.last_line = ""  # What it printed last: often why it ended.
        self._pump: threading.Thread | None = None

    def start(self, note: str = "") -> None:
        """Starts the process; `note` goes into the announcement (and the log), e.g. where.

        Call it from a thread that lives as long as the supervisor (the main thread): the process
        is killed when that thread ends.
        """
        log_file = None
        if self._log_path:
            try:
                log_file = open_log(self._log_path)
            except OSError as error:
                self._log_lost(error)
        self.process = subprocess.Popen(  # pylint: disable=consider-using-with
            self._argv,
            env=self._env,
            cwd=self._cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=functools.partial(_in_child, os.getpid(), self._cgroup),
        )
        self.started_s = time.monotonic()
        self._pump = threading.Thread(target=self._copy_output, args=(log_file,), daemon=True)
        self._pump.start()
        with self._lock:  # Not inside a line of another process's.
            print(
                f"{self._announcer}: started {self.name}{note} pid={self.process.pid}", flush=True
            )

    def _copy_output(self, log_file: BinaryIO | None) -> None:
        """Drains the process's output to the end whatever fails to take it: a pipe nobody
        drains would stop the process. Whole lines, as many as have arrived at once, go out
        prefixed in one write to each side, without a Python step per line, so that the copy
        keeps up with a process printing as fast as it can. A log that cannot be written (a
        full disk) is said once and closed; the output goes on to our stdout."""
        prefix = f"[{self.name}] ".encode()
        for batch in _whole_lines(self.process.stdout.fileno()):
            _write_stdout(self._lock, prefix + batch[:-1].replace(b"\n", b"\n" + prefix) + b"\n")
            self.last_line = batch[:-1].rpartition(b"\n")[2].decode(errors="replace")
            if self._on_line:  # After the lines: what it says about a line comes below it.
                for line in batch.decode().splitlines(keepends=True):
                    self._on_line(line)
            if log_file:
                try:
                    log_file.write(batch)
                    log_file.flush()
                except OSError as error:
                    self._log_lost(error)
                    _close_quietly(log_file)
                    log_file = None
        if log_file:
            _close_quietly(log_file)

    def _log_lost(self, error: OSError) -> None:
        with self._lock, contextlib.suppress(OSError, ValueError):
            print(
                f"{self._announcer}: warning: {self.name}'s log {self._log_path} cannot be "
                f"written ({error.strerror}); its output goes on to stdout only (free space "
                "there, or pass another --log_dir)",
                file=sys.stderr,
                flush=True,
            )

    def poll(self) -> int | None:
        return self.process.poll() if self.process else None

    def send_signal(self, signum: int) -> None:
        """Sends `signum` to the process group and to every process in the cgroup, if any."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)
        if self._cgroup:
            signal_cgroup(self._cgroup, signum)

    def wait_ended(self, deadline: float) -> None:
        """Waits for the killed process, its cgroup's processes and the rest of its output; for
        the latter two until `deadline` (time.monotonic()) at most."""
        self.process.wait(timeout=STOP_GRACE_S)
        while self._cgroup and _cgroup_pids(self._cgroup) and time.monotonic() < deadline:
            time.sleep(0.01)
        self._pump.join(timeout=max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """`stop_all([self])`."""
        stop_all([self])


def _whole_lines(descriptor: int) -> Iterator[bytes]:
    """What is read from `descriptor` to its end, in batches of whole lines as they arrive,
    each batch valid UTF-8 (bad bytes replaced) and ending in a newline; a line is cut every
    _LONGEST_LINE bytes (each piece a line), and the last given a newline if it has none."""
    pending = b""
    while chunk := os.read(descriptor, _READ_BYTES):
        complete, newline, pending = (pending + chunk).rpartition(b"\n")
        batch = complete + newline
        while len(pending) >= _LONGEST_LINE:
            batch, pending = batch + pending[:_LONGEST_LINE] + b"\n", pending[_LONGEST_LINE:]
        if batch:
            yield batch.decode("utf-8", "replace").encode()
    if pending:
        yield pending.decode("utf-8", "replace").encode() + b"\n"


def _write_stdout(lock: threading.Lock, data: bytes) -> None:
    """Writes `data` (UTF-8) to our stdout, after what was printed before, as one write."""
    with lock, contextlib.suppress(OSError, ValueError):  # Our stdout closed.
        binary = getattr(sys.stdout, "buffer", None)
        if binary is None:  # A text stream standing in (a test's capture).
            sys.stdout.write(data.decode())
            sys.stdout.flush()
            return
        sys.stdout.flush()
        binary.write(data)
        binary.flush()


def stop_all(members: Sequence[Process], grace_s: float | None = None) -> None:
    """Stops every started process and what it started: SIGTERM to all at once, SIGKILL to all
    once each has ended or `grace_s` (by default STOP_GRACE_S) has passed; waits (bounded) for
    them and their output."""
    grace_s = STOP_GRACE_S if grace_s is None else grace_s
    started = [member for member in members if member.process]
    for member in started:
        member.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for member in started:
        with contextlib.suppress(subprocess.TimeoutExpired):
            member.process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for member in started:
        member.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + STOP_GRACE_S
    for member in started:
        member.wait_ended(deadline)


def _in_child(supervisor_pid: int, cgroup: str | None) -> None:
    """Runs in a new process before its program: unblocks every signal (a mask is inherited: a
    local Ray's workers have SIGTERM blocked, as its daemons started), joins `cgroup` (where
    refused, its process group alone covers it), and asks for SIGKILL when the supervisor's
    thread ends (or dies at once if the supervisor is already gone)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    if cgroup:
        with contextlib.suppress(OSError):
            _write(os.path.join(cgroup, "cgroup.procs"), "0")
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != supervisor_pid:
            os.kill(os.getpid(), signal.SIGKILL)


def dies_with_this_thread() -> Callable[[], None]:
    """A `preexec_fn` for a process that must not outlive the thread that starts it (nor this
    process): SIGKILL when that thread ends."""
    return functools.partial(_in_child, os.getpid(), None)


def _close_quietly(file: BinaryIO) -> None:
    with contextlib.suppress(OSError):  # Its last buffered bytes on a full disk.
        file.close()


def _write(path: str, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY)
    try:
        os.write(descriptor, text.encode())
    finally:
        os.close(descriptor)


def _cgroup_pids(path: str) -> list[int]:
    """Every process in cgroup `path` and the cgroups below it."""
    pids = []
    for directory, _, _ in os.walk(path):
        with (
            contextlib.suppress(OSError),
            open(os.path.join(directory, "cgroup.procs"), encoding="ascii") as procs,
        ):
            pids += [int(pid) for pid in procs.read().split()]
    return pids


def signal_cgroup(path: str, signum: int) -> None:
    """Sends `signum` to every process in cgroup `path` and below; SIGKILL through cgroup.kill
    (Linux 5.14+) where there is one, which no fork escapes."""
    if signum == signal.SIGKILL:
        with contextlib.suppress(OSError):
            _write(os.path.join(path, "cgroup.kill"), "1")
            return
    for pid in _cgroup_pids(path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _remove_cgroups(root: str) -> bool:
    """Kills every process in cgroup `root` and below, then removes those cgroups; whether they
    are gone within _TEARDOWN_S."""
    deadline = time.monotonic() + _TEARDOWN_S
    while os.path.isdir(root) and time.monotonic() < deadline:
        signal_cgroup(root, signal.SIGKILL)
        for directory, _, _ in os.walk(root, topdown=False):
            with contextlib.suppress(OSError):  # EBUSY until its processes are gone.
                os.rmdir(directory)
        time.sleep(0.02)
    return not os.path.isdir(root)


def guard(root: str) -> None:
    """The guardian of `Cgroups` at `root`: once stdin closes (its supervisor closed it, or
    died), removes them and what runs in them."""
    sys.stdin.read()
    _remove_cgroups(root)


class Cgroups:
    """A cgroup v2 of ours, made below this process's own, with a child per supervised process.

    `close` kills whatever still runs in them and removes them; should this process die first
    (SIGKILL included), a guardian process that waits for it does that. Only the cgroups made
    here are touched.

    Attributes:
      root: the cgroup's directory.
    """

    def __init__(self, root: str, guardian: subprocess.Popen, *, announcer: str):
        self.root, self._guardian, self._announcer = root, guardian, announcer

    def child(self, name: str) -> str:
        """The directory of the child cgroup `name` (made if missing)."""
        path = os.path.join(self.root, name.replace(":", "-"))
        os.makedirs(path, exist_ok=True)
        return path

    def close(self) -> None:
        """Kills what runs in the cgroups, removes them and lets the guardian go."""
        removed = _remove_cgroups(self.root)
        try:
            self._guardian.communicate(timeout=_TEARDOWN_S)
        except subprocess.TimeoutExpired:
            self._guardian.kill()
            self._guardian.communicate(timeout=_TEARDOWN_S)
        if not removed:
            print(
                f"{self._announcer}: warning: cgroup {self.root} still holds processes "
                f"{_TEARDOWN_S:g} s after they were killed; it is left in place",
                file=sys.stderr,
                flush=True,
            )


def _own_cgroup() -> str | None:
    """This process's cgroup v2 directory; None without a cgroup v2 mount."""
    with open(_MOUNTS, encoding="utf-8") as mounts:
        mount_points = [line.split()[1] for line in mounts if line.split()[2:3] == ["cgroup2"]]
    with open(_OWN_CGROUP, encoding="utf-8") as cgroups:
        paths = [line.strip()[3:] for line in cgroups if line.startswith("0::")]
    if not (mount_points and paths):
        return None
    return os.path.join(mount_points[0], paths[0].lstrip("/"))


@contextlib.contextmanager
def own_cgroups(*, announcer: str) -> Iterator[Cgroups | None]:
    """`Cgroups` below this process's cgroup, removed at the end; None where this process may not
    make cgroups and move processes into them (no cgroup v2 mount, not writable). `announcer`
    names us in a warning (e.g. "tfdist launch")."""
    try:
        parent = _own_cgroup()
    except OSError:  # Not Linux.
        parent = None
    if not (parent and os.access(os.path.join(parent, "cgroup.procs"), os.W_OK)):
        yield None
        return
    try:
        root = tempfile.mkdtemp(prefix=f"tfdist-{os.getpid()}-", dir=parent)
    except OSError:
        yield None
        return
    try:
        guardian = subprocess.Popen(  # pylint: disable=consider-using-with
            [*PYTHON, "-c", _GUARDIAN, root],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
    except BaseException:
        os.rmdir(root)
        raise
    cgroups = Cgroups(root, guardian, announcer=announcer)
    try:
        yield cgroups
    finally:
        cgroups.close()


class Stopped(Exception):
    """SIGINT or SIGTERM reached the supervisor."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_STOP_ASKED: list[int] = []  # The signal that asked to stop, once one has.


def _raise_stopped(signum, frame):
    del frame
    if _STOP_ASKED:  # Stopping already: what cleans up goes on undisturbed.
        return
    _STOP_ASKED.append(signum)
    raise Stopped(signum)


def raise_if_stopped() -> None:
    """Raises `Stopped` if a signal asked to stop: call it where the supervisor waits, in case
    the signal's own exception was lost (raised where Python ignores exceptions, in a
    `__del__`)."""
    if _STOP_ASKED:
        raise Stopped(_STOP_ASKED[0])


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within it, the first SIGINT or SIGTERM raises `Stopped` (later ones are ignored, so that
    cleaning up is not interrupted); the previous handlers come back after."""
    _STOP_ASKED.clear()
    previous = {
        signum: signal.signal(signum, _raise_stopped) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _STOP_ASKED.clear()
