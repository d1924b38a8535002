"""The paths a run reads and writes, checked before training starts: `check` finds a file where
a directory belongs (or the reverse) and paths this process cannot write, in pure Python before
TensorFlow starts; once it has, `check_urls` finds URLs whose scheme it cannot open here. So a
run fails in one line before training instead of losing its result at the end. What is written
under `--model_dir`, and its lock, is `model_dir`'s.
"""

import dataclasses
import errno
import os
import tempfile

from tfdist.runtime import output_files
from tfdist.runtime.model_dir.storage import is_url
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import RunConfig
from tfdist.strategies import TaskType


_PROBE_BYTES = 4096  # One block: what a full file system refuses.


def _nearest_existing(path: str, field: str = "path") -> str:
    try:  # A relative path needs the working directory, which may have been deleted.
        existing = os.path.abspath(path)
    except FileNotFoundError:
        raise ConfigError(
            f"{field}={path!r} is relative to the working directory, which no "
            "longer exists; cd to one that exists, or pass an absolute "
            "path."
        ) from None
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    return existing


def _check_creatable(field: str, path: str, *, directory: bool) -> None:
    """Raises ConfigError unless `path` is (or can be made) a directory / a file we may write."""
    fix = "pass a directory" if directory else "pass a file path"
    existing = _nearest_existing(path, field)
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    absolute_path = os.path.abspath(path)
    for part in absolute_path[len(existing) :].split(os.sep):
        if len(os.fsencode(part)) > limit:
            raise ConfigError(
                f"{field}={path!r}: its part {part[:16]!r}... is "
                f"{len(os.fsencode(part))} bytes, past the {limit} a name may "
                "have here; shorten it."
            )
    if len(os.fsencode(absolute_path)) >= 4096:  # Linux's PATH_MAX.
        raise ConfigError(
            f"{field}={path[:40]!r}...: the path is "
            f"{len(os.fsencode(absolute_path))} bytes, past the 4095 a path may "
            "have; shorten it."
        )
    if os.path.isdir(path) and not directory:
        raise ConfigError(f"{field}={path!r} is a directory; pass the path of a file in it.")
    if os.path.exists(path) and not os.path.isdir(path) and directory:
        raise ConfigError(f"{field}={path!r} is a file; {fix}.")
    parent = _nearest_existing(path if directory else os.path.dirname(os.path.abspath(path)), field)
    if not os.path.isdir(parent):
        raise ConfigError(f"{field}={path!r}: {parent} is a file, not a directory; {fix}.")
    writable = path if directory and os.path.isdir(path) else parent
    try:  # A real write: permission bits do not stop root, and /proc, a read-only mount or a
        # full disk (a block of data, not only a name) do.
        with tempfile.TemporaryFile(dir=writable, buffering=0) as probe:
            probe.write(bytes(_PROBE_BYTES))
    except OSError as error:
        fix = (
            "free space there, or pass a path on another file system"
            if error.errno in (errno.ENOSPC, errno.EDQUOT)
            else "pass a path you may write"
        )
        raise ConfigError(
            f"{field}={path!r}: cannot write in {writable} ({error.strerror}); {fix}."
        ) from None


def absolute(config: RunConfig) -> RunConfig:
    """`config` with its local `--data_dir`, `--model_dir` and `--metrics_json` made absolute,
    resolved once at set-up: a plug-in that changes the working directory later cannot split a
    run over two directories. URIs (`gs://...`) stay as they are."""

    def resolved(path: str | None) -> str | None:
        if not path or is_url(path):
            return path
        try:
            return os.path.abspath(path)
        except FileNotFoundError:  # No working directory: `check` says so in one line.
            return path

    return dataclasses.replace(
        config,
        input=dataclasses.replace(config.input, data_dir=resolved(config.input.data_dir)),
        train=dataclasses.replace(
            config.train,
            model_dir=resolved(config.train.model_dir),
            metrics_json=resolved(config.train.metrics_json),
        ),
    )


def check_urls(config: RunConfig) -> None:
    """Checks that TensorFlow, imported, has a file system for the scheme of a URL `--data_dir`,
    `--model_dir` or `--metrics_json` (its own `gs://`, or a plug-in's); reaches no storage.

    Raises:
      ConfigError: a scheme no file system here opens, naming the ones that do.
    """
    for field, path in (
        ("data_dir", config.input.data_dir),
        ("model_dir", config.train.model_dir),
        ("metrics_json", config.train.metrics_json),
    ):
        if path and is_url(path):
            _check_url(field, path)


def _check_url(field: str, url: str) -> None:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    scheme = url.split("://", 1)[0]
    opened = sorted(name for name in tf.io.gfile.get_registered_schemes() if name)
    if scheme not in opened:
        raise ConfigError(
            f"{field}={url!r}: TensorFlow here cannot open {scheme}:// (it opens "
            f"{', '.join(name + '://' for name in opened)}); mount that storage as a volume and "
            f"pass its path, or install the TensorFlow file-system plug-in for {scheme}:// "
            "(tensorflow-io has s3://)."
        )


def check(config: RunConfig) -> None:
    """Checks `--data_dir`, `--model_dir` (which an evaluator task needs) and, where this task
    writes it, `--metrics_json`.

    Raises:
      ConfigError, InputConfigError: a path that is a file where a directory belongs or the
        reverse, lies under a file, or is not writable here; an evaluator without a model dir.
    """
    check_input_dir("data_dir", config.input.data_dir)
    if config.train.model_dir:
        if not is_url(config.train.model_dir):  # URLs: `check_urls`.
            _check_creatable("model_dir", config.train.model_dir, directory=True)
    elif config.cluster is not None and config.cluster.task.type is TaskType.EVALUATOR:
        raise ConfigError(
            "the evaluator task needs model_dir=DIR, the chief's, to find the checkpoints "
            "it evaluates."
        )
    if config.train.metrics_json and config.writes_results:
        check_output_file("metrics_json", config.train.metrics_json)


def check_input_dir(field: str, path: str | None) -> None:
    """Checks that `path` (when given), or the nearest part of it that exists, is a directory;
    it may not exist yet (`--data_dir`: the built-in dataset is generated there), and then it
    must be one this process can make. An existing one may be read-only.

    Raises:
      ConfigError: `path` lies under a file, or is one; or it does not exist and cannot be
        made here.
    """
    if not path:
        return
    if is_url(path):  # `check_urls`.
        return
    existing = _nearest_existing(path, field)
    if not os.path.isdir(existing):
        raise ConfigError(
            f"{field}={path!r}: {existing} is a file, not a directory; pass a directory."
        )
    if not os.path.isdir(path):
        _check_creatable(field, path, directory=True)


def check_output_dir(field: str, path: str | None) -> None:
    """Checks that the directory `path` (when given) exists or can be made, and can be written
    here; makes nothing (`--log_dir`).

    Raises:
      ConfigError: `path` is a file, lies under a file, or cannot be written here.
    """
    if path:
        _check_creatable(field, path, directory=True)


def check_output_file(field: str, path: str | None) -> None:
    """Checks that the file `path` (when given) can be written once the work is done, so a
    report is not lost at the end (`--json`, `--plot`).

    Raises:
      ConfigError: `path` is a directory, lies under a file, or cannot be written here; or it
        is what output is not written through (`output_files.refusal`).
    """
    if not path or is_url(path):  # A URL's storage answers when it is written.
        return
    reason = output_files.refusal(field, path)
    if reason:
        raise ConfigError(reason)
    if output_files.writes_through(path):
        if not os.access(path, os.W_OK):  # Written through: its directory is not ours to write.
            raise ConfigError(
                f"{field}={path!r}: cannot write it (permission denied); pass a path you may write."
            )
        return
    _check_creatable(field, path, directory=False)
