"""What tests of supervised processes check with: a parent that starts a job and a daemon and
ignores SIGTERM, and whether (and when) processes are gone."""

import textwrap
import time


PARENT = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                              start_new_session=True)
    print("pids", os.getpid(), job.pid, daemon.pid, flush=True)
    if len(sys.argv) > 1:
        os._exit(int(sys.argv[1]))
    time.sleep(120)
""")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, waiting for a parent that is gone, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def seconds_until_gone(pids: list[int], timeout_s: float) -> float:
    """How long until none of `pids` runs, polled every 10 ms; fails after `timeout_s`."""
    start = time.monotonic()
    while any(alive(pid) for pid in pids):
        if time.monotonic() - start > timeout_s:
            raise AssertionError(
                f"still running after {timeout_s:g} s: {[pid for pid in pids if alive(pid)]}"
            )
        time.sleep(0.01)
    return time.monotonic() - start
