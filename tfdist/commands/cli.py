"""`tfdist <command> [--flag=value ...]`: the command-line entry point.

Each command is a module of this package with its flags and a `main`; this one parses argv for
the command before TensorFlow is imported, so help and flag errors answer at once. Every user
error ends as one line on stderr and exit status 2, without a traceback.
"""

import sys

from absl import flags

from tfdist import errors
from tfdist.commands import app
from tfdist.commands import data
from tfdist.commands import doctor
from tfdist.commands import flags as flags_lib
from tfdist.commands import launch
from tfdist.commands.manifest import command as manifest
from tfdist.commands import ray_job
from tfdist.commands import rehearse
from tfdist.commands import train
from tfdist.commands.benchmark import command as benchmark
from tfdist.commands.cost_plan import command as cost_plan

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
  ray      run it on Ray Train instead, each Ray Train worker one task, on a
           local Ray or a Ray cluster (--address): tfdist ray --num_workers=2 -- train ...
  manifest write a Kubernetes JobSet (the default), a Slurm sbatch script (--format=slurm) or
           a legacy Kubeflow TFJob for a train command or your program:
           tfdist manifest --image=IMG --num_workers=4 -- train ... > job.yaml
  rehearse run that manifest here as the cluster would, one emulated host per pod or node
           (root): tfdist rehearse job.yaml

`tfdist <command> --help` lists a command's flags; --helpfull lists every flag."""

EXIT_USAGE = errors.EXIT_USAGE
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C.


def _launch(command: list[str]) -> int:
    return launch.main(command, tfdist_commands=COMMANDS)


def _ray(command: list[str]) -> int:
    return ray_job.main(command, tfdist_commands=COMMANDS)


# Each command's main; launch and manifest take the command after `--`, rehearse its file.
COMMANDS = {
    "train": train.main,
    "benchmark": benchmark.main,
    "plan": cost_plan.main,
    "doctor": doctor.main,
    "data check": data.check_main,
    "data serve": data.serve_main,
    "launch": _launch,
    "ray": _ray,
    "manifest": manifest.main,
    "rehearse": rehearse.main,
}
TAKES_A_COMMAND = ("launch", "manifest", "ray")
_TAKES_ARGUMENTS = ("rehearse",)
_USAGE_TAIL = {
    "launch": " -- COMMAND",
    "manifest": " -- COMMAND",
    "ray": " -- COMMAND",
    "rehearse": " FILE",
}
GROUPS = {"data": ("check", "serve")}


def _fail(command: str, message: object) -> int:
    """A usage error of `tfdist <command>` (the command's name itself may be what is wrong)."""
    with errors.running_as(f"tfdist {flags_lib.printable(command)}"):
        return app.report(errors.UsageError(message))


def _command_and_args(args: list[str]) -> tuple[str, list[str]]:
    """Splits `args` into the command (one word, or a group and its sub-command) and its flags."""
    if args[0] in GROUPS and len(args) > 1 and not args[1].startswith("-"):
        return f"{args[0]} {args[1]}", args[2:]
    return args[0], args[1:]


def _help(command: str, args: list[str]) -> bool:
    """Prints help when `args` ask for it; returns whether they did."""
    if "--helpfull" in args:
        print(flags_lib.FLAGS.get_help())
        return True
    if not {"-h", "--help", "--helpshort", "-?"} & set(args):
        return False
    print(
        f"usage: tfdist {command} [--flag=value ...]{_USAGE_TAIL.get(command, '')}\n\n"
        f"flags:\n{flags_lib.help_text(command)}"
    )
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
        return _fail(
            command,
            f"needs a sub-command: "
            f"{' or '.join(f'{command} {sub}' for sub in GROUPS[command])} "
            "(see `tfdist --help`).",
        )
    if command not in COMMANDS:
        return _fail(
            command,
            f"unknown command {command!r}; use one of {', '.join(COMMANDS)} (see `tfdist --help`).",
        )
    child_command = []
    if command in TAKES_A_COMMAND and "--" in flag_args:
        split = flag_args.index("--")
        flag_args, child_command = flag_args[:split], flag_args[split + 1 :]
    if _help(command, flag_args):
        return 0
    try:
        arguments = flags_lib.parse(
            command,
            [argv[0]] + flag_args,
            arguments=command in _TAKES_ARGUMENTS,
            takes_a_command=command in TAKES_A_COMMAND,
        )
    except flags.Error as error:
        return _fail(command, f"{error}; see `tfdist {command} --help`.")
    except errors.UsageError as error:
        return _fail(command, error)
    with errors.running_as(f"tfdist {command}"):
        try:
            if command in TAKES_A_COMMAND:
                return COMMANDS[command](child_command)
            return (
                COMMANDS[command](arguments) if command in _TAKES_ARGUMENTS else COMMANDS[command]()
            )
        except app.USER_ERRORS as error:  # Bad input (2) or a failed run (1): one line.
            return app.report(error)
        except KeyboardInterrupt:  # Ctrl-C: the user knows why; one line, not a traceback.
            print(f"tfdist {command}: interrupted.", file=sys.stderr)
            return EXIT_INTERRUPTED


def run() -> None:
    """Console-script entry point."""
    sys.exit(main(sys.argv))
