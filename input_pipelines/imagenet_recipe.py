"""The ImageNet recipe's crops (`augment=imagenet`): a random-resized crop fused with the JPEG
decode for training, a centre crop for evaluation; both on the host, in the batch's map.

Training, per image (a `tf.map_fn` over the batch, as every JPEG/PNG decode in tfdist):
  tf.image.extract_jpeg_shape (reads the header only)
  -> tf.image.stateless_sample_distorted_bounding_box: a window covering `crop_area_range`
     (0.08 to 1) of the image's area, of width/height in `crop_aspect_range` (3/4 to 4/3),
     min_object_covered 0.1, 10 attempts; when none fits, TF returns the whole image, which is
     replaced by the evaluation's centre crop
  -> tf.image.decode_and_crop_jpeg (decodes only the window's blocks: the fusion is the speed)
  -> bilinear resize to image_size x image_size, truncated to uint8.
Then, per batch, where `preprocess_on` says: a horizontal flip of a random half of the images,
normalisation and the cast (`preprocessing.preprocess`; the flip is one select).
Evaluation: the central square whose side is 0.875 of the short side (at 224 the same pixels as
resizing the short side to 256 and cutting the central 224; at every size, as timm and
torchvision take it, where TF's official code pads by 32 pixels and so cuts more from smaller
images), fused with the decode, resized to image_size.
Images that are not JPEG (PNG, GIF, ...; `tf.io.is_jpeg` per image) cannot be cut while decoded:
they are decoded whole, then cut to the same window; so are raw-pixel datasets (whole batches).

Source: the random-resized crop is Inception's (Szegedy et al. 2015, "Going deeper with
convolutions", section 6). TF's official ResNet preprocessing (tensorflow/tpu's
models/official/resnet/resnet_preprocessing.py; the Model Garden's
official/legacy/image_classification/preprocessing.py) fuses it with the decode, with the same
ranges, attempts and centre-crop fallback, and evaluates on the 0.875 centre crop; Goyal et al.
2017 ("Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour") train ResNet-50 to 76.3%
top-1 with it. Unlike those, images are normalised to [-1, 1] as in tfdist's other recipes.
"""

import dataclasses
import fractions

import tensorflow as tf

from . import preprocessing
from . import records
from .choices import Augment
from .config import InputConfig

EVAL_CROP_FRACTION = 0.875  # Of the short side: the central 224 of 256.
MAX_ATTEMPTS = 10
MIN_OBJECT_COVERED = 0.1
_WHOLE_IMAGE = ((0.0, 0.0, 1.0, 1.0),)  # The one "object" box: the image itself.
_PARALLEL_IMAGES = 32  # Images cropped concurrently within a batch (as pipeline's decode).


@dataclasses.dataclass(frozen=True, kw_only=True)
class Crop:
    """What one batch's crops need: training (random) or evaluation (centre), the output side
    and channels, and the random crop's ranges (see `InputConfig`)."""

    training: bool
    image_size: int
    channels: int
    area_range: tuple[float, float]
    aspect_range: tuple[float, float]

    @classmethod
    def of(
        cls, config: InputConfig, image_shape: tuple[int, int, int], *, training: bool
    ) -> "Crop":
        return cls(
            training=training,
            image_size=image_shape[0],
            channels=image_shape[2],
            area_range=config.crop_area_range,
            aspect_range=config.crop_aspect_range,
        )


def centre_window(shape: tf.Tensor) -> tf.Tensor:
    """The evaluation crop of an image of `shape` ([height, width, ...], int32) as the window
    [top, left, height, width] that `tf.image.decode_and_crop_jpeg` takes."""
    height, width = shape[0], shape[1]
    side = tf.cast(EVAL_CROP_FRACTION * tf.cast(tf.minimum(height, width), tf.float32), tf.int32)
    side = tf.maximum(side, 1)
    return tf.stack([(height - side + 1) // 2, (width - side + 1) // 2, side, side])


def random_window(shape: tf.Tensor, seed: tf.Tensor, crop: Crop) -> tf.Tensor:
    """A random-resized crop's window [top, left, height, width] of an image of `shape`
    ([height, width, channels], int32), drawn with the stateless `seed` ([2] int32); the
    centre window when no attempt fits."""
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape,
        bounding_boxes=tf.constant([_WHOLE_IMAGE], tf.float32),
        seed=seed,
        min_object_covered=MIN_OBJECT_COVERED,
        aspect_ratio_range=crop.aspect_range,
        area_range=crop.area_range,
        max_attempts=MAX_ATTEMPTS,
        use_image_if_no_bounding_boxes=True,
    )
    whole = tf.reduce_all(tf.equal(size[:2], shape[:2]))
    return tf.where(whole, centre_window(shape), tf.stack([begin[0], begin[1], size[0], size[1]]))


def _window(shape: tf.Tensor, seed: tf.Tensor, crop: Crop) -> tf.Tensor:
    return random_window(shape, seed, crop) if crop.training else centre_window(shape)


def _cut(image: tf.Tensor, window: tf.Tensor) -> tf.Tensor:
    """The `window` ([top, left, height, width]) of a decoded `image`."""
    return tf.slice(image, [window[0], window[1], 0], [window[2], window[3], -1])


def _resize(image: tf.Tensor, crop: Crop) -> tf.Tensor:
    """`image` resized to the output side (bilinear), truncated to uint8 as tfdist's other
    resizes are: rounding cost 0.05 ms of the 1.2 ms an image takes (2 cores, 224x224 output),
    for half a grey level that train and evaluation share."""
    resized = tf.image.resize(image, [crop.image_size, crop.image_size])
    return tf.ensure_shape(
        tf.cast(resized, tf.uint8), [crop.image_size, crop.image_size, crop.channels]
    )


def _crop_encoded(encoded: tf.Tensor, seed: tf.Tensor, crop: Crop) -> tf.Tensor:
    """One encoded image's crop, resized: fused with the decode for a JPEG, else decoded whole
    and cut."""

    def jpeg() -> tf.Tensor:
        window = _window(tf.image.extract_jpeg_shape(encoded), seed, crop)
        return tf.image.decode_and_crop_jpeg(encoded, window, channels=crop.channels)

    def other() -> tf.Tensor:
        image = records.decode_image(encoded, crop.channels)
        return _cut(image, _window(tf.shape(image), seed, crop))

    return _resize(tf.cond(tf.io.is_jpeg(encoded), jpeg, other), crop)


def _seeds(batch_size: tf.Tensor, crop: Crop, seed: tf.Tensor | None) -> tf.Tensor:
    """A stateless seed per image, drawn anew per batch: from the batch's `seed` ([2] int,
    `pipeline.map_batches`), else from TensorFlow's stateful generator; none drawn for the
    evaluation's centre crop, which uses none."""
    if not crop.training:
        return tf.zeros([batch_size, 2], tf.int32)
    if seed is None:
        return tf.random.uniform([batch_size, 2], 0, tf.int32.max, tf.int32)
    crop_seed = tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), _CROP_DRAW)
    return tf.random.stateless_uniform([batch_size, 2], crop_seed, 0, tf.int32.max, tf.int32)


# The crop's draw from a batch's seed; the preprocessing's augmentation takes draws 0-2.
_CROP_DRAW = 3


def crop_encoded(encoded: tf.Tensor, crop: Crop, seed: tf.Tensor | None = None) -> tf.Tensor:
    """A batch of encoded images ([B] string) as the uint8 crops `[B, S, S, C]` of `crop`,
    drawn from the batch's `seed` (see `_seeds`)."""
    spec = tf.TensorSpec([crop.image_size, crop.image_size, crop.channels], tf.uint8)
    return tf.map_fn(
        lambda args: _crop_encoded(*args, crop),
        (encoded, _seeds(tf.size(encoded), crop, seed)),
        parallel_iterations=_PARALLEL_IMAGES,
        fn_output_signature=spec,
    )


def crop_decoded(images: tf.Tensor, crop: Crop, seed: tf.Tensor | None = None) -> tf.Tensor:
    """`crop_encoded` for a batch decoded already (uint8 `[B, H, W, C]`, raw-pixel datasets)."""
    spec = tf.TensorSpec([crop.image_size, crop.image_size, crop.channels], tf.uint8)
    return tf.map_fn(
        lambda args: _resize(_cut(args[0], _window(tf.shape(args[0]), args[1], crop)), crop),
        (images, _seeds(tf.shape(images)[0], crop, seed)),
        parallel_iterations=_PARALLEL_IMAGES,
        fn_output_signature=spec,
    )


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.3g}"


def _ratio(value: float) -> str:
    """3/4 for 0.75, 4/3 for 1.3333..., else the number."""
    near = fractions.Fraction(value).limit_denominator(16)
    return str(near) if abs(float(near) - value) < 1e-6 else f"{value:.3g}"


def describe(config: InputConfig) -> str:
    """The augmentation and evaluation of `config` in a few words, for the announce line."""
    augment = config.augmentation
    if augment is Augment.IMAGENET:
        (area_min, area_max), (aspect_min, aspect_max) = (
            config.crop_area_range,
            config.crop_aspect_range,
        )
        return (
            f"augmentation: imagenet (random-resized crop {_percent(area_min)}-"
            f"{_percent(area_max)}% area, aspect {_ratio(aspect_min)}-{_ratio(aspect_max)}, "
            f"fused with the decode on the host; flip), evaluation: centre crop "
            f"{EVAL_CROP_FRACTION:g} of the short side"
        )
    if augment is Augment.SMALL:
        return (
            f"augmentation: small (shift of up to {preprocessing.CROP_PADDING} px from a "
            f"reflect-padded image, flip, brightness +-"
            f"{_percent(preprocessing.MAX_BRIGHTNESS_DELTA)}%), evaluation: whole image"
        )
    return "augmentation: none (training reads images as evaluation does)"
