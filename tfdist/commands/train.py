"""`tfdist train`: the model and data its flags name, trained through the public API
(`tfdist.train` of the flags' config), and the summary line on stdout."""

from tfdist.commands import train_flags
from tfdist.runtime import notice
from tfdist.runtime import paths
from tfdist.runtime import plugins
from tfdist.runtime import tf_import


def main() -> int:
    """Checks the flags' paths and plug-ins before TensorFlow starts and trains this task's part
    of the run (`fit` prints the summary line); returns 0.

    Raises:
      tfdist.errors.UsageError (ConfigError, the packages' config errors): bad input, one line.
      tfdist.errors.RunFailure: the run failed (Diverged, DiskFull, LostPeer), one line;
        ResultNotSaved after the summary line when --metrics_json cannot be written.
    """
    config = train_flags.run_config(train_flags.cluster())
    notice.install(config.train.preemption_signal)  # Before TensorFlow's seconds of start-up.
    paths.check(config)  # Before TensorFlow's seconds of start-up; `setup` checks again.
    plugins.check_findable(dataset=config.input.dataset, model=config.train.model)
    tf_import.import_tensorflow(config.show_tf_logs, config.train.keras)
    # pylint: disable-next=import-outside-toplevel
    from tfdist.training import from_config

    from_config.train(config)  # Its training tasks print the summary line.
    return 0
