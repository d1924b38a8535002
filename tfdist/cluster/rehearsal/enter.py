"""The first program on an emulated host, run by `Host.enter` inside the host's network namespace
(`ip netns exec`, which also gives it the host's hosts file as /etc/hosts):

    python -P -c "...; enter.main(sys.argv[1:])" SPEC -- ARGV...

SPEC (JSON, `Spec`) names the host and, for a pod, its sandbox. A Slurm node's task keeps this
machine's file system, as a real node keeps its shared one. A pod gets what a container runtime
gives it, built here and gone when the pod ends, so it cannot touch the host:

  - its own UTS, IPC, PID and mount namespaces; its command runs under a small init (PID 1 of
    the pod) that passes signals on and reaps, as `docker run --init` does;
  - its own root file system: every file system of this machine's (the image) under an overlay
    whose upper layer is a tmpfs of the pod's own (as large as its memory request, else 1 GiB:
    a full one is ENOSPC in the pod), so what the pod writes outside its volumes is its own
    and lost when it ends, as a container's writable layer is (a file system that
    overlayfs cannot stack on is bound read-only instead, said in the pod's log); the manifest's
    volumes bind-mounted over it; a fresh /proc, /dev (null, zero, full, random, urandom, tty,
    its own pts and shm), /run and /tmp-as-in-the-image, /sys read-only;
  - the host's secrets in the image masked (shadow and gshadow, the munge key, ssh host keys,
    root's .ssh: `_SECRETS`);
  - Docker's default capabilities less CAP_MKNOD (no mounts, no namespaces, no raw devices, no
    modules, no clock), and Docker's seccomp rule against user namespaces (`pod_limits`), in
    which the pod would hold every capability again: so the pod cannot undo any of the above;
  - at most `pod_limits.MAX_PROCESSES` processes and threads (a pids cgroup the rehearsal
    starts the pod in, where this machine has cgroup v1's pids controller; else the pod's log
    says they are not counted).

What it still shares with the host: the kernel, CPU and memory (no limit on its processes' own
memory), this machine's other files as a read-only image, the volumes' directories, and the
same user (root).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import glob
import json
import os
import signal
import socket
import sys

from tfdist.cluster.rehearsal import pod_limits

ANNOUNCER = "tfdist rehearse"
EXIT_CANNOT_RUN = 127
LAYER_BYTES = 1 << 30  # A pod's writable layer when it requests no memory.

_CLONE_NEWNS, _CLONE_NEWUTS = 0x00020000, 0x04000000
_CLONE_NEWIPC, _CLONE_NEWPID = 0x08000000, 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP = 1, 24
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
# Docker's default capabilities (moby's oci/caps/defaults.go) less CAP_MKNOD (7): chown,
# dac_override, fowner, fsetid, kill, setgid, setuid, setpcap, net_bind_service, net_raw,
# sys_chroot, audit_write, setfcap.
_KEPT_CAPABILITIES = frozenset((0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 29, 31))
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_PSEUDO_FILE_SYSTEMS = frozenset(
    (
        "proc",
        "sysfs",
        "devtmpfs",
        "devpts",
        "mqueue",
        "nsfs",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "bpf",
        "fusectl",
        "configfs",
        "pstore",
        "hugetlbfs",
        "autofs",
        "binfmt_misc",
        "efivarfs",
        "selinuxfs",
        "rpc_pipefs",
    )
)
_FRESH_TREES = ("/proc", "/sys", "/dev", "/run")  # Never from this machine.
_FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_LIBC = ctypes.CDLL(None, use_errno=True)
# What a pod must not read in the image (this machine's files): passwords, keys.
_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/munge",
    "/etc/ssh/ssh_host_*key",
    "/root/.ssh",
)


@dataclasses.dataclass(frozen=True)
class Spec:
    """What one emulated host's first program does.

    Attributes:
      hostname: the host's name (a pod's, or a Slurm node's).
      staging: for a pod, an empty directory of the rehearsal's own that its sandbox is built
        on (its mounts are the pod's alone: the host sees the directory empty); None for a
        Slurm node, which keeps this machine's files.
      binds: (source on this machine, mount path in the pod) of each volume.
      working_dir: where the command starts in the pod; None is `/`.
      layer_bytes: the most the pod may write outside its volumes (its writable layer, held in
        memory); None is `LAYER_BYTES`.
    """

    hostname: str
    staging: str | None = None
    binds: tuple[tuple[str, str], ...] = ()
    working_dir: str | None = None
    layer_bytes: int | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Spec:
        fields = json.loads(text)
        fields["binds"] = tuple(tuple(bind) for bind in fields["binds"])
        return cls(**fields)


class _Refused(Exception):
    """The pod cannot start as specified; the message is one line."""


def main(argv: list[str]) -> None:
    """Runs ARGV on the host SPEC names; exits with its status (128 + N for signal N)."""
    spec, command = Spec.from_json(argv[0]), argv[2:]
    if spec.staging is None:
        _unshare(_CLONE_NEWUTS)
        socket.sethostname(spec.hostname)
        _exec(command)
    _unshare(_CLONE_NEWNS | _CLONE_NEWUTS | _CLONE_NEWIPC | _CLONE_NEWPID)
    socket.sethostname(spec.hostname)
    alive_read, alive_write = os.pipe()  # Open here while this process lives.
    init = os.fork()
    if init == 0:
        os.close(alive_write)
        _run_init(spec, command, alive_read)
    # This process stays outside the pod's PID namespace, where the rehearsal signals it: it
    # passes each signal on to the pod's init, and ends as the pod does.
    for signum in _FORWARDED:
        signal.signal(signum, functools.partial(_pass_on, init))
    sys.exit(_exit_status(os.waitpid(init, 0)[1]))  # Retried on a signal (PEP 475).


def _run_init(spec: Spec, command: list[str], parent_alive: int) -> None:
    """PID 1 of the pod: builds its sandbox, starts its command, passes signals on to every
    process of the pod, reaps them, and exits as the command did (the kernel then kills what is
    left in the pod)."""
    try:
        os.setpgid(0, 0)  # Signals come through the process outside, once.
        _die_with_parent(parent_alive)
        _build_root(spec)
    except (_Refused, OSError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else error
        _say(f"pod {spec.hostname}: {why}")
        os._exit(EXIT_CANNOT_RUN)  # pylint: disable=protected-access
    child = os.fork()
    if child == 0:
        try:  # While this process may still install the filter.
            pod_limits.forbid_user_namespaces()
        except OSError as error:
            _say(f"pod {spec.hostname}: cannot install its seccomp filter ({error.strerror})")
            os._exit(EXIT_CANNOT_RUN)  # pylint: disable=protected-access
        _drop_capabilities()
        _exec(command)
    for signum in _FORWARDED:
        signal.signal(signum, functools.partial(_pass_on, -1))  # -1: all the pod's processes.
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            os._exit(_exit_status(status))  # pylint: disable=protected-access


def _build_root(spec: Spec) -> None:
    """Makes the pod's root file system on `spec.staging` and moves into it."""
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    file_systems = _this_machines_file_systems()
    size = spec.layer_bytes or LAYER_BYTES
    _mount("tmpfs", spec.staging, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0755,size={size}")
    root = os.path.join(spec.staging, "root")
    for index, (target, is_dir) in enumerate(file_systems):
        inside = root + target if target != "/" else root
        if not is_dir:  # A file mounted on its own (the hosts file): read-only, as it is.
            _bind(target, inside, read_only=True)
            continue
        layer = os.path.join(spec.staging, "layers", str(index))
        os.makedirs(os.path.join(layer, "upper"))
        os.makedirs(os.path.join(layer, "work"))
        os.makedirs(inside, exist_ok=True)
        lower = target.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")
        try:
            _mount(
                "overlay",
                inside,
                "overlay",
                _MS_NODEV,
                f"lowerdir={lower},upperdir={layer}/upper,workdir={layer}/work",
            )
        except OSError as refused:  # A file system overlayfs cannot stack on: read-only.
            _mount(target, inside, None, _MS_BIND)
            _mount("none", inside, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)
            _say(f"pod {spec.hostname}: {target} is read-only in the pod ({refused.strerror})")
    _fresh_trees(root)
    _mask_secrets(root)
    for source, path in spec.binds:
        inside = root + path
        if os.path.lexists(inside) and not os.path.isdir(inside):
            raise _Refused(
                f"mount path {path} is not a directory in the image (this machine); "
                "mount the volume elsewhere (tfdist manifest --mount_path=DIR)"
            )
        os.makedirs(inside, exist_ok=True)
        _bind(source, inside)
    os.chdir(root)
    _pivot_root()
    working_dir = spec.working_dir or "/"
    os.makedirs(working_dir, exist_ok=True)  # As runc does, in the pod's own layer.
    os.chdir(working_dir)


def _this_machines_file_systems() -> list[tuple[str, bool]]:
    """(mount point, is a directory) of this machine's file systems with files (no pseudo file
    systems, nothing under _FRESH_TREES), parents first."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            target = _unescape(fields[4])
            file_system = fields[fields.index("-") + 1]
            if file_system in _PSEUDO_FILE_SYSTEMS or any(
                target == tree or target.startswith(tree + "/") for tree in _FRESH_TREES
            ):
                continue
            found = [entry for entry in found if entry[0] != target]  # The top one counts.
            found.append((target, os.path.isdir(target)))
    return sorted(found, key=lambda entry: (entry[0] != "/", entry[0].count("/")))


def _fresh_trees(root: str) -> None:
    """The pod's own /proc, /sys (read-only), /dev and /run."""
    for tree in _FRESH_TREES:
        os.makedirs(root + tree, exist_ok=True)
    _mount("proc", f"{root}/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for path in ("sys", "sysrq-trigger", "irq", "bus"):  # As Docker leaves them: read-only.
        if os.path.exists(f"{root}/proc/{path}"):
            _bind(f"{root}/proc/{path}", f"{root}/proc/{path}", read_only=True)
    _mount("sysfs", f"{root}/sys", "sysfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("tmpfs", f"{root}/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=0755")
    for device in _DEVICES:
        open(f"{root}/dev/{device}", "w", encoding="ascii").close()  # pylint: disable=consider-using-with
        _bind(f"/dev/{device}", f"{root}/dev/{device}")
    os.makedirs(f"{root}/dev/pts")
    _mount(
        "devpts",
        f"{root}/dev/pts",
        "devpts",
        _MS_NOSUID | _MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620",
    )
    os.symlink("pts/ptmx", f"{root}/dev/ptmx")
    os.makedirs(f"{root}/dev/shm")
    _mount("tmpfs", f"{root}/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{root}/dev/{name}")
    _mount("tmpfs", f"{root}/run", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")


def _bind(source: str, target: str, *, read_only: bool = False) -> None:
    _mount(source, target, None, _MS_BIND | _MS_REC)
    if read_only:
        _mount("none", target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)


def _pivot_root() -> None:
    """Makes the current directory the root, and this machine's root unreachable."""
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise _Refused(
            f"pivot_root is not known on {os.uname().machine}; rehearse on x86_64 or aarch64"
        )
    _check(_LIBC.syscall(number, b".", b"."), "pivot_root")
    _check(_LIBC.umount2(b".", _MNT_DETACH), "umount the old root")
    os.chdir("/")


def _mask_secrets(root: str) -> None:
    """Hides the host's secrets that the image (this machine's files) would show the pod: each
    file of `_SECRETS` there reads as empty (/dev/null over it), each directory as an empty
    read-only one."""
    for pattern in _SECRETS:
        for path in glob.glob(root + pattern):
            if os.path.islink(path):
                continue  # A link's target is masked where it is a secret itself.
            if os.path.isdir(path):
                _mount("tmpfs", path, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "size=4k")
            else:
                _bind(f"{root}/dev/null", path, read_only=True)


def _drop_capabilities() -> None:
    """Leaves the pod's command only _KEPT_CAPABILITIES: dropped from the bounding set, so that
    executing the command (as root) grants no more."""
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as last:
        last_cap = int(last.read())
    for capability in range(last_cap + 1):
        if capability not in _KEPT_CAPABILITIES:
            _check(_LIBC.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), "drop a capability")


def _exec(command: list[str]) -> None:
    try:
        os.execvp(command[0], command)
    except OSError as error:
        _say(f"cannot run {command[0]!r}: {error.strerror}")
        os._exit(EXIT_CANNOT_RUN)  # pylint: disable=protected-access


def _die_with_parent(parent_alive: int) -> None:
    """Asks for SIGKILL when the process outside ends; `parent_alive` reads end-of-file once
    it has (already, if it ended before the request)."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.set_blocking(parent_alive, False)
    try:
        gone = os.read(parent_alive, 1) == b""
    except BlockingIOError:
        gone = False
    if gone:
        os._exit(128 + signal.SIGKILL)  # pylint: disable=protected-access
    os.close(parent_alive)


def _pass_on(pid: int, signum: int, _frame) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _exit_status(status: int) -> int:
    """A wait status as a container runtime reports it: the exit code, or 128 + the signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _unshare(flags: int) -> None:
    _check(_LIBC.unshare(flags), "unshare")


def _mount(
    source: str, target: str, file_system: str | None, flags: int, data: str | None = None
) -> None:
    result = _LIBC.mount(
        source.encode(),
        target.encode(),
        file_system.encode() if file_system else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(result, f"mount {file_system or 'bind'} on {target}")


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _unescape(text: str) -> str:
    """A mountinfo field: octal escapes (\\040 for a space) decoded."""
    return text.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")


def _say(line: str) -> None:
    print(f"{ANNOUNCER}: {line}", file=sys.stderr, flush=True)
