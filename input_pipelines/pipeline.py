"""The tf.data pipeline of one input pipeline: shard, read, shuffle, batch, decode, preprocess.

Order of operations, and why:
  files (this pipeline's share, shuffled per epoch when training)
  -> parallel interleave of TFRecord readers (records tagged with file and position only when
     an example id is wanted and the dataset stores none)
  -> every N-th record when sharding by data (reading is deterministic before this point)
  -> cache (records, optional) -> shuffle, epoch after epoch (training: each epoch's orders
     drawn from the seed and the epoch's number, so a resumed run starts in its own epoch)
  -> batch per replica (image datasets training from small images: several batches at once)
  -> one parallel map per batch: parse the whole batch at once (image datasets: decode its
     images, cropped as the recipe says (`imagenet_recipe`: fused with the JPEG decode), and
     preprocess them when placed on the host; `Records`: the user's parse_fn)
  -> (several batches at once: split back into per-replica batches)
  -> tf.data service (optional, training) -> prefetch.
Batching before parsing and mapping keeps tf.data's fixed per-element cost off every example;
mapping several small batches per call keeps the map's fixed cost per call (running its graph,
launching the XLA-compiled preprocessing: about 0.2 ms) off every batch.
`batches` is that pipeline for any TFRecord files and parse function; `image_batches.examples`
reads image datasets with it."""

import functools
from typing import Any
from typing import Callable

import tensorflow as tf

from . import records
from . import service
from . import sharding
from .choices import AutoShard
from .choices import ServiceMode
from .config import InputConfig
from .config import per_replica_batch_size
from .messages import InputConfigError
from .messages import log
from .read_options import ReadOptions

_POSITION_BITS = 32  # An example without a stored id is identified as file << 32 | position.
_MAX_READERS = 8
# Consecutive records taken from one file before the interleave moves to the next. Measured on
# the built-in dataset's training pipeline, 2 cores, 192,000 examples each: 32 read 164k and
# 149k examples/s against 134k and 132k with 1 (the shuffle buffer downstream mixes them).
_READ_BLOCK = 32
# Several per-replica batches go through one map call while together they hold at most this
# many bytes of decoded pixels, and at most `_MAX_BATCHES_PER_CALL` of them. Measured on the
# built-in dataset, 2 cores, batches of 128 32x32x3 images: XLA-compiled augmentation took 3.8-4.0
# us of CPU per example at 128 per call, 2.2-2.9 at 512; the whole training pipeline was faster
# with 4 batches per call in 5 of 6 paired rounds (170k-186k examples/s against 146k-167k in a
# quiet period).
_GRAPH_SEED = 1  # Of the function that reads a training epoch (`training_epochs`).
_MAX_BYTES_PER_CALL = 4 << 20
_MAX_BATCHES_PER_CALL = 4


def options(config: InputConfig) -> tf.data.Options:
    """Options every tfdist pipeline carries.

    tf.data's own auto-sharding is off: the sharding plan already chose this pipeline's share,
    and TF must not shard a second time (or warn that it falls back to DATA). Autotuning is off
    too: with TF 2.21, deleting an autotuned iterator under a strategy can wait out the
    autotuner's sleep, which grows to a minute in long runs (docs/PERFORMANCE.md); AUTOTUNE
    parallelism then means one thread per core.
    """
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    opts.autotune.enabled = False
    if config.deterministic is not None:
        opts.deterministic = config.deterministic
    if config.datasets_num_private_threads:
        opts.threading.private_threadpool_size = config.datasets_num_private_threads
    return opts


def _uses_service(config: InputConfig, training: bool) -> bool:
    """Training data goes through the tf.data service when one is set; validation, re-read
    every epoch, is always read locally."""
    return bool(config.tf_data_service) and training


def shard_plan(
    config: InputConfig, num_files: int, context: tf.distribute.InputContext, *, training: bool
) -> sharding.ShardPlan:
    """This pipeline's plan over a split of `num_files` files. Through the tf.data service the
    pipeline is one whole job (OFF) that the service splits between its workers."""
    if _uses_service(config, training):
        return sharding.plan(AutoShard.OFF, num_files=num_files, num_pipelines=1, pipeline_id=0)
    return sharding.plan(
        config.autoshard,
        num_files=num_files,
        num_pipelines=context.num_input_pipelines,
        pipeline_id=context.input_pipeline_id,
    )


def _read_file(
    file_index: tf.Tensor, path: tf.Tensor, *, skip_corrupt: bool, tag_positions: bool
) -> tf.data.Dataset:
    """The serialized records of one file; with `tag_positions`, (record, position id) pairs,
    the id being `file_index << 32 | position` (this costs a map per record)."""
    file_records = tf.data.TFRecordDataset(path)
    if skip_corrupt:
        file_records = file_records.ignore_errors()
    if not tag_positions:
        return file_records
    first_id = tf.bitwise.left_shift(file_index, _POSITION_BITS)
    return file_records.enumerate().map(lambda position, record: (record, first_id + position))


def read_records(
    config: InputConfig,
    files: tuple[str, ...],
    plan: sharding.ShardPlan,
    *,
    shuffle_seed: int | None,
    first_order_seed: tf.Tensor | None = None,
    tag_positions: bool = False,
) -> tf.data.Dataset:
    """Serialized records of this pipeline's share of `files` (a split's), one epoch (see
    `_read_file`).

    Its files come in a new order each epoch drawn with `shuffle_seed` (None: in order), from a
    starting order drawn with `first_order_seed` (None: as listed).
    """
    indices = tf.constant(list(plan.file_indices), tf.int64)
    if first_order_seed is not None:
        indices = tf.gather(
            indices,
            tf.argsort(
                tf.random.stateless_uniform(indices.shape, seed=tf.stack([first_order_seed, 0]))
            ),
        )
    dataset = tf.data.Dataset.from_tensor_slices((indices, tf.gather(files, indices)))
    if shuffle_seed is not None:
        dataset = dataset.shuffle(
            len(plan.file_indices), seed=shuffle_seed, reshuffle_each_iteration=True
        )
    deterministic = True if plan.keeps_every_nth else config.deterministic
    dataset = dataset.interleave(
        lambda index, path: _read_file(
            index, path, skip_corrupt=config.skip_corrupt_records, tag_positions=tag_positions
        ),
        cycle_length=min(len(plan.file_indices), _MAX_READERS),
        block_length=_READ_BLOCK,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )
    if plan.keeps_every_nth:
        dataset = dataset.shard(plan.num_pipelines, plan.pipeline_id)
    return dataset


def _log_damaged_files(files: list[str]) -> None:
    """Logs and counts the damaged files among `files`, whose rest the pipeline skips."""
    damaged = records.damaged_files(files)
    for path, (readable, reason) in damaged.items():
        log(f"skipping the rest of {path} after {readable} record(s): {reason}")
    if damaged:
        log(
            f"{len(damaged)} of {len(files)} file(s) damaged; their records after the damage "
            "are skipped (--skip_corrupt_records)"
        )


def _clock_seed() -> tf.Tensor:
    """A seed that differs between processes: the time, in microseconds, when the pipeline is
    created (on the worker, when a parameter-server worker builds its dataset)."""
    return tf.cast(tf.timestamp() * 1e6, tf.int64)


def _describe(
    config: InputConfig, plan: sharding.ShardPlan, training: bool, independent: bool
) -> str:
    if independent:
        return (
            f"each worker reads all {plan.num_files} files, starting from its own random "
            "file order (every worker gets the same input context, so nothing can be "
            "sharded); spread over the workers, each epoch's steps see each example once on "
            "average, not exactly once (--tf_data_service gives exactly once)"
        )
    if not _uses_service(config, training):
        return plan.describe()
    each = (
        "the service workers split each epoch, each example once across all training workers"
        if config.tf_data_service_mode is ServiceMode.DISTRIBUTED_EPOCH
        else "every service worker produces every example once per epoch"
    )
    return (
        f"runs on the tf.data service at {config.tf_data_service} "
        f"({config.tf_data_service_mode.value}): {each}"
    )


def training_epochs(
    config: InputConfig,
    files: tuple[str, ...],
    plan: sharding.ShardPlan,
    *,
    tag_positions: bool,
    first: int,
) -> tf.data.Dataset:
    """This pipeline's training records, epoch after epoch without end, from record `first`
    (counted from the run's start). Each epoch's file order and record shuffle are drawn from
    (seed, epoch), so the stream can start in any epoch: a resumed run reads only into its own
    epoch (its size counted once), where replaying from the start would read every epoch done
    again. Cached records are read in the first epoch's file order every epoch, as a cache
    keeps them."""

    def read(file_order_seed: tf.Tensor | None) -> tf.data.Dataset:
        return read_records(
            config, files, plan, shuffle_seed=file_order_seed, tag_positions=tag_positions
        )

    cached = read(_epoch_seed(config.seed, 0)).cache() if config.cache else None

    def epoch(number: tf.Tensor) -> tf.data.Dataset:
        # This function's graph seed, not the run's: with a global seed of 0, TF 2.21 tests a
        # tensor op seed as a Python bool (`random_seed.get_seed`), which a graph refuses.
        tf.random.set_seed(_GRAPH_SEED)
        seed = _epoch_seed(config.seed, number)
        epoch_records = cached if cached is not None else read(seed)
        return epoch_records.shuffle(config.shuffle_buffer_size, seed=seed)

    first_epoch = offset = 0
    if first:  # The epoch's size from its files' framing, or where only reading tells (records
        # skipped after damage, files not local) by reading one.
        counts = None
        if not config.skip_corrupt_records:
            counts = records.framed_counts([files[index] for index in plan.file_indices])
        if counts is None:
            size = records.count(cached if cached is not None else read(None))
        else:
            size = plan.records_an_epoch(counts)
        first_epoch, offset = divmod(first, max(size, 1))
    return (
        tf.data.Dataset.counter(first_epoch)
        .flat_map(epoch)
        .skip(offset)
        .apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    )


def _epoch_seed(seed: int, epoch) -> tf.Tensor:
    """The shuffle seed of training epoch `epoch` (from 0) of the run seeded `seed`."""
    pair = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])
    return tf.random.stateless_uniform([], pair, minval=None, maxval=None, dtype=tf.int64)


def batches_per_call(per_replica_batch_size: int, bytes_per_example: int | None) -> int:
    """How many per-replica batches one map call parses and preprocesses (see
    `_MAX_BYTES_PER_CALL`); 1 when the bytes of an example are not known."""
    if not bytes_per_example:
        return 1
    fitting = _MAX_BYTES_PER_CALL // (per_replica_batch_size * bytes_per_example)
    return max(1, min(_MAX_BATCHES_PER_CALL, fitting))


def _split(calls: int, batch_size: int, element: Any) -> tf.data.Dataset:
    """One map call's element of `calls * batch_size` examples as `calls` batches, in order.
    The slices share the element's memory where aligned (tf.data copies only unaligned ones)."""
    return tf.data.Dataset.from_tensor_slices(
        tf.nest.map_structure(
            lambda tensor: tf.reshape(tensor, [calls, batch_size, *tensor.shape[1:]]), element
        )
    )


def map_batches(
    records: tf.data.Dataset,
    batch_size: int,
    parse_batch: Callable[..., Any],
    *,
    drop_remainder: bool,
    calls: int = 1,
    deterministic: bool | None = None,
    seed: tuple[int, int] | None = None,
    first_call: int = 0,
) -> tf.data.Dataset:
    """`records` in batches of `batch_size`, each made into an element by `parse_batch` in a
    parallel map; with `calls` > 1 (only when dropping the remainder), `calls` batches go
    through each map call and are split back, in order. With `seed` (the run's seed, the
    pipeline's id), each call also gets `seed=`: a stateless-random seed of its own ([2] int64)
    from a sequence `seed` fixes, so that its random work (augmentation) depends on nothing but
    the seed and the call's place in the sequence (`records` starting at call `first_call`)."""
    if calls > 1 and not drop_remainder:
        raise InputConfigError(
            f"calls={calls} needs drop_remainder=True: a partial last batch cannot be split evenly"
        )
    dataset = records.batch(batch_size * calls, drop_remainder=drop_remainder)
    if seed is not None:
        run_seed, pipeline_id = seed
        seeds = (
            tf.data.Dataset.random(seed=run_seed)
            .skip(first_call)
            .map(lambda value: tf.stack([value, tf.constant(pipeline_id, tf.int64)]))
        )
        dataset = tf.data.Dataset.zip(dataset, seeds)
        parse_batch = _seeded(parse_batch)
    dataset = dataset.map(
        parse_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic
    )
    if calls > 1:
        dataset = dataset.flat_map(functools.partial(_split, calls, batch_size))
    return dataset


def _seeded(parse_batch: Callable[..., Any]) -> Callable[..., Any]:
    """`parse_batch` of the records with `seed=` the seed zipped beside them."""

    def parse_seeded(records, seed):
        return parse_batch(*(records if isinstance(records, tuple) else (records,)), seed=seed)

    return parse_seeded


def batches(
    config: InputConfig,
    read: ReadOptions,
    files: tuple[str, ...],
    context: tf.distribute.InputContext,
    parse_batch: Callable[..., Any],
    *,
    job_name: str,
    repeat: bool = True,
    announce: bool = True,
    tag_positions: bool = False,
    bytes_per_example: int | None = None,
    seeded: bool = False,
) -> tf.data.Dataset:
    """This pipeline's share of `files` (the split `read.split` of a dataset), as per-replica
    batches of serialized records that one parallel map turns into elements: `parse_batch`
    receives the batch of records and, with `tag_positions`, their position ids (see
    `_read_file`).

    Training data is shuffled and, if `repeat`, repeated; the last partial batch is dropped only
    when training data repeats (so nothing is lost); evaluation data keeps its tail. Repeating
    training data whose parsed examples hold `bytes_per_example` goes through the map several
    batches per call (`batches_per_call`): the same batches, in the same order. `announce`
    logs the sharding plan. Training data goes through the tf.data service, when one is set, as
    the job `job_name`. With `seeded`, each map call on training data also gets `seed=`, its
    own stateless-random seed (`map_batches`).

    `read.independent_order` is for strategies that give every worker the same `InputContext`
    (ParameterServerStrategy): such pipelines cannot be told apart, so each reads the whole
    split, starting from a file order of its own drawn from the clock; the seeded shuffles
    that follow then give each its own example order (evaluation data is shuffled too). Without
    it they would all read the same examples in the same order; a split in one file still is.
    The tf.data service, when used, splits the data instead.
    """
    training = read.training
    independent = read.independent_order and not _uses_service(config, training)
    plan = shard_plan(config, len(files), context, training=training)
    if announce:
        described = _describe(config, plan, training, independent)
        for line in (plan.notice, f"{read.split}: {described}"):
            if line:
                log(line)
    if config.skip_corrupt_records:
        _log_damaged_files([files[index] for index in plan.file_indices])
    batch_size = per_replica_batch_size(config.global_batch_size, context.num_replicas_in_sync)
    shuffled = independent or training
    # Where a resumed run's pipeline starts: after the batches its replicas read in the steps
    # done, so many map calls and then batches into the next call; read again from the start
    # where epochs cannot be addressed (the tf.data service splits the data itself).
    replicas = max(1, context.num_replicas_in_sync // context.num_input_pipelines)
    calls = batches_per_call(batch_size, bytes_per_example) if training and repeat else 1
    addressed = training and repeat and not independent and not _uses_service(config, training)
    batches_done = read.steps_done * replicas
    calls_done, batches_into_call = divmod(batches_done, calls) if addressed else (0, batches_done)
    # The same seed on every pipeline: with DATA sharding they see the same file order. Under
    # independent_order the files start from a different order on each worker, so the same
    # shuffles give each worker its own order. (The tf.data service hands out files itself; a
    # file shuffle would make the job unsplittable.)
    if addressed:
        dataset = training_epochs(
            config, files, plan, tag_positions=tag_positions, first=calls_done * calls * batch_size
        )
    else:
        dataset = read_records(
            config,
            files,
            plan,
            shuffle_seed=config.seed if shuffled and not config.tf_data_service else None,
            first_order_seed=_clock_seed() if independent else None,
            tag_positions=tag_positions,
        )
        if config.cache:
            dataset = dataset.cache()
        if shuffled:
            dataset = dataset.shuffle(config.shuffle_buffer_size, seed=config.seed)
        if training and repeat:
            dataset = dataset.repeat()
    dataset = map_batches(
        dataset,
        batch_size,
        parse_batch,
        drop_remainder=training and repeat,
        calls=calls,
        deterministic=config.deterministic,
        seed=(config.seed, context.input_pipeline_id) if seeded and training else None,
        first_call=calls_done,
    ).skip(batches_into_call)
    if _uses_service(config, training):
        dataset = service.distribute(
            dataset, config.tf_data_service, config.tf_data_service_mode, job_name=job_name
        )
    return dataset.with_options(options(config))
