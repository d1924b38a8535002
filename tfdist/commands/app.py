"""A user's absl program with tfdist's flags: define them, build the run's config from them, and
run `main` so that bad input ends as one line and exit status 2, as in `tfdist train`.

Pure Python until the config is built: TensorFlow is imported after the flags are parsed.
"""

import os
import sys
from typing import Callable

from absl import app as absl_app

from tfdist import strategies
from tfdist.input_pipelines import InputConfigError
from tfdist.strategies import ClusterConfigError
from tfdist.strategies import StrategyConfigError
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import RunConfig
from tfdist.runtime import tf_import

EXIT_USAGE = 2
# Every error that means "the input is wrong", each worded in one line that names the field.
USER_ERRORS = (ConfigError, StrategyConfigError, ClusterConfigError, InputConfigError)


def import_tensorflow(keras: int | None = None) -> None:
    """Imports TensorFlow, hiding its start-up logs unless `--tf_logs` was given, with
    `tf.keras` the flavour `keras` when given."""
    from tfdist.commands import flags  # pylint: disable=import-outside-toplevel
    tf_import.import_tensorflow(flags.show_tf_logs(), keras)


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
    from tfdist.commands import flags  # pylint: disable=import-outside-toplevel
    flags.adopt_train_flags()


def cluster_from_flags() -> strategies.ClusterConfig | None:
    """The cluster from TF_CONFIG, or from the Slurm job step with --cluster_resolver=slurm."""
    from tfdist.commands import flags  # pylint: disable=import-outside-toplevel
    slurm = flags.slurm_layout()
    if slurm is None:
        return strategies.from_environment()
    import_tensorflow()  # The Slurm resolver is TensorFlow's.
    from tfdist.strategies import slurm as slurm_cluster  # pylint: disable=import-outside-toplevel
    return slurm_cluster.cluster_from_slurm(**slurm)


def config_from_flags() -> RunConfig:
    """The run's `RunConfig` from the parsed tfdist flags and this task's cluster (TF_CONFIG,
    or the Slurm job step with `--cluster_resolver=slurm`), checked.

    Example:
      >>> def main(argv):
      ...     plan = tfdist.setup(tfdist.config_from_flags(), train_examples=50_000)

    Raises:
      ConfigError (and the packages' config errors): a bad flag value or TF_CONFIG, one line.
    """
    from tfdist.commands import flags  # pylint: disable=import-outside-toplevel
    flags.require_parsed("config_from_flags")
    config = flags.run_config(cluster_from_flags())
    import_tensorflow(config.train.keras)
    return config


def run(main: Callable[[list[str]], int | None]) -> None:
    """`absl.app.run(main)`, except that tfdist's input errors end as one line on stderr and
    exit status 2 instead of a traceback.

    Example:
      >>> if __name__ == "__main__":
      ...     tfdist.run(main)
    """
    from tfdist.commands import flags  # pylint: disable=import-outside-toplevel
    program = os.path.basename(sys.argv[0])

    def main_with_one_line_errors(argv: list[str]) -> int | None:
        try:
            return main(argv)
        except USER_ERRORS as error:
            print(f"{program}: error: {flags.as_flags(str(error))}", file=sys.stderr, flush=True)
            return EXIT_USAGE

    absl_app.run(main_with_one_line_errors)
