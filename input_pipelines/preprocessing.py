"""Image preprocessing on whole batches, usable on the host (in tf.data) or on the device (in the
model).

Both placements run the same functions, so they produce the same distribution of inputs:
augmentation, then normalisation to [-1, 1] and the cast to the compute dtype. Augmentation is
the recipe's (`Augment`): small = random crop from a reflect-padded image, horizontal flip,
brightness; imagenet = horizontal flip only (its random-resized crop runs in the host's decode,
imagenet_recipe.py); none = nothing. Every op works on a batch at once:
per-example ops cost tf.data a fixed overhead per element that dominates small images.
Measured on 2 cores, 128 images of 32x32x3: `tf.pad(mode="REFLECT")` alone took 4.7 ms and a
`tf.where` flip of reversed uint8 images 5.9 ms, so crop and flip are index arithmetic and two
gathers instead. The imagenet recipe's flip, alone, is that select after all: XLA on the host
fuses it with the normalisation (see `flip`).
"""

import tensorflow as tf
import tf_keras

from .choices import Augment
from .choices import PreprocessOn
from .messages import InputConfigError
from .messages import log
from .read_options import Placement

CROP_PADDING = 4
MAX_BRIGHTNESS_DELTA = 0.125  # Of the full 0-255 range.
# CPU time per 224x224x3 image, batches of 128 on 2 cores, small and imagenet recipes: in a traced
# step without XLA, as a model's first layer runs on a CPU replica (0.61 and 0.98 ms), against
# the XLA-compiled host function (0.125 and 0.062 ms).
_CPU_DEVICE_MS = "0.6-1.0"
_CPU_HOST_MS = "0.06-0.13"


def resolve_placement(
    preprocess_on: PreprocessOn, *, num_gpus: int, compute_dtype: str = "float32"
) -> Placement:
    """`auto` is DEVICE when the replicas are GPUs, else HOST. DEVICE asked for without GPU
    replicas is kept, with one warning line: the work then runs in the training step on the
    CPU, without the host's XLA compilation."""
    if preprocess_on is PreprocessOn.AUTO:
        preprocess_on = PreprocessOn.DEVICE if num_gpus else PreprocessOn.HOST
    elif preprocess_on is PreprocessOn.DEVICE and not num_gpus:
        log(
            f"--preprocess_on=device with no GPU replicas: augmentation and normalisation run "
            f"inside each training step on the CPU, without XLA, {_CPU_DEVICE_MS} ms of CPU per "
            f"224x224 image against {_CPU_HOST_MS} ms on the host (measured on 2 cores); use "
            "--preprocess_on=host, or auto (device only with GPUs)"
        )
    return Placement(preprocess_on, compute_dtype)


def _reflect(index: tf.Tensor, size: tf.Tensor) -> tf.Tensor:
    """Maps indices in [-size + 1, 2 * size - 2] into [0, size) by mirroring at the edges."""
    return (size - 1) - tf.abs((size - 1) - tf.abs(index))


def _uniform(shape, seed: tf.Tensor | None, index: int, minval=0, maxval=None, dtype=tf.float32):
    """Random numbers of `shape`: stateless, the `index`-th draw of `seed` ([2] int), or from
    TensorFlow's stateful generator when `seed` is None."""
    if seed is None:
        return tf.random.uniform(shape, minval, maxval, dtype)
    draw_seed = tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), index)
    return tf.random.stateless_uniform(shape, draw_seed, minval, maxval, dtype)


def augment(images: tf.Tensor, seed: tf.Tensor | None = None) -> tf.Tensor:
    """Random crop, flip and brightness of a uint8 batch `[B, H, W, C]`; returns float32 in
    [0, 255]. With `seed` ([2] int), the draws are a function of it alone (stateless), so the
    same batch and seed augment alike in every run; else TensorFlow's stateful generator's.

    The crop takes each image at its own offset of up to `CROP_PADDING` pixels from a
    reflect-padded copy, and the flip mirrors a random half of the images; both are one gather
    of rows and one of columns, with no padded copy made.
    """
    # The gathers run on float32: TensorFlow has no GPU kernel of GatherV2 for uint8, so on a
    # GPU they ran on the host, with a copy each way per batch (device preprocessing measured
    # 0.59x host on an H200, docs/PERFORMANCE.md). Under XLA on the host the cast is free.
    images = tf.cast(images, tf.float32)
    batch_size, height, width = tf.shape(images)[0], tf.shape(images)[1], tf.shape(images)[2]
    offsets = _uniform([2, batch_size], seed, 0, -CROP_PADDING, CROP_PADDING + 1, tf.int32)
    rows = _reflect(offsets[0][:, None] + tf.range(height)[None], height)
    cols = _reflect(offsets[1][:, None] + tf.range(width)[None], width)
    flip = _uniform([batch_size, 1], seed, 1, maxval=1.0) < 0.5
    cols = tf.where(flip, tf.reverse(cols, axis=[1]), cols)
    images = tf.gather(tf.gather(images, rows, axis=1, batch_dims=1), cols, axis=2, batch_dims=1)
    delta = _uniform(
        [batch_size, 1, 1, 1],
        seed,
        2,
        -255.0 * MAX_BRIGHTNESS_DELTA,
        255.0 * MAX_BRIGHTNESS_DELTA,
    )
    return tf.clip_by_value(images + delta, 0.0, 255.0)


def flip(images: tf.Tensor, seed: tf.Tensor | None = None) -> tf.Tensor:
    """Mirrors a random half of a batch `[B, H, W, C]` left to right (the imagenet recipe's
    augmentation after its crop); returns float32. `seed` as `augment`'s.

    A select between the batch and its mirror, not `augment`'s gather: XLA on the host fuses
    it into the normalisation's loop. Measured on 2 cores, 128 images of 224x224x3: flip and
    normalisation took 0.068 ms of CPU per image, 0.107 with a gather of columns (normalisation
    alone: 0.059).
    """
    images = tf.cast(images, tf.float32)  # As `augment`'s: kernels on every device.
    flipped = _uniform([tf.shape(images)[0], 1, 1, 1], seed, 0, maxval=1.0) < 0.5
    return tf.where(flipped, tf.reverse(images, axis=[2]), images)


def normalise(images: tf.Tensor, compute_dtype: str) -> tf.Tensor:
    """Maps pixel values in [0, 255] to [-1, 1] in `compute_dtype`."""
    return tf.cast(tf.cast(images, tf.float32) / 127.5 - 1.0, compute_dtype)


def preprocess(
    images: tf.Tensor,
    *,
    training: bool,
    compute_dtype: str,
    seed: tf.Tensor | None = None,
    augmentation: Augment = Augment.SMALL,
) -> tf.Tensor:
    """What every batch goes through before the model: the recipe's augmentation when
    training (`augmentation`: small, imagenet or none; see the module's docstring), then
    normalisation and the cast."""
    if training and augmentation is Augment.SMALL:
        images = augment(images, seed)
    elif training and augmentation is Augment.IMAGENET:
        images = flip(images, seed)
    return normalise(images, compute_dtype)


# On the host, `preprocess` runs XLA-compiled: one fused loop instead of a kernel per op.
# Measured on 2 cores, a batch of 128 32x32x3 images: 1.15 ms instead of 3.9 ms.
preprocess_on_host = tf.function(preprocess, jit_compile=True)


class DevicePreprocessing(tf_keras.layers.Layer):
    """`preprocess` as the model's first layer, so it runs in each replica's step on that
    replica's device. Augments, as `augmentation` says (`InputConfig.augmentation`, the recipe
    the pipeline read the images for), only when Keras calls it with `training=True` (in
    `fit`)."""

    def __init__(self, *, augmentation: Augment | str = Augment.SMALL, **kwargs):
        super().__init__(**kwargs)
        self.augmentation = Augment(augmentation)
        if self.augmentation is Augment.AUTO:
            raise InputConfigError(
                "augmentation=auto is resolved by the input config; pass "
                "InputConfig.augmentation (imagenet, small or none)."
            )

    def call(self, images, training=None):  # pylint: disable=arguments-differ
        return preprocess(
            images,
            training=bool(training),
            compute_dtype=self.compute_dtype,
            augmentation=self.augmentation,
        )

    def get_config(self) -> dict:
        return {**super().get_config(), "augmentation": self.augmentation.value}
