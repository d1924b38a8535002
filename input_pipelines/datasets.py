"""`dataset_fn`: the `DatasetFn` a strategy calls once per input pipeline, for Keras."""

from typing import Callable

import tensorflow as tf

from input_pipelines import pipeline
from input_pipelines.config import InputConfig
from input_pipelines.config import SourceKind
from input_pipelines.preprocessing import Placement

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


def _as_supervised(batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
    return batch[pipeline.IMAGE], batch[pipeline.LABEL]


def dataset_fn(config: InputConfig, split: str, *, training: bool, placement: Placement,
               independent_order: bool = False) -> DatasetFn:
    """Returns a `DatasetFn` reading `split` as per-replica (image, label) batches.

    The function runs once per input pipeline (worker, or replica): it reads that pipeline's
    share of the data as the sharding plan says and batches `global_batch_size /
    num_replicas_in_sync` examples per replica. Images arrive as uint8 when `placement` is on
    the device, else preprocessed in the compute dtype. Training data is shuffled (seeded) and
    repeated; evaluation data is read once in order and keeps its last partial batch.

    `independent_order`: every pipeline gets the same `InputContext` (ParameterServerStrategy),
    so each reads the whole split in its own random order (`pipeline.examples`).
    """
    def make_dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
        if config.source_kind is SourceKind.SYNTHETIC:
            dataset = pipeline.synthetic(config, context, placement=placement)
        else:
            dataset = pipeline.examples(config, split, context, training=training,
                                        placement=placement,
                                        independent_order=independent_order)
        return dataset.map(_as_supervised).prefetch(tf.data.AUTOTUNE)

    return make_dataset
