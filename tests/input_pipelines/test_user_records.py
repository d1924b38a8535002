"""A user's own TFRecord files and parse_fn (`Records`): element structures (dicts, ragged, padded
and sparse features), per-replica batching and sharding with hand-built InputContexts, seeded
shuffling, parameter-server order, coverage, the tf.data service, and one-line errors naming the
file (and the record) that a parse_fn fails on."""

import collections
import os
import pathlib
import re
from unittest import mock

import numpy as np
import portpicker
import pytest
import tensorflow as tf
from absl.testing import parameterized

from tfdist import input_pipelines
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import InputConfigError
from tfdist.input_pipelines import Placement
from tfdist.input_pipelines import PreprocessOn
from tfdist.input_pipelines import ReadOptions
from tfdist.input_pipelines import Records
from tfdist.input_pipelines import pipeline
from tfdist.input_pipelines import records as record_checks
from tfdist.input_pipelines import service
from tests.input_pipelines.records import damage_first_record
from tests.input_pipelines.records import float_feature
from tests.input_pipelines.records import int64_feature
from tests.input_pipelines.records import write_records
from tests.tf_test_case import TfTestCase

_NUM_TRAIN_FILES = 8
_RECORDS_PER_FILE = 3
_NUM_TRAIN = _NUM_TRAIN_FILES * _RECORDS_PER_FILE
_NUM_VALIDATION = 5
_TRAIN = ReadOptions(split="train", training=True)
_EVAL = ReadOptions(split="train", training=False)
_SPEC = {"tokens": tf.io.RaggedFeature(tf.int64), "label": tf.io.FixedLenFeature([], tf.int64)}


def token_example(example_id: int, **features: tf.train.Feature) -> bytes:
    """A tf.train.Example with `id % 4 + 1` tokens, each the id, and the id as its label."""
    feature = {
        "tokens": int64_feature(*[example_id] * (example_id % 4 + 1)),
        "label": int64_feature(example_id),
        **features,
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse_ragged(serialized: tf.Tensor) -> tuple[dict[str, tf.RaggedTensor], tf.Tensor]:
    features = tf.io.parse_example(serialized, _SPEC)
    label = features.pop("label")
    return features, label


def parse_padded(serialized: tf.Tensor) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    features = tf.io.parse_example(serialized, _SPEC)
    tokens = features["tokens"]
    return {"tokens": tokens.to_tensor(), "length": tokens.row_lengths()}, features["label"]


def parse_sparse(serialized: tf.Tensor) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    features = tf.io.parse_example(
        serialized,
        {
            "tokens": tf.io.VarLenFeature(tf.int64),
            "score": tf.io.FixedLenFeature([], tf.float32),
            "label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    return {"ids": features["tokens"], "score": features["score"]}, features["label"]


def _context(
    num_pipelines: int = 1, pipeline_id: int = 0, num_replicas: int = 1
) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(
        num_input_pipelines=num_pipelines,
        input_pipeline_id=pipeline_id,
        num_replicas_in_sync=num_replicas,
    )


def _labels(dataset: tf.data.Dataset) -> list[int]:
    return [int(label) for _, labels in dataset for label in labels.numpy()]


class _Files:
    """8 train files of 3 examples (ids 3 * file + position) and 1 validation file of 5."""

    @pytest.fixture(autouse=True)
    def _files(self, tmp_path):
        self.directory = str(tmp_path)
        self.train_files = [
            write_records(
                os.path.join(self.directory, f"train-{index}.tfrecord"),
                [
                    token_example(index * _RECORDS_PER_FILE + position)
                    for position in range(_RECORDS_PER_FILE)
                ],
            )
            for index in range(_NUM_TRAIN_FILES)
        ]
        write_records(
            os.path.join(self.directory, "validation-0.tfrecord"),
            [token_example(100 + position) for position in range(_NUM_VALIDATION)],
        )
        self.records = Records(
            files=os.path.join(self.directory, "{split}-*.tfrecord"),
            parse_fn=parse_ragged,
            num_examples=_NUM_TRAIN,
        )

    def _dataset(
        self,
        read: ReadOptions = _EVAL,
        context: tf.distribute.InputContext | None = None,
        records: Records | None = None,
        **config,
    ) -> tf.data.Dataset:
        """`records` (else the fixture's) read as one pipeline of `context` (else the only
        one), with 4 examples per step and `config` options."""
        config = InputConfig(**{"global_batch_size": 4, "shuffle_buffer_size": 100, **config})
        make = input_pipelines.records_dataset_fn(records or self.records, config, read)
        return make(context or _context())


class RecordsOptionsTest(parameterized.TestCase):
    @parameterized.named_parameters(
        (
            "empty_glob",
            dict(files=""),
            r"^files='' names no files; pass a glob such as "
            r"'/data/\{split\}-\*\.tfrecord' or a list of TFRecord "
            r"paths\.$",
        ),
        ("empty_list", dict(files=[]), r"^files=\[\] names no files; "),
        ("not_paths", dict(files=5), r"^files=5 is not a glob or a sequence of paths; "),
        ("bytes", dict(files=b"/data/*"), r"^files=b'/data/\*' is not a glob or a sequence"),
        ("empty_path", dict(files=["/a", ""]), r"^files contains '', not a path; "),
        (
            "twice",
            dict(files=["/a", "/b", "/a"]),
            r"^files lists /a 2 times; list each file once, or every epoch reads it more than "
            r"once\.$",
        ),
        (
            "parse_fn",
            dict(parse_fn="parse"),
            r"^parse_fn='parse' is not callable; pass a "
            r"function from a batch of serialized records ",
        ),
        (
            "zero",
            dict(num_examples=0),
            r"^num_examples=0 is not an integer from 1 to "
            r"1099511627776; pass the number of training examples, "
            r"or None\.$",
        ),
        ("bool", dict(num_examples=True), r"^num_examples=True is not an integer"),
        ("float", dict(num_examples=10.0), r"^num_examples=10\.0 is not an integer"),
        ("huge", dict(num_examples=1 << 41), r"^num_examples=2199023255552 is not an integer"),
    )
    def test_rejections_are_one_line(self, kwargs, pattern):
        with self.assertRaisesRegex(InputConfigError, pattern) as caught:
            Records(**{"files": "/data/*", "parse_fn": parse_ragged, **kwargs})
        self.assertNotIn("\n", str(caught.exception))

    def test_files_and_parse_fn_by_position_num_examples_by_keyword(self):
        self.assertEqual(
            Records("/x/*", len, num_examples=3),
            Records(files="/x/*", parse_fn=len, num_examples=3),
        )
        with self.assertRaises(TypeError):
            Records("/x/*", len, 3)  # pylint: disable=too-many-function-args

    def test_paths_become_a_tuple_and_describe_themselves(self):
        records = Records(files=[pathlib.Path("/a"), "/b", "/c", "/d"], parse_fn=parse_ragged)
        self.assertEqual(records.files, ("/a", "/b", "/c", "/d"))
        self.assertEqual(records.describe(), "/a, /b, /c and 1 more")
        self.assertEqual(Records(files=pathlib.Path("/x/*"), parse_fn=parse_ragged).files, "/x/*")
        self.assertEqual(
            records.job_name("train"),
            Records(files=("/a", "/b", "/c", "/d"), parse_fn=len).job_name("train"),
        )
        self.assertNotEqual(records.job_name("train"), records.job_name("validation"))


class StructureTest(_Files, TfTestCase):
    def test_dict_of_ragged_tokens_and_labels(self):
        dataset = self._dataset(ReadOptions(split="validation", training=False))
        features, labels = dataset.element_spec
        self.assertIsInstance(features["tokens"], tf.RaggedTensorSpec)
        self.assertEqual(labels, tf.TensorSpec([None], tf.int64))
        batches = list(dataset)
        self.assertEqual([len(batch_labels) for _, batch_labels in batches], [4, 1])
        tokens, labels = batches[0][0]["tokens"], batches[0][1]
        self.assertEqual(
            tokens.to_list(), [[int(label)] * (int(label) % 4 + 1) for label in labels]
        )

    def test_padded_tokens(self):
        records = Records(files=self.records.files, parse_fn=parse_padded)
        features, labels = next(
            iter(self._dataset(ReadOptions(split="validation", training=False), records=records))
        )
        self.assertAllEqual(labels, [100, 101, 102, 103])
        self.assertAllEqual(features["length"], [1, 2, 3, 4])
        self.assertAllEqual(features["tokens"][1], [101, 101, 0, 0])

    def test_sparse_ids_in_a_dict(self):
        path = write_records(
            os.path.join(self.directory, "scored.tfrecord"),
            [token_example(index, score=float_feature(index / 2)) for index in range(4)],
        )
        records = Records(files=[path], parse_fn=parse_sparse)
        features, labels = next(iter(self._dataset(records=records)))
        self.assertIsInstance(features["ids"], tf.SparseTensor)
        self.assertAllEqual(tf.sparse.to_dense(features["ids"])[2], [2, 2, 2, 0])
        self.assertAllClose(features["score"], [0.0, 0.5, 1.0, 1.5])
        self.assertAllEqual(labels, [0, 1, 2, 3])


class ShardingTest(_Files, parameterized.TestCase):
    def test_per_replica_batches_from_two_input_contexts(self):
        for pipeline_id in range(2):
            dataset = self._dataset(
                _TRAIN,
                _context(2, pipeline_id, num_replicas=4),
                global_batch_size=8,
                autoshard="file",
            )
            batches = [labels.numpy() for _, labels in dataset.take(10)]  # Past one epoch.
            self.assertTrue(all(len(labels) == 2 for labels in batches))
            files = {label // _RECORDS_PER_FILE for labels in batches for label in labels}
            self.assertEqual(files, set(range(pipeline_id, _NUM_TRAIN_FILES, 2)))

    @parameterized.parameters("auto", "file", "data")
    def test_two_pipelines_read_each_example_once(self, autoshard):
        read = [
            _labels(
                self._dataset(_EVAL, _context(2, pipeline_id, num_replicas=2), autoshard=autoshard)
            )
            for pipeline_id in range(2)
        ]
        self.assertCountEqual(read[0] + read[1], range(_NUM_TRAIN))
        self.assertLen(read[0], _NUM_TRAIN // 2)

    def test_off_reads_everything_in_each_pipeline(self):
        read = _labels(self._dataset(_EVAL, _context(2, 1, num_replicas=2), autoshard="off"))
        self.assertCountEqual(read, range(_NUM_TRAIN))

    def test_logs_the_plan_like_the_built_in_pipeline(self):
        with mock.patch.object(pipeline, "log") as log:
            self._dataset(_TRAIN, _context(2, 1, num_replicas=2))
        log.assert_called_once_with(
            "train: input pipeline 1/2 reads files 1,3,5,7 of 8; each example once per epoch"
        )

    def test_shuffle_is_seeded(self):
        def first_labels(seed: int) -> list[int]:
            dataset = self._dataset(_TRAIN, seed=seed, deterministic=True, global_batch_size=8)
            return next(iter(dataset))[1].numpy().tolist()

        self.assertEqual(first_labels(1), first_labels(1))
        self.assertNotEqual(first_labels(1), first_labels(2))
        self.assertNotEqual(sorted(first_labels(1)), first_labels(1))

    def test_independent_order_reads_everything_in_an_order_of_its_own(self):
        # Parameter-server workers all get this one context.
        read = ReadOptions(split="train", training=False, independent_order=True)
        first, second = (_labels(self._dataset(read, _context())) for _ in range(2))
        self.assertCountEqual(first, range(_NUM_TRAIN))
        self.assertCountEqual(second, first)
        self.assertNotEqual(first, second)

    def test_options_and_cache(self):
        dataset = self._dataset(_TRAIN, cache=True, datasets_num_private_threads=2)
        self.assertEqual(
            dataset.options().experimental_distribute.auto_shard_policy,
            tf.data.experimental.AutoShardPolicy.OFF,
        )
        self.assertEqual(dataset.options().threading.private_threadpool_size, 2)
        self.assertLen(_labels(dataset.take(10)), 40)

    def test_placement_is_for_image_datasets_only(self):
        read = ReadOptions(split="train", training=False, placement=Placement(PreprocessOn.HOST))
        self.assertCountEqual(_labels(self._dataset(read)), range(_NUM_TRAIN))


class CoverageTest(_Files, parameterized.TestCase):
    @parameterized.parameters(("auto", 2, 2), ("file", 2, 1), ("data", 3, 1), ("auto", 16, 1))
    def test_every_example_read_exactly_once(self, autoshard, num_workers, replicas_per_worker):
        config = InputConfig(global_batch_size=48, autoshard=autoshard)
        report = input_pipelines.check_coverage(
            config,
            num_workers=num_workers,
            replicas_per_worker=replicas_per_worker,
            records=self.records,
        )
        self.assertTrue(report.exactly_once, report.lines())
        self.assertEqual(report.num_examples, _NUM_TRAIN)
        self.assertEqual(report.dataset, self.records.files)

    def test_off_reports_duplicates(self):
        report = input_pipelines.check_coverage(
            InputConfig(autoshard="off", global_batch_size=4),
            num_workers=2,
            replicas_per_worker=1,
            records=self.records,
        )
        self.assertFalse(report.exactly_once)
        self.assertEqual(report.num_duplicated, _NUM_TRAIN)


class ServiceTest(_Files, TfTestCase):
    def test_ragged_batches_come_through_the_service(self):
        cluster = service.start(portpicker.pick_unused_port(), 1)
        self.addCleanup(cluster.stop)
        dataset = self._dataset(_TRAIN, tf_data_service=cluster.address)
        features, labels = next(iter(dataset))
        self.assertEqual(
            features["tokens"].row_lengths().numpy().tolist(),
            [int(label) % 4 + 1 for label in labels],
        )


class ErrorsTest(_Files, parameterized.TestCase):
    def _assert_one_line(
        self, pattern: str, read: ReadOptions = _EVAL, records: Records | None = None
    ) -> None:
        with self.assertRaisesRegex(InputConfigError, pattern) as caught:
            self._dataset(read, records=records)
        self.assertNotIn("\n", str(caught.exception))

    def test_no_file_matches(self):
        self._assert_one_line(
            rf"^files='{self.directory}/{{split}}-\*\.tfrecord': the pattern "
            rf"'{self.directory}/test-\*\.tfrecord' matches no files; check the path \(\{{split\}} "
            r"in it stands for the split, here 'test'\)\.$",
            ReadOptions(split="test", training=False),
        )

    def test_listed_path_missing(self):
        missing = os.path.join(self.directory, "gone.tfrecord")
        self._assert_one_line(
            rf"^files='.*': {missing} does not exist; check the path\.$",
            records=Records(files=[self.train_files[0], missing], parse_fn=parse_ragged),
        )

    @parameterized.named_parameters(
        (
            "missing_key",
            lambda serialized: (parse_ragged(serialized)[0]["nope"], 0),
            r"KeyError: 'nope'",
        ),
        (
            "wrong_spec",
            lambda serialized: tf.io.parse_example(
                serialized, {"tokens": tf.io.FixedLenFeature([7], tf.int64)}
            ),
            r"InvalidArgumentError: Name: <unknown>, Key: tokens, Index: 0\.  Number of int64 "
            r"values != expected\.  Values size: 1 but output shape: \[7\]",
        ),
        ("raises", lambda serialized: int("x"), r"ValueError: invalid literal for int\(\) "),
    )
    def test_parse_fn_failing_on_the_first_record_names_the_file(self, parse_fn, complaint):
        path = self.train_files[0]
        self._assert_one_line(
            rf"^file {path}, record 0 \(from 0\): parse_fn fails on it \({complaint}.*\); check "
            rf"parse_fn against the records in {path}\.$",
            _EVAL,
            Records(files=self.records.files, parse_fn=parse_fn),
        )

    def test_parse_fn_must_return_features_and_labels(self):
        records = Records(
            files=self.records.files,
            parse_fn=lambda serialized: tf.io.parse_example(serialized, _SPEC),
        )
        self._assert_one_line(
            rf"^parse_fn returns dict .* for the records of "
            rf"{self.train_files[0]}; return a pair \(features, labels\)\.$",
            records=records,
        )

    def test_damaged_first_file(self):
        damage_first_record(self.train_files[0])
        self._assert_one_line(
            rf"^file {self.train_files[0]} is damaged \(.*; 0 record\(s\) "
            r"readable before it\); re-create it, or set "
            r"skip_corrupt_records=true"
        )

    def test_not_a_tfrecord_file(self):
        path = os.path.join(self.directory, "notes.txt")
        pathlib.Path(path).write_text("these are not records\n" * 4)
        self._assert_one_line(
            rf"^file {path} is damaged ", records=Records(files=[path], parse_fn=parse_ragged)
        )

    def test_bad_record_mid_training_is_named_after_the_read_fails(self):
        serialized = [token_example(50 + position) for position in range(5)]
        serialized[3] = token_example(53, label=float_feature(53.0))
        bad = write_records(os.path.join(self.directory, "train-8.tfrecord"), serialized)
        with self.assertRaises(tf.errors.InvalidArgumentError) as read:
            _labels(self._dataset())  # The first record parses, so the function is built.
        # Batches of 2 records: the bad one is in the second batch of its file.
        with (
            mock.patch.object(record_checks, "_CHECK_BATCH", 2),
            self.assertRaisesRegex(
                InputConfigError,
                rf"^file {bad}, record 3 \(from 0\): parse_fn fails on it "
                r"\(InvalidArgumentError: .*label.*\); check parse_fn against the records in "
                rf"{re.escape(bad)}\.$",
            ) as caught,
        ):
            input_pipelines.explain_records_error(self.records, "train", read.exception)
        self.assertNotIn("\n", str(caught.exception))

    def test_damaged_file_mid_training_is_named(self):
        damage_first_record(self.train_files[5])
        with self.assertRaises(tf.errors.DataLossError) as read:
            _labels(self._dataset())
        with self.assertRaisesRegex(InputConfigError, rf"^file {self.train_files[5]} is damaged"):
            input_pipelines.explain_records_error(self.records, "train", read.exception)

    @parameterized.parameters(tf.errors.InvalidArgumentError, tf.errors.DataLossError)
    def test_other_errors_are_left_to_the_caller(self, error_type):
        error = error_type(None, None, "Incompatible shapes: [4,10] vs. [4,3]")
        self.assertIsNone(input_pipelines.explain_records_error(self.records, "train", error))

    def test_skip_corrupt_records_reads_the_rest(self):
        damage_first_record(self.train_files[0])
        labels = _labels(self._dataset(skip_corrupt_records=True))
        self.assertEqual(
            collections.Counter(labels), collections.Counter(range(_RECORDS_PER_FILE, _NUM_TRAIN))
        )
        self.assertEqual(np.unique(labels).size, len(labels))
