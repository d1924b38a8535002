"""TFRecord file lists: matching a `{split}` glob and checking that each path can be a TFRecord
file. Pure Python, shared by `tfrecord:` sources and user `Records`."""

import glob
import os

from .choices import SPLIT_PLACEHOLDER
from .messages import InputConfigError


def match(pattern: str, split: str) -> tuple[str, ...]:
    """The sorted paths `pattern` matches, `{split}` in it replaced by `split`."""
    return tuple(sorted(glob.glob(pattern.replace(SPLIT_PLACEHOLDER, split))))


def check(owner: str, paths: tuple[str, ...]) -> None:
    """Raises InputConfigError for the first path that cannot be a TFRecord file: a directory, a
    broken link, a missing path, or an empty file (almost always a failed write). `owner` starts
    the message, e.g. "dataset='tfrecord:/data/*'"."""
    for path in paths:
        if os.path.isdir(path):
            raise InputConfigError(
                f"{owner}: {path} is a directory, not a TFRecord file; make the pattern match "
                f"files only, e.g. {os.path.join(path, '*')}."
            )
        if os.path.islink(path) and not os.path.exists(path):
            raise InputConfigError(f"{owner}: {path} is a broken link; fix or remove it.")
        if not os.path.exists(path):
            raise InputConfigError(f"{owner}: {path} does not exist; check the path.")
        if not os.path.getsize(path):
            raise InputConfigError(
                f"{owner}: file {path} is empty (0 bytes), most likely a failed write; "
                "re-create it, or move it out of the pattern."
            )


def some(paths: tuple[str, ...], shown: int = 3) -> str:
    """The first `shown` of `paths`, and how many more there are."""
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more
