"""Examples for the ImageNet recipe's tests: smooth random pictures, encoded, as
tf.train.Examples."""

import io

import numpy as np
import tensorflow as tf
from PIL import Image

from tests.input_pipelines.records import bytes_feature
from tests.input_pipelines.records import int64_feature


def smooth_pixels(height: int, width: int, seed: int) -> np.ndarray:
    """Smooth random colours (JPEG keeps them close), different in every window."""
    coarse = np.random.default_rng(seed).integers(0, 256, (height // 8 + 1, width // 8 + 1, 3))
    return np.asarray(Image.fromarray(coarse.astype(np.uint8)).resize((width, height)))


def encode_image(pixels: np.ndarray, image_format: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(
        buffer, format=image_format, **({"quality": 95} if image_format == "JPEG" else {})
    )
    return buffer.getvalue()


def imagenet_example(encoded: bytes, label: int) -> bytes:
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "image/encoded": bytes_feature(encoded),
                "image/class/label": int64_feature(label),
            }
        )
    ).SerializeToString()
