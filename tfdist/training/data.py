"""The data `fit` and `CustomLoop` read, as dataset functions for the plan's strategy: tfdist's
pipeline for an input config, the user's records and parse_fn through it, or the user's own
dataset function; how the strategy hands batches to its replicas; how long validation runs."""

import math
import sys
from typing import Callable

import tensorflow as tf

from tfdist import input_pipelines
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import Records
from tfdist.input_pipelines.records import complaint
from tfdist.runtime.config import ConfigError
from tfdist.runtime.setup import Plan
from tfdist.runtime.setup import require_plan
from tfdist.strategies import StrategyKind
from tfdist.training import guards

# What `fit` takes as data: tfdist's pipeline for an input config, the user's records and
# parse_fn through it, or the user's own dataset function (InputContext -> tf.data.Dataset).
DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]
Data = InputConfig | Records | DatasetFn
DEFAULT = "default"  # `validation_data`: the validation split of an input config's dataset.
# How TensorFlow's error names Python code run inside a pipeline (from_generator, py_function).
_PYTHON_OP_WORDS = ("PyFunc", "generator_py_func", "EagerPyFunc")


def input_options(plan: Plan) -> tf.distribute.InputOptions:
    """How the strategy hands batches to its replicas.

    GPUs: the default, batches prefetched onto each device. CPU replicas take batches from the
    host pipeline as they are. Mirrored CPU replicas each read their own pipeline (PER_REPLICA):
    measured on the default job over 2 CPU replicas, 2x the examples/s of the strategy's shared
    multi-device iterator, and `fit` returns 0.05 s after its last epoch instead of 21-90 s (with
    TF 2.21 that iterator's teardown waits out a tf.data autotuner's sleep). Other strategies
    skip the per-device prefetch buffer, which copies nothing on a CPU. (one_device on a machine
    without GPUs runs under the default strategy, which takes the dataset as it is, with no
    such wait: `tfdist.strategies.one_device`.) multi_worker_mirrored cannot read per replica
    (TensorFlow refuses PER_REPLICA outside MirroredStrategy), so its batches pass through that
    iterator even on one device: 0.4 ms of a 38 ms step with one worker, where these options
    and TF's defaults time the same (docs/PERFORMANCE.md "The multi-worker tax").
    """
    if plan.num_gpu_replicas:
        return tf.distribute.InputOptions()
    if plan.kind is StrategyKind.MIRRORED:
        return tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            experimental_fetch_to_device=False,
        )
    return tf.distribute.InputOptions(
        experimental_fetch_to_device=False, experimental_per_replica_buffer_size=0
    )


def dataset_fn(
    plan: Plan, data: Data, split: str, *, training: bool, steps_done: int = 0
) -> DatasetFn:
    """The dataset function that reads `data`'s `split` for this plan; tfdist's pipelines start
    after the batches of `steps_done` training steps (`from_start`).

    Example (a custom loop):
      >>> train = tfdist.dataset_fn(plan, tfdist.Records("data/train-*.tfrecord", parse),
      ...                           "train", training=True)
      >>> batches = plan.strategy.distribute_datasets_from_function(train)
    """
    require_plan(plan)
    if isinstance(data, (InputConfig, Records)):
        read = input_pipelines.ReadOptions(
            split=split,
            training=training,
            placement=plan.placement,
            independent_order=_in_orders_of_their_own(plan),
            steps_done=steps_done,
        )
        if isinstance(data, Records):
            return input_pipelines.records_dataset_fn(data, plan.config.input, read)
        return input_pipelines.dataset_fn(data, read)
    if not callable(data):
        raise ConfigError(
            f"{split} data is a {type(data).__name__}; pass a dataset function "
            "(InputContext -> tf.data.Dataset), a tfdist.Records or an "
            "InputConfig."
        )
    return guards.returning_dataset(data, f"{split} data")


def from_start(
    plan: Plan, data: Data, start: tuple[int, int] | None, split: str = "train"
) -> DatasetFn:
    """The training dataset function of `data`'s `split` for a run that resumes at `start`
    ((epoch, step), from 0; None: at the beginning): each pipeline reads on where the steps done
    left it. tfdist's pipelines start in that step's epoch (their epochs' orders come from the
    seed); the user's own dataset function is read from its start and its replicas' batches of
    the steps done are dropped (said on stderr: tfdist cannot know its order). Several
    parameter-server workers read in orders of their own, so they start over."""
    steps = start[0] * plan.steps_per_epoch + start[1] if start else 0
    if _in_orders_of_their_own(plan):
        steps = 0
    if not is_dataset_function(data):
        return dataset_fn(plan, data, split, training=True, steps_done=steps)
    read = dataset_fn(plan, data, split, training=True)
    if not steps:
        return read
    print(
        f"tfdist: your dataset function {guards.name_of(data)} reads on after the batches of "
        f"the {steps} step(s) trained (they are read and dropped): the batches the run "
        "would have read if it reads in a fixed order (seeded shuffles, deterministic maps)",
        file=sys.stderr,
        flush=True,
    )

    def read_on(context: tf.distribute.InputContext) -> tf.data.Dataset:
        replicas = max(1, context.num_replicas_in_sync // context.num_input_pipelines)
        return read(context).skip(steps * replicas)

    return read_on


def _in_orders_of_their_own(plan: Plan) -> bool:
    """Whether each worker reads in an order of its own, which nothing records: several
    parameter-server workers, which TensorFlow gives the same InputContext and steps in no set
    order. One such worker reads as one process does, so its position can be restored."""
    return plan.kind is StrategyKind.PARAMETER_SERVER and plan.num_workers > 1


def is_dataset_function(data: Data) -> bool:
    """Whether `data` is the user's own dataset function (not tfdist's pipeline)."""
    return callable(data) and not isinstance(data, (InputConfig, Records))


def dataset_info(plan: Plan, data: InputConfig) -> input_pipelines.DatasetInfo:
    """`data`'s dataset info: the plan's, when it is the run's own input."""
    if data == plan.config.input and plan.dataset_info is not None:
        return plan.dataset_info
    return input_pipelines.prepare(data)


def validation_steps(plan: Plan, data: Data, steps: int | None = None) -> int:
    """`steps`, else `--validation_steps`, else one pass over the validation data (its last
    partial batch too) when its size is known: a `Records`' own `num_examples`, else its
    validation files counted through once."""
    steps = steps or plan.config.train.validation_steps
    if steps:
        return steps
    if isinstance(data, InputConfig):
        examples = dataset_info(plan, data).num_examples["validation"]
        return math.ceil(examples / plan.global_batch_size)
    if isinstance(data, Records):
        examples = data.num_examples or int(
            tf.data.TFRecordDataset(data.paths("validation")).reduce(0, lambda count, _: count + 1)
        )
        if examples:
            return math.ceil(examples / plan.global_batch_size)
    if is_dataset_function(data):
        # One pipeline of one replica: its batches are global batches.
        batches = int(data(tf.distribute.InputContext()).cardinality())
        if batches > 0:
            return batches
    raise ConfigError(
        "validation_steps: tfdist cannot tell where your validation data ends; "
        "pass validation_steps=N (to fit, or as the option) (or return a finite dataset, "
        "or a tfdist.Records)."
    )


def validation_data(plan: Plan, train_data: Data, data: Data | None | str):
    """The validation data `fit` reads: `DEFAULT` is the validation split of an input config's
    dataset, when it has one, and none for the user's own data."""
    if data != DEFAULT:
        return data
    if (
        isinstance(train_data, InputConfig)
        and "validation" in dataset_info(plan, train_data).num_examples
    ):
        return train_data
    return None


def describe(data: Data) -> str:
    """A name for the summary's `dataset`."""
    if isinstance(data, InputConfig):
        return data.dataset
    if isinstance(data, Records):
        return f"records:{data.files if isinstance(data.files, str) else len(data.files)}"
    return guards.name_of(data)


def check_steps_match(plan: Plan, train_data: Data) -> None:
    """Raises ConfigError unless the plan's steps per epoch describe `train_data`."""
    if plan.dataset_info is not None and train_data != plan.config.input:
        raise ConfigError(
            f"steps_per_epoch: the plan took {plan.steps_per_epoch} from {plan.steps_from}, but "
            "fit got other training data; pass train_examples= to tfdist.setup, or "
            "steps_per_epoch=N."
        )


def explain(data: Data, error: Exception) -> None:
    """Raises the one-line error naming the damaged file or record behind `error`, if any, or
    the user's dataset function whose Python code (a generator's, a py_function's) raised."""
    if isinstance(data, InputConfig):
        input_pipelines.explain_input_error(data, error)
    elif isinstance(data, Records):
        input_pipelines.explain_records_error(data, "train", error)
    elif (
        callable(data)
        and isinstance(error, tf.errors.OpError)
        and "test_function" not in error.message
        and any(words in error.message for words in _PYTHON_OP_WORDS)
    ):
        raise ConfigError(
            f"train_data: dataset function {guards.name_of(data)}: its Python code raised "
            f"while making a batch ({complaint(error)}); fix that code "
            "(run the dataset by itself to see the traceback)."
        ) from None
