"""`Records`: a user's own dataset, TFRecord files plus the function that parses a batch of their
records. Pure Python; `datasets.records_dataset_fn` reads it."""

import collections
import dataclasses
import hashlib
import os
from typing import Any
from typing import Callable
from typing import Sequence

from . import file_lists
from .choices import SPLIT_PLACEHOLDER
from .config import MAX_NUM_EXAMPLES
from .messages import InputConfigError

_FILES_FIX = "pass a glob such as '/data/{split}-*.tfrecord' or a list of TFRecord paths"

# From a 1-D string tensor of serialized records (one per-replica batch) to (features, labels).
ParseFn = Callable[[Any], tuple[Any, Any]]


def _as_files(files) -> str | tuple[str, ...]:
    """`files` as one glob or a tuple of paths; raises InputConfigError when it is neither, or
    names no file."""
    if isinstance(files, os.PathLike):
        files = os.fspath(files)
    if isinstance(files, str):
        if not files:
            raise InputConfigError(f"files={files!r} names no files; {_FILES_FIX}.")
        return files
    if isinstance(files, bytes) or not isinstance(files, Sequence):
        raise InputConfigError(
            f"files={files!r} is not a glob or a sequence of paths; {_FILES_FIX}."
        )
    paths = tuple(os.fspath(path) if isinstance(path, os.PathLike) else path for path in files)
    if not paths:
        raise InputConfigError(f"files={files!r} names no files; {_FILES_FIX}.")
    for path in paths:
        if not isinstance(path, str) or not path:
            raise InputConfigError(f"files contains {path!r}, not a path; {_FILES_FIX}.")
    for path, count in collections.Counter(paths).items():
        if count > 1:
            raise InputConfigError(
                f"files lists {path} {count} times; list each file once, or "
                "every epoch reads it more than once."
            )
    return paths


@dataclasses.dataclass(frozen=True)
class Records:
    """A user's dataset: TFRecord files of serialized records, and how to parse a batch of them,
    e.g. `Records("/data/{split}-*.tfrecord", parse, num_examples=50_000)`.

    Attributes:
      files: a glob, in which `{split}` stands for the split read (`ReadOptions.split`), or a
        sequence of paths, read in the order given (`{split}` in them is replaced too).
      parse_fn: takes a 1-D string tensor of serialized records, one per-replica batch (the last
        batch of evaluation data may be shorter), and returns `(features, labels)`, each any
        nested structure of tensors: dense, ragged or sparse. It runs inside tf.data, traced
        once, on the host or on tf.data service workers: TensorFlow ops only.
      num_examples: how many examples the files hold, when known; tfdist's `fit` reads that
        many as one validation pass when this is validation data (a split's own `Records`
        when `files` has `{split}`).
    """

    files: str | Sequence[str]
    parse_fn: ParseFn
    _: dataclasses.KW_ONLY
    num_examples: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "files", _as_files(self.files))
        if not callable(self.parse_fn):
            raise InputConfigError(
                f"parse_fn={self.parse_fn!r} is not callable; pass a function from a batch of "
                "serialized records (a 1-D string tensor) to (features, labels)."
            )
        if self.num_examples is not None and (
            isinstance(self.num_examples, bool)
            or not isinstance(self.num_examples, int)
            or not 1 <= self.num_examples <= MAX_NUM_EXAMPLES
        ):
            raise InputConfigError(
                f"num_examples={self.num_examples!r} is not an integer from 1 to "
                f"{MAX_NUM_EXAMPLES}; pass the number of training examples, or None."
            )

    def describe(self) -> str:
        """The files, as logs and reports name them: the glob, or the first few paths."""
        return self.files if isinstance(self.files, str) else file_lists.some(self.files)

    def job_name(self, split: str) -> str:
        """The tf.data service job that every training worker reading `split` joins: the same
        name in every process for the same files."""
        digest = hashlib.sha1(repr(self.files).encode()).hexdigest()[:12]
        return f"tfdist-records-{digest}-{split}"

    def paths(self, split: str) -> tuple[str, ...]:
        """The TFRecord files of `split`: the glob's sorted matches, or the listed paths.

        Raises:
          InputConfigError: the glob matches nothing; a path is a directory, missing, or empty.
        """
        owner = f"files={self.describe()!r}"
        if isinstance(self.files, str):
            paths = file_lists.match(self.files, split)
            if not paths:
                raise InputConfigError(
                    f"{owner}: the pattern {self.files.replace(SPLIT_PLACEHOLDER, split)!r} "
                    f"matches no files; check the path ({SPLIT_PLACEHOLDER} in it stands for "
                    f"the split, here {split!r})."
                )
        else:
            paths = tuple(path.replace(SPLIT_PLACEHOLDER, split) for path in self.files)
        file_lists.check(owner, paths)
        return paths
