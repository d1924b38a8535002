"""A text classifier on your own TFRecords, through tfdist's input pipeline, under mirrored.

Variable-length token ids in `tf.train.Example`s, generated here (a review is positive when
most of its words come from the upper half of the vocabulary); the model is an embedding,
average pooling and a softmax. The records reach the model through `tfdist.Records`: tfdist's
sharding plan, shuffling, per-replica batching, then this file's `parse` once per batch.

  python examples/text_classifier.py --records_dir=/tmp/text \
      --strategy=mirrored --num_cpu_devices=2
"""

import os

from absl import flags

import tfdist

tfdist.define_flags()
_RECORDS_DIR = flags.DEFINE_string("records_dir", "/tmp/tfdist_text", "Where the records go.")
_FILES, _PER_FILE = 8, 512
VOCABULARY, MAX_TOKENS = 1000, 48


def write_records(directory: str, split: str, files: int, seed: int) -> str:
    """Writes `files` TFRecord files of `_PER_FILE` examples; returns their glob."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    for index in range(files):
        path = os.path.join(directory, f"{split}-{index:03d}.tfrecord")
        if os.path.exists(path):
            continue
        with tf.io.TFRecordWriter(path + ".tmp") as writer:
            for _ in range(_PER_FILE):
                label = int(rng.integers(2))
                length = int(rng.integers(4, MAX_TOKENS))
                upper = rng.random(length) < (0.7 if label else 0.3)
                tokens = np.where(
                    upper,
                    rng.integers(VOCABULARY // 2, VOCABULARY, length),
                    rng.integers(1, VOCABULARY // 2, length),
                )
                writer.write(
                    tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                "tokens": tf.train.Feature(
                                    int64_list=tf.train.Int64List(value=tokens)
                                ),
                                "label": tf.train.Feature(
                                    int64_list=tf.train.Int64List(value=[label])
                                ),
                            }
                        )
                    ).SerializeToString()
                )
        os.replace(path + ".tmp", path)
    return os.path.join(directory, f"{split}-*.tfrecord")


def parse(serialized):
    """A batch of serialized examples -> ({"tokens": [batch, MAX_TOKENS] ids, 0-padded},
    labels)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    parsed = tf.io.parse_example(
        serialized,
        {"tokens": tf.io.RaggedFeature(tf.int64), "label": tf.io.FixedLenFeature([], tf.int64)},
    )
    tokens = parsed["tokens"][:, :MAX_TOKENS].to_tensor(0, shape=[None, MAX_TOKENS])
    return {"tokens": tokens}, parsed["label"]


def build_model():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    layers = tf.keras.layers
    tokens = layers.Input((MAX_TOKENS,), dtype="int64", name="tokens")
    embedded = layers.Embedding(VOCABULARY, 16, mask_zero=True)(tokens)
    hidden = layers.Dense(16, activation="relu")(layers.GlobalAveragePooling1D()(embedded))
    outputs = layers.Dense(2, activation="softmax", dtype="float32")(hidden)
    return tf.keras.Model({"tokens": tokens}, outputs, name="text_classifier")


def main(argv):
    del argv
    config = tfdist.config_from_flags()
    train = write_records(_RECORDS_DIR.value, "train", _FILES, seed=1)
    validation = write_records(_RECORDS_DIR.value, "validation", 2, seed=2)
    plan = tfdist.setup(config, train_examples=_FILES * _PER_FILE)
    summary = tfdist.fit(
        plan,
        build_model,
        tfdist.Records(train, parse),
        validation_data=tfdist.Records(validation, parse, num_examples=2 * _PER_FILE),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    if summary["role"] == "train":
        print(f"text classifier: val_accuracy={summary['final']['val_accuracy']:.4f}")


if __name__ == "__main__":
    tfdist.run(main)
