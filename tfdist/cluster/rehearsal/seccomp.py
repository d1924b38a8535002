"""A pod's seccomp filter, as Docker's default profile has it for what matters here: no user
namespace of its own (`unshare` and `clone` with CLONE_NEWUSER fail with EPERM, `clone3` is
absent), where the pod would hold every capability again and could mount and make namespaces.
Installed by the pod's first process (`enter`) before it drops its capabilities. Linux, x86_64
and aarch64; pure Python (ctypes).
"""

import ctypes
import errno
import os

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
