"""Image TFRecords for input tests: random JPEGs of varying size under ImageNet's keys."""

import io
import os

import numpy as np
import tensorflow as tf
from PIL import Image


def jpeg(height: int, width: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return buffer.getvalue()


def write_image_tfrecords(
    directory: str, split: str, num_files: int, examples_per_file: int
) -> list[str]:
    """Writes `{split}-0000i-of-n` files of JPEG images of varying size with ImageNet's keys."""
    paths = []
    for file_index in range(num_files):
        path = os.path.join(directory, f"{split}-{file_index:05d}-of-{num_files:05d}")
        with tf.io.TFRecordWriter(path) as writer:
            for position in range(examples_per_file):
                seed = file_index * 1000 + position
                feature = {
                    "image/encoded": tf.train.Feature(
                        bytes_list=tf.train.BytesList(
                            value=[jpeg(20 + seed % 7, 24 + seed % 5, seed)]
                        )
                    ),
                    "image/class/label": tf.train.Feature(
                        int64_list=tf.train.Int64List(value=[seed % 3])
                    ),
                }
                writer.write(
                    tf.train.Example(
                        features=tf.train.Features(feature=feature)
                    ).SerializeToString()
                )
        paths.append(path)
    return paths
