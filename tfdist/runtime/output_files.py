"""Writing a file a user named (`--json`, `--metrics_json`, `--plot`) or one of ours under
`--model_dir`, whole or not at all, without replacing what the path points at. Pure Python.

    no file yet, or a regular file   a temp file beside it, renamed over it once complete
                                     (a new file gets the umask's mode, a replaced one keeps its
                                     own); the missing directories are made
    a symlink, a character device,   written through, in place: `/dev/stdout` gets the bytes on
    a FIFO                           stdout, `/dev/null` stays a device; a FIFO needs a reader
    a block device, a socket, a      refused in one line
    directory, a dangling symlink

A URL (`gs://...`, under a model dir on object storage) is written as one object, which appears
whole or not at all (`storage.write_url`). A failed write (a full disk) removes the temp file
and raises `OutputFileError` in one line; what was at the path before is untouched.
"""

import contextlib
import errno
import json
import os
import stat

from tfdist.runtime.model_dir import storage
from tfdist.runtime.config import ConfigError


class OutputFileError(ConfigError):
    """An output file cannot be written; one line: the field, the path, why, the fix."""


def refusal(field: str, path: str) -> str | None:
    """Why `path` cannot take output written through it, in one line; None when it can (it
    does not exist, or is a regular file, a character device, a FIFO or a symlink to one)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return (
                f"{field}={path!r} is a symlink to {os.readlink(path)!r}, which does not "
                "exist; pass the target's path, or make it first."
            )
        return None
    except OSError:  # Under a file, too long, ...: the write says so, or `paths` first.
        return None
    if stat.S_ISDIR(mode):
        return f"{field}={path!r} is a directory; pass the path of a file in it."
    for kind, test in (("a block device", stat.S_ISBLK), ("a socket", stat.S_ISSOCK)):
        if test(mode):
            return (
                f"{field}={path!r} is {kind}; pass the path of a regular file (or a "
                "character device or FIFO to write through)."
            )
    return None


def writes_through(path: str) -> bool:
    """Whether output to `path` is written through it in place: a symlink, or an existing file
    that is not a regular one (a character device, a FIFO)."""
    return os.path.islink(path) or (
        os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode)
    )


def write_json(field: str, path: str, value: object) -> None:
    """Writes `value` to `path` as indented JSON with sorted keys, as `write_bytes` does."""
    write_bytes(field, path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode())


def write_record(path: str, value: object) -> None:
    """Writes `value` as a record of tfdist's under a model dir (`write_json`), never through
    what is there: a link or FIFO planted in a model dir (by anyone who can write a shared
    volume) is refused, where a user's own output file is written through.

    Raises:
      OutputFileError: `path` is a link or not a regular file; or the write failed.
    """
    planted = storage.local_kind(path)
    if planted not in (None, storage.REGULAR_FILE):
        raise OutputFileError(
            f"model_dir: {path} is {planted}, which tfdist never writes through in a model "
            "dir; remove it, or pass another model_dir=DIR."
        )
    write_json("model_dir", path, value)


def write_bytes(field: str, path: str, data: bytes) -> None:
    """Writes `data` to `path`, named by the flag or field `field`: atomically where it is (or
    will be) a regular file, through it where it is a symlink, a character device or a FIFO.

    Raises:
      OutputFileError: `path` cannot take output (see `refusal`), a FIFO has no reader, or
        the write failed; nothing of ours is left behind.
    """
    reason = None if storage.is_url(path) else refusal(field, path)
    if reason:
        raise OutputFileError(reason)
    try:
        if storage.is_url(path):
            storage.write_url(path, data)
        elif writes_through(path):
            _write_through(path, data)
        else:
            _replace(path, data)
    except OSError as error:
        raise OutputFileError(
            f"{field}={path!r}: could not write it ({_why(error)}); {_fix(error)}"
        ) from None


def _write_through(path: str, data: bytes) -> None:
    """Opens what `path` points at in place (a FIFO without blocking for a reader) and writes."""
    mode = os.stat(path).st_mode
    fifo = stat.S_ISFIFO(mode)
    flags = os.O_WRONLY | (os.O_NONBLOCK if fifo else 0) | (os.O_TRUNC if stat.S_ISREG(mode) else 0)
    descriptor = os.open(path, flags)
    try:
        if fifo:
            os.set_blocking(descriptor, True)
        _write_all(descriptor, data)
    finally:
        os.close(descriptor)


def _replace(path: str, data: bytes) -> None:
    """Writes `data` to a temp file beside `path`, then renames it over `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    existing_mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else None
    temp = os.path.join(directory, f".{os.path.basename(path)}.{os.urandom(4).hex()}.tmp")
    # 0o666 less the umask, as any program's new file; O_EXCL never opens what was there.
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        try:
            if existing_mode is not None:
                os.fchmod(descriptor, existing_mode)
            _write_all(descriptor, data)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


def _why(error: OSError) -> str:
    if error.errno == errno.ENXIO:
        return "it is a FIFO that no process reads"
    return error.strerror or str(error)


def _fix(error: OSError) -> str:
    if error.errno == errno.ENXIO:
        return "start its reader first, or pass a regular file."
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free space there, or pass a path on another file system."
    return "pass a path you may write."
