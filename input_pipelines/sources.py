"""Where examples come from: the files of each split and how to parse and decode one record.

Every file-backed source (the built-in dataset, a prepared TFDS dataset, TFRecord files by glob)
is reduced to the same `Source`: sorted TFRecord files per split, the feature keys of the image,
the label and (if stored) a unique example id, and the image shape the decoder produces. The
pipeline (`pipeline.py`, `image_batches.py`) then shards, reads and decodes all of them the same
way. `synthetic` has no files.
"""

import dataclasses
import functools
import os
import sys

import tensorflow as tf
import tensorflow_datasets as tfds

from . import file_lists
from . import records
from . import shapes
from .choices import SPLIT_PLACEHOLDER
from .choices import SourceKind
from .choices import TFRECORD_PREFIX
from .config import InputConfig
from .messages import InputConfigError
from .read_options import DatasetInfo

TRAIN = "train"
VALIDATION = "validation"
TFRECORD_DEFAULT_IMAGE_SIZE = 224
SYNTHETIC_DEFAULT_IMAGE_SIZE = 32
SYNTHETIC_DEFAULT_NUM_CLASSES = 10
SYNTHETIC_EXAMPLES_PER_EPOCH = 12_800
TFRECORD_IMAGE_KEY = "image/encoded"
TFRECORD_LABEL_KEY = "image/class/label"
# The ops whose name an error from decoding an image carries (e.g. `{{node .../DecodeImage}}`):
# the whole decode's, and the imagenet recipe's header read and fused crop.
_DECODE_OPS = ("DecodeImage", "ExtractJpegShape", "DecodeAndCropJpeg")


@dataclasses.dataclass(frozen=True)
class Source:
    """A dataset as TFRecord files plus how to turn one serialized record into an example.

    Attributes:
      info: sizes and shapes.
      files: sorted TFRecord paths per split.
      image_key, label_key: feature keys of the encoded image and the int64 class label.
      id_key: feature key of a unique int64 example id, or None (the pipeline then identifies
        an example by its file and position).
      resize: resize decoded images to `info.image_shape` (sources whose images vary in size).
      raw_image_shape: the stored shape of images kept as raw uint8 bytes; None for JPEG/PNG.
      label_offset: subtracted from every stored label (`InputConfig.label_offset`).
    """

    info: DatasetInfo
    files: dict[str, tuple[str, ...]]
    image_key: str
    label_key: str
    id_key: str | None
    resize: bool
    raw_image_shape: tuple[int, int, int] | None = None
    label_offset: int = 0

    @property
    def features(self) -> dict[str, tf.io.FixedLenFeature]:
        """The `tf.io.parse_example` spec of the keys the pipeline reads."""
        spec = {
            self.image_key: tf.io.FixedLenFeature([], tf.string),
            self.label_key: tf.io.FixedLenFeature([], tf.int64),
        }
        if self.id_key:
            spec[self.id_key] = tf.io.FixedLenFeature([], tf.int64)
        return spec


def _split_files(builder: tfds.core.DatasetBuilder, split: str) -> tuple[str, ...]:
    return tuple(
        sorted(
            os.path.join(builder.data_dir, name) for name in builder.info.splits[split].filenames
        )
    )


def _from_tfds_builder(
    name: str, builder: tfds.core.DatasetBuilder, image_size: int | None
) -> Source:
    """A `Source` over a prepared TFDS image-classification dataset."""
    features = dict(builder.info.features.items())
    image_key, label_key = builder.info.supervised_keys or ("image", "label")
    image, label = features.get(image_key), features.get(label_key)
    raw_images = _is_raw_image(image)
    if not (
        (raw_images or isinstance(image, tfds.features.Image))
        and isinstance(label, tfds.features.ClassLabel)
    ):
        raise InputConfigError(
            f"dataset={name!r} has no image and class-label features; tfdist reads image "
            "classification datasets (e.g. mnist, cifar10, imagenet2012)."
        )
    height, width, channels = image.shape
    if image_size is None and None in (height, width):
        raise InputConfigError(
            f"dataset={name!r} has images of varying size; resize them "
            "with image_size, e.g. image_size=224."
        )
    if image_size is not None:
        height = width = image_size
    splits = [split for split in (TRAIN, VALIDATION, "test") if split in builder.info.splits]
    if TRAIN not in splits:
        raise InputConfigError(
            f"dataset={name!r} has no train split; its splits are {', '.join(builder.info.splits)}."
        )
    validation = VALIDATION if VALIDATION in splits else ("test" if "test" in splits else None)
    split_names = {TRAIN: TRAIN, **({VALIDATION: validation} if validation else {})}
    return Source(
        info=DatasetInfo(
            name=name,
            num_classes=label.num_classes,
            image_shape=(height, width, channels or 3),
            num_examples={
                ours: builder.info.splits[theirs].num_examples
                for ours, theirs in split_names.items()
            },
        ),
        files={ours: _split_files(builder, theirs) for ours, theirs in split_names.items()},
        image_key=image_key,
        label_key=label_key,
        id_key="id" if isinstance(features.get("id"), tfds.features.Scalar) else None,
        resize=image_size is not None,
        raw_image_shape=tuple(image.shape) if raw_images else None,
    )


def _is_raw_image(feature) -> bool:
    """A uint8 [H, W, C] tensor feature stored as raw bytes (as the built-in dataset is)."""
    return (
        isinstance(feature, tfds.features.Tensor)
        and len(feature.shape) == 3
        and None not in feature.shape
        and feature.tf_dtype == tf.uint8
        and feature.get_serialized_info().tf_dtype == tf.string
    )


def _tfds_builder(config: InputConfig) -> tfds.core.DatasetBuilder:
    """The builder of a TFDS dataset by name, prepared (downloading only when allowed)."""
    data_dir = config.data_dir or tfds.core.constants.DATA_DIR
    try:
        with shapes.tfds_chatter_hidden():
            builder = tfds.builder(config.dataset, data_dir=data_dir)
            prepared = builder.is_prepared()
    except tfds.core.registered.DatasetNotFoundError:
        raise InputConfigError(
            f"dataset={config.dataset!r} is not a TFDS dataset; see "
            "https://www.tensorflow.org/datasets/catalog for names, or use "
            "shapes, synthetic or tfrecord:<glob>."
        ) from None
    if prepared:
        return builder
    if not config.download:
        raise InputConfigError(
            f"dataset={config.dataset!r} is not prepared in data_dir={data_dir}; prepare it once "
            f"with `tfds build {config.dataset} --data_dir={data_dir}` or set download=true "
            "(needs network), or point data_dir at where it is prepared."
        )
    print(
        f"tfdist: downloading and preparing {config.dataset} into {builder.data_dir}",
        file=sys.stderr,
        flush=True,
    )
    builder.download_and_prepare()
    return builder


def _readable_records(
    config: InputConfig, split: str, paths: tuple[str, ...], layout: records.RecordLayout
) -> int:
    """Checks every record of `split` (see `records.check`); returns how many are readable.

    Raises:
      InputConfigError: a bad record or damaged file, or no readable record in the split.
    """
    num_records = records.check(paths, layout, config.skip_corrupt_records)
    if not num_records:
        raise InputConfigError(
            f"dataset={config.dataset!r}: the {split} split has no readable records: each of "
            f"its {len(paths)} file(s) ({file_lists.some(paths)}) is damaged or cut short before "
            "its first record; re-create them."
        )
    return num_records


def _from_tfrecord_glob(config: InputConfig) -> Source:
    """A `Source` over TFRecord files in the common image layout, every record checked and
    counted once."""
    pattern = config.dataset[len(TFRECORD_PREFIX) :]
    splits = (TRAIN, VALIDATION) if SPLIT_PLACEHOLDER in pattern else (TRAIN,)
    split_files = {split: file_lists.match(pattern, split) for split in splits}
    for split, paths in split_files.items():
        if not paths:
            where = pattern.replace(SPLIT_PLACEHOLDER, split)
            raise InputConfigError(
                f"dataset={config.dataset!r}: the pattern {where!r} matches no files; check the "
                f"path ({SPLIT_PLACEHOLDER} in it stands for train and validation)."
            )
        file_lists.check(f"dataset={config.dataset!r}", paths)
    layout = records.RecordLayout(
        image_key=TFRECORD_IMAGE_KEY,
        label_key=TFRECORD_LABEL_KEY,
        num_classes=config.num_classes,
        label_offset=config.label_offset,
    )
    size = config.image_size or TFRECORD_DEFAULT_IMAGE_SIZE
    return Source(
        info=DatasetInfo(
            name=config.dataset,
            num_classes=config.num_classes,
            image_shape=(size, size, 3),
            num_examples={
                split: _readable_records(config, split, paths, layout)
                for split, paths in split_files.items()
            },
        ),
        files=split_files,
        image_key=TFRECORD_IMAGE_KEY,
        label_key=TFRECORD_LABEL_KEY,
        id_key=None,
        resize=True,
        label_offset=config.label_offset,
    )


def synthetic_info(config: InputConfig) -> DatasetInfo:
    """`synthetic`: square RGB images, training only, a fixed number of examples per epoch."""
    size = config.image_size or SYNTHETIC_DEFAULT_IMAGE_SIZE
    return DatasetInfo(
        name=config.dataset,
        num_classes=config.num_classes or SYNTHETIC_DEFAULT_NUM_CLASSES,
        image_shape=(size, size, 3),
        num_examples={TRAIN: SYNTHETIC_EXAMPLES_PER_EPOCH},
    )


def source(config: InputConfig) -> Source:
    """The `Source` of a file-backed `config.dataset`, prepared once per process and dataset
    (batching, sharding and preprocessing options do not change it).

    Raises:
      InputConfigError: the dataset is not prepared, unknown, not image classification; the
        glob matches nothing, or a directory or empty file; a file is damaged, or one of its
        records is not an image example of the `tfrecord:` layout (see `records.check`).
    """
    return _prepared_source(
        InputConfig(
            dataset=config.dataset,
            data_dir=config.data_dir,
            download=config.download,
            num_classes=config.num_classes,
            image_size=config.image_size,
            skip_corrupt_records=config.skip_corrupt_records,
            label_offset=config.label_offset,
        )
    )


@functools.lru_cache(maxsize=None)
def _prepared_source(config: InputConfig) -> Source:
    kind = config.source_kind
    if kind is SourceKind.BUILTIN:
        builder = shapes.prepare(config.data_dir or tfds.core.constants.DATA_DIR)
        return _from_tfds_builder(config.dataset, builder, config.image_size)
    if kind is SourceKind.TFDS:
        return _from_tfds_builder(config.dataset, _tfds_builder(config), config.image_size)
    if kind is SourceKind.TFRECORD:
        return _from_tfrecord_glob(config)
    raise InputConfigError(
        f"dataset={config.dataset!r} is read by your own function, not by "
        "tfdist's image pipeline; pass what the function returns to fit."
    )


def info(config: InputConfig) -> DatasetInfo:
    """Describes `config.dataset`, preparing it first if it is file-backed."""
    if config.source_kind is SourceKind.SYNTHETIC:
        return synthetic_info(config)
    return source(config).info


def explain_read_error(config: InputConfig, error: tf.errors.OpError) -> None:
    """After reading `config.dataset` failed with `error` (in `model.fit` or a coverage check):
    raises the one-line InputConfigError that names the damaged file (a DataLossError) or the
    record whose image does not decode (an InvalidArgumentError from decoding); returns when
    there is none, and the caller re-raises `error`.

    Finding an undecodable image decodes the dataset's images until one fails, in parallel.
    """
    if config.source_kind is SourceKind.SYNTHETIC:
        return
    file_source = source(config)
    for split_files in file_source.files.values():
        if isinstance(error, tf.errors.DataLossError):
            records.raise_if_damaged(split_files)
        elif any(op in error.message for op in _DECODE_OPS) and not file_source.raw_image_shape:
            records.raise_if_undecodable(
                split_files,
                file_source.image_key,
                file_source.info.image_shape[-1],
                config.skip_corrupt_records,
            )
