"""The large-batch recipe below, at and past the critical batch, and LARS where it is meant
to help.

Every run is a fresh `tfdist train --strategy=mirrored --num_cpu_devices=2
--measure_noise_scale` process with the same seed and a cosine decay after warmup; the table
shows the gradient noise scale B_simple of each run's last epoch.

  recipe (small CNN, --epochs):
    small         global batch --small_batch, momentum SGD at --learning_rate (for
                  --base_batch_size, scaled linearly to the small batch): the reference
    large         each of --large_batches, rate scaled linearly, --warmup_epochs of gradual
                  warmup (Goyal et al. 2017): at, and well past, the critical batch that
                  `batch_scaling_study.py` measures
  LARS (ResNet-20, batch normalisation, --resnet_epochs at --resnet_batch):
    momentum SGD  --resnet_learning_rate at --resnet_base_batch, scaled linearly, warmup,
                  weight decay 5e-4
    LARS          You et al. 2017, the same scaling, schedule and weight decay, one run per
                  base rate of --lars_learning_rates (its rate is multiplied by each layer's
                  trust ratio, eeta x ||w|| / ||g||, so it takes rates of its own)

Writes OUT_DIR/large_batch.{md,json,png} (validation accuracy per epoch; the plot needs
matplotlib: `pip install -e .[plot]`).

    python scripts/large_batch/large_batch_experiment.py [--epochs=3] [--large_batches=64,256,1024]
"""

import argparse
import os
import sys
import time

from tfdist.runtime.output_files import write_json

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # train_runs
from train_runs import train_and_read_metrics  # noqa: E402

_TIMEOUT_S = 3600


def _runs(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(group, name, tfdist train flags) of every run."""
    sgd = [
        "--optimizer=momentum",
        f"--learning_rate={args.learning_rate}",
        f"--base_batch_size={args.base_batch_size}",
        "--lr_scaling=linear",
        "--lr_schedule=cosine",
    ]
    warmup = [f"--warmup_epochs={args.warmup_epochs}"]
    recipe = ["--model=small_cnn", f"--epochs={args.epochs}"]
    resnet = [
        "--model=resnet20",
        f"--epochs={args.resnet_epochs}",
        f"--global_batch_size={args.resnet_batch}",
        "--weight_decay=5e-4",
        "--lr_scaling=linear",
        f"--base_batch_size={args.resnet_base_batch}",
        "--lr_schedule=cosine",
        f"--warmup_epochs={args.resnet_warmup_epochs}",
    ]
    return (
        [
            (
                "recipe",
                f"small ({args.small_batch})",
                [*recipe, f"--global_batch_size={args.small_batch}", *sgd],
            ),
        ]
        + [
            (
                "recipe",
                f"{batch} ({batch // args.small_batch}x) scaling + warmup",
                [*recipe, f"--global_batch_size={batch}", *sgd, *warmup],
            )
            for batch in args.large_batches
        ]
        + [
            (
                "resnet20",
                f"ResNet-20 ({args.resnet_batch}) momentum SGD",
                [*resnet, "--optimizer=momentum", f"--learning_rate={args.resnet_learning_rate}"],
            ),
        ]
        + [
            (
                "resnet20",
                f"ResNet-20 ({args.resnet_batch}) LARS (rate {rate:g})",
                [*resnet, "--optimizer=lars", f"--learning_rate={rate}"],
            )
            for rate in args.lars_learning_rates
        ]
    )


def _last_noise_scale(history: dict) -> str:
    """The last epoch's B_simple, or "-" where it was not measured (a step with |G|^2 <= 0)."""
    measured = [value for value in history.get("noise_scale", []) if value is not None]
    return f"{measured[-1]:.0f}" if measured else "-"


def _table(results: list[dict], command: str) -> str:
    lines = [
        f"Command: `{command}`",
        "",
        "| run | updates | final val_accuracy | best val_accuracy | final val_loss | "
        "final accuracy (training) | B_simple | wall s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run in results:
        history = run["metrics"]["history"]
        lines.append(
            f"| {run['name']} | {run['metrics']['steps']} | "
            f"{history['val_accuracy'][-1]:.4f} | {max(history['val_accuracy']):.4f} | "
            f"{history['val_loss'][-1]:.4f} | {history['accuracy'][-1]:.4f} | "
            f"{_last_noise_scale(history)} | {run['wall_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def _plot(results: list[dict], path: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel

    groups = {
        "recipe": "Linear scaling + warmup, small CNN",
        "resnet20": "LARS against momentum SGD, ResNet-20",
    }
    figure, axes = pyplot.subplots(1, len(groups), figsize=(12, 4.5))
    for panel, (group, title) in zip(axes, groups.items()):
        for run in (run for run in results if run["group"] == group):
            accuracy = run["metrics"]["history"]["val_accuracy"]
            panel.plot(range(1, len(accuracy) + 1), accuracy, marker="o", label=run["name"])
        panel.set(xlabel="epoch", ylabel="validation accuracy", title=title)
        panel.grid(alpha=0.3)
        panel.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--small_batch", type=int, default=16)
    parser.add_argument(
        "--large_batches",
        default="64,256,1024",
        type=lambda text: [int(batch) for batch in text.split(",")],
        help="one recipe run per global batch",
    )
    parser.add_argument(
        "--learning_rate",
        type=float,
        default=0.04,
        help="momentum SGD's rate at --base_batch_size (the study's best at 16)",
    )
    parser.add_argument("--base_batch_size", type=int, default=16)
    parser.add_argument("--warmup_epochs", type=float, default=0.5)
    parser.add_argument("--resnet_epochs", type=int, default=10)
    parser.add_argument("--resnet_batch", type=int, default=512)
    parser.add_argument(
        "--resnet_learning_rate",
        type=float,
        default=0.1,
        help="momentum SGD's rate at --resnet_base_batch (He et al.'s 0.1)",
    )
    parser.add_argument("--resnet_base_batch", type=int, default=256)
    parser.add_argument("--resnet_warmup_epochs", type=float, default=2.0)
    parser.add_argument(
        "--lars_learning_rates",
        default="1.0,4.0",
        type=lambda text: [float(rate) for rate in text.split(",")],
        help="one LARS run per base rate",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out_dir", default="docs/results")
    args = parser.parse_args()
    try:
        import matplotlib  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        raise SystemExit(
            "large_batch_experiment: matplotlib is missing; install it with "
            "`pip install -e .[plot]`."
        ) from None
    results, started = [], time.perf_counter()
    for group, name, flags in _runs(args):
        metrics, wall_s = train_and_read_metrics(
            [
                "--strategy=mirrored",
                "--num_cpu_devices=2",
                "--measure_noise_scale",
                f"--seed={args.seed}",
                *flags,
            ],
            timeout_s=_TIMEOUT_S,
        )
        results.append(
            {"group": group, "name": name, "flags": flags, "metrics": metrics, "wall_s": wall_s}
        )
        accuracy = metrics["history"]["val_accuracy"]
        print(
            f"{name}: final val_accuracy {accuracy[-1]:.4f}, best {max(accuracy):.4f} "
            f"({wall_s:.0f} s)",
            flush=True,
        )
    command = (
        "python scripts/large_batch/large_batch_experiment.py " + " ".join(sys.argv[1:])
    ).strip()
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "large_batch.md"), "w", encoding="utf-8") as table:
        table.write(_table(results, command))
        table.write(f"\n{(time.perf_counter() - started) / 60:.0f} min in all.\n")
    write_json(
        "json",
        os.path.join(args.out_dir, "large_batch.json"),
        {"command": command, "runs": results},
    )
    _plot(results, os.path.join(args.out_dir, "large_batch.png"))


if __name__ == "__main__":
    main()
