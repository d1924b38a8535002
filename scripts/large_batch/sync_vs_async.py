"""Synchronous all-reduce against asynchronous parameter-server updates, same model, data,
global batch and examples seen.

  sync   `tfdist launch --num_workers=2 -- train --strategy=multi_worker_mirrored`: every update
         averages both workers' gradients (half the global batch each) at the same weights
  async  `tfdist launch --num_workers=2 --num_ps=1 --chief -- train
         --strategy=parameter_server`: each update is one worker's gradient over a whole global
         batch, applied on the ps as it arrives, possibly computed on weights another update
         has since changed (staleness)

Both train the small CNN on the built-in dataset with the same seed, optimizer and epochs; each
run `--repeats` times. Validation accuracy per epoch against examples seen and against the
training seconds (validation excluded) go into one plot and one table:
OUT_DIR/sync_vs_async.{json,md,png} (the plot needs matplotlib: `pip install -e .[plot]`).

    python scripts/large_batch/sync_vs_async.py [--epochs=5] [--global_batch_size=128] [--repeats=2]
"""

import argparse
import itertools
import os
import statistics
import sys
import time

from tfdist.runtime.output_files import write_json

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # train_runs
from train_runs import train_and_read_metrics  # noqa: E402

_TIMEOUT_S = 1800
_MODES = {
    "sync (multi_worker_mirrored)": (["--num_workers=2"], ["--strategy=multi_worker_mirrored"]),
    "async (parameter_server)": (
        ["--num_workers=2", "--num_ps=1", "--chief"],
        ["--strategy=parameter_server"],
    ),
}


def _run(mode: str, args: argparse.Namespace, seed: int) -> dict:
    launch, strategy = _MODES[mode]
    metrics, wall_s = train_and_read_metrics(
        [
            *strategy,
            f"--epochs={args.epochs}",
            f"--global_batch_size={args.global_batch_size}",
            f"--seed={seed}",
        ],
        timeout_s=_TIMEOUT_S,
        launch_flags=launch,
    )
    examples = metrics["global_batch_size"] * metrics["steps_per_epoch"]
    return {
        "seed": seed,
        "val_accuracy": metrics["history"]["val_accuracy"],
        "examples": [examples * (epoch + 1) for epoch in range(args.epochs)],
        "train_s": list(itertools.accumulate(metrics["epoch_train_s"])),
        "examples_per_sec": metrics["examples_per_sec"],
        "wall_s": wall_s,
    }


def _markdown(results: dict[str, list[dict]], command: str) -> str:
    lines = [
        f"Command: `{command}`",
        "",
        "| mode | runs | final val_accuracy (per run) | epochs to 0.95 | training s | "
        "examples/s | launch wall s |",
        "| --- | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for mode, runs in results.items():
        reached = [
            next(
                (epoch + 1 for epoch, value in enumerate(run["val_accuracy"]) if value >= 0.95), "-"
            )
            for run in runs
        ]
        finals = ", ".join(f"{run['val_accuracy'][-1]:.4f}" for run in runs)
        lines.append(
            f"| {mode} | {len(runs)} | {finals} | "
            f"{', '.join(map(str, reached))} | "
            f"{statistics.median(run['train_s'][-1] for run in runs):.0f} | "
            f"{statistics.median(run['examples_per_sec'] for run in runs):.0f} | "
            f"{statistics.median(run['wall_s'] for run in runs):.0f} |"
        )
    return "\n".join(lines) + "\n"


def _plot(results: dict[str, list[dict]], path: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel

    figure, (by_examples, by_time) = pyplot.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for colour, (mode, runs) in enumerate(results.items()):
        for index, run in enumerate(runs):
            label = mode if index == 0 else None
            by_examples.plot(
                run["examples"],
                run["val_accuracy"],
                "o-",
                color=f"C{colour}",
                label=label,
                alpha=0.8,
            )
            by_time.plot(
                run["train_s"],
                run["val_accuracy"],
                "o-",
                color=f"C{colour}",
                label=label,
                alpha=0.8,
            )
    by_examples.set(
        xlabel="training examples seen",
        ylabel="validation accuracy",
        title="accuracy against examples",
    )
    by_time.set(xlabel="training seconds (validation excluded)", title="accuracy against wall time")
    for axes in (by_examples, by_time):
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle("Sync (all-reduce) vs async (parameter server), 2 workers, small CNN")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--global_batch_size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out_dir", default="docs/results")
    args = parser.parse_args()
    started = time.perf_counter()
    results: dict[str, list[dict]] = {mode: [] for mode in _MODES}
    for seed, mode in itertools.product(range(args.repeats), _MODES):  # Alternating modes.
        run = _run(mode, args, seed)
        results[mode].append(run)
        print(
            f"{mode} seed {seed}: val_accuracy {run['val_accuracy'][-1]:.4f}, "
            f"{run['train_s'][-1]:.0f} s of training, {run['wall_s']:.0f} s in all",
            flush=True,
        )
    command = ("python scripts/large_batch/sync_vs_async.py " + " ".join(sys.argv[1:])).strip()
    os.makedirs(args.out_dir, exist_ok=True)
    write_json(
        "json",
        os.path.join(args.out_dir, "sync_vs_async.json"),
        {"command": command, "wall_s": time.perf_counter() - started, "runs": results},
    )
    with open(os.path.join(args.out_dir, "sync_vs_async.md"), "w", encoding="utf-8") as out:
        out.write(_markdown(results, command))
    _plot(results, os.path.join(args.out_dir, "sync_vs_async.png"))
    print(_markdown(results, command))


if __name__ == "__main__":
    main()
