"""tfdist's errors: one root, one program name, and how a message quotes a value. Imports only
the strategies library's `shown` and `cut`, nothing heavy. The libraries, which import nothing
of tfdist, raise their own ValueErrors (StrategyConfigError, ClusterConfigError,
InputConfigError): `USER_ERRORS` catches them with the root, as usage errors. The root is
exported as `tfdist.TfdistError`.

    TfdistError                      every error tfdist words in one line; `exit_status`
      UsageError (ValueError)        the input is wrong: a flag, a config field, a file; exit 2
        ConfigError                  a run's option (the core's configs, a model, data)
      RunFailure (RuntimeError)      the input was fine, the run failed; exit 1
        Diverged                     the loss or weights became NaN or infinite
        DiskFull                     a save found no space (the last complete state is kept)
        LostPeer                     a peer stopped answering mid-run
        ResultNotSaved               the run trained, but its result file could not be written
      Preempted                      a preemption notice ended the run, its state saved; exit 75

A message is one line: the field and its value (quoted by `shown`, or `cut` when it is text),
the problem, the fix. The strategies library's field checks (`check_int`, `check_bounds`,
`coerce_enums`, `check_seconds`), which the core's configs use too, build theirs with its
`problem` (strategies/messages.py); the core's other messages are worded by hand in the same
form. Lower rooms raise; the command layer (`tfdist <command>`, `tfdist.run`) prints, as
`<program>: error: <message>` with `program()`'s name.
"""

import contextlib
import os
import sys
from typing import Iterator

# How a message quotes a value, bounded (`shown`: its repr; `cut`: a text, e.g. a line of a
# child's output), written in the strategies library, which imports nothing of tfdist; tfdist's
# rooms reach them here, as `errors.shown` and `errors.cut`.
from tfdist.strategies.messages import cut  # noqa: F401
from tfdist.strategies.messages import shown  # noqa: F401

EXIT_USAGE = 2
EXIT_RUN_FAILURE = 1
# EX_TEMPFAIL (sysexits.h): a temporary failure, run me again. `tfdist launch`, the JobSet
# manifests and the Slurm scripts restart a task that ends with it without counting a failure.
EXIT_PREEMPTED = 75


class TfdistError(Exception):
    """An error tfdist explains in one line; the root that the CLI and users' programs catch."""

    exit_status = EXIT_RUN_FAILURE
    heading = "error: "  # Between the program's name and the message.


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


class Preempted(TfdistError):
    """A preemption notice (SIGTERM, or `--preemption_signal`) ended the run at a step every task
    agreed on, with the training state saved there (`tfdist.training.preemption`); starting the
    same command again resumes at that step. Exit status 75 (`EXIT_PREEMPTED`); reported by
    `tfdist.run` or the CLI, the process leaves at once after its line (`commands.app`)."""

    exit_status = EXIT_PREEMPTED
    heading = ""  # Not an error: `tfdist train: preempted at epoch 2 step 37; ...`.


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


def line(message: object, heading: str = TfdistError.heading) -> str:
    """`message` as the one line the user sees: `<program>: error: <message>` (`heading`: what
    stands for `error: `, e.g. nothing for a preemption)."""
    return f"{program()}: {heading}{message}"
