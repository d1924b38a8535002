"""Emulated hosts on this machine: one network namespace per host, each with its own address on
a private bridge and its own hosts file, so that a rehearsal's pods (or Slurm nodes) reach each
other by name at the same port, as on a real cluster.

The bridge lives in a namespace of its own (the switch), so nothing is added to this machine's
network: the hosts reach each other and nothing else (they have no route out). Each host's
`/etc/netns/<namespace>/hosts` holds every host's names; `ip netns exec` mounts it over
/etc/hosts for the processes it starts. Everything is named `tfdist-rh<pid>-...` after the
rehearsing process, so that `clean_stale` can remove what a killed rehearsal left behind: its
namespaces (and the processes still in them) and hosts files. Linux, root and iproute2 only.

`Hosts.shape` gives every host's link a bandwidth, as a NIC of that rate would, with Linux's
token-bucket filter (`tc qdisc ... tbf`) on both ends of its link: bandwidth only, no added delay
(netem, which would add it, is not in every kernel); `tfdist rehearse` leaves links unshaped.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable

from tfdist.cluster import ClusterError
from tfdist.cluster import PYTHON
from tfdist.cluster.rehearsal import enter

PREFIX = "tfdist-rh"
NETNS_DIR = "/etc/netns"  # Where `ip netns exec` finds a namespace's own /etc files.
SUBNET_PREFIX = "10.250"  # The hosts' addresses: 10.250.0.2 onwards, /16, on the bridge only.
MAX_HOSTS = 1000
INTERFACE = "eth0"  # Each host's link to the bridge, as in a pod.
_IP_TIMEOUT_S = 30.0
_NAME_RE = re.compile(rf"{PREFIX}(\d+)-(.+)")
_SERIALS = itertools.count()
_SWITCH = "switch"
_ENTER = "import sys; from tfdist.cluster.rehearsal import enter; enter.main(sys.argv[1:])"
_MIN_BURST_BYTES = 64 * 1024  # One GSO packet of a veth, so that packets pass whole.
_BURST_S, _QUEUE_S = 1e-3, 20e-3  # The bucket holds 1 ms at the rate; 20 ms more may queue.


class NoHosts(ClusterError):
    """This machine cannot emulate hosts (not root, no iproute2, namespaces refused); one line."""


@dataclasses.dataclass(frozen=True)
class Host:
    """One emulated host.

    Attributes:
      hostname: its name (a pod's hostname, a Slurm node's name).
      names: every name it is known by in the hosts files, hostname included.
      address: its IPv4 address on the bridge.
      namespace: its network namespace.
    """

    hostname: str
    names: tuple[str, ...]
    address: str
    namespace: str

    def enter(
        self,
        *,
        staging: str | None = None,
        binds: tuple[tuple[str, str], ...] = (),
        working_dir: str | None = None,
        layer_bytes: int | None = None,
    ) -> list[str]:
        """The argv prefix that runs a program on this host: in its network namespace (with its
        hosts file as /etc/hosts) and a UTS namespace named after it; with `staging`, in a pod's
        sandbox built there, with `binds`, `working_dir` and `layer_bytes` (`enter.Spec`). Its
        tools come from this machine's PATH, whatever PATH the program is given."""
        spec = enter.Spec(
            self.hostname,
            staging=staging,
            binds=binds,
            working_dir=working_dir,
            layer_bytes=layer_bytes,
        )
        return [
            _tool("ip"),
            "netns",
            "exec",
            self.namespace,
            *PYTHON,
            "-c",
            _ENTER,
            spec.to_json(),
            "--",
        ]

    def cut_link(self) -> None:
        """Takes this host's link down, as a failed cable or switch port would."""
        _ip("-n", self.namespace, "link", "set", INTERFACE, "down")


class Hosts:
    """A set of emulated hosts; `close` (or leaving the `with`) removes everything made."""

    def __init__(
        self,
        names: list[tuple[str, ...]],
        *,
        owner: int | None = None,
        checkpoint: Callable[[], None] | None = None,
    ):
        """Makes one host per entry of `names` (its hostname first, then other names), calling
        `checkpoint` before each, which may raise to stop (what was made is removed).

        Raises:
          NoHosts: this machine refuses, or there are more than MAX_HOSTS hosts.
        """
        self._owner = os.getpid() if owner is None else owner
        self._serial = next(_SERIALS)  # Several sets of one process never share a name.
        self._made: list[str] = []
        self._made_netns_dir = not os.path.isdir(NETNS_DIR)
        self.hosts: list[Host] = []
        if len(names) > MAX_HOSTS:
            raise NoHosts(
                f"{len(names)} hosts is more than a rehearsal emulates ({MAX_HOSTS}); "
                "rehearse a smaller layout."
            )
        require_tools()
        try:
            self._make(names, checkpoint or (lambda: None))
        except BaseException:
            self.close()
            raise

    def shape(self, gbit_per_s: float) -> None:
        """Limits each host's link to `gbit_per_s` in each direction: a token-bucket filter on
        the host's eth0 (what it sends) and on its port of the bridge (what it receives), with
        `tbf_sizes`; a later call replaces the limit.

        Raises:
          NoHosts: no `tc` on PATH, or the kernel refuses the filter.
        """
        if shutil.which("tc") is None:
            raise NoHosts(
                "tc not on PATH; shaping emulated links needs iproute2's tc: install iproute2."
            )
        burst, limit = tbf_sizes(gbit_per_s)
        tbf = [
            "root",
            "tbf",
            "rate",
            f"{round(gbit_per_s * 1e9)}bit",
            "burst",
            str(burst),
            "limit",
            str(limit),
        ]
        switch = self._namespace(_SWITCH)
        for index, host in enumerate(self.hosts):
            _run("tc", "-n", host.namespace, "qdisc", "replace", "dev", INTERFACE, *tbf)
            _run("tc", "-n", switch, "qdisc", "replace", "dev", f"h{index}", *tbf)

    def _namespace(self, suffix: str) -> str:
        return f"{PREFIX}{self._owner}-{self._serial}-{suffix}"

    def _make(self, names: list[tuple[str, ...]], checkpoint: Callable[[], None]) -> None:
        switch = self._namespace(_SWITCH)
        self._add_namespace(switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for index, host_names in enumerate(names):
            checkpoint()
            number = index + 2
            address = f"{SUBNET_PREFIX}.{number >> 8}.{number & 255}"
            namespace = self._namespace(str(index))
            self._add_namespace(namespace)
            port = f"h{index}"
            _ip(
                "-n",
                switch,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                INTERFACE,
                "netns",
                namespace,
            )
            _ip("-n", switch, "link", "set", port, "master", "br0")
            _ip("-n", switch, "link", "set", port, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("-n", namespace, "addr", "add", f"{address}/16", "dev", INTERFACE)
            _ip("-n", namespace, "link", "set", INTERFACE, "up")
            self.hosts.append(Host(host_names[0], tuple(host_names), address, namespace))
        table = "".join(f"{host.address}\t{' '.join(host.names)}\n" for host in self.hosts)
        for host in self.hosts:
            with open(
                os.path.join(NETNS_DIR, host.namespace, "hosts"), "w", encoding="utf-8"
            ) as hosts_file:
                hosts_file.write("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n" + table)

    def _add_namespace(self, namespace: str) -> None:
        self._made.append(namespace)
        _ip("netns", "add", namespace)
        os.makedirs(os.path.join(NETNS_DIR, namespace), exist_ok=True)

    def close(self) -> None:
        """Stops what still runs in the hosts and removes the namespaces (their links and the
        bridge go with them) and hosts files; later calls do nothing."""
        made, self._made = self._made, []
        _remove(made)
        if self._made_netns_dir and os.path.isdir(NETNS_DIR) and not os.listdir(NETNS_DIR):
            os.rmdir(NETNS_DIR)

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def tbf_sizes(gbit_per_s: float) -> tuple[int, int]:
    """(burst, limit) in bytes of `Hosts.shape`'s token bucket at `gbit_per_s`: the bucket
    holds 1 ms at the rate (at least 64 KiB, a whole GSO packet), and up to 20 ms more of
    traffic queues behind it before packets are dropped."""
    bytes_per_s = gbit_per_s * 1e9 / 8
    burst = max(_MIN_BURST_BYTES, round(bytes_per_s * _BURST_S))
    return burst, burst + round(bytes_per_s * _QUEUE_S)


def clean_stale() -> list[str]:
    """Removes the namespaces and hosts files of rehearsals whose process is gone (killed
    before it could clean up); returns the namespaces removed."""
    if shutil.which("ip") is None:
        return []
    try:
        listed = subprocess.run(
            ["ip", "netns", "list"],
            capture_output=True,
            text=True,
            timeout=_IP_TIMEOUT_S,
            check=False,
        ).stdout
    except subprocess.TimeoutExpired:
        return []
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    if os.path.isdir(NETNS_DIR):
        names += [name for name in os.listdir(NETNS_DIR) if name not in names]
    stale = [
        name
        for name in names
        if (match := _NAME_RE.fullmatch(name)) and not _alive(int(match.group(1)))
    ]
    _remove(stale)
    return stale


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(namespaces: list[str]) -> None:
    """Kills the processes left in `namespaces`, then deletes them and their /etc/netns dirs."""
    for namespace in namespaces:
        pids = subprocess.run(
            ["ip", "netns", "pids", namespace],
            capture_output=True,
            text=True,
            timeout=_IP_TIMEOUT_S,
            check=False,
        ).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    deadline = time.monotonic() + _IP_TIMEOUT_S
    for namespace in namespaces:
        while os.path.exists(os.path.join("/run/netns", namespace)):
            subprocess.run(
                ["ip", "netns", "delete", namespace],
                capture_output=True,
                timeout=_IP_TIMEOUT_S,
                check=False,
            )
            if time.monotonic() > deadline:
                break
            if os.path.exists(os.path.join("/run/netns", namespace)):
                time.sleep(0.1)  # A killed process may still hold it for a moment.
        shutil.rmtree(os.path.join(NETNS_DIR, namespace), ignore_errors=True)


def require_tools() -> None:
    """Raises NoHosts, in one line, unless this machine has what emulating hosts takes."""
    if shutil.which("ip") is None:
        raise NoHosts(
            "ip not on PATH; a rehearsal emulates hosts with iproute2: install it "
            "(apt install iproute2)."
        )
    if os.geteuid() != 0:
        raise NoHosts(
            "a rehearsal emulates hosts with network namespaces, which need root; "
            "run `tfdist rehearse` as root (e.g. with sudo, or in a container run with "
            "--cap-add=NET_ADMIN --cap-add=SYS_ADMIN)."
        )


def _tool(name: str) -> str:
    """The path of tool `name` on this machine's PATH (this process's)."""
    return shutil.which(name) or name


def _ip(*args: str) -> None:
    """Runs `ip ARGS`; raises NoHosts with ip's own words when it fails."""
    _run("ip", *args)


def _run(tool: str, *args: str) -> None:
    """Runs iproute2's `tool ARGS`; raises NoHosts with its own words when it fails."""
    command = " ".join((tool, *args))
    try:
        result = subprocess.run(
            [tool, *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise NoHosts(
            f"`{command}` gave no answer within {_IP_TIMEOUT_S:g} s; "
            "check that iproute2 works here."
        ) from None
    if result.returncode:
        why = " ".join(result.stderr.split()) or f"exit status {result.returncode}"
        raise NoHosts(
            f"`{command}` failed ({why}); a rehearsal needs root on Linux "
            "with network namespaces allowed."
        )
