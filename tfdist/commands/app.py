"""A user's absl program with tfdist's flags: define them, build the run's config from them, and
run `main` so that bad input ends as one line and exit status 2, as in `tfdist train`.

Pure Python until the config is built: TensorFlow is imported after the flags are parsed.
"""

import sys
from typing import Callable
from typing import Sequence

from absl import app as absl_app
from absl import flags

from tfdist import errors
from tfdist.input_pipelines import InputConfigError
from tfdist.runtime import notice
from tfdist.runtime import tf_import
from tfdist.runtime.config import NoticeSignal
from tfdist.runtime.config import RunConfig
from tfdist.strategies import ClusterConfigError
from tfdist.strategies import StrategyConfigError

EXIT_USAGE = errors.EXIT_USAGE
# Every error tfdist words in one line, as users' programs catch them: the core's root
# (`tfdist.errors`: usage errors, exit 2, and run-time failures, exit 1) and the libraries' own
# usage errors (ValueErrors: the libraries import nothing of tfdist).
USER_ERRORS = (errors.TfdistError, StrategyConfigError, ClusterConfigError, InputConfigError)

# `define_flags` makes the train flags key flags of the module that calls it, not of this one.
flags.disclaim_key_flags()


def import_tensorflow(keras: int | None = None) -> None:
    """Imports TensorFlow, hiding its start-up logs unless `--tf_logs` was given, with
    `tf.keras` the flavour `keras` when given."""
    from tfdist.commands import train_flags  # pylint: disable=import-outside-toplevel

    tf_import.import_tensorflow(train_flags.show_tf_logs(), keras)


def define_flags() -> None:
    """Defines tfdist's training flags (strategy, precision, input, optimizer, cluster,
    output) as absl flags and lists them in this program's `--help`, beside its own flags.

    Call at import time of your main module, before `app.run` (or `tfdist.run`) parses argv.

    Example:
      >>> from absl import flags
      >>> import tfdist
      >>> tfdist.define_flags()
      >>> _HIDDEN = flags.DEFINE_integer("hidden_units", 64, "My model's width.")
    """
    from tfdist.commands import train_flags  # pylint: disable=import-outside-toplevel

    flags.adopt_module_key_flags(train_flags)


def config_from_flags(argv: Sequence[str] | None = None) -> RunConfig:
    """The run's `RunConfig` from the parsed tfdist flags and this task's cluster (TF_CONFIG,
    a JobSet pod's, or the Slurm job step `srun` started it in: `--cluster_resolver`), checked.

    Args:
      argv: parse these first (the program's name, then flags), where nothing parsed argv: a
        function Ray or another engine calls in its own process, e.g.
        `config_from_flags(["train", "--strategy=multi_worker_mirrored"])`.

    Example:
      >>> def main(argv):
      ...     plan = tfdist.setup(tfdist.config_from_flags(), train_examples=50_000)

    Raises:
      tfdist.errors.UsageError (ConfigError, the packages' config errors): a bad flag value or
        TF_CONFIG, one line.
    """
    # pylint: disable=import-outside-toplevel
    from tfdist.commands import flags as flags_lib
    from tfdist.commands import train_flags

    if argv is not None:
        _parse(list(argv))
    flags_lib.require_parsed("config_from_flags")
    config = train_flags.run_config(train_flags.cluster())
    import_tensorflow(config.train.keras)
    return config


def _parse(argv: list[str]) -> list[str]:
    """absl's parse of `argv`, with a bad flag one UsageError (absl prints two lines)."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        raise errors.UsageError(f"{error}; see `{errors.program()} --help`.") from None


def report(error: Exception) -> int:
    """Prints `error` as the one line the user sees (`<program>: error: ...`, its fields named
    as the flags that set them); returns its exit status. The one printer of tfdist's errors."""
    from tfdist.commands import flags as flags_lib  # pylint: disable=import-outside-toplevel

    heading = getattr(error, "heading", errors.TfdistError.heading)
    print(errors.line(flags_lib.as_flags(str(error)), heading), file=sys.stderr, flush=True)
    status = getattr(error, "exit_status", errors.EXIT_USAGE)
    if isinstance(error, errors.Preempted):
        notice.leave_now(status)
    return status


def _preemption_signal() -> NoticeSignal:
    """`--preemption_signal` when the program defines tfdist's flags, else SIGTERM alone."""
    holder = flags.FLAGS["preemption_signal"] if "preemption_signal" in flags.FLAGS else None
    return NoticeSignal(holder.value) if holder is not None else NoticeSignal.SIGTERM


def run(main: Callable[[list[str]], int | None]) -> None:
    """`absl.app.run(main)`, except that tfdist's errors end as one line on stderr instead of a
    traceback: bad input with exit status 2, a run-time failure (divergence, a full disk, a
    lost peer) with status 1.

    Example:
      >>> if __name__ == "__main__":
      ...     tfdist.run(main)
    """
    from tfdist.commands import flags as flags_lib  # pylint: disable=import-outside-toplevel

    def main_with_one_line_errors(argv: list[str]) -> int | None:
        notice.install(_preemption_signal())  # `setup` installs the run's own.
        try:
            return main(argv)
        except USER_ERRORS as error:
            return report(error)

    def one_line_usage_errors(argv: list[str]) -> list[str]:
        """absl's parse, with a bad flag one line and status 2 (absl prints two, status 1)."""
        try:
            return _parse(argv)
        except errors.UsageError as error:
            sys.exit(report(error))

    try:  # Before absl reads them: it would hang on a FIFO, or trace back on a binary file.
        flags_lib.check_flagfiles(sys.argv)
    except errors.UsageError as error:
        sys.exit(report(error))
    absl_app.run(main_with_one_line_errors, flags_parser=one_line_usage_errors)
