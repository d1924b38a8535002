"""tf.data input pipelines that shard across workers and replicas and batch per replica.

Importing this package selects tf-keras as TensorFlow's Keras when TensorFlow is not imported yet
(see ARCHITECTURE.md). Nothing here imports TensorFlow at import time.
"""

import os
import sys

if "tensorflow" not in sys.modules:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

# pylint: disable=wrong-import-position
from input_pipelines.config import DATASETS
from input_pipelines.config import InputConfig
from input_pipelines.config import InputConfigError


def prepare(config: InputConfig):
    """Makes the dataset ready to read (generating the built-in one once); returns its `DatasetInfo`."""
    from input_pipelines import datasets  # pylint: disable=import-outside-toplevel
    return datasets.prepare(config)


def dataset_fn(config: InputConfig, split: str, *, training: bool):
    """Returns a `DatasetFn` (InputContext -> per-replica-batched tf.data.Dataset) for `split`."""
    from input_pipelines import datasets  # pylint: disable=import-outside-toplevel
    return datasets.dataset_fn(config, split, training=training)
