"""Measures tfdist's training input pipeline against a naive one and the I/O floor, in one run.

All three read the built-in dataset's training files (prepared first if needed) and are timed
over the same number of examples after the same warm-up, on this machine:

  naive       the pipeline as first written in TF's tf.data performance guide: one sequential
              reader, a per-example map (parse, decode the raw bytes, augment with tf.image's
              per-image ops, normalise), batch; no interleave, no parallel map, no prefetch.
  tfdist      tfdist's training pipeline with augmentation on the host (`--preprocess_on=host`).
  parse_only  the I/O floor: the same files read by tfdist's parallel interleave, batched and
              parsed as tfdist's pipeline does (several batches per map call), but nothing
              decoded or augmented.

(`tfdist.input_pipelines.baseline_pipeline` builds each.)

Each pipeline is timed in a fresh child process, so that none inherits another's threads or
memory (measured: tfdist's pipeline ran 30% slower right after the naive one in the same
process). A round times each pipeline once, one after the other; --rounds repeats that, and each
figure is the median over rounds: examples/s of each pipeline, and the ratios tfdist/naive and
tfdist/parse_only as the median of the rounds' ratios, with their [min, max] over the rounds
(a 2-core machine's speed drifts from one child to the next: measured, parse_only alone ranged
214k-337k examples/s over 15 children). --json=PATH writes naive_eps, tfdist_eps,
parse_only_eps, speedup_vs_naive, fraction_of_parse_only and `<ratio>_spread`. --stages also
times, in every round, tfdist's pipeline cut after each of its steps and writes what each adds
per example (from the medians) under "stages". --trace also runs tfdist's pipeline under
TensorFlow's profiler and writes, under "trace", the trace time of each tf.data transformation
and each op per example (`input_pipelines.profile_stages`).

    python scripts/input_pipeline/benchmark_input.py [--json=PATH] [--rounds=5] [--examples=N]
        [--data_dir=DIR] [--stages] [--trace]

With --dataset=tfrecord:GLOB (JPEG records in ImageNet's layout, e.g. as
scripts/input_pipeline/make_jpeg_records.py writes them; `{split}` in GLOB stands for train and
validation) it compares instead, on that dataset's training files, batches of --global_batch_size
(64) images of --image_size (224):

  naive          one sequential reader, a per-example map (parse, decode the whole image,
                 resize, flip, normalise), batch.
  tfdist         tfdist's training pipeline with augmentation on the host, as `tfdist train`
                 builds it (`image_batches.examples`): whatever decode and augmentation it does
                 (--augment picks its recipe).
  tfdist_device  the host's share of it under --preprocess_on=device: read, decode (the
                 imagenet recipe's crop included), batch; flip and normalisation left out.
  best_practice  TF's official ResNet ImageNet training input (tensorflow/models'
                 imagenet_preprocessing.py): parallel interleave, shuffle, a parallel
                 per-example map of random crop window, fused decode_and_crop_jpeg, flip,
                 resize, mean subtraction; batch, prefetch; TF's default options.
  decode_only    the floor: the same reading, each image decoded whole and nothing else done
                 with it (its first pixel kept, so batching costs nothing); batch, prefetch.

Each is timed for --seconds (20) per round after a warm-up, in a fresh child process as above,
and the rounds alternate; figures are medians over --rounds (3): images/s, and images per
CPU-second (the child's CPU time over the timed seconds, all its threads: what one core's worth
of CPU time preprocesses). Ratios tfdist/naive, tfdist/best_practice and tfdist/decode_only (of
images/s, and of images per CPU-second) are medians of the rounds' ratios with their
[min, max]. --json=PATH writes them all, and `host_examples_per_core` (tfdist's images per
CPU-second: the per-core rate of host preprocessing a planner needs) and
`decode_examples_per_core` (tfdist_device's: the same with preprocessing on the device), which
`tfdist plan --input_benchmark` reads.

    python scripts/input_pipeline/benchmark_input.py --dataset='tfrecord:DIR/{split}-*' \\
        --num_classes=10 [--image_size=224] [--global_batch_size=64] [--augment=auto] [--rounds=3]
        [--seconds=20] [--json=PATH]
"""

import argparse
import json
import os
import sys

import input_rounds
import input_timing
from tfdist import input_pipelines  # Selects tf-keras before TensorFlow is imported.
from tfdist.input_pipelines import Augment
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import InputConfigError
from tfdist.runtime.output_files import write_json
from tfdist.runtime.tf_import import import_tensorflow

# With --dataset: the defaults of the flags of this mode and of the built-in dataset's (None in
# argparse, so that a flag given in the wrong mode is refused).
_JPEG_DEFAULTS = {
    "rounds": 3,
    "seconds": 20.0,
    "global_batch_size": 64,
    "image_size": 224,
    "augment": "auto",
}
_BUILTIN_DEFAULTS = {"rounds": 5, "examples": 400_000}
_JPEG_ONLY = ("num_classes", "image_size", "global_batch_size", "seconds", "augment")
_BUILTIN_ONLY = ("examples", "data_dir", "stages", "trace")


def _print_jpeg(args: argparse.Namespace, figures: dict) -> None:
    print(
        f"{args.dataset}: batches of {args.global_batch_size} at {args.image_size}px, medians "
        f"of {args.rounds} rounds of {args.seconds:g} s on {os.cpu_count()} cores"
    )
    print(f"  {'pipeline':14s} {'images/s':>9s} {'images/CPU-s':>13s}")
    for name in input_timing.JPEG_PIPELINES:
        print(
            f"  {name:14s} {figures['images_per_s'][name]:9,.1f} "
            f"{figures['images_per_cpu_s'][name]:13,.1f}"
        )
    for ratio, baseline in input_rounds.JPEG_RATIOS.items():
        low, high = figures[f"{ratio}_spread"]
        cpu_low, cpu_high = figures[f"per_cpu_{ratio}_spread"]
        print(
            f"tfdist/{baseline}: {figures[ratio]:.2f} of images/s (rounds {low:.2f}-"
            f"{high:.2f}), {figures[f'per_cpu_{ratio}']:.2f} of images/CPU-s (rounds "
            f"{cpu_low:.2f}-{cpu_high:.2f})"
        )


def _jpeg_main(args: argparse.Namespace, config: InputConfig) -> None:
    """--dataset: times the JPEG pipelines in alternating rounds; prints and writes the
    figures."""
    load_before = [round(load, 2) for load in os.getloadavg()]
    figures = input_rounds.jpeg_rounds(args)
    _print_jpeg(args, figures)
    if args.json:
        write_json(
            "json",
            args.json,
            {
                "dataset": args.dataset,
                "num_classes": args.num_classes,
                "image_size": args.image_size,
                "global_batch_size": args.global_batch_size,
                "augmentation": config.augmentation.value,
                "seconds": args.seconds,
                "rounds": args.rounds,
                "cpu_count": os.cpu_count(),
                "load_average_before": load_before,
                "train_images": input_pipelines.prepare(config).num_examples["train"],
                **figures,
            },
        )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def _settle_mode(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses flags of the other mode (built-in dataset, or --dataset) and fills in this
    mode's defaults."""
    jpeg = args.dataset is not None
    given = [
        f"--{flag}"
        for flag in (_BUILTIN_ONLY if jpeg else _JPEG_ONLY)
        if getattr(args, flag) not in (None, False)
    ]
    if given:
        one = len(given) == 1
        parser.error(
            f"{', '.join(given)} only time{'s' if one else ''} "
            f"{'the built-in dataset, without --dataset' if jpeg else 'a --dataset'}; "
            f"leave {'it' if one else 'them'} out."
        )
    if jpeg and not args.dataset.startswith("tfrecord:"):
        parser.error(
            f"--dataset={args.dataset!r}: this benchmark reads JPEG records, "
            "--dataset=tfrecord:GLOB; leave --dataset out to time the built-in dataset."
        )
    if jpeg and args.num_classes is None:
        parser.error(
            f"--dataset={args.dataset} needs --num_classes=N, the number of classes "
            "its labels index."
        )
    for flag, default in (_JPEG_DEFAULTS if jpeg else _BUILTIN_DEFAULTS).items():
        if getattr(args, flag) is None:
            setattr(args, flag, default)


def _config(args: argparse.Namespace) -> InputConfig:
    """The input config of this run's pipelines; the dataset prepared (checked, for --dataset:
    every record parsed once), before any timing. Exits 2 in one line when it cannot be."""
    try:
        if args.dataset:
            config = InputConfig(
                dataset=args.dataset,
                num_classes=args.num_classes,
                image_size=args.image_size,
                global_batch_size=args.global_batch_size,
                augment=args.augment,
            )
        else:
            config = InputConfig(
                data_dir=args.data_dir, global_batch_size=input_timing.GLOBAL_BATCH_SIZE
            )
        import_tensorflow(show_logs=False)
        input_pipelines.prepare(config)
    except InputConfigError as error:
        print(f"benchmark_input: {error}", file=sys.stderr)
        sys.exit(2)
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures to this path")
    parser.add_argument(
        "--rounds",
        type=_positive,
        help="rounds of the pipelines; figures are medians over rounds "
        "(default: 5; 3 with --dataset)",
    )
    parser.add_argument(
        "--examples",
        type=_positive,
        help="examples to time per pipeline (default: 400,000, 40 epochs, 2-3 s at tfdist's rate)",
    )
    parser.add_argument("--data_dir", help="TFDS data dir of the built-in dataset")
    parser.add_argument(
        "--stages",
        action="store_true",
        help="also time tfdist's pipeline cut after each step (read, shuffle, "
        "parse, decode; then augment and normalise) and the cost per "
        "example each step adds",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also profile tfdist's pipeline: trace time per example of each "
        "tf.data transformation and op",
    )
    parser.add_argument(
        "--dataset",
        help="tfrecord:GLOB of JPEG records ({split} in GLOB: "
        "train and validation) to compare naive, tfdist, best_practice and "
        "decode_only on, instead of the built-in dataset",
    )
    parser.add_argument(
        "--num_classes", type=_positive, help="with --dataset: the classes its labels index"
    )
    parser.add_argument(
        "--image_size",
        type=_positive,
        help="with --dataset: side of the images the pipelines make (224)",
    )
    parser.add_argument(
        "--global_batch_size", type=_positive, help="with --dataset: images per batch (64)"
    )
    parser.add_argument(
        "--augment",
        choices=[recipe.value for recipe in Augment],
        help="with --dataset: tfdist's recipe, as `tfdist train --augment` "
        "(auto: imagenet on JPEG records); the other pipelines keep theirs",
    )
    parser.add_argument(
        "--seconds",
        type=_positive_float,
        help="with --dataset: seconds to time each pipeline per round (20)",
    )
    parser.add_argument(
        "--pipeline",
        choices=sorted(input_timing.PIPELINES),
        help="time only this pipeline, here, and print its examples/s (with "
        "--dataset: its figures as JSON)",
    )
    parser.add_argument("--trace_here", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    _settle_mode(parser, args)
    config = _config(args)
    if args.trace_here:
        print(json.dumps(input_timing.trace(config)))
        return
    if args.pipeline and args.dataset:
        print(
            json.dumps(
                input_timing.image_rates(
                    input_timing.PIPELINES[args.pipeline](config),
                    args.seconds,
                    args.global_batch_size,
                )
            )
        )
        return
    if args.pipeline:
        print(
            input_timing.examples_per_sec(
                input_timing.PIPELINES[args.pipeline](config), args.examples
            )
        )
        return
    if args.dataset:
        _jpeg_main(args, config)
        return
    figures = input_rounds.builtin_rounds(args)
    for name in ("naive_eps", "tfdist_eps", "parse_only_eps"):
        print(f"{name}: {figures[name]:,.0f} examples/s (median of {args.rounds} rounds)")
    for ratio, label in (
        ("speedup_vs_naive", "tfdist/naive"),
        ("fraction_of_parse_only", "tfdist/parse_only"),
    ):
        low, high = figures[f"{ratio}_spread"]
        print(f"{label}: {figures[ratio]:.2f} (rounds {low:.2f}-{high:.2f})")
    stages = input_rounds.stage_costs(figures) if args.stages else None
    trace = json.loads(input_rounds.child_output(args, "--trace_here")) if args.trace else None
    if trace:
        print(
            f"trace of tfdist's pipeline, {trace['wall_us_per_example']:.2f} us/example of wall "
            "time under the profiler; each stage's trace time per example:"
        )
        for stage, value in trace["stage_us_per_example"].items():
            print(f"  {stage:36s} {value:6.2f} us/example")
    if args.json:
        write_json(
            "json",
            args.json,
            {
                "cpu_count": os.cpu_count(),
                "examples": args.examples,
                "rounds": args.rounds,
                "global_batch_size": input_timing.GLOBAL_BATCH_SIZE,
                **figures,
                **({"stages": stages} if stages else {}),
                **({"trace": trace} if trace else {}),
            },
        )


if __name__ == "__main__":
    main()
