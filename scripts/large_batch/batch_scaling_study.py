"""Steps to a target validation accuracy against the global batch: where does a larger batch stop
buying fewer steps, and does the gradient noise scale say so in advance?

For each global batch (powers of 2), the small CNN trains on the built-in dataset (in memory,
no augmentation) under mirrored over 2 CPU replicas, with momentum SGD at a constant rate
reached by `--warmup_steps` of gradual warmup. Each run evaluates the validation split at steps
2^(k/4) and stops at the first evaluation at or above `--target`. The rate is searched on a
factor-2 grid per batch, linear scaling first: the first batch starts at `--base_rate`, each
next one at twice the previous batch's best rate; then half that; then on in the better
direction while it improves, at most `--max_runs` runs. A run also stops once it has taken as
many steps as the best run of its batch, when it falls `--prune_margin` behind the best's
accuracy at the same step (past half the best's steps), when its accuracy has stalled (no new
high in the last 3/4 of its steps, from step 64), or when it diverges. tfdist's optimizer
measures the gradient noise scale B_simple in every run (`--measure_noise_scale`, 2 replicas);
the study reports it where the target is reached.

McCandlish et al.'s model S(B) = S_min (1 + B_crit / B) is fitted to the steps of the best
runs: B_crit is the measured knee, compared with B_simple. Writes
OUT_DIR/batch_scaling.{json,md,png} (the plot needs matplotlib: `pip install -e .[plot]`).

    python scripts/large_batch/batch_scaling_study.py [--batches=16,32,...,2048] [--target=0.95]
"""

import argparse
import dataclasses
import math
import os
import sys
import time

import numpy as np

import tfdist
from tfdist import input_pipelines
from tfdist.runtime.output_files import write_json

_EVALUATE_BATCH = 1000
# A run stops as stalled from this step on once its accuracy has not risen for 4x the steps.
_STALL_STEPS = 64


def _evaluation_steps(limit: int) -> list[int]:
    """Steps 1, 2, 3, 4, 5, 7, 8, 10, ...: 2^(k/4) rounded, up to `limit`."""
    steps, k = [], 0
    while (step := round(2 ** (k / 4))) <= limit:
        if not steps or step > steps[-1]:
            steps.append(step)
        k += 1
    return steps


def _plan_for(plan, batch: int, rate: float, args: argparse.Namespace, train_examples: int):
    """`plan` with the global batch `batch` and momentum SGD at `rate`, measuring the noise
    scale. Warmup (tfdist's, from the rate linearly scaled down to `--base_batch` up to `rate`)
    lasts `--warmup_steps`; the rate then stays constant."""
    steps_per_epoch = max(train_examples // batch, 1)
    epochs = math.ceil(args.max_examples / batch / steps_per_epoch) + 1
    optimizer = tfdist.OptimizerConfig(
        optimizer="momentum",
        learning_rate=rate * args.base_batch / batch,
        lr_scaling="linear",
        base_batch_size=args.base_batch,
        warmup_epochs=args.warmup_steps / steps_per_epoch,
        measure_noise_scale=True,
    )
    config = dataclasses.replace(
        plan.config,
        input=dataclasses.replace(plan.config.input, global_batch_size=batch),
        train=dataclasses.replace(plan.config.train, epochs=epochs),
        optimizer=optimizer,
    )
    return dataclasses.replace(
        plan,
        config=config,
        steps_per_epoch=steps_per_epoch,
        per_replica_batch_size=batch // plan.num_replicas,
    )


def _dataset_fn(images, labels, seed: int, global_batch: int):
    """The training examples, shuffled and repeated, in per-replica batches."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def dataset_fn(context):
        batch = context.get_per_replica_batch_size(global_batch)
        return (
            tf.data.Dataset.from_tensor_slices((images, labels))
            .shard(context.num_input_pipelines, context.input_pipeline_id)
            .shuffle(len(labels), seed=seed)
            .repeat()
            .batch(batch, drop_remainder=True)
            .prefetch(2)
        )

    return dataset_fn


def _train_to_target(plan, train, validation, args, best: dict | None) -> dict:
    """One run: steps to `--target` (None if not reached), the accuracy curve, the noise scale
    where the target was reached, and why it stopped."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tf_keras  # pylint: disable=import-outside-toplevel
    from tfdist.training import models  # pylint: disable=import-outside-toplevel

    def build():
        return models.build("small_cnn", (32, 32, 3), 10)

    def normalise(images):
        return input_pipelines.device_preprocess(images, training=False, compute_dtype="float32")

    loop = tfdist.CustomLoop(plan, build)
    batches = loop.distribute(_dataset_fn(*train, args.seed, plan.global_batch_size))

    def step(images, labels):
        with tf.GradientTape() as tape:
            probabilities = loop.model(normalise(images), training=True)
            loss = loop.scale_loss(
                tf_keras.losses.sparse_categorical_crossentropy(labels, probabilities)
            )
        loop.minimize(loss, tape)
        return loss

    @tf.function
    def correct(images, labels):
        predicted = tf.argmax(loop.model(normalise(images), training=False), axis=1)
        return tf.reduce_sum(tf.cast(predicted == labels, tf.int32))

    def accuracy() -> float:
        images, labels = validation
        return sum(
            int(
                correct(
                    images[start : start + _EVALUATE_BATCH], labels[start : start + _EVALUATE_BATCH]
                )
            )
            for start in range(0, len(labels), _EVALUATE_BATCH)
        ) / len(labels)

    limit = args.max_examples // plan.global_batch_size
    if best is not None:
        limit = min(limit, best["steps"] - 1)
    best_curve = dict(best["curve"]) if best else {}
    done, curve, started = 0, [], time.perf_counter()
    for at in _evaluation_steps(limit):
        loss = loop.run(step, batches, at - done)
        done = at
        if not math.isfinite(loss):
            return {
                "steps": None,
                "curve": curve,
                "stopped": "diverged",
                "seconds": time.perf_counter() - started,
            }
        curve.append((at, accuracy()))
        if args.verbose:
            print(
                f"  step {at}: val_accuracy {curve[-1][1]:.4f}, loss {loss:.4f}, "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
        if curve[-1][1] >= args.target:
            measured = tfdist.gradient_noise_scale(loop.optimizer) or {}
            return {
                "steps": at,
                "curve": curve,
                "stopped": "target",
                "noise_scale": measured.get("noise_scale"),
                "seconds": time.perf_counter() - started,
            }
        if (
            best
            and 2 * at >= best["steps"]
            and curve[-1][1] < best_curve.get(at, 0.0) - args.prune_margin
        ):
            return {
                "steps": None,
                "curve": curve,
                "stopped": "behind the best",
                "seconds": time.perf_counter() - started,
            }
        peak_step = max(curve, key=lambda point: point[1])[0]
        if at >= max(_STALL_STEPS, 4 * peak_step):
            return {
                "steps": None,
                "curve": curve,
                "stopped": "stalled",
                "seconds": time.perf_counter() - started,
            }
    capped = best is not None and limit == best["steps"] - 1
    return {
        "steps": None,
        "curve": curve,
        "seconds": time.perf_counter() - started,
        "stopped": "slower than the best" if capped else "limit",
    }


def _search_rate(first_rate: float, train_at, max_runs: int) -> list[dict]:
    """Runs `train_at(rate, best run so far)` at `first_rate`, at half of it, then on in the
    better direction (x2 or /2) while that improves, at most `max_runs` runs; returns them."""
    runs: list[dict] = []

    def steps(run: dict) -> float:
        return run["steps"] or math.inf

    def run_at(rate: float) -> dict:
        best = min(runs, key=steps, default=None)
        run = train_at(rate, best if best and best["steps"] else None)
        run["rate"] = rate
        runs.append(run)
        return run

    first, half = run_at(first_rate), run_at(first_rate / 2)
    factor = 2.0 if steps(first) < steps(half) else 0.5
    rate, last = (first_rate * 2, first) if factor == 2.0 else (first_rate / 4, half)
    while len(runs) < max_runs:
        run = run_at(rate)
        if steps(run) >= steps(last):
            break
        rate, last = rate * factor, run
    return runs


def _fit_knee(batches: list[int], steps: list[int]) -> tuple[float, float]:
    """(S_min, B_crit) of S = S_min (1 + B_crit / B), least squares in log space over a grid of
    B_crit (for each, S_min is the geometric-mean fit)."""
    batches_array, log_steps = np.array(batches, float), np.log(np.array(steps, float))
    best = None
    for crit in np.geomspace(1, 1e6, 2000):
        shape = np.log1p(crit / batches_array)
        log_min = np.mean(log_steps - shape)
        error = np.sum((log_steps - log_min - shape) ** 2)
        if best is None or error < best[0]:
            best = (error, math.exp(log_min), crit)
    return best[1], best[2]


def _markdown(report: dict, command: str) -> str:
    lines = [
        f"Command: `{command}` ({report['wall_s'] / 60:.0f} min)",
        "",
        f"Target: validation accuracy {report['target']}; fit S(B) = S_min (1 + B_crit / B): "
        f"S_min = {report['fit']['s_min']:.1f} steps, B_crit = {report['fit']['b_crit']:.0f}; "
        f"median B_simple at the target {report['median_noise_scale']:.0f}.",
        "",
        "| global batch | best rate | steps to target | examples | B_simple at target | "
        "runs (rate: steps or why not) |",
        "| ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for batch, entry in report["batches"].items():
        best = entry.get("best")
        runs = "; ".join(
            f"{run['rate']:.3g}: {run['steps'] or run['stopped']}" for run in entry["runs"]
        )
        if best is None:
            lines.append(f"| {batch} | - | not reached | - | - | {runs} |")
            continue
        noise = best.get("noise_scale")
        lines.append(
            f"| {batch} | {best['rate']:.3g} | {best['steps']} | "
            f"{best['steps'] * int(batch)} | "
            f"{'-' if noise is None else f'{noise:.0f}'} | {runs} |"
        )
    return "\n".join(lines) + "\n"


def _plot(report: dict, path: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel

    reached = [
        (int(batch), entry["best"]["steps"])
        for batch, entry in report["batches"].items()
        if entry.get("best")
    ]
    batches, steps = zip(*reached)
    figure, axes = pyplot.subplots(figsize=(7, 5))
    axes.loglog(batches, steps, "o-", label=f"steps to val_accuracy {report['target']}")
    axes.loglog(
        batches,
        [steps[0] * batches[0] / batch for batch in batches],
        "--",
        color="grey",
        label="perfect scaling (steps x batch constant)",
    )
    fit = report["fit"]
    grid = np.geomspace(min(batches), max(batches), 100)
    axes.loglog(
        grid,
        fit["s_min"] * (1 + fit["b_crit"] / grid),
        ":",
        label=f"fit S_min(1 + B_crit/B), B_crit = {fit['b_crit']:.0f}",
    )
    axes.axvline(fit["b_crit"], color="C1", alpha=0.5)
    axes.axvline(
        report["median_noise_scale"],
        color="C2",
        alpha=0.5,
        label=f"measured B_simple = {report['median_noise_scale']:.0f}",
    )
    axes.set(
        xlabel="global batch",
        ylabel="training steps",
        title="Steps to target against batch size (small CNN, built-in data)",
    )
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def _numbers(text: str, kind=int) -> list:
    return [kind(value) for value in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--batches", type=_numbers, default=[16, 32, 64, 128, 256, 512, 1024, 2048])
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument(
        "--base_rate", type=float, default=0.04, help="the first batch's first rate"
    )
    parser.add_argument(
        "--base_batch",
        type=int,
        default=16,
        help="warmup starts at the rate scaled linearly down to this batch",
    )
    parser.add_argument("--max_runs", type=int, default=3, help="rates tried per batch")
    parser.add_argument("--prune_margin", type=float, default=0.1)
    parser.add_argument("--warmup_steps", type=int, default=10)
    parser.add_argument("--max_examples", type=int, default=400_000)
    parser.add_argument(
        "--train_examples",
        type=int,
        default=None,
        help="examples drawn for training (default: the built-in 10,000)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out_dir", default="docs/results")
    parser.add_argument("--verbose", action="store_true", help="print every evaluation")
    args = parser.parse_args()
    started = time.perf_counter()
    plan = tfdist.setup(
        tfdist.RunConfig(
            strategy=tfdist.StrategyConfig(strategy="mirrored", num_cpu_devices=2),
            train=tfdist.TrainConfig(seed=args.seed),
        ),
        train_examples=args.train_examples or 10_000,
    )
    train = input_pipelines.builtin_examples("train", args.train_examples)
    validation = input_pipelines.builtin_examples("validation")
    report = {"target": args.target, "batches": {}}
    first_rate = args.base_rate
    for batch in args.batches:

        def train_at(rate, best, batch=batch):
            return _train_to_target(
                _plan_for(plan, batch, rate, args, len(train[1])), train, validation, args, best
            )

        runs = _search_rate(first_rate, train_at, args.max_runs)
        for run in runs:
            print(
                f"batch {batch} rate {run['rate']:.4g}: {run['steps'] or run['stopped']} "
                f"steps, B_simple {run.get('noise_scale')}, {run['seconds']:.0f} s",
                flush=True,
            )
        reached = [run for run in runs if run["steps"]]
        entry = report["batches"][str(batch)] = {"runs": runs}
        if reached:
            entry["best"] = min(reached, key=lambda run: run["steps"])
        first_rate = 2 * entry["best"]["rate"] if reached else 2 * first_rate
    reached = [
        (int(batch), entry["best"])
        for batch, entry in report["batches"].items()
        if entry.get("best")
    ]
    s_min, b_crit = _fit_knee(
        [batch for batch, _ in reached], [best["steps"] for _, best in reached]
    )
    report["fit"] = {"s_min": s_min, "b_crit": b_crit}
    report["median_noise_scale"] = float(
        np.median(
            [best["noise_scale"] for _, best in reached if best.get("noise_scale") is not None]
        )
    )
    report["wall_s"] = time.perf_counter() - started
    command = "python scripts/large_batch/batch_scaling_study.py " + " ".join(sys.argv[1:])
    os.makedirs(args.out_dir, exist_ok=True)
    write_json(
        "json",
        os.path.join(args.out_dir, "batch_scaling.json"),
        {"command": command.strip(), **report},
    )
    with open(os.path.join(args.out_dir, "batch_scaling.md"), "w", encoding="utf-8") as out:
        out.write(_markdown(report, command.strip()))
    _plot(report, os.path.join(args.out_dir, "batch_scaling.png"))
    print(_markdown(report, command.strip()))


if __name__ == "__main__":
    main()
