"""A click-through-rate model with a 1M-row hashed embedding table, under parameter server:
the workload parameter servers exist for. `--variable_partition` shards the table over the ps
tasks, and tfdist logs which ps task holds which rows.

Click logs are generated here, on each worker: a user and an item id (hashed into 2^20
buckets) and two dense features; a click is drawn from a hidden logistic model of the item's
popularity and the dense features.

  tfdist launch --num_workers=2 --num_ps=2 --chief -- \
      python examples/ctr_parameter_server.py --variable_partition=max_shards:2

The same with `launch --keras=3` trains the model in Keras 3, whose `tf.keras` it is then.
"""

from absl import flags

import tfdist

tfdist.define_flags()
_BUCKETS = flags.DEFINE_integer("hash_buckets", 1 << 20, "Rows of the hashed id embedding.")
_EXAMPLES = 1 << 15
_VALIDATION = 1 << 12


def click_logs(seed):
    """An endless stream of (features, clicked) with a learnable click rate; `seed` (an int
    or an int64 tensor) decides the draws, not the rate."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    buckets = _BUCKETS.value

    def example(index):
        key = tf.stack([tf.cast(seed, tf.int64), index])
        item = tf.random.stateless_uniform([], key, maxval=5000, dtype=tf.int64)
        user = tf.random.stateless_uniform([], key + 1, maxval=1 << 30, dtype=tf.int64)
        dense = tf.random.stateless_normal([2], key + 2)
        logit = 2.0 * tf.cast(item % 7 < 3, tf.float32) - 1.0 + dense[0] - 0.5 * dense[1]
        clicked = tf.cast(tf.random.stateless_uniform([], key + 3) < tf.sigmoid(logit), tf.int64)
        ids = tf.strings.to_hash_bucket_fast(
            tf.strings.join(["item:", tf.strings.as_string(item)]), buckets
        )
        user_ids = tf.strings.to_hash_bucket_fast(
            tf.strings.join(["user:", tf.strings.as_string(user % 100_000)]), buckets
        )
        return {"ids": tf.stack([ids, user_ids]), "numeric": dense}, clicked

    return tf.data.Dataset.range(1 << 40).map(example, num_parallel_calls=tf.data.AUTOTUNE)


def dataset_fn(global_batch_size: int, seed: int, training: bool):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Each worker draws its own endless stream, from a seed its clock gives: every worker
        # gets the same input context under parameter server, and one stream for all would
        # train each example on every worker (tfdist refuses that).
        worker_seed = tf.cast(tf.timestamp() * 1e6, tf.int64)
        dataset = click_logs(worker_seed) if training else click_logs(seed).take(_VALIDATION)
        return dataset.batch(
            context.get_per_replica_batch_size(global_batch_size), drop_remainder=training
        ).prefetch(2)

    return make


def build_model():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    layers = tf.keras.layers
    ids = layers.Input((2,), dtype="int64", name="ids")
    numeric = layers.Input((2,), name="numeric")
    embedded = layers.Flatten()(layers.Embedding(_BUCKETS.value, 8, name="hashed_ids")(ids))
    hidden = layers.Dense(32, activation="relu")(layers.Concatenate()([embedded, numeric]))
    clicked = layers.Dense(1, activation="sigmoid", dtype="float32")(hidden)
    return tf.keras.Model({"ids": ids, "numeric": numeric}, clicked, name="ctr")


def main(argv):
    del argv
    config = tfdist.config_from_flags()
    plan = tfdist.setup(config, train_examples=_EXAMPLES)
    summary = tfdist.fit(
        plan,
        build_model,
        dataset_fn(plan.global_batch_size, seed=1, training=True),
        validation_data=dataset_fn(plan.global_batch_size, seed=2, training=False),
        validation_steps=_VALIDATION // plan.global_batch_size,
        loss="binary_crossentropy",
        metrics=["AUC"],
    )
    if summary["role"] == "train":
        final = {name.lower(): value for name, value in summary["final"].items()}
        print(f"ctr: val_auc={final['val_auc']:.4f}")  # Keras 3 (--keras=3) says val_AUC.


if __name__ == "__main__":
    tfdist.run(main)
