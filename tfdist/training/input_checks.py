"""Two input mistakes that otherwise train silently, caught before the first step: a dataset
function that does not shard (every worker, or every replica's pipeline, reads the same
examples, so each global batch holds them twice or more) and one that batches by the global
batch instead of the per-replica batch (the real global batch is a multiple of what the plan
and the summary say).

Each pipeline's first batch is read once, as the strategy would make it, and reduced to a
fingerprint and its size. Mirrored replicas compare theirs in this process; multi-worker
mirrored workers exchange theirs in one small all-gather (every worker takes part, and every
worker reaches the same verdict, so none is left waiting); under parameter server the
coordinator has each worker build its own pipeline and fetches theirs. Only users' dataset
functions are checked: tfdist's own pipelines (`Records`, `InputConfig`) shard and batch by
the plan. `check_input=False` (fit's and `CustomLoop.distribute`'s argument) skips both checks.

Relied-on TensorFlow internal: `ClusterCoordinator._create_per_worker_resources`, the way
`create_per_worker_dataset` runs a function once on every worker (TensorFlow 2.21).
"""

import re

import tensorflow as tf

from tfdist.runtime.config import ConfigError
from tfdist.runtime.setup import Plan
from tfdist.strategies import StrategyKind
from tfdist.training.data import DatasetFn
from tfdist.training.data import input_options

_HASH_BUCKETS = (1 << 62) - 1
_OPT_OUT = "or pass check_input=False if that is meant"


def _fingerprint_and_size(batch) -> tf.Tensor:
    """[fingerprint of `batch`'s values, its examples] as int64 (in a function or eagerly)."""
    leaves = tf.nest.flatten(batch, expand_composites=True)
    serialized = tf.stack([tf.io.serialize_tensor(leaf) for leaf in leaves])
    fingerprint = tf.strings.to_hash_bucket_fast(tf.strings.reduce_join(serialized), _HASH_BUCKETS)
    sizes = [_examples(leaf) for leaf in tf.nest.flatten(batch)]
    sizes = [size for size in sizes if size is not None]
    size = tf.reduce_max(tf.stack(sizes)) if sizes else tf.constant(0, tf.int64)
    return tf.stack([fingerprint, size])


def _examples(leaf) -> tf.Tensor | None:
    """The leading dimension of one batched value (None for a scalar)."""
    if isinstance(leaf, tf.RaggedTensor):
        return tf.cast(leaf.nrows(), tf.int64)
    if isinstance(leaf, tf.SparseTensor):
        return leaf.dense_shape[0]
    if leaf.shape.rank == 0:
        return None
    return tf.shape(leaf, out_type=tf.int64)[0]


def check(plan: Plan, read: DatasetFn, name: str) -> None:
    """Raises ConfigError when the pipelines `read` makes for the plan's strategy read the
    same first batch on different workers (or replicas' pipelines), or batches larger than the
    plan's per-replica batch. Call on every training task, in the same order (mirrored workers
    exchange fingerprints)."""
    if plan.kind is StrategyKind.PARAMETER_SERVER:
        probes = _per_worker_probes(plan, read)
        where = "parameter-server worker"
    else:
        probes = _local_probes(plan, read, name)
        where = "replica pipeline" if len(probes) > 1 else "worker"
        if plan.kind is StrategyKind.MULTI_WORKER_MIRRORED and plan.num_workers > 1:
            probes = _gathered(plan, probes)
    _check_sizes(plan, probes, name)
    _check_distinct(plan, probes, name, where)


def _first_batch(dataset: tf.data.Dataset, name: str):
    """The first batch of `dataset` (`name`'s); None when it is empty.

    Raises:
      ConfigError: reading it failed (a generator of the user's that raises, a file that is
        gone): the reason's line, without TensorFlow's traceback around it.
    """
    try:
        return next(iter(dataset.take(1)), None)
    except tf.errors.OpError as error:
        raise ConfigError(
            f"{name}: reading its first batch failed ({_reason(error)}); fix what it reads, "
            "then run again."
        ) from None


def _reason(error: tf.errors.OpError) -> str:
    """The line that says why `error` happened: the Python exception a `from_generator` or
    `py_function` raised, when it holds one, else its first line."""
    lines = [line.strip() for line in (error.message or "").splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception): ", line)]
    return (raised or lines or [type(error).__name__])[-1 if raised else 0]


def _local_probes(plan: Plan, read: DatasetFn, name: str) -> dict[int, tuple[int, int]]:
    """{input pipeline id: (fingerprint, examples)} of this process's pipelines, made as the
    strategy makes them (with the input contexts it gives)."""
    made = {}

    def recording(context: tf.distribute.InputContext) -> tf.data.Dataset:
        made[context.input_pipeline_id] = dataset = read(context)
        return dataset

    plan.strategy.distribute_datasets_from_function(recording, options=input_options(plan))
    probes = {}
    for pipeline, dataset in made.items():
        batch = _first_batch(dataset, name)
        if batch is not None:
            fingerprint, size = _fingerprint_and_size(batch).numpy().tolist()
            probes[pipeline] = (fingerprint, size)
    return probes


def _gathered(plan: Plan, probes: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Every multi-worker mirrored worker's probes (one pipeline each), by one all-gather."""
    ((pipeline, (fingerprint, size)),) = probes.items() or ((-1, (0, 0)),)
    mine = tf.constant([[pipeline, fingerprint, size]], tf.int64)
    strategy = plan.strategy

    @tf.function
    def gather():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_gather(mine, 0))

    rows = strategy.experimental_local_results(gather())[0].numpy().tolist()
    return {row[0]: (row[1], row[2]) for row in rows if row[0] >= 0}


def _per_worker_probes(plan: Plan, read: DatasetFn) -> dict[int, tuple[int, int]]:
    """{worker index: (fingerprint, examples)}: each parameter-server worker builds the pipeline
    as its per-worker dataset would (every worker gets the same input context)."""
    strategy = plan.strategy
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    context = tf.distribute.InputContext(num_replicas_in_sync=strategy.num_replicas_in_sync)

    @tf.function
    def probe():
        batch = next(iter(read(context)))
        return _fingerprint_and_size(batch)

    # pylint: disable-next=protected-access
    remote = coordinator._create_per_worker_resources(probe)
    # pylint: disable-next=protected-access
    values = [value.fetch().tolist() for value in remote._values]
    return {worker: (fingerprint, size) for worker, (fingerprint, size) in enumerate(values)}


def _check_sizes(plan: Plan, probes: dict[int, tuple[int, int]], name: str) -> None:
    largest = max((size for _, size in probes.values()), default=0)
    if largest > plan.per_replica_batch_size:
        raise ConfigError(
            f"{name}: its first batch holds {largest} examples, but each replica's batch is "
            f"{plan.per_replica_batch_size} (global batch {plan.global_batch_size} over "
            f"{plan.num_replicas} replica(s)), so each step would train on more than the plan "
            "says; batch by context.get_per_replica_batch_size(global_batch_size) in the "
            f"dataset function (or plan.per_replica_batch_size), {_OPT_OUT}."
        )


def _check_distinct(plan: Plan, probes: dict[int, tuple[int, int]], name: str, where: str) -> None:
    seen: dict[int, int] = {}
    for pipeline, (fingerprint, _) in sorted(probes.items()):
        if fingerprint in seen:
            raise ConfigError(
                f"{name}: {where}s {seen[fingerprint]} and {pipeline} read the "
                f"same first batch, so each step trains on the same examples "
                f"more than once; {_fix(plan)}, {_OPT_OUT}."
            )
        seen[fingerprint] = pipeline


def _fix(plan: Plan) -> str:
    if plan.kind is StrategyKind.PARAMETER_SERVER:
        return (
            "under parameter server every worker gets the same input context and reads "
            "all the data, so give each its own order with an unseeded shuffle (each "
            "worker draws its own; tfdist sets no TensorFlow seed there), or read a "
            "tfdist.Records"
        )
    return (
        "shard the data by context.input_pipeline_id (dataset.shard("
        "context.num_input_pipelines, context.input_pipeline_id)), or read a tfdist.Records, "
        "which tfdist shards"
    )
