"""`tfdist benchmark`: examples/s per replica count on synthetic and real data, scaling
efficiency, the input-bound ratio, tfdist's overhead against a plain Keras script, and the tax
of a 1-worker multi_worker_mirrored run against mirrored on the same device.

Each configuration (replica count x synthetic or real data) runs in a process of its own
(`child`), since the number of logical CPU devices is fixed when TensorFlow starts. The processes
live for the whole sweep, and each of --rounds rounds times every configuration once, one after
the other (`rounds`); `figures` turns the rounds into the table (its docstring defines each
figure), `--json` and `--plot`. With --overhead and synthetic data, two more processes join the
rounds: mirrored and a 1-worker multi_worker_mirrored run on one device (`overhead_vs_mirrored`).
"""

import dataclasses
import sys

from absl import flags

from tfdist import strategies
from tfdist.commands import cli_flags
from tfdist.commands import flags as flags_lib
from tfdist.commands.benchmark import plotting
from tfdist.commands import train_flags
from tfdist.commands.benchmark import figures
from tfdist.commands.benchmark import rounds as benchmark_rounds
from tfdist.input_pipelines.choices import PYTHON_PREFIX
from tfdist.runtime import output_files
from tfdist.runtime import paths
from tfdist.runtime import plugins
from tfdist.runtime import tf_import
from tfdist.runtime.config import ConfigError
from tfdist.fields import MAX_COUNT
from tfdist.strategies import StrategyConfig
from tfdist.strategies import StrategyKind
from tfdist.strategies.config import MAX_REPLICA_DEVICES

_REPLICAS = flags.DEFINE_list(
    "replicas",
    ["1", "2"],
    "benchmark: replica counts to sweep (GPUs when present, else logical CPUs).",
)
_DATA = flags.DEFINE_list(
    "data",
    ["synthetic", "real"],
    "benchmark: synthetic (one batch, no input cost) and/or real (--dataset).",
)
_WARMUP_STEPS = flags_lib.define_integer(
    "warmup_steps",
    5,
    "benchmark: untimed steps first (tracing, warm-up).",
    lower_bound=1,
    upper_bound=MAX_COUNT,
)
_TIMED_STEPS = flags_lib.define_integer(
    "timed_steps", 20, "benchmark: timed steps per round.", lower_bound=1, upper_bound=MAX_COUNT
)
_ROUNDS = flags_lib.define_integer(
    "rounds",
    7,
    "benchmark: timed rounds per configuration; figures are medians "
    "over rounds, with their spread.",
    lower_bound=1,
    upper_bound=MAX_COUNT,
)
_OVERHEAD = flags.DEFINE_boolean(
    "overhead",
    True,
    "benchmark: on synthetic data, each round also times a plain "
    "Keras script in the strategy's scope and with no strategy "
    "(overhead_ratio, overhead_vs_no_strategy), and a 1-worker "
    "multi_worker_mirrored run against mirrored on one device, "
    "each in a process of its own (overhead_vs_mirrored).",
)
flags_lib.register(
    "benchmark",
    train_flags.STRATEGY,
    train_flags.INPUT,
    train_flags.TRAIN,
    train_flags.OPTIMIZER,
    flags_lib.group(
        _REPLICAS,
        _DATA,
        _WARMUP_STEPS,
        _TIMED_STEPS,
        _ROUNDS,
        _OVERHEAD,
        cli_flags.JSON,
        cli_flags.PLOT,
        train_flags.TF_LOGS,
    ),
)


@flags.multi_flags_validator(
    [_DATA.name, train_flags.SOURCE["dataset"].name],
    message="--data=synthetic: a python: dataset brings its own model and data, which synthetic "
    "images do not fit; pass --data=real",
)
def _synthetic_needs_an_image_dataset(values: dict) -> bool:
    """A `python:` dataset sweeps real data only; asking for synthetic data is an error (by
    default such a sweep just leaves it out)."""
    return not (
        values["dataset"].startswith(PYTHON_PREFIX)
        and "synthetic" in values["data"]
        and _DATA.present
    )


@dataclasses.dataclass(frozen=True)
class Sweep:
    """What one `tfdist benchmark` measures: `train_args` (the train flags given) in every
    configuration of `replicas` x `data`."""

    train_args: list[str]
    replicas: list[int]
    data: list[str]
    warmup_steps: int
    timed_steps: int
    rounds: int
    overhead: bool
    json_path: str | None
    plot_path: str | None
    multi_worker_tax: bool = False


# The strategy tax pair, each on one device in a process of its own: the baseline first.
_TAX_PAIR = (StrategyKind.MIRRORED, StrategyKind.MULTI_WORKER_MIRRORED)


def sweep_from_flags() -> Sweep:
    """The parsed flags of `tfdist benchmark`, checked.

    Raises:
      UsageError: a replica count that is not an integer from 1 to MAX_REPLICA_DEVICES, an
        unknown data kind.
    """
    replicas = flags_lib.counts(_REPLICAS.value, MAX_REPLICA_DEVICES)
    if replicas is None:
        raise flags_lib.UsageError(
            f"replicas={','.join(_REPLICAS.value)!r} is not a list of "
            f"integers from 1 to {MAX_REPLICA_DEVICES}; write e.g. "
            "--replicas=1,2,4."
        )
    data = _DATA.value
    if not data or set(data) - set(figures.DATA_KINDS):
        raise flags_lib.UsageError(
            f"data={','.join(data)!r} is not understood; use synthetic, real or synthetic,real."
        )
    if train_flags.SOURCE["dataset"].value.startswith(PYTHON_PREFIX):
        data = ["real"]  # The default sweep, less what such a dataset cannot run.
    train = {
        name: holder
        for name, holder in flags_lib.COMMAND_FLAGS["benchmark"].items()
        if name in flags_lib.COMMAND_FLAGS["train"]
    }
    return Sweep(
        train_args=flags_lib.given(train),
        replicas=replicas,
        data=[kind for kind in figures.DATA_KINDS if kind in data],
        warmup_steps=_WARMUP_STEPS.value,
        timed_steps=_TIMED_STEPS.value,
        rounds=_ROUNDS.value,
        overhead=_OVERHEAD.value,
        json_path=cli_flags.JSON.value,
        plot_path=cli_flags.PLOT.value,
    )


def _child_args(train_args: list[str], replicas: int, data: str, num_gpus: int) -> list[str]:
    """`tfdist train` flags of one configuration: N replicas on GPUs or split CPUs, under the
    strategy `tfdist train` would pick (`auto`: one_device for 1, mirrored for more) unless
    `--strategy` names one."""
    args = list(train_args)
    args.append(f"--num_gpus={replicas}" if num_gpus else f"--num_cpu_devices={replicas}")
    if data == "synthetic":
        args.append("--dataset=synthetic")
    return args


def _tax_pair_fits(sweep: Sweep, strategy: StrategyConfig) -> bool:
    """Whether the sweep times the multi_worker_mirrored tax pair: with --overhead and synthetic
    data, unless a strategy option given fits only one of the two (said on standard error)."""
    if not (sweep.overhead and "synthetic" in sweep.data):
        return False
    single = dataclasses.replace(strategy, num_cpu_devices=1)  # As `_child_args` sets it.
    refused = [why for kind in _TAX_PAIR for why in single.ignored_by(kind)]
    if refused:
        print(
            f"tfdist benchmark: overhead_vs_mirrored is left out: {refused[0]}.",
            file=sys.stderr,
            flush=True,
        )
    return not refused


def _tax_pair_specs(sweep: Sweep, num_gpus: int) -> list[dict]:
    """The children of the tax pair: the sweep's train flags on one device, synthetic data,
    under mirrored and multi_worker_mirrored (no TF_CONFIG: one worker)."""
    return (
        [
            {
                "train_args": [
                    *_child_args(sweep.train_args, 1, "synthetic", num_gpus),
                    f"--strategy={kind.value}",
                ],
                "warmup_steps": sweep.warmup_steps,
                "timed_steps": sweep.timed_steps,
                "overhead": False,
            }
            for kind in _TAX_PAIR
        ]
        if sweep.multi_worker_tax
        else []
    )


def _check_whole_calls(sweep: Sweep, per_call: int) -> None:
    """Raises UsageError unless the warm-up and the timed steps are whole calls of `per_call`
    steps (--steps_per_execution): a step's time is its call's over `per_call`."""
    if sweep.warmup_steps % per_call or sweep.timed_steps % per_call:
        whole = [
            -(-steps // per_call) * per_call for steps in (sweep.warmup_steps, sweep.timed_steps)
        ]
        raise flags_lib.UsageError(
            f"steps_per_execution={per_call}: --warmup_steps={sweep.warmup_steps} and "
            f"--timed_steps={sweep.timed_steps} must be multiples of it (each call runs "
            f"{per_call} steps); pass e.g. --warmup_steps={whole[0]} --timed_steps={whole[1]}."
        )


def main() -> int:
    """Checks the flags, runs the sweep, prints a progress line per configuration and the table;
    returns 0."""
    sweep = sweep_from_flags()
    config = train_flags.run_config(None)
    paths.check(config)  # The train flags, before minutes of sweeping.
    _check_whole_calls(sweep, config.train.steps_per_execution)
    plugins.check_findable(dataset=config.input.dataset, model=config.train.model)
    paths.check_output_file("json", sweep.json_path)
    paths.check_output_file("plot", sweep.plot_path)
    tf_import.import_tensorflow(train_flags.TF_LOGS.value)
    num_gpus = len(strategies.visible_gpus())
    if num_gpus and max(sweep.replicas) > num_gpus:
        raise ConfigError(
            f"replicas={max(sweep.replicas)} needs that many GPUs, but "
            f"{num_gpus} are visible; lower --replicas."
        )
    sweep = dataclasses.replace(sweep, multi_worker_tax=_tax_pair_fits(sweep, config.strategy))
    return run(sweep, num_gpus=num_gpus)


def run(sweep: Sweep, *, num_gpus: int) -> int:
    """Runs `sweep` on `num_gpus` GPUs (none: logical CPUs), prints its table; returns 0."""
    if sweep.plot_path:
        plotting.pyplot(sweep.plot_path)  # Before a sweep of minutes, not after it.
    configurations = [(count, kind) for count in sweep.replicas for kind in sweep.data]
    measured_all = benchmark_rounds.run(
        [
            {
                "train_args": _child_args(sweep.train_args, count, kind, num_gpus),
                "warmup_steps": sweep.warmup_steps,
                "timed_steps": sweep.timed_steps,
                "overhead": sweep.overhead and kind == "synthetic",
            }
            for count, kind in configurations
        ]
        + _tax_pair_specs(sweep, num_gpus),
        benchmark_rounds.child_env(num_gpus),
        rounds=sweep.rounds,
    )
    tax = (
        figures.multi_worker_tax(*measured_all[len(configurations) :])
        if sweep.multi_worker_tax
        else None
    )
    results = []
    for number, ((count, kind), measured) in enumerate(zip(configurations, measured_all), 1):
        entry = {"replicas": count, "data": kind, **figures.figures(measured, kind)}
        results.append(entry)
        print(
            f"tfdist benchmark: [{number}/{len(configurations)}] replicas={count} data={kind}: "
            f"{entry['examples_per_sec']['median']:.1f} examples/s, step "
            f"{entry['step_time_s']['median'] * 1000:.1f} ms",
            file=sys.stderr,
            flush=True,
        )
    figures.add_ratios(results)
    print(figures.table(results))
    if tax:
        print(figures.tax_line(tax, "1 GPU" if num_gpus else "1 CPU device"))
    for line in figures.noisy_figures(results, tax):
        print(line)
    if sweep.json_path:
        output_files.write_json(
            "json",
            sweep.json_path,
            {
                "configurations": results,
                "train_args": sweep.train_args,
                "trainable_parameters": measured_all[0]["trainable_parameters"],
                "warmup_steps": sweep.warmup_steps,
                "timed_steps": sweep.timed_steps,
                "rounds": sweep.rounds,
                **({"multi_worker_mirrored": tax} if tax else {}),
            },
        )
    if sweep.plot_path:
        figures.plot(results, sweep.plot_path)
    return 0
