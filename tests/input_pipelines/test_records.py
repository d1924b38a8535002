"""`tfrecord:` sources with bad paths or bad records: each problem is one line naming the file
(and the record), raised when the source is prepared; an image that only fails to decode is
named after the read that hit it fails. Counting a file's records from its framing."""

import os
from unittest import mock

import pytest
import tensorflow as tf
from absl.testing import parameterized

from tests.input_pipelines.records import IMAGE_KEY
from tests.input_pipelines.records import LABEL_KEY
from tests.input_pipelines.records import encoded_image
from tests.input_pipelines.records import bytes_feature
from tests.input_pipelines.records import int64_feature
from tests.input_pipelines.records import float_feature
from tests.input_pipelines.records import image_example
from tests.input_pipelines.records import write_records
from tests.input_pipelines.records import damage_first_record
from tests.input_pipelines.records import GRAPH_ERROR
from tfdist import input_pipelines
from tfdist.input_pipelines import AutoShard
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import InputConfigError
from tfdist.input_pipelines import Placement
from tfdist.input_pipelines import PreprocessOn
from tfdist.input_pipelines import ReadOptions
from tfdist.input_pipelines import image_batches
from tfdist.input_pipelines import pipeline
from tfdist.input_pipelines import records
from tfdist.input_pipelines import sharding
from tests.tf_test_case import TfTestCase

_LAYOUT = (
    r"; tfrecord: records need one encoded image as image/encoded \(bytes_list\) and one "
    r"class index as image/class/label \(int64_list\): re-write it\.$"
)


class _Files:
    @pytest.fixture(autouse=True)
    def _directory(self, tmp_path):
        self.directory = str(tmp_path)

    def _write(self, name: str, serialized: list[bytes]) -> str:
        return write_records(os.path.join(self.directory, name), serialized)

    def _config(self, pattern: str = "train-*", **options) -> InputConfig:
        return InputConfig(
            dataset=f"tfrecord:{self.directory}/{pattern}",
            num_classes=3,
            image_size=16,
            global_batch_size=4,
            **options,
        )


class RecordCheckTest(_Files, parameterized.TestCase):
    def test_every_image_format_decode_image_reads_passes(self):
        formats = ("JPEG", "PNG", "GIF", "BMP", "WEBP")
        self._write(
            "train-0",
            [image_example(bytes_feature(encoded_image(image_format))) for image_format in formats],
        )
        config = self._config()
        self.assertEqual(input_pipelines.prepare(config).num_examples, {"train": 5})
        context = tf.distribute.InputContext()
        read = ReadOptions(split="train", training=False, placement=Placement(PreprocessOn.DEVICE))
        batch = next(iter(image_batches.examples(config, read, context)))
        self.assertEqual(batch["image"].shape, (4, 16, 16, 3))

    @parameterized.named_parameters(
        (
            "label_too_large",
            image_example(label=int64_feature(5)),
            r": image/class/label=5 is outside \[0, 3\) \(num_classes=3\); re-write the label as a "
            r"class index, or set num_classes=6 if the dataset has that many classes\.$",
        ),
        (
            "label_negative",
            image_example(label=int64_feature(-1)),
            r": image/class/label=-1 is outside \[0, 3\) "
            r"\(num_classes=3\); re-write the label as a "
            r"class index\.$",
        ),
        (
            "float_label",
            image_example(label=float_feature(1.0)),
            r" stores image/class/label as float_list" + _LAYOUT,
        ),
        (
            "two_labels",
            image_example(label=int64_feature(1, 2)),
            r" holds 2 values in image/class/label" + _LAYOUT,
        ),
        ("no_label", image_example(omit=LABEL_KEY), r" has no image/class/label feature" + _LAYOUT),
        ("no_image", image_example(omit=IMAGE_KEY), r" has no image/encoded feature" + _LAYOUT),
        (
            "image_as_int64",
            image_example(image=int64_feature(7)),
            r" stores image/encoded as int64_list" + _LAYOUT,
        ),
        ("not_an_example", b"hello world", r" is not a serialized tf.train.Example" + _LAYOUT),
        (
            "raw_pixels",
            image_example(image=bytes_feature(bytes(range(48)))),
            r": image/encoded holds no encoded image \(it starts 00 01 02 03 04 05 06 07\); tfdist "
            r"decodes JPEG, PNG, GIF, BMP, WebP or JPEG XL bytes there, not raw pixels: re-write "
            r"the record with an encoded image\.$",
        ),
        (
            "empty_image",
            image_example(image=bytes_feature(b"")),
            r": image/encoded holds no encoded image \(it is empty\)",
        ),
    )
    def test_bad_record_is_named_by_file_and_index(self, bad_record, message):
        self._write("train-0", [image_example()] * 3)
        bad_file = self._write("train-1", [image_example()] * 3 + [bad_record, image_example()])
        # Batches of 2 records: the bad one is in the second batch of the second file.
        with (
            mock.patch.object(records, "_CHECK_BATCH", 2),
            self.assertRaisesRegex(
                InputConfigError, rf"^file {bad_file}, record 3 \(from 0\){message}"
            ),
        ):
            input_pipelines.prepare(self._config())

    def test_one_based_labels_get_the_offset_suggested(self):
        path = self._write(
            "train-0", [image_example(label=int64_feature(label)) for label in (1, 2, 3, 2)]
        )
        with self.assertRaisesRegex(
            InputConfigError,
            rf"^file {path}, record 2 \(from 0\): image/class/label=3 is outside \[0, 3\) "
            r"\(num_classes=3\); the labels look 1-based \(none below 1\): set "
            r"label_offset=1 to read them as classes 0\.\.2, or num_classes=4 if the "
            r"dataset has that many classes\.$",
        ):
            input_pipelines.prepare(self._config())
        self.assertEqual(
            input_pipelines.prepare(self._config(label_offset=1)).num_examples, {"train": 4}
        )

    def test_a_label_below_the_offset_is_named_with_it(self):
        path = self._write(
            "train-0", [image_example(label=int64_feature(label)) for label in (1, 0, 3)]
        )
        with self.assertRaisesRegex(
            InputConfigError,
            rf"^file {path}, record 1 \(from 0\): image/class/label=0 \(less label_offset=1: "
            r"-1\) is outside \[0, 3\) \(num_classes=3\); re-write the label as a class "
            r"index\.$",
        ):
            input_pipelines.prepare(self._config(label_offset=1))

    def test_a_zero_among_the_labels_is_no_sign_of_1_based(self):
        self._write("train-0", [image_example(label=int64_feature(label)) for label in (0, 3)])
        with self.assertRaisesRegex(InputConfigError, r"or set num_classes=4 if the dataset"):
            input_pipelines.prepare(self._config())

    def test_bad_record_is_an_error_with_skip_corrupt_records_too(self):
        path = self._write("train-0", [image_example(), image_example(label=int64_feature(3))])
        with self.assertRaisesRegex(InputConfigError, rf"^file {path}, record 1 \(from 0\): "):
            input_pipelines.prepare(self._config(skip_corrupt_records=True))


class PathCheckTest(_Files, parameterized.TestCase):
    def test_directory_among_the_files(self):
        self._write("train-0", [image_example()])
        os.mkdir(os.path.join(self.directory, "train-dir"))
        directory = os.path.join(self.directory, "train-dir")
        with self.assertRaisesRegex(
            InputConfigError,
            rf"^dataset='tfrecord:.*/train-\*': {directory} is a directory, not a TFRecord "
            rf"file; make the pattern match files only, e.g. {directory}/\*\.$",
        ):
            input_pipelines.prepare(self._config())

    def test_only_directories(self):
        os.mkdir(os.path.join(self.directory, "validation-a"))
        self._write("train-0", [image_example()])
        with self.assertRaisesRegex(InputConfigError, r"/validation-a is a directory, not a "):
            input_pipelines.prepare(self._config("{split}-*"))

    def test_empty_file_among_good_ones(self):
        self._write("train-0", [image_example()])
        empty = self._write("train-1", [])
        with self.assertRaisesRegex(
            InputConfigError,
            rf"^dataset='tfrecord:.*': file {empty} is empty \(0 bytes\), most likely a "
            r"failed write; re-create it, or move it out of the pattern\.$",
        ):
            input_pipelines.prepare(self._config())

    def test_broken_link(self):
        self._write("train-0", [image_example()])
        link = os.path.join(self.directory, "train-1")
        os.symlink(os.path.join(self.directory, "gone"), link)
        with self.assertRaisesRegex(
            InputConfigError, rf"^dataset='tfrecord:.*': {link} is a broken link; "
        ):
            input_pipelines.prepare(self._config())


class NoReadableRecordsTest(_Files, parameterized.TestCase):
    def test_split_left_empty_by_skip_corrupt_records(self):
        self._write("train-0", [image_example()] * 2)
        paths = [self._write(f"validation-{index}", [image_example()] * 2) for index in (0, 1)]
        for path in paths:
            damage_first_record(path)
        with self.assertRaisesRegex(
            InputConfigError,
            rf"^dataset='tfrecord:.*': the validation split has no readable records: each of "
            rf"its 2 file\(s\) \({paths[0]}, {paths[1]}\) is damaged or cut short before its "
            r"first record; re-create them\.$",
        ):
            input_pipelines.prepare(self._config("{split}-*", skip_corrupt_records=True))
        with self.assertRaisesRegex(InputConfigError, rf"^file {paths[0]} is damaged "):
            input_pipelines.prepare(self._config("{split}-*"))

    def test_damaged_file_after_good_ones_is_named(self):
        self._write("train-0", [image_example()] * 3)
        damaged = self._write("train-1", [image_example()] * 2)
        damage_first_record(damaged)
        with self.assertRaisesRegex(InputConfigError, rf"^file {damaged} is damaged "):
            input_pipelines.prepare(self._config())


class ExplainInputErrorTest(_Files, parameterized.TestCase):
    def _truncated_jpeg_at(self, position: int) -> str:
        """Writes 3 good records to train-0 and 4 to train-1, whose record `position` holds a
        JPEG cut short (it starts like one); returns train-1's path."""
        self._write("train-0", [image_example()] * 3)
        serialized = [image_example()] * 4
        serialized[position] = image_example(bytes_feature(encoded_image()[:200]))
        return self._write("train-1", serialized)

    def test_undecodable_image_is_named_after_the_read_fails(self):
        path = self._truncated_jpeg_at(2)
        config = self._config()
        self.assertEqual(input_pipelines.prepare(config).num_examples, {"train": 7})
        make = input_pipelines.dataset_fn(
            config,
            ReadOptions(split="train", training=False, placement=Placement(PreprocessOn.DEVICE)),
        )
        with self.assertRaises(tf.errors.InvalidArgumentError) as read:
            list(make(tf.distribute.InputContext()))
        with self.assertRaisesRegex(
            InputConfigError,
            rf"^file {path}, record 2 \(from 0\): its image/encoded image does not decode "
            r"\(jpeg::Uncompress failed\. Invalid JPEG data or crop window\); re-write the "
            r"record with an intact image, or re-create the file\.$",
        ):
            input_pipelines.explain_input_error(config, read.exception)

    def test_coverage_check_names_the_undecodable_image(self):
        path = self._truncated_jpeg_at(3)
        with self.assertRaisesRegex(InputConfigError, rf"^file {path}, record 3 \(from 0\): "):
            input_pipelines.check_coverage(self._config(), num_workers=1, replicas_per_worker=1)

    @parameterized.parameters(tf.errors.InvalidArgumentError, tf.errors.DataLossError)
    def test_other_errors_are_left_to_the_caller(self, error_type):
        self._write("train-0", [image_example()] * 2)
        error = error_type(None, None, "Incompatible shapes: [4,10] vs. [4,3]")
        self.assertIsNone(input_pipelines.explain_input_error(self._config(), error))


class ComplaintTest(TfTestCase):
    """`records.complaint` on the error `model.fit` raises when an op of a step fails."""

    def test_the_line_before_the_node_without_the_traceback(self):
        error = tf.errors.InvalidArgumentError(None, None, GRAPH_ERROR.format(labels="9 9"))
        self.assertEqual(
            records.complaint(error),
            "InvalidArgumentError: Received a label value of 9 which is outside the "
            "valid range of [0, 4).  Label values: 9 9",
        )

    def test_a_long_complaint_is_cut(self):
        error = tf.errors.InvalidArgumentError(
            None, None, GRAPH_ERROR.format(labels=" ".join(["9"] * 512))
        )
        complaint = records.complaint(error)
        self.assertLessEqual(len(complaint), 200)
        self.assertTrue(complaint.endswith("9 9 ..."), complaint)


class EpochSizeTest(_Files, parameterized.TestCase):
    """A resumed pipeline finds its place in the stream of epochs by an epoch's size, counted
    from the files' framing: it must be what the pipeline reads."""

    def _files(self) -> tuple[str, ...]:
        """Files of 3, 7, 0, 11 and 4 records of 1 byte to 63 KB (past a page)."""
        return tuple(
            self._write(
                f"train-{index}", [bytes([index]) * (1 + 9_000 * (n % 8)) for n in range(count)]
            )
            for index, count in enumerate((3, 7, 0, 11, 4))
        )

    @parameterized.parameters(
        ("file", 2, 0), ("file", 2, 1), ("data", 3, 0), ("data", 3, 2), ("off", 2, 1)
    )
    def test_the_framing_counts_what_the_pipeline_reads(self, policy, pipelines, pipeline_id):
        files = self._files()
        plan = sharding.plan(
            AutoShard(policy), num_files=5, num_pipelines=pipelines, pipeline_id=pipeline_id
        )
        framed = records.framed_counts([files[index] for index in plan.file_indices])
        read = pipeline.read_records(self._config(), files, plan, shuffle_seed=None)
        self.assertEqual(plan.records_an_epoch(framed), records.count(read))

    def test_only_local_regular_files_are_framed(self):
        one = self._write("train-0", [b"x"])
        fifo = os.path.join(self.directory, "fifo")
        os.mkfifo(fifo)
        self.assertEqual(records.framed_counts([one]), [1])
        self.assertIsNone(records.framed_counts([one, "gs://bucket/train-1"]))
        self.assertIsNone(records.framed_counts([one, fifo]))

    def test_a_resumed_stream_that_skips_damage_counts_its_epoch_by_reading(self):
        # The framing would count file 1's damaged first record (and stop there); the pipeline
        # reads nothing of that file, so an epoch is 18 records.
        files = self._files()
        damage_first_record(files[1])
        config = self._config(skip_corrupt_records=True, deterministic=True, seed=3)
        plan = sharding.plan(AutoShard.OFF, num_files=5, num_pipelines=1, pipeline_id=0)

        def stream(first: int, count: int) -> list[bytes]:
            epochs = pipeline.training_epochs(config, files, plan, tag_positions=False, first=first)
            return list(epochs.take(count).as_numpy_iterator())

        self.assertEqual(stream(25, 10), stream(0, 35)[25:])
