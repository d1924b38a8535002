"""TFRecord files for input tests: encoded images, tf.train.Features and Examples in the
`tfrecord:` layout, record files (whole or damaged), and the message `model.fit` raises when an
op of the step fails."""

import io

import numpy as np
import tensorflow as tf
from PIL import Image

IMAGE_KEY = "image/encoded"
LABEL_KEY = "image/class/label"


def encoded_image(image_format: str = "JPEG", seed: int = 0) -> bytes:
    """A random 16x16 RGB image encoded in `image_format` (a PIL format name)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=image_format)
    return buffer.getvalue()


def bytes_feature(*values: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def int64_feature(*values: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def float_feature(*values: float) -> tf.train.Feature:
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def image_example(
    image: tf.train.Feature | None = None,
    label: tf.train.Feature | None = None,
    *,
    omit: str | None = None,
) -> bytes:
    """A serialized tf.train.Example in the `tfrecord:` layout: a JPEG and label 1 unless given;
    `omit` leaves out one of the two keys."""
    feature = {
        IMAGE_KEY: bytes_feature(encoded_image()) if image is None else image,
        LABEL_KEY: int64_feature(1) if label is None else label,
    }
    feature.pop(omit, None)
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_records(path: str, serialized: list[bytes]) -> str:
    """Writes `serialized` records to a TFRecord file at `path`; returns the path."""
    with tf.io.TFRecordWriter(path) as writer:
        for record in serialized:
            writer.write(record)
    return path


def damage_first_record(path: str) -> None:
    """Overwrites the length of the file's first record, so nothing in it can be read."""
    with open(path, "r+b") as damaged:
        damaged.write(b"garbage!")


# The shape of the message `model.fit` raises when an op of the step fails.
GRAPH_ERROR = """Graph execution error:

Detected at node sparse_categorical_crossentropy/Loss defined at (most recent call last):
  File "train.py", line 9, in <module>

  File "losses.py", line 2454, in sparse_categorical_crossentropy

Received a label value of 9 which is outside the valid range of [0, 4).  Label values: {labels}
\t [[{{{{node sparse_categorical_crossentropy/Loss}}}}]] [Op:__inference_train_function_557]"""
