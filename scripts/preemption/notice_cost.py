"""What watching for a preemption notice costs a multi-worker step: the agreement every step of
a multi_worker_mirrored run makes (each worker's notice flag, one float, summed over the workers
so that all stop at the same step: tfdist/training/preemption.py), against the same step
without it. Two ways: the flag riding in the step's gradient all-reduce (as tfdist's gradient
path carries it: `fit`, Keras 3), and an all-reduce of its own after the step (a model compiled
with an optimizer of its own, `CustomLoop`).

    tfdist launch --num_workers=2 -- python scripts/preemption/notice_cost.py \\
        [--steps=200] [--rounds=5] [--json=PATH]

Each worker builds the strategy with `tfdist.setup`, a small CNN on 32x32x3 images (the default
job's shape, batch 64 over the workers), and three compiled training steps that differ only in
the flag's sum; it runs them in turn, `--steps` steps each, over `--rounds` rounds after a warm-up
of each, and worker 0 prints the median milliseconds per step of each and each round's ratio to
the step without, median (min-max) (and writes them to --json).
"""

import argparse
import json
import statistics
import time

import tfdist

_BATCH = 64


def _model():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return tf.keras.Sequential(
        [
            tf.keras.layers.Input((32, 32, 3)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(64, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )


def _steps(plan) -> dict:
    """Compiled training steps by name, each running `count` steps in one call: without the
    flag, the flag riding in the gradients' all-reduce, the flag summed on its own after."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    strategy = plan.strategy
    with strategy.scope():
        model = _model()
        optimizer = tf.keras.optimizers.SGD(0.01)
    with tf.init_scope():
        raised = tf.Variable(0.0, trainable=False)
        agreed = tf.Variable(0.0, trainable=False)
    images = tf.random.stateless_uniform((plan.per_replica_batch_size, 32, 32, 3), seed=(1, 2))
    labels = tf.zeros((plan.per_replica_batch_size,), tf.int32)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(with_flag: bool = False):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                loss_fn(labels, model(images, training=True)), global_batch_size=_BATCH
            )
        grads = tape.gradient(loss, model.trainable_variables)
        context = tf.distribute.get_replica_context()
        riding = [raised.read_value()] if with_flag else []
        summed = context.all_reduce(tf.distribute.ReduceOp.SUM, [*grads, *riding])
        if with_flag:
            agreed.assign(summed.pop())
        optimizer.apply_gradients(
            zip(summed, model.trainable_variables), skip_gradients_aggregation=True
        )

    def separate():
        replica_step()
        context = tf.distribute.get_replica_context()
        agreed.assign(context.all_reduce(tf.distribute.ReduceOp.SUM, raised.read_value()))

    def loop(step):
        @tf.function
        def run(count):
            for _ in tf.range(count):
                strategy.run(step)

        return run

    return {
        "without": loop(replica_step),
        "riding": loop(lambda: replica_step(with_flag=True)),
        "separate": loop(separate),
    }


def _ms_per_step(run, steps: int) -> float:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    started = time.perf_counter()
    run(tf.constant(steps))
    return 1000 * (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    config = tfdist.RunConfig(
        strategy=tfdist.StrategyConfig(strategy="multi_worker_mirrored"),
        input=tfdist.InputConfig(global_batch_size=_BATCH),
        train=tfdist.TrainConfig(steps_per_epoch=args.steps),
        cluster=tfdist.strategies.from_environment(),
    )
    plan = tfdist.setup(config)
    steps = _steps(plan)
    for run in steps.values():
        _ms_per_step(run, args.steps)  # Tracing and warm-up.
    measured = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, run in steps.items():
            measured[name].append(_ms_per_step(run, args.steps))
    medians = {name: statistics.median(values) for name, values in measured.items()}
    # Each round's ratio to the step without, as the machine's speed drifts between rounds.
    ratios = {
        name: sorted(ms / base for ms, base in zip(measured[name], measured["without"]))
        for name in ("riding", "separate")
    }
    result = {
        "workers": plan.num_workers,
        "steps": args.steps,
        "rounds": args.rounds,
        "ms_per_step": measured,
        "median_ms_per_step": medians,
        "over_without": {
            name: {"median": statistics.median(each), "min": each[0], "max": each[-1]}
            for name, each in ratios.items()
        },
    }
    if plan.writes_results:
        print(
            f"{plan.num_workers} workers, median ms/step: "
            + ", ".join(f"{name} {value:.2f}" for name, value in medians.items())
            + "; each round over without, median (min-max): "
            + ", ".join(
                f"{name} x{spread['median']:.3f} ({spread['min']:.3f}-{spread['max']:.3f})"
                for name, spread in result["over_without"].items()
            ),
            flush=True,
        )
        if args.json:
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
