"""`tfdist <command> [--flag=value ...]`: the command-line entry point.

Flags are parsed before TensorFlow is imported, so help and flag errors answer at once. Every
user error ends as one line on stderr and exit status 2, without a traceback.
"""

import sys

from absl import flags

from tfdist.commands import app
from tfdist.commands import flags as tfdist_flags
from tfdist.runtime import paths
from tfdist.runtime import plugins
from tfdist.runtime.config import ConfigError
from tfdist.runtime.tf_import import import_tensorflow

USAGE = """usage: tfdist <command> [--flag=value ...] [--flagfile=FILE]

commands:
  train    train a model under a tf.distribute strategy; with no flags, a small CNN on the
           built-in shapes dataset (generated locally on first use)
  benchmark
           measure examples/s, scaling efficiency over --replicas, the input-bound ratio
           (real vs synthetic data) and tfdist's overhead against plain Keras
  plan     predict step time, examples/s and scaling efficiency on clusters of GPU nodes
           (links, all-reduce, overlap, input) from what a benchmark on one box measured
  doctor   check TF_CONFIG and this machine before a cluster job starts: role, devices, the
           Keras it trains with (--keras) and the strategy `auto` would pick
  data check
           read one epoch as N simulated workers would and report the sharding plan, examples
           per worker, duplicates and missing examples (exit 1 unless each is read once)
  data serve
           run a tf.data service dispatcher and workers for --tf_data_service
  launch   start a local cluster, one process per task with its own TF_CONFIG:
           tfdist launch --num_workers=2 -- train --strategy=multi_worker_mirrored
  manifest write a Kubeflow TFJob (--format=tfjob) or Slurm sbatch script (--format=slurm)
           for a train command: tfdist manifest --image=IMG --num_workers=4 -- train ...

`tfdist <command> --help` lists a command's flags; --helpfull lists every flag."""

tfdist_flags.define_cli_flags()  # The commands' own flags, beside the train flags.
EXIT_USAGE = app.EXIT_USAGE
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C.
USER_ERRORS = (*app.USER_ERRORS, tfdist_flags.UsageError)


def _fail(command: str, message: object) -> int:
    print(f"tfdist {command}: error: {tfdist_flags.as_flags(str(message))}", file=sys.stderr)
    return EXIT_USAGE


def _train() -> int:
    config = tfdist_flags.run_config(app.cluster_from_flags())
    paths.check(config)  # Before TensorFlow's seconds of start-up; `setup` checks again.
    plugins.check_findable(dataset=config.input.dataset, model=config.train.model)
    import_tensorflow(config.show_tf_logs, config.train.keras)
    # pylint: disable-next=import-outside-toplevel
    from tfdist.training import summary
    from tfdist.training import from_config as train_command
    from tfdist.training import fit as training
    try:
        result = train_command.train(config)
    except training.ResultNotSaved as error:
        print(summary.format_line(error.summary), flush=True)
        raise
    if result["role"] == "train":
        print(summary.format_line(result))
    return 0


def _doctor() -> int:
    # pylint: disable=import-outside-toplevel
    from tfdist.commands import doctor
    return doctor.main(tfdist_flags.tf_config(), tfdist_flags.strategy_config(),
                       show_tf_logs=tfdist_flags.show_tf_logs(),
                       probe_timeout_s=tfdist_flags.probe_timeout_s(),
                       keras=tfdist_flags.keras())


def _data_check() -> int:
    config = tfdist_flags.input_config("data check")
    num_workers, replicas_per_worker, json_path = tfdist_flags.data_check_options()
    paths.check_input_dir("data_dir", config.data_dir)
    plugins.check_findable(dataset=config.dataset)
    paths.check_output_file("json", json_path)
    import_tensorflow(tfdist_flags.show_tf_logs())
    from tfdist.commands import data_check  # pylint: disable=import-outside-toplevel
    return data_check.main(config, num_workers, replicas_per_worker, json_path)


def _data_serve() -> int:
    import_tensorflow(tfdist_flags.show_tf_logs())
    from tfdist.commands import data_serve as data_service_command  # pylint: disable=import-outside-toplevel
    return data_service_command.main(*tfdist_flags.data_serve_options())


def _benchmark() -> int:
    options = tfdist_flags.benchmark_options()
    train_args = tfdist_flags.benchmark_train_args()
    config = tfdist_flags.run_config(None)
    paths.check(config)  # The train flags, before minutes of sweeping.
    plugins.check_findable(dataset=config.input.dataset, model=config.train.model)
    paths.check_output_file("json", options["json_path"])
    paths.check_output_file("plot", options["plot_path"])
    import_tensorflow(tfdist_flags.show_tf_logs())
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tfdist.commands.benchmark import sweep as benchmark  # pylint: disable=import-outside-toplevel
    num_gpus = len(tf.config.list_physical_devices("GPU"))
    if num_gpus and max(options["replicas"]) > num_gpus:
        raise ConfigError(f"replicas={max(options['replicas'])} needs that many GPUs, but "
                          f"{num_gpus} are visible; lower --replicas.")
    return benchmark.main(train_args, num_gpus=num_gpus, **options)


def _plan() -> int:
    options = tfdist_flags.plan_options()
    plugins.check_findable(dataset="", model=options["model"])
    paths.check_output_file("json", options["json"])
    paths.check_output_file("plot", options["plot"])
    from tfdist.commands import cost_plan as plan_command  # pylint: disable=import-outside-toplevel
    return plan_command.main(options)


def _launch(command: list[str]) -> int:
    from tfdist.cluster import launcher as launch  # pylint: disable=import-outside-toplevel
    config = tfdist_flags.launch_config(command)
    if command[:1] == ["train"]:
        tfdist_flags.check_train_args(command[1:])  # Before any task starts.
    return launch.main(config, tfdist_commands=COMMANDS)


def _manifest(command: list[str]) -> int:
    from tfdist.cluster import manifest  # pylint: disable=import-outside-toplevel
    options = tfdist_flags.manifest_options()
    train_args = manifest.train_args_of(command)
    tfdist_flags.check_train_args(train_args)
    print(manifest.from_options(train_args, **options), end="")
    return 0


COMMANDS = {"train": _train, "benchmark": _benchmark, "plan": _plan, "doctor": _doctor,
            "data check": _data_check,
            "data serve": _data_serve, "launch": _launch, "manifest": _manifest}
_TAKES_A_COMMAND = ("launch", "manifest")
GROUPS = {"data": ("check", "serve")}


def _command_and_args(args: list[str]) -> tuple[str, list[str]]:
    """Splits `args` into the command (one word, or a group and its sub-command) and its flags."""
    if args[0] in GROUPS and len(args) > 1 and not args[1].startswith("-"):
        return f"{args[0]} {args[1]}", args[2:]
    return args[0], args[1:]


def _help(command: str, args: list[str]) -> bool:
    """Prints help when `args` ask for it; returns whether they did."""
    if "--helpfull" in args:
        print(tfdist_flags.FLAGS.get_help())
        return True
    if not {"-h", "--help", "--helpshort", "-?"} & set(args):
        return False
    print(f"usage: tfdist {command} [--flag=value ...]\n\n"
          f"flags:\n{tfdist_flags.help_text(command)}")
    return True


def main(argv: list[str]) -> int:
    """Runs `tfdist` with `argv` (program name first); returns the exit status."""
    args = argv[1:]
    if not args:
        print(USAGE, file=sys.stderr)
        return EXIT_USAGE
    if args[0] in ("-h", "--help", "--helpfull", "help"):
        print(USAGE)
        return 0
    command, flag_args = _command_and_args(args)
    if command in GROUPS:
        return _fail(command, f"needs a sub-command: "
                              f"{' or '.join(f'{command} {sub}' for sub in GROUPS[command])} "
                              "(see `tfdist --help`).")
    if command not in COMMANDS:
        return _fail(command, f"unknown command {command!r}; use one of "
                              f"{', '.join(COMMANDS)} (see `tfdist --help`).")
    child_command = []
    if command in _TAKES_A_COMMAND and "--" in flag_args:
        split = flag_args.index("--")
        flag_args, child_command = flag_args[:split], flag_args[split + 1:]
    if _help(command, flag_args):
        return 0
    try:
        tfdist_flags.parse(command, [argv[0]] + flag_args)
    except flags.Error as error:
        return _fail(command, f"{error}; see `tfdist {command} --help`.")
    except tfdist_flags.UsageError as error:
        return _fail(command, error)
    try:
        return COMMANDS[command](child_command) if command in _TAKES_A_COMMAND \
            else COMMANDS[command]()
    except USER_ERRORS as error:
        return _fail(command, error)
    except KeyboardInterrupt:  # Ctrl-C: the user knows why; one line, not a traceback.
        print(f"tfdist {command}: interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED


def run() -> None:
    """Console-script entry point."""
    sys.exit(main(sys.argv))
