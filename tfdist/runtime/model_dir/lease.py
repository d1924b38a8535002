"""A model dir's exclusive owner on object storage (`gs://`), where there is no `flock`: a lease
object that names its holder, renewed by the holder every third of STALE_S, taken over only when
stale (STALE_S: 30 s, or `TFDIST_LEASE_S`).

    take:    no lease there -> write ours, wait SETTLE_S, read it back: still ours -> held
             (two runs that wrote at once: the one whose write landed last holds it, the other
             is refused);
             a lease there -> watch it for STALE_S: changed (renewed) -> refused, its holder
             lives; unchanged -> its holder died (killed, or cut off): ours replaces it
    renew:   every STALE_S / 3, read it, then write it with one more renewal; found another's ->
             this run lost the model dir (it was cut off past STALE_S) and ends at once
             (exit 1), writing nothing more
    release: the lease is removed, when it is still ours

What it guarantees: a live holder (one that renews) is never taken over, whatever the clocks of
the two machines say, since staleness is a lease seen unchanged for STALE_S, on the taker's own
clock. What it cannot: a holder cut off from storage for longer than STALE_S (partitioned, or
stopped in a debugger) is taken over while still running, and writes until its next renewal
finds that out (at most STALE_S / 3 later); two runs that start within one read-write of each other
both wait SETTLE_S, and one of them is refused. A run that was killed leaves its lease for the
next run to take over after STALE_S.
"""

import atexit
import json
import os
import socket
import sys
import threading
import time
import uuid

from tfdist.runtime.model_dir import storage
from tfdist.runtime.config import ConfigError

LEASE_ENV = "TFDIST_LEASE_S"  # STALE_S of this run, in seconds; renewed every third of it.
STALE_S = 30.0  # A lease unchanged this long has no live holder.
SETTLE_S = 2.0  # Between writing a new lease and reading it back.
_MIN_STALE_S = 3.0
_MAX_LEASE_BYTES = 4096


def stale_s() -> float:
    """How long a lease unchanged has no live holder: `TFDIST_LEASE_S`, else STALE_S.

    Raises:
      ConfigError: TFDIST_LEASE_S is not a number of seconds of at least 3.
    """
    value = os.environ.get(LEASE_ENV)
    if value is None:
        return STALE_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not _MIN_STALE_S <= seconds < float("inf"):
        raise ConfigError(
            f"{LEASE_ENV}={value[:40]!r} is not a number of seconds of at least "
            f"{_MIN_STALE_S:g}; set it to how long a gs:// model dir's lease may go unrenewed "
            f"before another run takes it over, or unset it ({STALE_S:g} s)."
        )
    return seconds


class Lease:
    """A held lease on a model dir in object storage; `release` gives it up."""

    def __init__(self, path: str, record: dict, stale: float):
        self._path, self._record, self._stale = path, record, stale
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew, name="model-dir-lease", daemon=True)
        self._renewer.start()
        atexit.register(self.release)  # A run that ends (a preempted one too) frees it at once.

    @classmethod
    def take(cls, path: str, root: str) -> "Lease":
        """Takes the lease object `path` for the model dir `root` (see the module's docstring).

        Raises:
          ConfigError: a live run holds it; or it cannot be written.
        """
        stale = stale_s()
        found = _read(path)
        if found is not None:
            found = _watched(path, found, stale)
            if found is not None:
                raise ConfigError(
                    f"model_dir={root!r} is in use by another run ({_owner(found)}; its lease "
                    f"{path} was renewed within {stale:g} s); wait for it to end or stop it, "
                    "or pass another model_dir=DIR."
                )
        record = {"owner": owner_line(), "token": uuid.uuid4().hex, "renewals": 0}
        _write(path, root, record)
        time.sleep(SETTLE_S)
        landed = _read(path)
        if landed != record:
            raise ConfigError(
                f"model_dir={root!r}: another run ({_owner(landed)}) took it at the same moment "
                "as this one; wait for it to end or stop it, or pass another model_dir=DIR."
            )
        return cls(path, record, stale)

    def _renew(self) -> None:
        while not self._stop.wait(self._stale / 3):
            found = _read(self._path)
            if found is not None and found.get("token") != self._record["token"]:
                sys.stderr.write(
                    f"tfdist: lost the model dir: its lease {self._path} is held by another "
                    f"run ({_owner(found)}), which took it after this run did not renew it for "
                    f"{self._stale:g} s; this run ends without writing more.\n"
                )
                sys.stderr.flush()
                os._exit(1)
                return  # Where os._exit is stubbed: the thread writes nothing more.
            self._record = {**self._record, "renewals": self._record["renewals"] + 1}
            try:
                storage.write_url(self._path, _encoded(self._record))
            except OSError:  # Storage unreachable now: the next renewal tries again.
                continue

    def release(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._renewer.join()
        if (_read(self._path) or {}).get("token") == self._record["token"]:
            storage.remove(self._path)


def _watched(path: str, found: dict, stale: float) -> dict | None:
    """The lease at `path` as a live holder keeps it (renewed within `stale` s of `found`), or
    None when it stayed `found` (or went) all that time."""
    deadline = time.monotonic() + stale
    while time.monotonic() < deadline:
        time.sleep(min(stale / 12, max(0.0, deadline - time.monotonic())))
        now = _read(path)
        if now != found:
            return now
    return None


def _read(path: str) -> dict | None:
    data = storage.read_url(path, _MAX_LEASE_BYTES)
    try:
        record = json.loads(data) if data is not None else None
    except ValueError:  # Garbage where a lease belongs: no holder.
        return None
    return record if isinstance(record, dict) else None


def _write(path: str, root: str, record: dict) -> None:
    try:
        storage.write_url(path, _encoded(record))
    except OSError as error:
        raise ConfigError(
            f"model_dir={root!r}: cannot write its lease {path} ({error}); check the "
            "credentials' write permission on the bucket, or pass another model_dir=DIR."
        ) from None


def _encoded(record: dict) -> bytes:
    return (json.dumps(record, sort_keys=True) + "\n").encode()


def _owner(record: dict | None) -> str:
    owner = (record or {}).get("owner")
    return owner if isinstance(owner, str) else "another process"


def owner_line() -> str:
    """Who takes a lock or lease: this process, its host and when."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    return f"pid {os.getpid()} on {socket.gethostname()} since {started}"
