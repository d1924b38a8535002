"""A model dir's files wherever the model dir is: a local path through `os` (hardened by the
callers: no links followed, no FIFOs read), a URL (`gs://bucket/run`) through TensorFlow's file
systems, which speak object storage. Nothing made from a URL is ever used as a local path.

On object storage an object appears whole when its upload ends, or not at all, so writing one
is atomic: there is no rename to do it with, and none is needed. TensorFlow is imported only for
URLs (a run with a URL model dir has imported it already).
"""

import contextlib
import os
import shutil
import stat


def is_url(path: str) -> bool:
    """Whether `path` is a URL (`gs://...`) rather than a local path."""
    return "://" in path


def on_this_machine(path: str) -> str | None:
    """The local file system's path of `path`: itself, or a `file://` URL's; None for object
    storage (no links or FIFOs there)."""
    if not is_url(path):
        return path
    return path[len("file://") :] if path.startswith("file://") else None


REGULAR_FILE, DIRECTORY = "a regular file", "a directory"


def local_kind(path: str) -> str | None:
    """What the path `path` on this machine is, without following a link: "a regular file",
    "a directory", "a symbolic link", "a FIFO", "a device", "a socket"; None when there is
    nothing, or it is on object storage (which has no links, FIFOs or devices)."""
    local = on_this_machine(path)
    try:  # Without a trailing "/", which would follow a link.
        mode = os.lstat(local.rstrip("/") or "/").st_mode if local is not None else None
    except OSError:
        return None
    if mode is None:
        return None
    for kind, test in _KINDS:
        if test(mode):
            return kind
    return "a special file"


_KINDS = (
    (REGULAR_FILE, stat.S_ISREG),
    (DIRECTORY, stat.S_ISDIR),
    ("a symbolic link", stat.S_ISLNK),
    ("a FIFO", stat.S_ISFIFO),
    ("a device", lambda mode: stat.S_ISCHR(mode) or stat.S_ISBLK(mode)),
    ("a socket", stat.S_ISSOCK),
)


def _tf():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return tf


def _gfile():
    return _tf().io.gfile


def isfile(path: str) -> bool:
    if is_url(path):
        gfile = _gfile()
        return gfile.exists(path) and not gfile.isdir(path)
    return os.path.isfile(path)


def isdir(path: str) -> bool:
    return _gfile().isdir(path) if is_url(path) else os.path.isdir(path)


def listdir(path: str) -> list[str]:
    """The names in the directory `path` (a URL's without the trailing `/` of subdirectories);
    [] when it is not one."""
    if not isdir(path):
        return []
    if is_url(path):
        return [name.rstrip("/") for name in _gfile().listdir(path)]
    return os.listdir(path)


def makedirs(path: str) -> None:
    if is_url(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def remove_tree(path: str) -> None:
    """Removes the directory `path` and everything under it, if it is there."""
    if not is_url(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    tf = _tf()
    with contextlib.suppress(tf.errors.OpError):  # Gone already, or not ours to remove.
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)


def remove(path: str) -> None:
    """Removes the file (object) `path`, if it is there."""
    if is_url(path):
        tf = _tf()
        with contextlib.suppress(tf.errors.NotFoundError):  # Gone already.
            tf.io.gfile.remove(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def read_url(url: str, limit: int) -> bytes | None:
    """The bytes of the object `url`; None when there is none, it is a directory, or it holds
    more than `limit` bytes (read no further), or, on this machine (`file://`), it is a link or
    not a regular file (a FIFO would never end a read)."""
    local = on_this_machine(url)
    if local is not None and local_kind(local) != REGULAR_FILE:
        return None
    tf = _tf()
    try:
        if tf.io.gfile.isdir(url) or tf.io.gfile.stat(url).length > limit:
            return None
        with tf.io.gfile.GFile(url, "rb") as reader:
            return reader.read(limit + 1)
    except tf.errors.OpError:  # None there, or not ours to read.
        return None


def write_url(url: str, data: bytes) -> None:
    """Writes `data` as the object `url`, whole (it appears when the upload ends).

    Raises:
      OSError: the storage refused it (the error's message, in one line).
    """
    tf = _tf()
    try:
        with tf.io.gfile.GFile(url, "wb") as writer:
            writer.write(data)
    except tf.errors.OpError as error:  # Permission, quota, network.
        lines = (error.message or type(error).__name__).strip().splitlines()
        raise OSError(lines[0]) from None
