"""TensorFlow's parameter-server tutorial, its custom training loop, on tfdist's API.

The tutorial's model (an embedding of three words from a small vocabulary, a sigmoid on their
mean: "is 'avenger' among them?"), its loop (steps scheduled on the workers by the
coordinator, joined each epoch), its inline distributed evaluation, and checkpoints it would
need to survive a restart. What tfdist does instead of the tutorial's boilerplate: the cluster
and strategy from TF_CONFIG (`setup`), the worker and ps tasks serving until the chief is done
(`serve`), the model and optimizer recipe built in the scope, per-worker datasets and the
scheduling (`CustomLoop.distribute` and `run`), and checkpoints under `--model_dir`.

  tfdist launch --num_workers=2 --num_ps=2 --chief -- \\
      python examples/ps_custom_loop.py --variable_partition=max_shards:2 \\
      --model_dir=/tmp/ps_loop
"""

from absl import flags

import tfdist

tfdist.define_flags()
_EXAMPLES = flags.DEFINE_integer("examples", 200, "Training examples to generate.")
_EVAL_STEPS = flags.DEFINE_integer("eval_steps", 4, "Batches each evaluation schedules.")
FEATURE_VOCAB = ["avenger", "ironman", "batman", "hulk", "spiderman", "kingkong", "wonder_woman"]


def features_and_labels(count: int, seed: int):
    """`count` examples: three distinct words (as vocabulary ids) and whether "avenger" is one
    (the tutorial's data, its string lookup done here once)."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(seed)
    words = np.stack([rng.choice(len(FEATURE_VOCAB), 3, replace=False) for _ in range(count)])
    labels = (words == FEATURE_VOCAB.index("avenger")).any(axis=1, keepdims=True)
    return {"features": words.astype("int64")}, labels.astype("int64")


def dataset_fn(count: int, seed: int, global_batch_size: int):
    """Endless batches, as the tutorial reads them. Every parameter-server worker gets the same
    input context and reads all the examples; an unseeded shuffle gives each its own order (a
    seeded one would have every worker train on the same batches: tfdist refuses that)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    examples = features_and_labels(count, seed)

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return (
            tf.data.Dataset.from_tensor_slices(examples)
            .shuffle(count)
            .repeat()
            .batch(context.get_per_replica_batch_size(global_batch_size))
        )

    return make


def build_model():
    """The tutorial's model (called in the strategy's scope: variables on the ps tasks)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    words = tf.keras.layers.Input(shape=(3,), dtype=tf.int64, name="features")
    embedded = tf.keras.layers.Embedding(len(FEATURE_VOCAB), 16384)(words)
    mean = tf.keras.layers.GlobalAveragePooling1D()(embedded)
    output = tf.keras.layers.Dense(
        1, activation="sigmoid", kernel_regularizer=tf.keras.regularizers.L2(1e-4)
    )(mean)
    return tf.keras.Model({"features": words}, output)


def main(argv):
    del argv
    config = tfdist.config_from_flags()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    plan = tfdist.setup(config, train_examples=_EXAMPLES.value)
    if plan.role is tfdist.Role.SERVE:  # The worker and ps tasks.
        tfdist.serve(plan)
        return
    loop = tfdist.CustomLoop(plan, build_model)
    train = loop.distribute(dataset_fn(_EXAMPLES.value, 1, plan.global_batch_size))
    evaluation = loop.distribute(
        dataset_fn(16, 2, plan.global_batch_size), "validation", training=False
    )
    with loop.strategy.scope():
        accuracy = tf.keras.metrics.Accuracy()
        eval_accuracy = tf.keras.metrics.Accuracy()
    loss_fn = tf.keras.losses.BinaryCrossentropy(reduction=tf.keras.losses.Reduction.NONE)

    def train_step(batch, labels):
        with tf.GradientTape() as tape:
            predictions = loop.model(batch, training=True)
            loss = loop.scale_loss(loss_fn(labels, predictions))
            loss += tf.nn.scale_regularization_loss(tf.add_n(loop.model.losses))
        loop.minimize(loss, tape)
        accuracy.update_state(labels, tf.cast(predictions > 0.5, tf.int64))
        return loss

    def eval_step(batch, labels):
        predictions = loop.model(batch, training=False)
        eval_accuracy.update_state(labels, tf.cast(predictions > 0.5, tf.int64))

    for epoch in range(loop.restore(), plan.config.train.epochs):
        accuracy.reset_state()
        eval_accuracy.reset_state()
        loss = loop.run(train_step, train, plan.steps_per_epoch)
        loop.run(eval_step, evaluation, _EVAL_STEPS.value)
        loop.save(epoch + 1)
        print(
            f"epoch {epoch + 1}: loss={loss:.4f} accuracy={float(accuracy.result()):.4f} "
            f"eval_accuracy={float(eval_accuracy.result()):.4f}",
            flush=True,
        )


if __name__ == "__main__":
    tfdist.run(main)
