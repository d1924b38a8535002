"""`check_coverage`: reads one epoch of every simulated worker's pipeline and counts who read what.

Each worker's pipeline is built with a hand-made `tf.distribute.InputContext`, exactly as
`tf.distribute` would build it on that worker. Examples are identified by their stored `id`, or
by file and position when the source stores none (as for user `Records`).
"""

import collections
import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf

from . import image_batches
from . import pipeline
from . import sources
from .choices import PreprocessOn
from .choices import SourceKind
from .config import InputConfig
from .messages import InputConfigError
from .read_options import Placement
from .read_options import ReadOptions
from .records import explain_parse_error
from .user_records import Records


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

    @property
    def imbalance(self) -> float:
        """The most examples a worker reads over the fewest (1.0: even)."""
        fewest = min(self.examples_per_worker, default=0)
        return max(self.examples_per_worker) / fewest if fewest else 1.0

    def _uneven(self) -> list[str]:
        """A warning line when the workers read unevenly: in synchronous training every worker
        takes the same steps, so those with fewer examples repeat theirs more often."""
        if self.num_workers < 2 or self.imbalance < UNEVEN_WARNING:
            return []
        return [
            f"warning: the workers read unevenly, {min(self.examples_per_worker)} to "
            f"{max(self.examples_per_worker)} examples: in synchronous training they take "
            f"the same steps, so the smaller shares go round {self.imbalance:.1f}x as often "
            "per epoch; split the data into more files of even size (a multiple of the "
            "worker count)"
        ]

    def _verdict(self) -> str:
        if self.exactly_once:
            return "ok: every example read exactly once"
        if not self.num_examples:
            return f"FAIL: split {self.split} has no examples to read"
        return (
            f"FAIL: {self.num_duplicated} example(s) read more than once, "
            f"{self.num_missing} never read"
        )

    def lines(self) -> list[str]:
        """The human-readable report."""
        return [
            f"dataset {self.dataset}, split {self.split}: {self.num_examples} examples; "
            f"{self.num_workers} worker(s) x {self.replicas_per_worker} replica(s), "
            f"autoshard={self.autoshard}",
            *self.notices,
            *self.plans,
            "examples per worker: "
            + ", ".join(
                f"worker {index}: {count}" for index, count in enumerate(self.examples_per_worker)
            ),
            f"read {sum(self.examples_per_worker)}, unique {self.num_unique}, duplicated "
            f"{self.num_duplicated}, missing {self.num_missing}",
            *self._uneven(),
            self._verdict(),
        ]

    def as_dict(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "exactly_once": self.exactly_once,
            "imbalance": self.imbalance,
        }


UNEVEN_WARNING = 1.1  # Most over fewest examples per worker past which `lines` warns.
_UINT8 = Placement(PreprocessOn.DEVICE)  # Coverage needs no preprocessing.


@dataclasses.dataclass(frozen=True)
class _Covered:
    """A split to cover: its dataset's name, its number of files, how one pipeline reads one
    epoch of its example ids (config, context, training -> batches of {id}), and how to explain
    an error from reading it (see `explain_input_error`)."""

    name: str
    num_files: int
    read_ids: Callable[[InputConfig, tf.distribute.InputContext, bool], tf.data.Dataset]
    explain: Callable[[Exception], None]


def _image_split(config: InputConfig, split: str) -> _Covered:
    """The image dataset's split, its examples identified by their stored id, or else their file
    and position."""
    if config.source_kind is SourceKind.SYNTHETIC:
        raise InputConfigError(
            "dataset='synthetic' has no examples to cover; check shapes, a "
            "TFDS dataset or tfrecord:<glob>."
        )
    source = sources.source(config)
    if split not in source.files:
        raise InputConfigError(
            f"split={split!r} is not in dataset={config.dataset!r}; it has "
            f"{', '.join(source.files)}."
        )

    def read_ids(
        read_config: InputConfig, context: tf.distribute.InputContext, training: bool
    ) -> tf.data.Dataset:
        read = ReadOptions(split=split, training=training, placement=_UINT8)
        return image_batches.examples(
            read_config, read, context, repeat=False, announce=False, with_ids=True
        )

    return _Covered(
        config.dataset,
        len(source.files[split]),
        read_ids,
        lambda error: sources.explain_read_error(config, error),
    )


def _records_split(records: Records, split: str) -> _Covered:
    """The split of `records`, its examples identified by file and position (nothing is
    parsed)."""
    paths = records.paths(split)

    def read_ids(
        read_config: InputConfig, context: tf.distribute.InputContext, training: bool
    ) -> tf.data.Dataset:
        return pipeline.batches(
            read_config,
            ReadOptions(split=split, training=training),
            paths,
            context,
            lambda _, ids: {image_batches.ID: ids},
            job_name=records.job_name(split),
            repeat=False,
            announce=False,
            tag_positions=True,
        )

    return _Covered(
        records.describe(),
        len(paths),
        read_ids,
        lambda error: explain_parse_error(paths, records.parse_fn, error),
    )


def _read_ids(dataset: tf.data.Dataset) -> np.ndarray:
    ids = [batch[image_batches.ID] for batch in dataset.as_numpy_iterator()]
    return np.concatenate(ids) if ids else np.zeros([0], np.int64)


def _all_ids(config: InputConfig, covered: _Covered) -> np.ndarray:
    """Every example id of the split, read with one unsharded pipeline."""
    single = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1
    )
    unsharded = dataclasses.replace(config, autoshard="off", tf_data_service=None)
    return _read_ids(covered.read_ids(unsharded, single, False))


def check_coverage(
    config: InputConfig,
    *,
    num_workers: int,
    replicas_per_worker: int,
    split: str = sources.TRAIN,
    records: Records | None = None,
) -> CoverageReport:
    """Reads one training epoch of `split` as each of `num_workers` workers would: of the image
    dataset `config.dataset`, or of `records` when given.

    Raises:
      InputConfigError: bad worker counts, a dataset without files, or a plan that cannot run.
    """
    for field, value in (
        ("num_workers", num_workers),
        ("replicas_per_worker", replicas_per_worker),
    ):
        if value < 1:
            raise InputConfigError(f"{field}={value} must be a positive integer.")
    covered = _image_split(config, split) if records is None else _records_split(records, split)
    num_replicas = num_workers * replicas_per_worker
    per_worker, plans, notices = [], [], []
    try:
        for worker in range(num_workers):
            context = tf.distribute.InputContext(
                num_input_pipelines=num_workers,
                input_pipeline_id=worker,
                num_replicas_in_sync=num_replicas,
            )
            plan = pipeline.shard_plan(config, covered.num_files, context, training=True)
            plans.append(plan.describe())
            if plan.notice and plan.notice not in notices:
                notices.append(plan.notice)
            per_worker.append(_read_ids(covered.read_ids(config, context, True)))
        expected = _all_ids(config, covered)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
        covered.explain(error)
        raise
    counts = collections.Counter(np.concatenate(per_worker).tolist())
    expected_ids = set(expected.tolist())
    return CoverageReport(
        dataset=covered.name,
        split=split,
        autoshard=config.autoshard.value,
        num_workers=num_workers,
        replicas_per_worker=replicas_per_worker,
        notices=notices,
        plans=plans,
        examples_per_worker=[len(ids) for ids in per_worker],
        num_examples=len(expected_ids),
        num_unique=len(counts),
        num_duplicated=sum(1 for count in counts.values() if count > 1),
        num_missing=len(expected_ids - counts.keys()),
    )
