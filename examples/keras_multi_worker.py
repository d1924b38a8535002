"""Your own Keras model and data under any tfdist strategy, from your own absl program.

The model of TensorFlow's multi-worker Keras tutorial, trained on digit-like 28x28 images
generated here (each class a fixed random stroke pattern plus noise; nothing is downloaded).
The program only uses tfdist's public API, so it runs unchanged as every task of a cluster:

  python examples/keras_multi_worker.py                         # one process
  python examples/keras_multi_worker.py --strategy=mirrored --num_cpu_devices=2
  tfdist launch --num_workers=2 -- python examples/keras_multi_worker.py
  tfdist launch --num_workers=2 --num_ps=1 --chief --evaluator -- \
      python examples/keras_multi_worker.py --model_dir=/tmp/mw --validation_steps=8
"""

from absl import flags

import tfdist

tfdist.define_flags()  # --strategy, --global_batch_size, --model_dir, ... beside this file's own.
_EXAMPLES = flags.DEFINE_integer("examples", 4096, "Training images to generate.")
_NUM_CLASSES = 10


def images_and_labels(count: int, seed: int):
    """`count` images whose class decides a fixed pattern (the same for every seed)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    patterns = tf.random.stateless_uniform((_NUM_CLASSES, 28, 28), seed=(7, 7)) > 0.8
    labels = tf.random.stateless_uniform(
        (count,), seed=(seed, 1), maxval=_NUM_CLASSES, dtype=tf.int32
    )
    noise = tf.random.stateless_normal((count, 28, 28), seed=(seed, 2), stddev=1.0)
    return tf.cast(tf.gather(patterns, labels), tf.float32) + noise, labels


def dataset_fn(count: int, seed: int, global_batch_size: int, training: bool):
    """A tf.distribute dataset function: each input pipeline reads its share, batched per
    replica, as TensorFlow's distributed input guide writes it."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices(images_and_labels(count, seed))
        dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        if training:  # Unseeded: under parameter server each worker draws its own order.
            dataset = dataset.shuffle(count).repeat()
        return dataset.batch(
            context.get_per_replica_batch_size(global_batch_size), drop_remainder=training
        ).prefetch(2)

    return make


def build_model():
    """The tutorial's CNN (called by tfdist inside the strategy's scope)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    layers = tf.keras.layers
    return tf.keras.Sequential(
        [
            layers.Input((28, 28)),
            layers.Reshape((28, 28, 1)),
            layers.Conv2D(32, 3, activation="relu"),
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dense(_NUM_CLASSES),
        ],
        name="tutorial_cnn",
    )


def main(argv):
    del argv
    config = tfdist.config_from_flags()  # Before TensorFlow's import: its start-up logs hidden.
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    plan = tfdist.setup(config, train_examples=_EXAMPLES.value)
    batch = plan.global_batch_size
    summary = tfdist.fit(
        plan,
        build_model,
        dataset_fn(_EXAMPLES.value, seed=1, global_batch_size=batch, training=True),
        validation_data=dataset_fn(1024, seed=2, global_batch_size=batch, training=False),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    if summary["role"] == "train":
        print(
            f"{plan.task}: {summary['strategy']}: "
            f"val_accuracy={summary['final']['val_accuracy']:.4f}",
            flush=True,
        )


if __name__ == "__main__":
    tfdist.run(main)
