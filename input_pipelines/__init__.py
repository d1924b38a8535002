"""tf.data input pipelines that shard across workers and replicas and batch per replica.

A library of its own (installed as `tfdist.input_pipelines`): it imports nothing else of tfdist.
Nothing here imports TensorFlow at import time; the functions below import the TensorFlow-backed
modules on first call. The Keras flavour TensorFlow loads is tfdist's to choose, when `tfdist` is
imported (`tfdist.runtime.keras_env`).
"""

# pylint: disable=import-outside-toplevel
from .choices import Augment
from .choices import AutoShard
from .choices import BASELINE_STAGES
from .choices import DATASET_FORMS
from .choices import PreprocessOn
from .choices import ServiceMode
from .choices import SourceKind
from .config import InputConfig
from .config import per_replica_batch_size
from .messages import InputConfigError
from .read_options import DatasetInfo
from .read_options import Placement
from .read_options import ReadOptions
from .user_records import Records


def builtin_examples(split: str, num_examples: int | None = None):
    """The built-in dataset's `split` ("train" or "validation") as NumPy arrays (uint8 images,
    int64 labels), drawn in memory as `prepare` writes them; `num_examples` draws that many
    from the split's seed instead (a larger split of the same kind of images)."""
    from . import shapes

    builder = shapes.TfdistShapes
    size, seed = {
        "train": (builder.TRAIN_SIZE, builder.TRAIN_SEED),
        "validation": (builder.VALIDATION_SIZE, builder.VALIDATION_SEED),
    }[split]
    return shapes.draw_examples(num_examples or size, seed)


def prepare(config: InputConfig):
    """Makes the dataset ready to read (generating the built-in one once); returns its
    `DatasetInfo`."""
    from . import sources

    return sources.info(config)


def resolve_placement(config: InputConfig, *, num_gpus: int, compute_dtype: str = "float32"):
    """Where preprocessing runs (`--preprocess_on`, `auto` = device when there are GPUs); returns
    a `Placement`."""
    from . import preprocessing

    return preprocessing.resolve_placement(
        config.preprocess_on, num_gpus=num_gpus, compute_dtype=compute_dtype
    )


def device_preprocessing(augmentation="small"):
    """The Keras layer that preprocesses uint8 batches inside each replica's step, augmenting
    as `augmentation` says: the recipe the pipeline read the images for
    (`InputConfig.augmentation`: "imagenet", "small" or "none")."""
    from . import preprocessing

    return preprocessing.DevicePreprocessing(augmentation=augmentation, name="device_preprocessing")


def device_preprocess(images, *, training: bool, compute_dtype: str, augmentation="small"):
    """`device_preprocessing` as a function of a uint8 batch, for a step of one's own."""
    from . import preprocessing

    return preprocessing.preprocess(
        images, training=training, compute_dtype=compute_dtype, augmentation=Augment(augmentation)
    )


def dataset_fn(config: InputConfig, read: ReadOptions):
    """Returns a `DatasetFn` (InputContext -> tf.data.Dataset of per-replica (image, label)
    batches) of the image dataset's split `read.split`, for `distribute_datasets_from_function`
    or parameter-server per-worker datasets (`read.independent_order=True`); `read.placement`
    is required."""
    from . import datasets

    return datasets.dataset_fn(config, read)


def records_dataset_fn(records: Records, config: InputConfig, read: ReadOptions):
    """Returns a `DatasetFn` (InputContext -> tf.data.Dataset of per-replica batches of the
    `(features, labels)` that `records.parse_fn` makes) of the split `read.split` of a user's
    TFRecord files; sharding, shuffling, batching and the tf.data service follow `config`.
    Parses the first record once, now: raises a one-line InputConfigError naming the file when
    no file matches, a file is damaged, or `parse_fn` fails on it."""
    from . import datasets

    return datasets.records_dataset_fn(records, config, read)


def check_coverage(
    config: InputConfig,
    *,
    num_workers: int,
    replicas_per_worker: int,
    records: Records | None = None,
):
    """Reads one training epoch as each simulated worker, of `records` when given, else of the
    image dataset `config.dataset`; returns a `CoverageReport`."""
    from . import coverage

    return coverage.check_coverage(
        config, num_workers=num_workers, replicas_per_worker=replicas_per_worker, records=records
    )


def explain_input_error(config: InputConfig, error: Exception) -> None:
    """After reading the dataset failed with `error` (call it in an `except
    (tf.errors.DataLossError, tf.errors.InvalidArgumentError)` around `model.fit`): raises the
    one-line InputConfigError naming the damaged file, or the record whose image does not
    decode, when there is one; else returns, and the caller re-raises `error`."""
    from . import sources

    sources.explain_read_error(config, error)


def explain_records_error(records: Records, split: str, error: Exception) -> None:
    """`explain_input_error` for `records`: raises the one-line InputConfigError naming the
    damaged file, or the first record of `split` that `records.parse_fn` fails on (parsing the
    split until one fails), when there is one; else returns, and the caller re-raises `error`."""
    from . import records as record_checks

    record_checks.explain_parse_error(records.paths(split), records.parse_fn, error)


def check_dispatcher(config: InputConfig) -> None:
    """With `config.tf_data_service`, waits up to 20 s for its dispatcher to answer, else raises
    InputConfigError in one line (TensorFlow itself would wait forever). Pure Python."""
    from . import dispatcher

    if config.tf_data_service:
        dispatcher.check_dispatcher(config.tf_data_service)


def start_service(port: int, num_workers: int):
    """Starts a tf.data service dispatcher on `port` and `num_workers` workers on 127.0.0.1;
    returns the running cluster (`.address`, `.worker_addresses`, `.stop()`)."""
    from . import service

    return service.start(port, num_workers)


def start_service_part(port: int, *, dispatcher: str | None, advertised: str):
    """Starts one part of a tf.data service spread over machines, on `port`: the dispatcher
    when `dispatcher` is None, else a worker that registers with the dispatcher at `dispatcher`
    ("host:port"); either is reached at `advertised` ("host:port"). Returns it running (`.stop()`).
    """
    from . import service

    if dispatcher is None:
        return service.start_dispatcher(port, host=advertised.rpartition(":")[0])
    return service.start_worker(port, dispatcher, advertised)


def profile_stages(
    dataset, *, num_elements: int, warmup_elements: int = 10, logdir: str | None = None
):
    """Takes `num_elements` from any `tf.data.Dataset` (yours too) under TensorFlow's profiler
    and returns a `StageProfile`: the trace time of each tf.data transformation and each op run
    in its map functions (`.stage_s`, `.per_element_us(stage)`). `logdir` keeps the trace."""
    from . import stage_profile

    return stage_profile.profile_stages(
        dataset, num_elements=num_elements, warmup_elements=warmup_elements, logdir=logdir
    )


def read_trace(logdir: str):
    """Trace seconds and event counts per stage (see `profile_stages`) of the newest trace that
    `tf.profiler.experimental.start(logdir)` ... `stop()` wrote, around any code (`model.fit`
    steps too: the ops of the step show as stages)."""
    from . import stage_profile

    return stage_profile.read_trace(logdir)


def baseline_pipeline(config: InputConfig, kind: str, *, shuffle: bool = True):
    """A pipeline to measure tfdist's training pipeline against, reading `config`'s training
    files as one input pipeline (batches of `config.global_batch_size`): "naive" (TF's guide's
    first pipeline), "tfdist" (tfdist's own, augmentation on the host), "tfdist_device" (the
    host's share of it under --preprocess_on=device) or a stage of
    `BASELINE_STAGES` (tfdist's cut after it; `shuffle=False` leaves out the example shuffle);
    for JPEG records also "best_practice" (TF's official ResNet ImageNet input) and
    "decode_only" (every image decoded whole, nothing else: the floor).
    Prepares the dataset first (the built-in one generated once)."""
    from . import baselines

    if kind in BASELINE_STAGES:
        return baselines.stage(config, kind, shuffle=shuffle)
    pipelines = {
        "naive": baselines.naive,
        "tfdist": baselines.tfdist,
        "tfdist_device": lambda config: baselines.tfdist(config, PreprocessOn.DEVICE),
        "best_practice": baselines.best_practice,
        "decode_only": baselines.decode_only,
    }
    if kind not in pipelines:
        raise InputConfigError(
            f"kind={kind!r} is not a baseline pipeline; pass one of "
            f"{', '.join(map(repr, [*pipelines, *BASELINE_STAGES]))}."
        )
    return pipelines[kind](config)
