"""What bounds a pod's processes beyond its namespaces, set by its first process (`enter`):

  - a seccomp filter, as Docker's default profile has it for what matters here: no user
    namespace of its own (`unshare` and `clone` with CLONE_NEWUSER fail with EPERM, `clone3` is
    absent), where the pod would hold every capability again and could mount and make
    namespaces; installed before the pod drops its capabilities (x86_64 and aarch64);
  - a process count (`MAX_PROCESSES`), through a pids cgroup of the pod's own, as a kubelet's
    podPidsLimit does: cgroup v1's pids controller, where this machine mounts one.

Linux; pure Python (ctypes).
"""

import contextlib
import ctypes
import errno
import glob
import os
import time

MAX_PROCESSES = 4096  # A pod's processes and threads, as a common podPidsLimit.

_LIBC = ctypes.CDLL(None, use_errno=True)
# seccomp (linux/seccomp.h, linux/filter.h, linux/audit.h).
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
_BPF_LD_W_ABS, _BPF_JEQ, _BPF_JGE, _BPF_JSET, _BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06
_X32_SYSCALL_BIT = 0x40000000
_CLONE_NEWUSER = 0x10000000
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYSCALLS = {"x86_64": (272, 56, 435), "aarch64": (97, 220, 435)}  # unshare, clone, clone3


def forbid_user_namespaces() -> None:
    """Installs a seccomp filter, as Docker's default profile does, under which `unshare` and
    `clone` with CLONE_NEWUSER fail (EPERM) and `clone3` is not there (ENOSYS: C libraries fall
    back to `clone`): in a user namespace of its own the pod would hold every capability again
    (mounts, namespaces). Other namespaces need CAP_SYS_ADMIN, which the pod does not have."""
    machine = os.uname().machine
    if machine not in _SYSCALLS:
        raise OSError(errno.ENOSYS, f"no filter for {machine}")
    arch, (unshare, clone, clone3) = _AUDIT_ARCH[machine], _SYSCALLS[machine]
    program = [
        (_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_BPF_JEQ, 1, 0, arch),
        (_BPF_RET, 0, 0, _SECCOMP_RET_ALLOW),  # Another ABI: left to the capabilities.
        (_BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        (_BPF_JGE, 0, 1, _X32_SYSCALL_BIT),  # x86_64's x32 numbers: none of a pod's.
        (_BPF_RET, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM),
        (_BPF_JEQ, 0, 1, clone3),
        (_BPF_RET, 0, 0, _SECCOMP_RET_ERRNO | errno.ENOSYS),
        (_BPF_JEQ, 1, 0, unshare),
        (_BPF_JEQ, 0, 3, clone),
        (_BPF_LD_W_ABS, 0, 0, 16),  # seccomp_data.args[0], its low 32 bits (flags).
        (_BPF_JSET, 0, 1, _CLONE_NEWUSER),
        (_BPF_RET, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM),
        (_BPF_RET, 0, 0, _SECCOMP_RET_ALLOW),
    ]
    filters = (_SockFilter * len(program))(*(_SockFilter(*line) for line in program))
    fprog = _SockFprog(len(program), filters)
    if _LIBC.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def pids_cgroup(name: str, limit: int = MAX_PROCESSES) -> str | None:
    """A pids cgroup for the pod `name` that allows `limit` processes and threads, below this
    process's cgroup (a process joins it by writing its pid to its `cgroup.procs`); None where
    there is no cgroup v1 pids controller, or it may not be written. Those a rehearsal that has
    ended (killed) left go first."""
    parent = _own_pids_cgroup()
    if parent is None:
        return None
    for stale in glob.glob(os.path.join(parent, "tfdist-pod-*")):
        maker = stale.rpartition("-")[2]  # A live rehearsal's may be empty for a moment.
        if maker.isdigit() and not os.path.exists(f"/proc/{maker}"):
            with contextlib.suppress(OSError):
                os.rmdir(stale)  # Refused while it holds a process.
    directory = os.path.join(parent, f"tfdist-pod-{name}-{os.getpid()}")
    try:
        os.makedirs(directory, exist_ok=True)
        _write(os.path.join(directory, "pids.max"), str(limit))
    except OSError:
        remove_pids_cgroup(directory, wait_s=0)
        return None
    return directory


def joining(cgroup: str | None) -> list[str]:
    """The argv prefix that runs a command in `cgroup` (none: as it is): a shell that joins it,
    then becomes the command, so that all the command starts is counted there."""
    if cgroup is None:
        return []
    return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup]


def remove_pids_cgroup(directory: str, *, wait_s: float = 5.0) -> None:
    """Removes the pids cgroup `directory` once its processes have gone (up to `wait_s`)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(directory)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)


def _own_pids_cgroup() -> str | None:
    """The directory of this process's cgroup in cgroup v1's pids hierarchy; None without one."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            points = [
                line.split()[1]
                for line in mounts
                if line.split()[2:3] == ["cgroup"] and "pids" in line.split()[3].split(",")
            ]
        with open("/proc/self/cgroup", encoding="utf-8") as cgroups:
            paths = [line.strip().split(":", 2)[2] for line in cgroups if ":pids:" in line]
    except OSError:
        return None
    if not (points and paths):
        return None
    return os.path.join(points[0], paths[0].lstrip("/"))


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as file:
        file.write(text)
