"""`dataset_fn` and `records_dataset_fn`: the `DatasetFn` a strategy calls once per input
pipeline, for Keras."""

from typing import Callable

import tensorflow as tf

from . import image_batches
from . import pipeline
from .choices import SourceKind
from .config import InputConfig
from .messages import InputConfigError
from .read_options import ReadOptions
from .records import check_parse_fn
from .user_records import Records

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


def _as_supervised(batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
    return batch[image_batches.IMAGE], batch[image_batches.LABEL]


def dataset_fn(config: InputConfig, read: ReadOptions) -> DatasetFn:
    """Returns a `DatasetFn` reading the image dataset's split `read.split` as per-replica
    (image, label) batches.

    The function runs once per input pipeline (worker, or replica): it reads that pipeline's
    share of the data as the sharding plan says and batches `global_batch_size /
    num_replicas_in_sync` examples per replica. Images arrive as uint8 when `read.placement` is
    on the device, else preprocessed in the compute dtype. Training data is shuffled (seeded)
    and repeated; evaluation data is read once in order and keeps its last partial batch.

    Raises:
      InputConfigError: `read.placement` is None; when a pipeline is made, the dataset has
        no split `read.split` or cannot be prepared (`image_batches.examples`).
    """
    if read.placement is None:
        raise InputConfigError(
            f"placement=None: dataset={config.dataset!r} is an image dataset and needs to know "
            "where preprocessing runs; pass ReadOptions(placement=input_pipelines."
            "resolve_placement(config, num_gpus=...))."
        )

    def make_dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
        if config.source_kind is SourceKind.SYNTHETIC:
            dataset = image_batches.synthetic(config, context, placement=read.placement)
        else:
            dataset = image_batches.examples(config, read, context)
        return dataset.map(_as_supervised).prefetch(tf.data.AUTOTUNE)

    return make_dataset


def records_dataset_fn(records: Records, config: InputConfig, read: ReadOptions) -> DatasetFn:
    """Returns a `DatasetFn` reading `records`' files of split `read.split` as per-replica
    batches, each the `(features, labels)` that `records.parse_fn` makes of one batch of
    serialized records.

    Sharding, shuffling, batching, caching, the tf.data service and the options come from
    `config` exactly as for image datasets (`pipeline.batches`); its image fields (`dataset`,
    `num_classes`, `image_size`, `preprocess_on`) and `read.placement` play no part. Runs on the
    caller (each worker, or the parameter-server coordinator) once: it finds the files and
    parses the first record.

    Raises:
      InputConfigError: no file matches, or a path cannot be a TFRecord file; the first file is
        damaged; `parse_fn` fails on the first record or does not return (features, labels).
    """
    paths = records.paths(read.split)
    check_parse_fn(paths, records.parse_fn, config.skip_corrupt_records)

    def make_dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return pipeline.batches(
            config, read, paths, context, records.parse_fn, job_name=records.job_name(read.split)
        ).prefetch(tf.data.AUTOTUNE)

    return make_dataset
