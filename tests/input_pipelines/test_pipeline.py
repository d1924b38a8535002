"""Pipelines over real files: coverage per sharding policy, batching, sources and bad input.

Uses the shrunk built-in dataset (640 train / 160 validation examples in 8 files per split) and
TFRecord files written here in the ImageNet layout.
"""

from tests.input_pipelines.images import write_image_tfrecords
import dataclasses
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized

from tfdist import input_pipelines
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import InputConfigError
from tfdist.input_pipelines import Placement
from tfdist.input_pipelines import PreprocessOn
from tfdist.input_pipelines import ReadOptions
from tfdist.input_pipelines import coverage
from tfdist.input_pipelines import image_batches
from tfdist.input_pipelines import pipeline
from tests.conftest import SMALL_TRAIN_SIZE
from tests.conftest import SMALL_VALIDATION_SIZE
from tests.tf_test_case import TfTestCase

_HOST = Placement(PreprocessOn.HOST)
_DEVICE = Placement(PreprocessOn.DEVICE)


def _read(split: str, training: bool, placement: Placement = _DEVICE) -> ReadOptions:
    return ReadOptions(split=split, training=training, placement=placement)


def _context(
    num_pipelines: int = 1, pipeline_id: int = 0, num_replicas: int = 1
) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(
        num_input_pipelines=num_pipelines,
        input_pipeline_id=pipeline_id,
        num_replicas_in_sync=num_replicas,
    )


class _SmallShapes:
    @pytest.fixture(autouse=True)
    def _config(self, small_shapes_data_dir):
        self.config = InputConfig(data_dir=small_shapes_data_dir, global_batch_size=32)


class CoverageTest(_SmallShapes, parameterized.TestCase):
    @parameterized.parameters(
        ("auto", 2, 2), ("file", 2, 2), ("data", 2, 2), ("data", 3, 1), ("auto", 16, 1)
    )
    def test_every_example_read_exactly_once(self, autoshard, num_workers, replicas_per_worker):
        config = dataclasses.replace(self.config, autoshard=autoshard, global_batch_size=48)
        report = input_pipelines.check_coverage(
            config, num_workers=num_workers, replicas_per_worker=replicas_per_worker
        )
        self.assertTrue(report.exactly_once, report.lines())
        self.assertEqual(report.num_examples, SMALL_TRAIN_SIZE)
        self.assertEqual(sum(report.examples_per_worker), SMALL_TRAIN_SIZE)
        self.assertLen(report.plans, num_workers)

    def test_auto_with_too_few_files_says_why(self):
        config = dataclasses.replace(self.config, global_batch_size=48)
        report = input_pipelines.check_coverage(config, num_workers=16, replicas_per_worker=1)
        self.assertLen(report.notices, 1)
        self.assertIn("8 file(s) for 16 input pipelines", report.notices[0])

    def test_off_reports_duplicates(self):
        config = dataclasses.replace(self.config, autoshard="off")
        report = input_pipelines.check_coverage(config, num_workers=2, replicas_per_worker=1)
        self.assertFalse(report.exactly_once)
        self.assertEqual(report.num_duplicated, SMALL_TRAIN_SIZE)
        self.assertEqual(report.num_missing, 0)
        self.assertIn("FAIL", report.lines()[-1])

    def test_no_examples_is_a_failure(self):
        # tfrecord: sources fail earlier (InputConfigError); a TFDS split can still be empty.
        report = coverage.CoverageReport(
            dataset="empty",
            split="train",
            autoshard="auto",
            num_workers=1,
            replicas_per_worker=1,
            notices=[],
            plans=[],
            examples_per_worker=[0],
            num_examples=0,
            num_unique=0,
            num_duplicated=0,
            num_missing=0,
        )
        self.assertFalse(report.exactly_once)
        self.assertEqual(report.lines()[-1], "FAIL: split train has no examples to read")

    def test_uneven_shares_are_a_warning_not_a_failure(self):
        report = coverage.CoverageReport(
            dataset="mine",
            split="train",
            autoshard="file",
            num_workers=3,
            replicas_per_worker=1,
            notices=[],
            plans=[],
            examples_per_worker=[800, 400, 400],
            num_examples=1600,
            num_unique=1600,
            num_duplicated=0,
            num_missing=0,
        )
        self.assertTrue(report.exactly_once)
        self.assertTrue(
            report.lines()[-2].startswith(
                "warning: the workers read unevenly, 400 to 800 examples: in synchronous training "
                "they take the same steps"
            ),
            report.lines()[-2],
        )
        self.assertIn("go round 2.0x as often", report.lines()[-2])
        self.assertEqual(report.lines()[-1], "ok: every example read exactly once")
        self.assertEqual(report.as_dict()["imbalance"], 2.0)
        even = dataclasses.replace(report, examples_per_worker=[540, 530, 530])
        self.assertNotIn("warning", " ".join(even.lines()))

    def test_file_with_too_few_files_is_an_error(self):
        config = dataclasses.replace(self.config, autoshard="file", global_batch_size=48)
        with self.assertRaisesRegex(InputConfigError, r"^autoshard=file: 8 file\(s\) for 16 "):
            input_pipelines.check_coverage(config, num_workers=16, replicas_per_worker=1)


class BatchingTest(_SmallShapes, TfTestCase):
    def test_training_batches_per_replica_and_repeats(self):
        dataset = image_batches.examples(
            self.config, _read("train", True, _HOST), _context(2, 1, num_replicas=4)
        )
        batches = list(dataset.take(30).as_numpy_iterator())  # 30 x 8 > the pipeline's 320.
        self.assertTrue(all(batch["image"].shape == (8, 32, 32, 3) for batch in batches))
        self.assertEqual(batches[0]["image"].dtype, np.float32)

    def test_validation_keeps_its_tail(self):
        config = dataclasses.replace(self.config, global_batch_size=48)
        dataset = image_batches.examples(
            config, _read("validation", False), _context(), with_ids=True
        )
        sizes = [len(batch["id"]) for batch in dataset.as_numpy_iterator()]
        self.assertEqual(sizes, [48, 48, 48, 16])
        self.assertEqual(sum(sizes), SMALL_VALIDATION_SIZE)

    def test_same_seed_same_order_other_seed_other_order(self):
        def first_ids(seed: int) -> np.ndarray:
            config = dataclasses.replace(self.config, seed=seed, deterministic=True)
            dataset = image_batches.examples(
                config, _read("train", True), _context(), with_ids=True
            )
            return next(dataset.as_numpy_iterator())["id"]

        self.assertAllEqual(first_ids(1), first_ids(1))
        self.assertNotAllEqual(first_ids(1), first_ids(2))

    def test_independent_order_reads_everything_in_an_order_of_its_own(self):
        # Parameter-server workers all get this one context; without independent_order they
        # would read the same examples in the same order (see test above).
        def validation_ids() -> np.ndarray:
            read = ReadOptions(
                split="validation", training=False, placement=_DEVICE, independent_order=True
            )
            dataset = image_batches.examples(self.config, read, _context(), with_ids=True)
            return np.concatenate([batch["id"] for batch in dataset.as_numpy_iterator()])

        first, second = validation_ids(), validation_ids()
        self.assertCountEqual(
            first, range(SMALL_TRAIN_SIZE, SMALL_TRAIN_SIZE + SMALL_VALIDATION_SIZE)
        )
        self.assertCountEqual(second, first)
        self.assertNotAllEqual(first, second)

    def test_options_stop_tf_from_sharding_again(self):
        dataset = image_batches.examples(self.config, _read("train", True), _context())
        self.assertEqual(
            dataset.options().experimental_distribute.auto_shard_policy,
            tf.data.experimental.AutoShardPolicy.OFF,
        )

    def test_private_threads_cache_and_determinism_reach_the_options(self):
        config = dataclasses.replace(
            self.config, datasets_num_private_threads=3, deterministic=False, cache=True
        )
        dataset = image_batches.examples(config, _read("train", True), _context())
        self.assertEqual(dataset.options().threading.private_threadpool_size, 3)
        self.assertIs(dataset.options().deterministic, False)  # Unset, it is None.
        self.assertEqual(next(iter(dataset))["image"].shape, (32, 32, 32, 3))
        for deterministic in (True, None):
            config = dataclasses.replace(self.config, deterministic=deterministic)
            dataset = image_batches.examples(config, _read("train", True), _context())
            self.assertIs(dataset.options().deterministic, deterministic)

    def test_several_batches_per_map_call_give_the_same_batches_in_the_same_order(self):
        def training_batches(max_calls: int) -> list[dict]:
            config = dataclasses.replace(self.config, deterministic=True)
            with mock.patch.object(pipeline, "_MAX_BATCHES_PER_CALL", max_calls):
                dataset = image_batches.examples(
                    config, _read("train", True), _context(), with_ids=True
                )
            return list(dataset.take(25).as_numpy_iterator())  # 25 x 32 > one epoch's 640.

        one, several = training_batches(1), training_batches(4)
        self.assertTrue(all(batch["image"].shape == (32, 32, 32, 3) for batch in several))
        for first, second in zip(one, several, strict=True):
            self.assertAllEqual(first["id"], second["id"])
            self.assertAllEqual(first["image"], second["image"])  # uint8, no augmentation yet.

    def test_a_resumed_pipeline_reads_on_as_the_whole_run_each_epoch_in_its_own_order(self):
        """640 examples an epoch (40 batches of 16 for 2 replicas), 4 batches a map call: started
        after N steps, the pipeline's batches are the whole run's from batch 2N, cached or
        not, into a map call, into an epoch and in a later epoch."""
        for cache in (False, True):
            config = dataclasses.replace(self.config, deterministic=True, cache=cache)

            def batches(steps_done: int, count: int) -> list[dict]:
                read = ReadOptions(
                    split="train", training=True, placement=_HOST, steps_done=steps_done
                )
                with mock.patch.object(pipeline, "_MAX_BATCHES_PER_CALL", 4):
                    dataset = image_batches.examples(
                        config, read, _context(num_replicas=2), with_ids=True
                    )
                return list(dataset.take(count).as_numpy_iterator())

            whole = batches(0, 86)
            for steps_done in (1, 5, 21, 41):
                with self.subTest(cache=cache, steps_done=steps_done):
                    for resumed, expected in zip(
                        batches(steps_done, 3), whole[2 * steps_done :], strict=False
                    ):
                        self.assertAllEqual(resumed["id"], expected["id"])
                        self.assertAllEqual(resumed["image"], expected["image"])
            epochs = [np.concatenate([b["id"] for b in whole[at : at + 40]]) for at in (0, 40)]
            self.assertCountEqual(epochs[0], epochs[1])  # Each epoch reads every example ...
            self.assertNotAllEqual(epochs[0], epochs[1])  # ... in an order of its own.

    def test_dataset_fn_yields_supervised_pairs(self):
        make = input_pipelines.dataset_fn(self.config, _read("train", True))
        images, labels = next(iter(make(_context())))
        self.assertEqual(images.dtype, tf.uint8)
        self.assertEqual(labels.shape, (32,))


class SyntheticTest(TfTestCase):
    def test_one_batch_in_the_models_input_format(self):
        config = InputConfig(dataset="synthetic", global_batch_size=16, image_size=8)
        for placement, dtype in (
            (_DEVICE, tf.uint8),
            (Placement(PreprocessOn.HOST, "bfloat16"), tf.bfloat16),
        ):
            make = input_pipelines.dataset_fn(config, _read("train", True, placement))
            images, labels = next(iter(make(_context(num_replicas=2))))
            self.assertEqual(images.shape, (8, 8, 8, 3))
            self.assertEqual(images.dtype, dtype)
            self.assertEqual(labels.shape, (8,))
        self.assertEqual(input_pipelines.prepare(config).num_examples, {"train": 12_800})


class TfrecordSourceTest(TfTestCase):
    @pytest.fixture(autouse=True)
    def _files(self, tmp_path):
        self.directory = str(tmp_path)
        self.train_files = write_image_tfrecords(self.directory, "train", 3, 10)
        write_image_tfrecords(self.directory, "validation", 1, 6)
        self.config = InputConfig(
            dataset=f"tfrecord:{self.directory}/{{split}}-*",
            num_classes=3,
            image_size=16,
            global_batch_size=4,
        )

    def test_counts_resizes_and_covers_by_position(self):
        info = input_pipelines.prepare(self.config)
        self.assertEqual(info.num_examples, {"train": 30, "validation": 6})
        self.assertEqual(info.image_shape, (16, 16, 3))
        report = input_pipelines.check_coverage(self.config, num_workers=2, replicas_per_worker=2)
        self.assertTrue(report.exactly_once, report.lines())
        self.assertEqual(report.examples_per_worker, [20, 10])
        batch = next(iter(image_batches.examples(self.config, _read("train", True), _context())))
        self.assertEqual(batch["image"].shape, (4, 16, 16, 3))

    def test_glob_without_split_is_training_only(self):
        config = dataclasses.replace(self.config, dataset=f"tfrecord:{self.directory}/train-*")
        self.assertEqual(input_pipelines.prepare(config).num_examples, {"train": 30})

    def test_empty_glob_is_one_line_error(self):
        config = dataclasses.replace(self.config, dataset=f"tfrecord:{self.directory}/nope-*")
        with self.assertRaisesRegex(
            InputConfigError,
            r"^dataset='tfrecord:.*/nope-\*': the pattern .* matches "
            r"no files; check the path",
        ):
            input_pipelines.prepare(config)

    def _damage(self, path: str) -> None:
        data = bytearray(open(path, "rb").read())
        data[len(data) // 2 : len(data) // 2 + 8] = b"garbage!"
        with open(path, "wb") as damaged:
            damaged.write(data)

    def test_damaged_file_is_named(self):
        self._damage(self.train_files[1])
        with self.assertRaisesRegex(
            InputConfigError,
            rf"^file {self.train_files[1]} is damaged \(corrupted "
            r"record at \d+; \d+ record\(s\) readable before it\); "
            r".*skip_corrupt_records=true",
        ):
            input_pipelines.prepare(self.config)

    def test_skip_corrupt_records_counts_and_reads_the_rest(self):
        self._damage(self.train_files[1])
        config = dataclasses.replace(self.config, skip_corrupt_records=True)
        readable = input_pipelines.prepare(config).num_examples["train"]
        self.assertBetween(readable, 20, 29)
        ids = [
            batch["id"]
            for batch in image_batches.examples(
                config, _read("train", False), _context(), with_ids=True
            )
        ]
        self.assertLen(np.concatenate(ids), readable)


class TfdsSourceTest(TfTestCase):
    @pytest.fixture(autouse=True)
    def _data_dirs(self, tmp_path, small_shapes_data_dir):
        self.data_dir = str(tmp_path)
        self.small_shapes_data_dir = small_shapes_data_dir

    def test_unprepared_dataset_says_how_to_prepare_it(self):
        data_dir = self.data_dir
        with self.assertRaisesRegex(
            InputConfigError,
            rf"^dataset='mnist' is not prepared in data_dir={data_dir}; prepare it once "
            rf"with `tfds build mnist --data_dir={data_dir}` or set download=true",
        ):
            input_pipelines.prepare(InputConfig(dataset="mnist", data_dir=data_dir))

    def test_unknown_dataset(self):
        with self.assertRaisesRegex(
            InputConfigError, r"^dataset='no_such_dataset' is not a TFDS dataset; "
        ):
            input_pipelines.prepare(InputConfig(dataset="no_such_dataset"))

    def test_prepared_dataset_by_name(self):
        # The built-in dataset is also a registered TFDS dataset: read it by its TFDS name.
        config = InputConfig(
            dataset="tfdist_shapes", data_dir=self.small_shapes_data_dir, global_batch_size=32
        )
        info = input_pipelines.prepare(config)
        self.assertEqual(
            info.num_examples, {"train": SMALL_TRAIN_SIZE, "validation": SMALL_VALIDATION_SIZE}
        )
        self.assertEqual((info.num_classes, info.image_shape), (10, (32, 32, 3)))
        report = input_pipelines.check_coverage(config, num_workers=2, replicas_per_worker=1)
        self.assertTrue(report.exactly_once, report.lines())


@pytest.mark.parametrize(
    "per_replica_batch_size, bytes_per_example, calls",
    [
        (128, 32 * 32 * 3, 4),  # The built-in dataset: 4 batches, 1.5 MiB of pixels.
        (64, 224 * 224 * 3, 1),  # ImageNet-sized: one batch is already 9.2 MiB.
        (512, 32 * 32 * 3, 2),  # 1.5 MiB a batch: two fit under 4 MiB.
        (2048, 32 * 32 * 3, 1),  # One batch over the bound still goes through, alone.
        (128, None, 1),  # A user's records: their parsed size is not known.
    ],
)
def test_batches_per_call_fill_at_most_4_mib_and_4_batches(
    per_replica_batch_size, bytes_per_example, calls
):
    assert pipeline.batches_per_call(per_replica_batch_size, bytes_per_example) == calls


def test_map_batches_splits_back_in_order_and_refuses_a_partial_last_batch():
    records = tf.data.Dataset.range(40)
    parse = lambda values: {"value": values * 10, "square": values * values}  # noqa: E731
    grouped = pipeline.map_batches(
        records, 4, parse, drop_remainder=True, calls=3, deterministic=True
    )
    batches = list(grouped.as_numpy_iterator())
    assert [list(batch["value"]) for batch in batches] == [
        [10 * value for value in range(start, start + 4)] for start in range(0, 36, 4)
    ]
    assert grouped.element_spec["value"].shape == (4,)
    with pytest.raises(ValueError, match="calls=3 needs drop_remainder=True"):
        pipeline.map_batches(records, 4, parse, drop_remainder=False, calls=3)
