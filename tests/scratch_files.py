"""Scratch stand-ins for the machine's special files, so no test touches the real ones: device
nodes made with mknod in a temp dir, and a small tmpfs to fill."""

import contextlib
import ctypes
import os
import stat
import tempfile
import unittest
from typing import Iterator

# (major, minor) of Linux's memory devices (Documentation/admin-guide/devices.txt).
NULL, ZERO, FULL = (1, 3), (1, 5), (1, 7)
LOOP0 = (7, 0)
_MNT_DETACH = 2


def device(directory: str, name: str, numbers: tuple[int, int], *, block: bool = False) -> str:
    """Makes a character (or block) device node `name` in `directory`; skips the test where
    this process may not."""
    path = os.path.join(directory, name)
    kind = stat.S_IFBLK if block else stat.S_IFCHR
    try:
        os.mknod(path, kind | 0o666, os.makedev(*numbers))
    except PermissionError:
        raise unittest.SkipTest("mknod needs root") from None
    return path


@contextlib.contextmanager
def small_tmpfs(size_kib: int) -> Iterator[str]:
    """A tmpfs of `size_kib` KiB mounted on a temp dir for the block (by mount(2), starting no
    process), detached after it; skips the test where mounting is not allowed."""
    libc = ctypes.CDLL(None, use_errno=True)
    with tempfile.TemporaryDirectory() as mount_point:
        if libc.mount(b"tmpfs", mount_point.encode(), b"tmpfs", 0, f"size={size_kib}k".encode()):
            raise unittest.SkipTest(f"cannot mount a tmpfs here: {os.strerror(ctypes.get_errno())}")
        try:
            yield mount_point
        finally:
            libc.umount2(mount_point.encode(), _MNT_DETACH)


def fill(directory: str) -> None:
    """Fills the file system of `directory` to the last byte."""
    with open(os.path.join(directory, "filler"), "wb", buffering=0) as filler:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    filler.write(b"\0" * size)
