"""What this machine's network exposes, and a network namespace with loopback only.

TensorFlow's gRPC servers (tf.distribute tasks, the tf.data service) have no authentication and
listen on every interface: TF 2.21 binds "0.0.0.0:<port>" in
core/distributed_runtime/rpc/grpc_server_lib.cc and core/data/service/server_lib.cc, and no
ServerDef, ConfigProto, DispatcherConfig/WorkerConfig field or environment variable picks another
address. So `exposed_interfaces` says where such a port can be reached from, and `open_namespace`
makes a network namespace whose only interface is loopback, for `tfdist launch` to run a local
cluster's tasks in. Pure Python and Linux: interface flags come from ioctls, namespaces from
util-linux's `unshare` and `nsenter`.
"""

import dataclasses
import enum
import fcntl
import select
import re
import shutil
import socket
import struct
import subprocess
import sys

from tfdist.cluster import LaunchError
from tfdist.cluster import PYTHON

# A tfdist command that passes a URL (--tf_data_service=grpc://..., --model_dir=gs://...) or
# --download needs this machine's network: `auto` does not isolate such a job. A local file
# (file://, TensorFlow's in-memory ram://, a plain path) does not.
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_LOCAL_SCHEMES = frozenset({"file", "ram"})
_DOWNLOAD = "--download"
_FALSE = ("0", "f", "false")  # absl's spellings of a false boolean, lower-cased.

# Linux ioctls on an interface's flags (<linux/sockios.h>, <net/if.h>).
_SIOCGIFFLAGS, _SIOCSIFFLAGS = 0x8913, 0x8914
_IFF_UP, _IFF_LOOPBACK = 0x1, 0x8
_WAIT_S = 30.0
_STOP_WAIT_S = 15.0


def exposed_interfaces() -> list[str]:
    """The interfaces of this process's network namespace, other than loopback, that are up.

    A server that binds every interface, as TensorFlow's do, can be reached through each of them:
    empty means only this network namespace can connect. An interface whose flags cannot be read
    (not Linux) counts as exposed unless its name starts with "lo".
    """
    return [name for _, name in socket.if_nameindex() if _is_exposed(name)]


def _is_exposed(name: str) -> bool:
    try:
        flags = interface_flags(name)
    except OSError:
        return not name.startswith("lo")
    return bool(flags & _IFF_UP) and not flags & _IFF_LOOPBACK


def interface_flags(name: str) -> int:
    """The flags (IFF_UP, IFF_LOOPBACK, ...) of interface `name`; raises OSError off Linux."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        reply = fcntl.ioctl(sock, _SIOCGIFFLAGS, struct.pack("16sH", name.encode(), 0))
    return struct.unpack_from("H", reply, 16)[0]


def bring_up(name: str) -> None:
    """Sets interface `name` up (needs CAP_NET_ADMIN over its network namespace; Linux)."""
    flags = interface_flags(name)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH", name.encode(), flags | _IFF_UP))


def exposure(ports: list[int], interfaces: list[str]) -> str:
    """What the tasks' servers expose on this machine's network, in one phrase."""
    where = (
        f"through {', '.join(interfaces)}"
        if interfaces
        else "through loopback only (no other interface is up)"
    )
    return (
        f"TensorFlow binds every interface (0.0.0.0 and [::]), so port(s) "
        f"{', '.join(map(str, ports))} accept unauthenticated connections {where}"
    )


# The process that holds the tasks' namespace open (`hold_namespace`), and the (unshare, nsenter)
# options that make and enter one: a network namespace needs root; without it, a user namespace
# around it, in which the tasks appear as uid 0 (with no rights outside it).
_HOLDER = "from tfdist.cluster import network; network.hold_namespace()"
_NAMESPACE_KINDS = (
    (("--net",), ("--net",)),
    (("--user", "--map-root-user", "--net"), ("--user", "--net", "--preserve-credentials")),
)
_LIST_INTERFACES = "import socket; print(*(name for _, name in socket.if_nameindex()))"


def hold_namespace() -> None:
    """Runs in a new network namespace, as its holder: checks that loopback is its only interface,
    brings it up (a new namespace has it down), prints "ready" and waits until stdin closes."""
    names = [name for _, name in socket.if_nameindex()]
    if names != ["lo"]:
        sys.exit(f"the new network namespace has interfaces {names}, not loopback alone")
    bring_up("lo")
    print("ready", flush=True)
    sys.stdin.read()


class NoNamespace(Exception):
    """This machine refuses the tasks a network namespace; the message says why, in one line."""


@dataclasses.dataclass(frozen=True)
class Namespace:
    """The tasks' network namespace, loopback only, held open by `holder` until `close`.

    Attributes:
      holder: the process that holds it.
      enter: the argv prefix that runs a program inside it (`nsenter ... --`).
    """

    holder: subprocess.Popen
    enter: tuple[str, ...]

    def close(self) -> None:
        """Lets the holder go (EOF on its stdin); the namespace ends with its last process."""
        try:
            self.holder.communicate(timeout=_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.holder.kill()
            self.holder.communicate(timeout=_STOP_WAIT_S)


def open_namespace() -> Namespace:
    """Makes a network namespace with loopback only, and checks that `enter` puts processes in it.

    Raises:
      NoNamespace: this machine refuses (no util-linux, no root and no user namespaces).
    """
    unshare, nsenter = shutil.which("unshare"), shutil.which("nsenter")
    if not (unshare and nsenter):
        raise NoNamespace("unshare and nsenter (util-linux) are not on PATH")
    reasons = []
    for make, enter in _NAMESPACE_KINDS:
        holder = subprocess.Popen(  # pylint: disable=consider-using-with
            [unshare, *make, "--", *PYTHON, "-c", _HOLDER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        namespace = Namespace(holder, (nsenter, f"--target={holder.pid}", *enter, "--"))
        why = _wait_ready(holder) or _check_entered(namespace)
        if not why:
            return namespace
        namespace.close()
        reasons.append(f"`unshare {' '.join(make)}`: {why}")
    raise NoNamespace("; ".join(reasons))


def isolation_refusal() -> str | None:
    """Why `tfdist launch` cannot isolate its tasks' network on this machine; None when it can.

    Opens a namespace and closes it again (about as long as starting Python twice).
    """
    try:
        open_namespace().close()
    except NoNamespace as refused:
        return str(refused)
    return None


def _wait_ready(holder: subprocess.Popen) -> str:
    """ "" once `holder` says it is ready; else why not, after stopping it."""
    readable, _, _ = select.select([holder.stdout], [], [], _WAIT_S)
    if readable and holder.stdout.readline().strip() == "ready":
        return ""
    holder.kill()
    _, stderr = holder.communicate(timeout=_STOP_WAIT_S)
    return _last_line(stderr) or f"no answer within {_WAIT_S:g} s"


def _check_entered(namespace: Namespace) -> str:
    """ "" when a process started through `namespace.enter` sees loopback alone; else why not."""
    try:
        check = subprocess.run(
            [*namespace.enter, *PYTHON, "-c", _LIST_INTERFACES],
            capture_output=True,
            text=True,
            timeout=_WAIT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"nsenter gave no answer within {_WAIT_S:g} s"
    if check.returncode == 0 and check.stdout.split() == ["lo"]:
        return ""
    return _last_line(check.stderr) or f"nsenter's process sees interfaces {check.stdout.split()}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class Network(str, enum.Enum):
    """Which network `tfdist launch`'s tasks run on; TensorFlow's servers listen on every
    interface of it.

    AUTO: ISOLATED where this machine allows it, unless a tfdist command needs this machine's
      network (it passes a URL, e.g. --tf_data_service=grpc://... or --model_dir=gs://..., or
      --download; a file:// path is local); else HOST with a one-line warning.
    ISOLATED: one network namespace with loopback only, shared by the tasks; fails if refused.
    HOST: this machine's network: the tasks' ports are open on each of its interfaces (said
      in a one-line warning).
    """

    AUTO = "auto"
    ISOLATED = "isolated"
    HOST = "host"


def for_tasks(mode: Network, ports: list[int], *, needs_host: str | None) -> Namespace | None:
    """The launched tasks' network namespace, or None for this machine's network; prints one
    line that says which of `ports` can be reached from where: a warning on stderr whenever the
    tasks share this machine's network. `needs_host`: the argument of the command that needs
    this machine's network (under AUTO the tasks then share it), if any.

    Raises:
      LaunchError: `mode` ISOLATED on a machine that refuses a namespace.
    """
    if mode is Network.HOST:
        _warn_exposed("network=host", ports, "")
        return None
    if needs_host and mode is Network.AUTO:
        _warn_exposed(
            f"the command passes {needs_host}, which needs this machine's network",
            ports,
            "pass --network=isolated to keep them local (they then reach "
            "nothing outside their namespace)",
        )
        return None
    try:
        namespace = open_namespace()
    except NoNamespace as refused:
        if mode is Network.ISOLATED:
            raise LaunchError(
                f"network=isolated: this machine refuses the tasks a network namespace "
                f"({refused}); run as root or allow unprivileged user namespaces, or pass "
                "--network=host (the tasks' ports are then open on every interface)."
            ) from None
        _warn_exposed(
            f"could not isolate the tasks' network ({refused})",
            ports,
            "run as root or allow unprivileged user namespaces, or firewall these ports",
        )
        return None
    print(
        f"tfdist launch: network isolated: the tasks share a network namespace with loopback "
        f"only, so port(s) {', '.join(map(str, ports))} are reachable from the tasks alone, "
        "and the tasks cannot reach the network (--network=host shares this machine's); "
        f"run a command among them with `{' '.join(namespace.enter)} COMMAND`",
        flush=True,
    )
    return namespace


def _warn_exposed(reason: str, ports: list[int], fix: str) -> None:
    """Warns on stderr, in one line, that the tasks run on this machine's network and what that
    exposes; `fix` ("" for none) says what to do about it."""
    print(
        f"tfdist launch: warning: {reason}: {exposure(ports, exposed_interfaces())}"
        f"{'; ' + fix if fix else ''}.",
        file=sys.stderr,
        flush=True,
    )


def host_network_flag(command: tuple[str, ...]) -> str | None:
    """The first argument of a tfdist command that needs this machine's network, if any: a URL
    other than a local file's (a tf.data service, a gs:// or s3:// path) or --download."""
    for arg in command[1:]:
        name, _, value = arg.partition("=")
        schemes = {scheme.lower() for scheme in _URL_SCHEME.findall(value)}
        if schemes - _LOCAL_SCHEMES or (name == _DOWNLOAD and value.lower() not in _FALSE):
            return arg
    return None
