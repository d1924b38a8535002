"""Image datasets as batches of examples through `pipeline.batches`: each batch of records
parsed and its images decoded (cropped as `imagenet_recipe` says) and, when placed on the host,
preprocessed, in one map, as dicts {image, label[, id]}; and the synthetic dataset's one batch.
"""

import math

import tensorflow as tf

from . import imagenet_recipe
from . import pipeline
from . import preprocessing
from . import records
from . import sources
from .choices import Augment
from .config import InputConfig
from .config import per_replica_batch_size
from .imagenet_recipe import Crop
from .messages import InputConfigError
from .messages import log
from .read_options import Placement
from .read_options import ReadOptions
from .sources import Source

IMAGE = "image"
LABEL = "label"
ID = "id"
_DECODE_PARALLELISM = 32  # Images decoded concurrently within a batch: 1.35x the default 10.


def _decode_images(
    encoded: tf.Tensor, source: Source, crop: Crop | None = None, seed: tf.Tensor | None = None
) -> tf.Tensor:
    """Decodes a batch of encoded images to uint8 `[B, H, W, C]`: the crops of `crop` when
    given (imagenet_recipe.py, drawn from the batch's `seed`), else whole, resized if the
    source says so.

    Raw images decode as one op for the whole batch; JPEG/PNG need one decode per image.
    """
    height, width, channels = source.info.image_shape
    if source.raw_image_shape:
        images = tf.reshape(tf.io.decode_raw(encoded, tf.uint8), [-1, *source.raw_image_shape])
        if crop is not None:
            return imagenet_recipe.crop_decoded(images, crop, seed)
        if source.resize:
            images = tf.cast(tf.image.resize(images, [height, width]), tf.uint8)
        return images
    if crop is not None:
        return imagenet_recipe.crop_encoded(encoded, crop, seed)

    def decode(image: tf.Tensor) -> tf.Tensor:
        image = records.decode_image(image, channels)
        if source.resize:
            image = tf.cast(tf.image.resize(image, [height, width]), tf.uint8)
        return tf.ensure_shape(image, source.info.image_shape)

    return tf.map_fn(
        decode,
        encoded,
        parallel_iterations=_DECODE_PARALLELISM,
        fn_output_signature=tf.TensorSpec(source.info.image_shape, tf.uint8),
    )


def parse_and_decode(
    source: Source,
    serialized: tf.Tensor,
    position_ids: tf.Tensor | None = None,
    *,
    crop: Crop | None = None,
    seed: tf.Tensor | None = None,
) -> dict[str, tf.Tensor]:
    """Parses and decodes one batch of records into {image uint8, label[, id]}, the images
    cropped as `crop` says when given (from the batch's `seed`), the labels less the source's
    `label_offset`; the id is the stored one, else `position_ids` when given."""
    features = tf.io.parse_example(serialized, source.features)
    labels = features[source.label_key]
    batch = {
        IMAGE: _decode_images(features[source.image_key], source, crop, seed),
        LABEL: labels - source.label_offset if source.label_offset else labels,
    }
    if source.id_key or position_ids is not None:
        batch[ID] = features[source.id_key] if source.id_key else position_ids
    return batch


def _host_work(
    config: InputConfig,
    source: Source,
    read: ReadOptions,
    records: tuple[tf.Tensor, ...],
    seed: tf.Tensor | None = None,
) -> dict[str, tf.Tensor]:
    """Everything the host does to one batch of images, in one map: parse, decode (cropped
    with augment=imagenet) and, when placed on the host, preprocess, its augmentation drawn
    from the call's stateless `seed` (`pipeline.map_batches`)."""
    augmentation = config.augmentation
    crop = (
        Crop.of(config, source.info.image_shape, training=read.training)
        if augmentation is Augment.IMAGENET
        else None
    )
    batch = parse_and_decode(source, *records, crop=crop, seed=seed)
    if not read.placement.on_device:
        batch[IMAGE] = preprocessing.preprocess_on_host(
            batch[IMAGE],
            training=read.training,
            compute_dtype=read.placement.compute_dtype,
            augmentation=augmentation,
            seed=seed,
        )
    return batch


def examples(
    config: InputConfig,
    read: ReadOptions,
    context: tf.distribute.InputContext,
    *,
    repeat: bool = True,
    announce: bool = True,
    with_ids: bool = False,
) -> tf.data.Dataset:
    """Batched examples as dicts {image, label[, id]} of this pipeline's share of the image
    dataset's split `read.split` (see `pipeline.batches`).

    Images are uint8 when `read.placement` is on the device, else preprocessed on the host.
    `announce` logs the sharding plan and, for training, the preprocessing placement and
    recipe.
    `with_ids` makes sure every example carries an `id` (its stored one, else its file and
    position).
    """
    source = sources.source(config)
    if read.split not in source.files:
        raise InputConfigError(
            f"split={read.split!r}: dataset={config.dataset!r} has no such "
            f"split; pass one of {', '.join(map(repr, source.files))}."
        )
    dataset = pipeline.batches(
        config,
        read,
        source.files[read.split],
        context,
        lambda *records, seed=None: _host_work(config, source, read, records, seed),
        job_name=f"tfdist-{source.info.name}-{read.split}",
        repeat=repeat,
        announce=announce,
        tag_positions=with_ids and not source.id_key,
        bytes_per_example=math.prod(source.info.image_shape),
        seeded=True,
    )
    if announce and read.training:
        shape = source.info.image_shape
        log(
            f"{read.placement.describe(shape, config.augmentation)}; "
            f"{imagenet_recipe.describe(config)}"
        )
    return dataset


def synthetic(
    config: InputConfig, context: tf.distribute.InputContext, *, placement: Placement
) -> tf.data.Dataset:
    """One random batch, made once in the model's input format and repeated: no reading,
    decoding or host preprocessing per step."""
    info = sources.synthetic_info(config)
    batch_size = per_replica_batch_size(config.global_batch_size, context.num_replicas_in_sync)
    images = tf.random.uniform((batch_size, *info.image_shape), 0, 256, tf.int32, seed=config.seed)
    images = tf.cast(images, tf.uint8)
    if not placement.on_device:
        images = preprocessing.normalise(images, placement.compute_dtype)
    labels = tf.random.uniform((batch_size,), 0, info.num_classes, tf.int64, seed=config.seed)
    return (
        tf.data.Dataset.from_tensors({IMAGE: images, LABEL: labels})
        .repeat()
        .with_options(pipeline.options(config))
    )
