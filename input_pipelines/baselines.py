"""Pipelines to measure tfdist's training pipeline against, on one input pipeline's share of a
dataset's training files (`scripts/benchmark_input.py`):

  naive       the pipeline as first written in TF's tf.data performance guide: one sequential
              reader, a per-example map (parse, decode the raw bytes, augment with tf.image's
              per-image ops, normalise), batch; no interleave, no parallel map, no prefetch.
  tfdist      tfdist's training pipeline with augmentation on the host.
  a stage     tfdist's training pipeline cut after one of its steps (`BASELINE_STAGES`): read,
              shuffle, parse, decode; batched and mapped as tfdist's pipeline does. Cut after "parse"
              without the shuffle it is the I/O floor (`parse_only`).
"""

import math

import tensorflow as tf

from . import pipeline
from . import preprocessing
from . import sources
from .config import InputConfig
from .config import Placement
from .config import PreprocessOn
from .config import ReadOptions

_SINGLE_PIPELINE = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                              num_replicas_in_sync=1)


def naive(config: InputConfig) -> tf.data.Dataset:
    """One reader, a per-example map with tfdist's augmentation, batch; nothing overlapped."""
    source = sources.source(config)
    size = source.info.image_shape[0]

    def parse_and_preprocess(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        features = tf.io.parse_single_example(record, source.features)
        image = tf.reshape(tf.io.decode_raw(features[source.image_key], tf.uint8),
                           source.raw_image_shape)
        padded = size + 2 * preprocessing.CROP_PADDING
        image = tf.image.random_crop(tf.image.resize_with_crop_or_pad(image, padded, padded),
                                     source.info.image_shape)
        image = tf.image.random_flip_left_right(image)
        image = tf.image.random_brightness(tf.cast(image, tf.float32),
                                           255 * preprocessing.MAX_BRIGHTNESS_DELTA)
        image = tf.clip_by_value(image, 0.0, 255.0) / 127.5 - 1.0
        return image, features[source.label_key]

    dataset = tf.data.TFRecordDataset(list(source.files[sources.TRAIN]))
    return dataset.map(parse_and_preprocess).repeat().batch(config.global_batch_size)


def tfdist(config: InputConfig) -> tf.data.Dataset:
    """tfdist's training pipeline, augmentation on the host, prefetched."""
    read = ReadOptions(split=sources.TRAIN, training=True, placement=Placement(PreprocessOn.HOST))
    return pipeline.examples(config, read, _SINGLE_PIPELINE, announce=False).prefetch(
        tf.data.AUTOTUNE)


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
    work = {"parse": lambda serialized: tf.io.parse_example(serialized, source.features),
            "decode": lambda serialized: pipeline.parse_and_decode(source, serialized)}.get(last)
    if work:  # Batched and mapped as tfdist's pipeline does, several batches per map call.
        calls = pipeline.batches_per_call(batch, math.prod(source.info.image_shape))
        batches = pipeline.map_batches(records.repeat(), batch, work, drop_remainder=True,
                                       calls=calls)
    else:
        batches = records.repeat().batch(batch, drop_remainder=True)
    return batches.with_options(pipeline.options(config)).prefetch(tf.data.AUTOTUNE)
