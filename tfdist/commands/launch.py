"""`tfdist launch`: a local cluster, one process per task with its own TF_CONFIG, supervised by
`tfdist.cluster.launcher`; the command after `--` is a tfdist command (`train ...`, whose flags
are checked before any task starts) or any program."""

from tfdist.cluster import supervisor
from tfdist.cluster import joining
from tfdist.cluster import launcher
from tfdist.cluster.network import Network
from tfdist.commands import cli_flags
from tfdist.commands import flags as flags_lib
from tfdist.commands import train_flags
from tfdist.runtime import keras_env
from tfdist.runtime import paths

_NETWORK = flags_lib.define_enum(
    "network",
    Network.AUTO,
    Network,
    "launch: the tasks' network (TensorFlow's servers listen on every interface, without "
    "authentication). isolated: one network namespace with loopback only, so nothing else "
    "connects and the tasks reach no network; host: this machine's network, the tasks' ports "
    "open on every interface; auto: isolated where the machine allows it and the command passes "
    "no URL (but file://) or --download, else host; sharing this machine's network is said in "
    "a one-line warning.",
)
_RESTART_BACKOFF_S = flags_lib.define_float(
    "restart_backoff_s",
    1.0,
    "launch: wait this many seconds before the first restart (--max_restarts), twice as long "
    f"before each next one, at most {supervisor.MAX_BACKOFF_S:g} s; 0 restarts at once.",
)
_JOIN_CHECK_S = flags_lib.define_float(
    "join_check_s",
    joining.JOIN_CHECK_S,
    "launch: a program's task (not a tfdist command's) that does not listen on its TF_CONFIG "
    "port this many seconds after it started is named in a one-line warning: the program did "
    "not join the cluster, so the tasks train as independent copies; 0 checks only when a task "
    "exits (a task that exits 0 without ever listening is always named).",
)
flags_lib.register(
    "launch",
    flags_lib.group(
        cli_flags.NUM_WORKERS,
        train_flags.NUM_PS,
        train_flags.CHIEF,
        cli_flags.EVALUATOR,
        cli_flags.LOG_DIR,
        cli_flags.MAX_RESTARTS,
        _RESTART_BACKOFF_S,
        cli_flags.GRACE_S,
        cli_flags.TIMEOUT_S,
        _NETWORK,
        train_flags.KERAS,
        _JOIN_CHECK_S,
    ),
)


def main(command: list[str], *, tfdist_commands) -> int:
    """Launches `command` (the words after `--`) as every task of the cluster the flags describe
    and supervises the job; returns its exit status.

    Raises:
      LaunchError, ConfigError and the train flags' errors: the launch cannot start.
    """
    keras = train_flags.keras()
    config = launcher.LaunchConfig(
        command=tuple(command),
        num_workers=cli_flags.NUM_WORKERS.value,
        num_ps=train_flags.NUM_PS.value,
        chief=train_flags.CHIEF.value,
        evaluator=cli_flags.EVALUATOR.value,
        log_dir=cli_flags.LOG_DIR.value,
        max_restarts=cli_flags.MAX_RESTARTS.value,
        restart_backoff_s=_RESTART_BACKOFF_S.value,
        grace_s=cli_flags.GRACE_S.value,
        timeout_s=cli_flags.TIMEOUT_S.value,
        network=_NETWORK.value,
        env=tuple(keras_env.environment(keras).items()),
        keras=keras,
        join_check_s=_JOIN_CHECK_S.value,
    )
    paths.check_output_dir("log_dir", config.log_dir)
    if command[:1] == ["train"]:
        train_flags.check_train_args(command[1:])  # Before any task starts.
    return launcher.main(config, tfdist_commands=tfdist_commands)
