"""The paths a run reads and writes, checked before training starts: `check` finds a file where
a directory belongs (or the reverse) and paths this process cannot write, so a run fails in one
line before training instead of losing its result at the end. Pure Python. What is written
under `--model_dir`, and its lock, is `model_dir`'s.
"""

import os
import tempfile

from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import RunConfig



def _nearest_existing(path: str) -> str:
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    return existing


def _check_creatable(field: str, path: str, *, directory: bool) -> None:
    """Raises ConfigError unless `path` is (or can be made) a directory / a file we may write."""
    fix = "pass a directory" if directory else "pass a file path"
    if os.path.isdir(path) and not directory:
        raise ConfigError(f"{field}={path!r} is a directory; pass the path of a file in it.")
    if os.path.exists(path) and not os.path.isdir(path) and directory:
        raise ConfigError(f"{field}={path!r} is a file; {fix}.")
    parent = _nearest_existing(path if directory else os.path.dirname(os.path.abspath(path)))
    if not os.path.isdir(parent):
        raise ConfigError(f"{field}={path!r}: {parent} is a file, not a directory; {fix}.")
    writable = path if directory and os.path.isdir(path) else parent
    try:  # A real write: permission bits do not stop root, and /proc or a read-only mount do.
        with tempfile.TemporaryFile(dir=writable):
            pass
    except OSError as error:
        raise ConfigError(f"{field}={path!r}: cannot write in {writable} ({error.strerror}); "
                          "pass a path you may write.") from None


def check(config: RunConfig) -> None:
    """Checks `--data_dir`, `--model_dir` and, where this task writes it, `--metrics_json`.

    Raises:
      ConfigError, InputConfigError: a path that is a file where a directory belongs or the
        reverse, lies under a file, or is not writable here.
    """
    check_input_dir("data_dir", config.input.data_dir)
    if config.train.model_dir:
        _check_creatable("model_dir", config.train.model_dir, directory=True)
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
    existing = _nearest_existing(path)
    if not os.path.isdir(existing):
        raise ConfigError(f"{field}={path!r}: {existing} is a file, not a directory; pass a "
                          "directory.")
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
      ConfigError: `path` is a directory, lies under a file, or cannot be written here.
    """
    if path:
        _check_creatable(field, path, directory=False)
