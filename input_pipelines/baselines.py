"""Pipelines to measure tfdist's training pipeline against, on one input pipeline's share of a
dataset's training files (`scripts/input_pipeline/benchmark_input.py`):

  naive          the pipeline as first written in TF's tf.data performance guide: one sequential
                 reader, a per-example map (parse, decode, augment with tf.image's per-image ops,
                 normalise), batch; no interleave, no parallel map, no prefetch.
  tfdist         tfdist's training pipeline with augmentation on the host.
  tfdist_device  what of it the host still does under --preprocess_on=device: read, decode (the
                 imagenet recipe's crop included), batch; no flip, normalisation or cast.
  a stage        tfdist's training pipeline cut after one of its steps (`BASELINE_STAGES`): read,
                 shuffle, parse, decode; batched and mapped as tfdist's pipeline does. Cut after
                 "parse" without the shuffle it is the I/O floor (`parse_only`).
  best_practice  JPEG records only: TF's official ResNet ImageNet training input, written as
                 tensorflow/models' official/legacy/image_classification/resnet/
                 imagenet_preprocessing.py writes it (`input_fn`, `_decode_crop_and_flip`).
  decode_only    JPEG records only: the floor of any pipeline that decodes whole images.
"""

import math

import tensorflow as tf

from . import image_batches
from . import pipeline
from . import preprocessing
from . import sources
from .choices import PreprocessOn
from .config import InputConfig
from .messages import InputConfigError
from .read_options import Placement
from .read_options import ReadOptions

_SINGLE_PIPELINE = tf.distribute.InputContext(
    num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1
)


def _naive_image(source: sources.Source, features: dict[str, tf.Tensor]) -> tf.Tensor:
    """One example's image as the naive pipeline makes it: raw pixels get tfdist's augmentation
    (crop from a padded copy, flip, brightness), an encoded image is decoded whole, resized to
    the dataset's size and flipped; either is normalised to [-1, 1]."""
    size = source.info.image_shape[0]
    if source.raw_image_shape:
        image = tf.reshape(
            tf.io.decode_raw(features[source.image_key], tf.uint8), source.raw_image_shape
        )
        padded = size + 2 * preprocessing.CROP_PADDING
        image = tf.image.random_crop(
            tf.image.resize_with_crop_or_pad(image, padded, padded), source.info.image_shape
        )
        image = tf.image.random_flip_left_right(image)
        image = tf.image.random_brightness(
            tf.cast(image, tf.float32), 255 * preprocessing.MAX_BRIGHTNESS_DELTA
        )
    else:
        image = tf.io.decode_image(features[source.image_key], channels=3, expand_animations=False)
        image = tf.image.random_flip_left_right(tf.image.resize(image, [size, size]))
    return tf.clip_by_value(image, 0.0, 255.0) / 127.5 - 1.0


def naive(config: InputConfig) -> tf.data.Dataset:
    """One reader, a per-example map (parse, decode, augment, normalise), batch; nothing
    overlapped."""
    source = sources.source(config)

    def parse_and_preprocess(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        features = tf.io.parse_single_example(record, source.features)
        return _naive_image(source, features), features[source.label_key]

    dataset = tf.data.TFRecordDataset(list(source.files[sources.TRAIN]))
    return dataset.map(parse_and_preprocess).repeat().batch(config.global_batch_size)


def tfdist(config: InputConfig, on: PreprocessOn = PreprocessOn.HOST) -> tf.data.Dataset:
    """tfdist's training pipeline, prefetched: augmentation on the host, or (`on=DEVICE`) the
    host's share when the device preprocesses (decode, and the imagenet recipe's crop)."""
    read = ReadOptions(split=sources.TRAIN, training=True, placement=Placement(on))
    return image_batches.examples(config, read, _SINGLE_PIPELINE, announce=False).prefetch(
        tf.data.AUTOTUNE
    )


def stage(config: InputConfig, last: str, *, shuffle: bool = True) -> tf.data.Dataset:
    """tfdist's training pipeline up to and including stage `last` (of `BASELINE_STAGES`); with
    `shuffle=False` no example shuffle (the file order is shuffled either way)."""
    source = sources.source(config)
    batch = config.global_batch_size
    files = source.files[sources.TRAIN]
    plan = pipeline.shard_plan(config, len(files), _SINGLE_PIPELINE, training=True)
    records = pipeline.read_records(config, files, plan, shuffle_seed=config.seed)
    if shuffle and last != "read":
        records = records.shuffle(config.shuffle_buffer_size, seed=config.seed)
    work = {
        "parse": lambda serialized: tf.io.parse_example(serialized, source.features),
        "decode": lambda serialized: image_batches.parse_and_decode(source, serialized),
    }.get(last)
    if work:  # Batched and mapped as tfdist's pipeline does, several batches per map call.
        calls = pipeline.batches_per_call(batch, math.prod(source.info.image_shape))
        batches = pipeline.map_batches(
            records.repeat(), batch, work, drop_remainder=True, calls=calls
        )
    else:
        batches = records.repeat().batch(batch, drop_remainder=True)
    return batches.with_options(pipeline.options(config)).prefetch(tf.data.AUTOTUNE)


# TF's official ResNet ImageNet input (see the module's docstring): its reader's cycle length, the
# random crop's bounds, and the channel means it subtracts.
_OFFICIAL_CYCLE_LENGTH = 10
_OFFICIAL_CROP = {
    "min_object_covered": 0.1,
    "aspect_ratio_range": (0.75, 1.33),
    "area_range": (0.05, 1.0),
    "max_attempts": 100,
    "use_image_if_no_bounding_boxes": True,
}
_OFFICIAL_CHANNEL_MEANS = (123.68, 116.78, 103.94)


def _jpeg_source(config: InputConfig, kind: str) -> sources.Source:
    """The source of `config`, which must hold encoded images."""
    source = sources.source(config)
    if source.raw_image_shape:
        raise InputConfigError(
            f"kind={kind!r} reads JPEG records, and dataset={config.dataset!r} "
            "stores raw pixels; pass dataset='tfrecord:<glob>' of JPEG records."
        )
    return source


def _official_reader(config: InputConfig, source: sources.Source) -> tf.data.Dataset:
    """The training files in a new order each epoch, read by a parallel interleave."""
    files = list(source.files[sources.TRAIN])
    dataset = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files), seed=config.seed)
    return dataset.interleave(
        tf.data.TFRecordDataset,
        cycle_length=_OFFICIAL_CYCLE_LENGTH,
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def best_practice(config: InputConfig) -> tf.data.Dataset:
    """TF's official ResNet ImageNet training input: files shuffled, a parallel interleave of
    readers, an example shuffle, repeat; then per example, in a parallel map: parse, a random
    crop window (`tf.image.sample_distorted_bounding_box` over the JPEG's header shape; no
    boxes are stored, so the whole image is the object), the fused `decode_and_crop_jpeg`,
    random flip, bilinear resize to the dataset's size, the channel means subtracted; batch
    (dropping the remainder), prefetch. tf.data's options are TF's defaults (autotuning on)."""
    source = _jpeg_source(config, "best_practice")
    size = source.info.image_shape[0]
    no_boxes = tf.zeros([1, 0, 4], tf.float32)

    def parse_and_preprocess(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        features = tf.io.parse_single_example(record, source.features)
        encoded = features[source.image_key]
        begin, crop_size, _ = tf.image.sample_distorted_bounding_box(
            tf.image.extract_jpeg_shape(encoded), bounding_boxes=no_boxes, **_OFFICIAL_CROP
        )
        window = tf.stack([begin[0], begin[1], crop_size[0], crop_size[1]])
        image = tf.image.decode_and_crop_jpeg(encoded, window, channels=3)
        image = tf.image.resize(tf.image.random_flip_left_right(image), [size, size])
        image = tf.ensure_shape(image, source.info.image_shape)
        return image - _OFFICIAL_CHANNEL_MEANS, features[source.label_key]

    dataset = (
        _official_reader(config, source)
        .shuffle(config.shuffle_buffer_size, seed=config.seed)
        .repeat()
    )
    dataset = dataset.map(parse_and_preprocess, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(config.global_batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def decode_only(config: InputConfig) -> tf.data.Dataset:
    """The floor: the training files read as `best_practice` reads them (no example shuffle),
    each record parsed and its JPEG decoded whole (`tf.io.decode_jpeg`) in a parallel map, then
    reduced to its first pixel (a slice of 3 bytes, so that the batch needs no resize and
    nothing but the decode costs); batch, prefetch."""
    source = _jpeg_source(config, "decode_only")

    def parse_and_decode(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        features = tf.io.parse_single_example(record, source.features)
        image = tf.io.decode_jpeg(features[source.image_key], channels=3)
        return image[0, 0], features[source.label_key]

    dataset = _official_reader(config, source).repeat()
    dataset = dataset.map(parse_and_decode, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(config.global_batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
