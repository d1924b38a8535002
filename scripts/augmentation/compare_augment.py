"""The augmentation recipes against each other on JPEG data: `tfdist train --augment=R` for each
recipe R, at equal steps, seeds and everything else, alternating recipe by recipe within each
seed; prints each run's validation accuracy, then each recipe's median and the difference
(the check: the ImageNet recipe learns at least as well as the small-image one).

    python scripts/augmentation/compare_augment.py
        [--data='tfrecord:DIR/{split}-*' --num_classes=N]
        [--recipes=imagenet/--crop_area_min=0.35,small] [--seeds=1,2] [--epochs=25]
        [--image_size=64] [--model=resnet20] [--stripes_by=class] [--json=PATH]

A recipe may carry train flags of its own after slashes. The default runs the ImageNet recipe with
its smallest crop at 35% of the area, which docs/input_pipelines.md recommends for short runs at low
resolution: on the generated sets it learns at least as well as the small recipe, where the
published 8% crop (`--recipes=imagenet,small`) does not (docs/PERFORMANCE.md, "Accuracy"). Every run
decays its rate to 0 by a cosine (`--lr_schedule=cosine`), so that the last epoch's accuracy is the
run's, not a point on a noisy curve.

Without --data, scripts/input_pipeline/make_jpeg_records.py generates the check's set into a
temporary directory first: its ImageNet-like JPEGs of 300-500 px, but 30 classes with 40 training
images each (and 600 for validation), whose neighbours' hues overlap, so that the recipes do not
both reach 99% as on the generator's default set (docs/PERFORMANCE.md, "Accuracy", has both).
Validation reads each recipe's own evaluation view (the imagenet recipe a centre crop, the
small one the whole image), as training with it would.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from tfdist.runtime.output_files import write_json

_SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _SCRIPTS)  # train_runs
from train_runs import train_and_read_metrics  # noqa: E402

_TIMEOUT_S = 1800
_MAKE_JPEG_RECORDS = os.path.join(_SCRIPTS, "input_pipeline", "make_jpeg_records.py")
_SET_FLAGS = ("--num_classes=30", "--train_images=1200", "--validation_images=600")


def _run(data: str, num_classes: int, recipe: str, seed: int, args) -> dict:
    name, *own_flags = recipe.split("/")
    metrics, wall_s = train_and_read_metrics(
        [
            f"--dataset={data}",
            f"--num_classes={num_classes}",
            f"--image_size={args.image_size}",
            f"--model={args.model}",
            f"--augment={name}",
            f"--seed={seed}",
            f"--epochs={args.epochs}",
            f"--global_batch_size={args.global_batch_size}",
            "--lr_schedule=cosine",
            *own_flags,
        ],
        timeout_s=_TIMEOUT_S,
    )
    accuracies = metrics["history"]["val_accuracy"]
    return {
        "recipe": recipe,
        "seed": seed,
        "val_accuracy": round(accuracies[-1], 4),
        "best_val_accuracy": round(max(accuracies), 4),
        "val_accuracy_per_epoch": [round(value, 4) for value in accuracies],
        "wall_s": round(wall_s, 1),
    }


def _set_flags(args) -> list[str]:
    """make_jpeg_records.py's flags for the check's set."""
    return [*_SET_FLAGS, f"--stripes_by={args.stripes_by}"]


def _generated(out_dir: str, args) -> str:
    """The check's JPEG set, written into `out_dir`; its dataset flag."""
    subprocess.run(
        [sys.executable, _MAKE_JPEG_RECORDS, f"--out_dir={out_dir}", *_set_flags(args)],
        check=True,
        timeout=_TIMEOUT_S,
    )
    return f"tfrecord:{out_dir}/{{split}}-*"


def _compare(data: str, num_classes: int, args) -> dict:
    runs = []
    for seed in args.seeds:
        for recipe in args.recipes:
            runs.append(_run(data, num_classes, recipe, seed, args))
            print(f"seed {seed}, --augment={recipe}: {runs[-1]}", flush=True)
    medians = {
        recipe: statistics.median(run["val_accuracy"] for run in runs if run["recipe"] == recipe)
        for recipe in args.recipes
    }
    for recipe, accuracy in medians.items():
        print(
            f"--augment={recipe}: median val_accuracy {accuracy:.4f} over seeds "
            f"{','.join(map(str, args.seeds))}"
        )
    first, *others = args.recipes
    for other in others:
        print(f"{first} - {other}: {medians[first] - medians[other]:+.4f}")
    return {"runs": runs, "median_val_accuracy": medians}


def _list(convert):
    return lambda text: [convert(item) for item in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="a tfrecord: dataset (default: the generated set)")
    parser.add_argument(
        "--num_classes",
        type=int,
        default=30,
        help="the classes of --data (the generated set has 30)",
    )
    parser.add_argument(
        "--recipes", type=_list(str), default=["imagenet/--crop_area_min=0.35", "small"]
    )
    parser.add_argument("--seeds", type=_list(int), default=[1, 2])
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--model", default="resnet20")
    parser.add_argument("--global_batch_size", type=int, default=64)
    parser.add_argument(
        "--stripes_by",
        choices=("class", "image"),
        default="class",
        help="the generated set's stripe counts: by class, or drawn per image "
        "(make_jpeg_records.py)",
    )
    parser.add_argument("--json", help="write every run and the medians to this path")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        data = args.data or _generated(os.path.join(scratch, "jpeg"), args)
        results = _compare(data, args.num_classes, args)
    if args.json:
        write_json(
            "json",
            args.json,
            {
                "data": args.data or f"make_jpeg_records.py {' '.join(_set_flags(args))}",
                **{
                    name: getattr(args, name)
                    for name in (
                        "num_classes",
                        "recipes",
                        "seeds",
                        "epochs",
                        "image_size",
                        "model",
                        "global_batch_size",
                    )
                },
                **results,
            },
        )


if __name__ == "__main__":
    main()
