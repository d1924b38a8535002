"""tfdist's errors: one root, one message builder, one program name. Imports nothing of tfdist
(the libraries' errors derive from it too), and nothing heavy.

    TfdistError                      every error tfdist words in one line; `exit_status`
      UsageError (ValueError)        the input is wrong: a flag, a config field, a file; exit 2
        ConfigError                  a run's option (the core's configs, a model, data)
      RunFailure (RuntimeError)      the input was fine, the run failed; exit 1
        Diverged                     the loss or weights became NaN or infinite
        DiskFull                     a save found no space (the last complete state is kept)
        LostPeer                     a peer stopped answering mid-run
        ResultNotSaved               the run trained, but its result file could not be written

A message is one line: the field and its value (cut by `shown`), the problem, the fix
(`problem`). Lower rooms raise; the command layer (`tfdist <command>`, `tfdist.run`) prints, as
`<program>: error: <message>` with `program()`'s name.
"""

import contextlib
import os
import sys
from typing import Iterator

EXIT_USAGE = 2
EXIT_RUN_FAILURE = 1
MAX_SHOWN = 80  # Characters of a value's repr in a message.


class TfdistError(Exception):
    """An error tfdist explains in one line; the root that the CLI and users' programs catch."""

    exit_status = EXIT_RUN_FAILURE


class UsageError(TfdistError, ValueError):
    """The input is wrong (a flag, a config field, TF_CONFIG, a manifest, a file); the message
    names it, its value and the fix. Exit status 2, as for a bad flag."""

    exit_status = EXIT_USAGE


class ConfigError(UsageError):
    """A training option is invalid (the core's configs, `fit`'s model and data); the message is
    one line: field, value, fix. The libraries' configs raise their own UsageErrors."""


class RunFailure(TfdistError, RuntimeError):
    """The input was fine but the run failed (not a bug of tfdist's: that stays a traceback).
    Exit status 1."""


class Diverged(RunFailure):
    """Training diverged: a NaN or infinite loss or weights; the last good state is kept."""


class DiskFull(RunFailure):
    """A save found no space left; the last complete backup and checkpoints are kept."""


class LostPeer(RunFailure):
    """A peer stopped answering mid-run (killed, or its link cut); the message names it."""


class ResultNotSaved(RunFailure):
    """The run trained, but its result (`--metrics_json`) could not be written; `summary` holds
    the result."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary


def cut(text: str, limit: int = MAX_SHOWN) -> str:
    """`text` cut to `limit` characters, " ..." marking the cut: how every message quotes a
    value or a line of someone else's."""
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def shown(value, limit: int = MAX_SHOWN) -> str:
    """`repr(value)` cut to `limit` characters (a 20-digit integer or a long list stays one
    readable line); strings quoted as in Python."""
    return cut(repr(value), limit)


_NO_VALUE = object()


def problem(subject: str, what: str, fix: str, value=_NO_VALUE) -> str:
    """One message, the builder of tfdist's: `<subject>=<value> <what>; <fix>.` (the value cut
    by `shown`), or without a value `<subject>: <what>; <fix>.`. `fix` says what to do
    instead, e.g. "pass e.g. epochs=3"."""
    said = f"{subject}: {what}" if value is _NO_VALUE else f"{subject}={shown(value)} {what}"
    return f"{said}; {fix.rstrip('.')}."


_PROGRAM: list[str] = []


def program() -> str:
    """The name errors are printed under: the tfdist command running (`tfdist train`), else
    the program's file name (`my_train.py`), as absl and argparse name it."""
    return (
        _PROGRAM[-1] if _PROGRAM else os.path.basename(sys.argv[0] if sys.argv else "") or "python"
    )


@contextlib.contextmanager
def running_as(name: str) -> Iterator[None]:
    """`program()` is `name` inside the block (the CLI runs each command in one)."""
    _PROGRAM.append(name)
    try:
        yield
    finally:
        _PROGRAM.pop()


def line(message: object) -> str:
    """`message` as the one line the user sees: `<program>: error: <message>`."""
    return f"{program()}: error: {message}"
