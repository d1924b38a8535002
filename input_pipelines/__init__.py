"""tf.data input pipelines that shard across workers and replicas and batch per replica.

Importing this package selects tf-keras as TensorFlow's Keras when TensorFlow is not imported yet
(see ARCHITECTURE.md). Nothing here imports TensorFlow at import time; the functions below import
the TensorFlow-backed modules on first call.
"""

import os
import sys

if "tensorflow" not in sys.modules:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

# pylint: disable=wrong-import-position,import-outside-toplevel
from input_pipelines.config import DATASET_FORMS
from input_pipelines.config import AutoShard
from input_pipelines.config import InputConfig
from input_pipelines.config import InputConfigError
from input_pipelines.config import PreprocessOn
from input_pipelines.config import ServiceMode
from input_pipelines.config import per_replica_batch_size


def prepare(config: InputConfig):
    """Makes the dataset ready to read (generating the built-in one once); returns its
    `DatasetInfo`."""
    from input_pipelines import sources
    return sources.info(config)


def resolve_placement(config: InputConfig, *, num_gpus: int, compute_dtype: str = "float32"):
    """Where preprocessing runs (`--preprocess_on`, `auto` = device when there are GPUs); returns
    a `Placement`."""
    from input_pipelines import preprocessing
    return preprocessing.resolve_placement(config.preprocess_on, num_gpus=num_gpus,
                                           compute_dtype=compute_dtype)


def device_preprocessing():
    """The Keras layer that preprocesses uint8 batches inside each replica's step."""
    from input_pipelines import preprocessing
    return preprocessing.DevicePreprocessing(name="device_preprocessing")


def dataset_fn(config: InputConfig, split: str, *, training: bool, placement,
               independent_order: bool = False):
    """Returns a `DatasetFn` (InputContext -> tf.data.Dataset of per-replica (image, label)
    batches) for `split`, for `distribute_datasets_from_function` or parameter-server
    per-worker datasets (`independent_order=True`, see `datasets.dataset_fn`)."""
    from input_pipelines import datasets
    return datasets.dataset_fn(config, split, training=training, placement=placement,
                               independent_order=independent_order)


def check_coverage(config: InputConfig, *, num_workers: int, replicas_per_worker: int):
    """Reads one training epoch as each simulated worker; returns a `CoverageReport`."""
    from input_pipelines import coverage
    return coverage.check_coverage(config, num_workers=num_workers,
                                   replicas_per_worker=replicas_per_worker)


def explain_input_error(config: InputConfig, error: Exception) -> None:
    """After reading the dataset failed with `error` (call it in an `except
    (tf.errors.DataLossError, tf.errors.InvalidArgumentError)` around `model.fit`): raises the
    one-line InputConfigError naming the damaged file, or the record whose image does not
    decode, when there is one; else returns, and the caller re-raises `error`."""
    from input_pipelines import sources
    sources.explain_read_error(config, error)


def check_dispatcher(config: InputConfig) -> None:
    """With `config.tf_data_service`, waits up to 20 s for its dispatcher to answer, else raises
    InputConfigError in one line (TensorFlow itself would wait forever). Pure Python."""
    from input_pipelines import dispatcher
    if config.tf_data_service:
        dispatcher.check_dispatcher(config.tf_data_service)


def start_service(port: int, num_workers: int):
    """Starts a tf.data service dispatcher on `port` and `num_workers` workers on 127.0.0.1;
    returns the running cluster (`.address`, `.worker_addresses`, `.stop()`)."""
    from input_pipelines import service
    return service.start(port, num_workers)
