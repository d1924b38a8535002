"""Large-batch experiment: which parts of the recipe recover the small-batch accuracy?

Trains the small CNN on the built-in dataset for the same number of epochs, each run a fresh
`tfdist train --strategy=mirrored --num_cpu_devices=2` process:

  small          global batch 64, momentum SGD at --learning_rate (the reference)
  large plain    a --factor times larger batch, same rate
  large linear   the larger batch, rate scaled linearly (Goyal et al. 2017)
  large warmup   scaled rate reached by --warmup_epochs of gradual warmup
  large LARS     LARS (You et al. 2017) with the scaled rate and the same warmup; LARS' rate is
                 multiplied by each layer's trust ratio (~eeta x ||w|| / ||g||), so it takes its
                 own base rates, one run each (--lars_learning_rates)

Every run uses the same seed and decays the rate by cosine after warmup. Writes a markdown
table (final and best validation accuracy, wall time) and a PNG plot of validation accuracy per
epoch; needs matplotlib (`pip install -e .[plot]`).

    python scripts/large_batch_experiment.py [--epochs=10] [--factor=16] [--out_dir=docs]
"""

import argparse
import json
import os
import sys
import time

from train_runs import train_and_read_metrics

_TIMEOUT_S = 3600


def _runs(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    small, large = args.small_batch, args.small_batch * args.factor
    common = [f"--base_batch_size={small}", "--lr_schedule=cosine"]
    sgd = ["--optimizer=momentum", f"--learning_rate={args.learning_rate}"]
    warmup = [f"--warmup_epochs={args.warmup_epochs}"]
    return [
        (f"small ({small})", [f"--global_batch_size={small}", *sgd, *common]),
        (f"large ({large}) plain", [f"--global_batch_size={large}", *sgd, *common]),
        (f"large ({large}) linear scaling", [f"--global_batch_size={large}", *sgd, *common,
                                              "--lr_scaling=linear"]),
        (f"large ({large}) scaling + warmup", [f"--global_batch_size={large}", *sgd, *common,
                                                "--lr_scaling=linear", *warmup]),
    ] + [
        (f"large ({large}) LARS (rate {rate:g}) + scaling + warmup",
         [f"--global_batch_size={large}", "--optimizer=lars", f"--learning_rate={rate}",
          *common, "--lr_scaling=linear", *warmup])
        for rate in args.lars_learning_rates
    ]


def _train(flags: list[str], epochs: int, seed: int) -> dict:
    """One `tfdist train` run; returns its metrics JSON (with per-epoch history)."""
    metrics, _ = train_and_read_metrics(["--strategy=mirrored", "--num_cpu_devices=2",
                                         f"--epochs={epochs}", f"--seed={seed}", *flags],
                                        timeout_s=_TIMEOUT_S)
    return metrics


def _table(results: dict[str, dict], command: str) -> str:
    lines = [f"Command: `{command}`", "",
             "| run | final val_accuracy | best val_accuracy | final val_loss | train s |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for name, summary in results.items():
        history = summary["history"]
        lines.append(f"| {name} | {history['val_accuracy'][-1]:.4f} | "
                     f"{max(history['val_accuracy']):.4f} | {history['val_loss'][-1]:.4f} | "
                     f"{summary['wall_s']:.0f} |")
    return "\n".join(lines) + "\n"


def _plot(results: dict[str, dict], path: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel
    figure, axes = pyplot.subplots(figsize=(8, 5))
    for name, summary in results.items():
        accuracy = summary["history"]["val_accuracy"]
        axes.plot(range(1, len(accuracy) + 1), accuracy, marker="o", label=name)
    axes.set_xlabel("epoch")
    axes.set_ylabel("validation accuracy")
    axes.set_title("Large-batch recipe on the built-in dataset (small CNN)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--small_batch", type=int, default=64)
    parser.add_argument("--factor", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=0.025)
    parser.add_argument("--lars_learning_rates", default="1.0,0.1,0.02",
                        type=lambda text: [float(rate) for rate in text.split(",")],
                        help="one LARS run per base rate")
    parser.add_argument("--warmup_epochs", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out_dir", default="docs")
    args = parser.parse_args()
    try:
        import matplotlib  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        raise SystemExit("large_batch_experiment: matplotlib is missing; install it with "
                         "`pip install -e .[plot]`.") from None
    results = {}
    for name, flags in _runs(args):
        start = time.perf_counter()
        results[name] = _train(flags, args.epochs, args.seed)
        accuracy = results[name]["history"]["val_accuracy"]
        print(f"{name}: final val_accuracy {accuracy[-1]:.4f}, best {max(accuracy):.4f} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    command = "python scripts/large_batch_experiment.py " + " ".join(sys.argv[1:])
    with open(os.path.join(args.out_dir, "large_batch.md"), "w", encoding="utf-8") as table:
        table.write(_table(results, command.strip()))
    with open(os.path.join(args.out_dir, "large_batch.json"), "w", encoding="utf-8") as raw:
        json.dump(results, raw, indent=2)
        raw.write("\n")
    _plot(results, os.path.join(args.out_dir, "large_batch.png"))


if __name__ == "__main__":
    main()
