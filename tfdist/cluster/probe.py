"""`tfdist doctor --probe`: checks that a cluster's tasks resolve and answer before a job starts.

A wrong host or port in TF_CONFIG otherwise shows up as a job that hangs while TensorFlow waits for
a peer. `probe` resolves every task's host and connects to every peer's port, all in parallel and
within one deadline, so it returns in about `timeout_s` even when a lookup or a connect hangs.

Pure Python (no TensorFlow), run on any task of the cluster before (or while) the others start.

Example:
    >>> report = probe(strategies.parse_tf_config(tf_config), timeout_s=5.0)
    >>> print("\\n".join(report.lines + report.warnings + report.problems))
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import math
import socket
import threading
import time

from tfdist.cluster import ClusterError
from tfdist.strategies import ClusterConfig

# One entry of `socket.getaddrinfo`: (family, type, proto, canonname, sockaddr).
AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple]

_HINT_TIMEOUT_S = 300
_UNRESOLVED_FIX = "fix the host in TF_CONFIG, or add it to DNS or /etc/hosts on this machine"
_SILENT_FIX = "start that task, or check the address and firewall"
_LOOPBACK_FIX = "use this machine's host name or network IP address in TF_CONFIG"


@dataclasses.dataclass(frozen=True)
class ProbeReport:
    """What `probe` found; the caller prints it and picks the exit status.

    Attributes:
        lines: human-readable lines, one per task plus a summary and hints; they do not repeat
            `warnings` or `problems`.
        problems: one line each, naming the task, its address and the fix: hosts that do not
            resolve and peers that do not answer. Non-empty means the job would hang or fail.
        warnings: one line each: findings that may be fine on this machine but not in the job,
            such as loopback addresses in a cluster that spans several hosts.
    """

    lines: list[str]
    problems: list[str]
    warnings: list[str]


def probe(
    cluster: ClusterConfig,
    *,
    timeout_s: float = 5.0,
    collective_timeout_s: float | None = None,
    connect: bool = True,
) -> ProbeReport:
    """Resolves every task's host and connects to every peer's port, within `timeout_s` in all.

    Runs on any task of the cluster. This task's own address is resolved but not connected to (it
    is this process), nor are evaluators' (they serve no port). A peer that is not started yet
    counts as not answering: probe once every task runs, or read `problems` accordingly.

    Args:
        cluster: the job's cluster, as this task sees it.
        timeout_s: bound on the whole probe, lookups and connects together; they run in parallel.
        collective_timeout_s: the job's `--collective_timeout_s`, if set; without it a
            multi-worker mirrored cluster gets a hint to set one.
        connect: False resolves the names only (peers that have not started are no problem
            then); a name that does not resolve is still one.

    Raises:
        ClusterError: `timeout_s` is not a positive number.
    """
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ClusterError(
            f"probe: timeout_s={timeout_s} must be a positive number of seconds; "
            "pass e.g. timeout_s=5."
        )
    targets = _targets(cluster, connect)
    slots = _probe_all(targets, time.monotonic() + timeout_s)
    results = [_final(slot, timeout_s) for slot in slots]
    probed = sum(target.connect for target in targets)
    answered = sum(result.outcome is _Outcome.ANSWERS for result in results)
    resolved = sum(result.outcome is not _Outcome.UNRESOLVED for result in results)
    lines = [
        f"probe: {len(targets)} task(s); {answered} of {probed} peer(s) answered within "
        f"{timeout_s:g} s"
        if connect
        else f"names: {resolved} of {len(targets)} task(s) resolve within {timeout_s:g} s"
    ]
    lines += [f"  {_status_line(target, result)}" for target, result in zip(targets, results)]
    lines += _collective_lines(cluster, collective_timeout_s)
    problems = [_problem(target, result) for target, result in zip(targets, results)]
    return ProbeReport(
        lines=lines,
        problems=[problem for problem in problems if problem],
        warnings=_loopback_warnings(targets),
    )


def answers(address: str, *, timeout_s: float = 2.0) -> bool:
    """Whether something accepts TCP connections at `address` ("host:port", IPv6 in brackets).

    The connect attempts share `timeout_s`; the host lookup before them is not bounded by it.
    """
    host, port = _split(address)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return _connect(infos, time.monotonic() + timeout_s) is None


def unreachable(address: str, *, timeout_s: float) -> str | None:
    """Why nothing accepts TCP connections at `address` ("host:port") within `timeout_s`, the
    host's lookup included, in a few words ("does not resolve (...)", "does not answer
    (connection refused)"); None when something does."""
    host, port = _split(address)
    (slot,) = _probe_all(
        [_Target(address, address, host, port, True)], time.monotonic() + timeout_s
    )
    result = _final(slot, timeout_s)
    return (
        None if result.outcome is _Outcome.ANSWERS else f"{result.outcome.value} ({result.detail})"
    )


class _Outcome(str, enum.Enum):
    ANSWERS = "answers"
    SILENT = "does not answer"
    UNRESOLVED = "does not resolve"
    SKIPPED = "not connected to"


@dataclasses.dataclass(frozen=True)
class _Target:
    name: str  # "worker:1"
    address: str
    host: str
    port: int
    connect: bool
    why_skipped: str = ""


@dataclasses.dataclass(frozen=True)
class _Result:
    outcome: _Outcome
    detail: str = ""  # Why, for UNRESOLVED and SILENT; the resolved IP otherwise.


@dataclasses.dataclass
class _Slot:
    """What one probe thread found; written by that thread, read once at the deadline."""

    ip: str | None = None
    result: _Result | None = None


def _targets(cluster: ClusterConfig, connect: bool) -> list[_Target]:
    """Every listed task, with whether to connect to it (not this task, not evaluators)."""
    targets = []
    for job, addresses in cluster.jobs.items():
        for index, address in enumerate(addresses):
            ours = job == cluster.task.type.value and index == cluster.task.index
            why = (
                "this task"
                if ours
                else "evaluators serve no port"
                if job == "evaluator"
                else ""
                if connect
                else "names only (--probe connects)"
            )
            host, port = _split(address)
            targets.append(_Target(f"{job}:{index}", address, host, port, not why, why))
    return targets


def _split(address: str) -> tuple[str, int]:
    """Returns the host (IPv6 without brackets) and port of a validated "host:port"."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _probe_all(targets: list[_Target], deadline: float) -> list[_Slot]:
    """Probes every target in its own thread; returns at `deadline` at the latest.

    Daemon threads, not a ThreadPoolExecutor: the interpreter joins executor threads at exit, so
    a lookup stuck in `getaddrinfo` would hold up the process after `probe` has returned.
    """
    slots = [_Slot() for _ in targets]
    threads = [
        threading.Thread(
            target=_probe_one,
            args=(target, deadline, slot),
            daemon=True,
            name=f"tfdist-probe-{target.name}",
        )
        for target, slot in zip(targets, slots)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return slots


def _probe_one(target: _Target, deadline: float, slot: _Slot) -> None:
    """Resolves `target`'s host, then connects to it if asked, filling in `slot`."""
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        slot.result = _Result(_Outcome.UNRESOLVED, _reason(exc))
        return
    slot.ip = infos[0][4][0]
    if not target.connect:
        slot.result = _Result(_Outcome.SKIPPED, slot.ip)
        return
    error = _connect(infos, deadline)
    slot.result = (
        _Result(_Outcome.ANSWERS, slot.ip)
        if error is None
        else _Result(_Outcome.SILENT, _reason(error))
    )


def _connect(infos: list[AddrInfo], deadline: float) -> OSError | None:
    """Tries each resolved address until one accepts or `deadline` passes; None on success."""
    error: OSError = TimeoutError()
    for family, sock_type, proto, _, sockaddr in infos:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        with socket.socket(family, sock_type, proto) as sock:
            sock.settimeout(remaining)
            try:
                sock.connect(sockaddr)
                return None
            except OSError as exc:
                error = exc
    return error


def _reason(error: BaseException) -> str:
    """One line saying why a lookup or connect failed ("timed out" gets its bound later)."""
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return " ".join(text.split())


def _final(slot: _Slot, timeout_s: float) -> _Result:
    """The slot's result; a thread still busy at the deadline timed out where it was."""
    result = slot.result
    if result is None and slot.ip is None:
        result = _Result(_Outcome.UNRESOLVED, "timed out")
    elif result is None:
        result = _Result(_Outcome.SILENT, "timed out")
    if result.detail == "timed out":
        result = dataclasses.replace(result, detail=f"timed out after {timeout_s:g} s")
    return result


def _status_line(target: _Target, result: _Result) -> str:
    where = f"{target.name} at {target.address}"
    if result.outcome is _Outcome.UNRESOLVED:
        return f"{where}: does not resolve ({result.detail})"
    if result.outcome is _Outcome.SILENT:
        return f"{where}: does not answer ({result.detail})"
    if result.outcome is _Outcome.SKIPPED:
        return f"{where}: resolves ({result.detail}); not connected to: {target.why_skipped}"
    return f"{where}: answers ({result.detail})"


def _problem(target: _Target, result: _Result) -> str | None:
    where = f"{target.name} at {target.address}"
    if result.outcome is _Outcome.UNRESOLVED:
        return (
            f'{where}: host "{target.host}" does not resolve ({result.detail}); {_UNRESOLVED_FIX}'
        )
    if result.outcome is _Outcome.SILENT:
        return f"{where} does not answer ({result.detail}); {_SILENT_FIX}"
    return None


def _loopback_warnings(targets: list[_Target]) -> list[str]:
    """Warns about loopback tasks when other tasks name other hosts: those cannot reach them."""
    others = sorted({target.host for target in targets if not _is_loopback(target.host)})
    if not others:
        return []
    shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
    return [
        f"{target.name} at {target.address} is a loopback address, but the cluster also "
        f"lists {shown}: tasks on other machines cannot reach it there; {_LOOPBACK_FIX}"
        for target in targets
        if _is_loopback(target.host)
    ]


def _is_loopback(host: str) -> bool:
    """Whether `host` names this machine only: "localhost", 127.0.0.0/8 or ::1 (no lookup)."""
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _collective_lines(cluster: ClusterConfig, collective_timeout_s: float | None) -> list[str]:
    """A hint to bound collectives, for clusters that `auto` runs as multi-worker mirrored."""
    if cluster.num_workers < 2 or cluster.num_ps:
        return []
    if collective_timeout_s is not None:
        return [f"collective timeout: {collective_timeout_s:g} s, so a lost peer fails the step"]
    return [
        f"hint: pass --collective_timeout_s={_HINT_TIMEOUT_S} to `tfdist train` so a lost "
        "peer fails the step instead of hanging"
    ]
