"""`check_coverage`: reads one epoch of every simulated worker's pipeline and counts who read what.

Each worker's pipeline is built with a hand-made `tf.distribute.InputContext`, exactly as
`tf.distribute` would build it on that worker. Examples are identified by their stored `id`, or
by file and position when the source stores none.
"""

import collections
import dataclasses

import numpy as np
import tensorflow as tf

from input_pipelines import pipeline
from input_pipelines import sources
from input_pipelines.config import InputConfig
from input_pipelines.config import InputConfigError
from input_pipelines.config import PreprocessOn
from input_pipelines.config import SourceKind
from input_pipelines.preprocessing import Placement


@dataclasses.dataclass(frozen=True)
class CoverageReport:
    """Who read what in one epoch of `split`, over `num_workers` simulated workers."""
    dataset: str
    split: str
    autoshard: str
    num_workers: int
    replicas_per_worker: int
    notices: list[str]
    plans: list[str]
    examples_per_worker: list[int]
    num_examples: int
    num_unique: int
    num_duplicated: int
    num_missing: int

    @property
    def exactly_once(self) -> bool:
        """Every example read once, and there were examples to read."""
        return self.num_examples > 0 and self.num_duplicated == 0 and self.num_missing == 0

    def _verdict(self) -> str:
        if self.exactly_once:
            return "ok: every example read exactly once"
        if not self.num_examples:
            return f"FAIL: split {self.split} has no examples to read"
        return (f"FAIL: {self.num_duplicated} example(s) read more than once, "
                f"{self.num_missing} never read")

    def lines(self) -> list[str]:
        """The human-readable report."""
        return [
            f"dataset {self.dataset}, split {self.split}: {self.num_examples} examples; "
            f"{self.num_workers} worker(s) x {self.replicas_per_worker} replica(s), "
            f"autoshard={self.autoshard}",
            *self.notices,
            *self.plans,
            "examples per worker: " + ", ".join(
                f"worker {index}: {count}" for index, count in enumerate(self.examples_per_worker)),
            f"read {sum(self.examples_per_worker)}, unique {self.num_unique}, duplicated "
            f"{self.num_duplicated}, missing {self.num_missing}",
            self._verdict(),
        ]

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "exactly_once": self.exactly_once}


_UINT8 = Placement(PreprocessOn.DEVICE)  # Coverage needs no preprocessing.


def _read_ids(dataset: tf.data.Dataset) -> np.ndarray:
    ids = [batch[pipeline.ID] for batch in dataset.as_numpy_iterator()]
    return np.concatenate(ids) if ids else np.zeros([0], np.int64)


def _all_ids(config: InputConfig, split: str) -> np.ndarray:
    """Every example id of `split`, read with one unsharded pipeline."""
    single = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                        num_replicas_in_sync=1)
    unsharded = dataclasses.replace(config, autoshard="off", tf_data_service=None)
    return _read_ids(pipeline.examples(unsharded, split, single, training=False,
                                       placement=_UINT8, announce=False, with_ids=True))


def check_coverage(config: InputConfig, *, num_workers: int, replicas_per_worker: int,
                   split: str = sources.TRAIN) -> CoverageReport:
    """Reads one training epoch of `split` as each of `num_workers` workers would.

    Raises:
      InputConfigError: bad worker counts, a dataset without files, or a plan that cannot run.
    """
    for field, value in (("num_workers", num_workers),
                         ("replicas_per_worker", replicas_per_worker)):
        if value < 1:
            raise InputConfigError(f"{field}={value} must be a positive integer.")
    if config.source_kind is SourceKind.SYNTHETIC:
        raise InputConfigError("dataset='synthetic' has no examples to cover; check shapes, a "
                               "TFDS dataset or tfrecord:<glob>.")
    source = sources.source(config)
    if split not in source.files:
        raise InputConfigError(f"split={split!r} is not in dataset={config.dataset!r}; it has "
                               f"{', '.join(source.files)}.")
    num_replicas = num_workers * replicas_per_worker
    per_worker, plans, notices = [], [], []
    try:
        for worker in range(num_workers):
            context = tf.distribute.InputContext(num_input_pipelines=num_workers,
                                                 input_pipeline_id=worker,
                                                 num_replicas_in_sync=num_replicas)
            plan = pipeline.shard_plan(config, source, split, context, training=True)
            plans.append(plan.describe())
            if plan.notice and plan.notice not in notices:
                notices.append(plan.notice)
            per_worker.append(_read_ids(pipeline.examples(
                config, split, context, training=True, placement=_UINT8, repeat=False,
                announce=False, with_ids=True)))
        expected = _all_ids(config, split)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
        sources.explain_read_error(config, error)
        raise
    counts = collections.Counter(np.concatenate(per_worker).tolist())
    expected_ids = set(expected.tolist())
    return CoverageReport(
        dataset=config.dataset, split=split, autoshard=config.autoshard.value,
        num_workers=num_workers, replicas_per_worker=replicas_per_worker, notices=notices,
        plans=plans,
        examples_per_worker=[len(ids) for ids in per_worker], num_examples=len(expected_ids),
        num_unique=len(counts),
        num_duplicated=sum(1 for count in counts.values() if count > 1),
        num_missing=len(expected_ids - counts.keys()))
