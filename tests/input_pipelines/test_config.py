"""InputConfig and ReadOptions validation and the batch split: every rejection is one line
naming the field."""

import unittest

from absl.testing import parameterized

from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import InputConfigError
from tfdist.input_pipelines import Placement
from tfdist.input_pipelines import PreprocessOn
from tfdist.input_pipelines import ReadOptions
from tfdist.input_pipelines import per_replica_batch_size
from tfdist.input_pipelines.choices import SourceKind


class InputConfigTest(parameterized.TestCase):
    @parameterized.parameters(
        ("shapes", SourceKind.BUILTIN),
        ("synthetic", SourceKind.SYNTHETIC),
        ("mnist", SourceKind.TFDS),
        ("imagenet2012:5.1.0", SourceKind.TFDS),
        ("tfrecord:/data/{split}-*", SourceKind.TFRECORD),
    )
    def test_dataset_forms(self, dataset, kind):
        self.assertIs(InputConfig(dataset=dataset, num_classes=10).source_kind, kind)

    @parameterized.parameters(
        (dict(dataset="Not A Name"), r"^dataset='Not A Name' is not a dataset name; use "),
        (dict(dataset="tfrecord:"), r"^dataset='tfrecord:' has no file pattern; "),
        (dict(dataset="tfrecord:/x/*"), r"^dataset='tfrecord:/x/\*' needs num_classes=N"),
        (
            dict(autoshard="files"),
            r"^autoshard='files' is not a known value; use one of "
            r"auto\|file\|data\|off\.$",
        ),
        (dict(preprocess_on="gpu"), r"^preprocess_on='gpu' is not a known value"),
        (dict(tf_data_service_mode="x"), r"^tf_data_service_mode='x' is not a known value"),
        (
            dict(global_batch_size=0),
            r"^global_batch_size=0 is not an integer from 1 to "
            r"16777216\.$",
        ),
        (dict(global_batch_size=10**20), r"^global_batch_size=10{20} is not an integer"),
        (dict(global_batch_size=32.0), r"^global_batch_size=32.0 is not an integer"),
        (dict(datasets_num_private_threads=0), r"^datasets_num_private_threads=0 is not"),
        (dict(image_size=10**6), r"^image_size=1000000 is not an integer from 1 to 8192"),
        (dict(num_classes=-3), r"^num_classes=-3 is not an integer from 1"),
        (dict(seed=-1), r"^seed=-1 is not an integer from 0 to 4294967295"),
        (
            dict(augment="inception"),
            r"^augment='inception' is not a known value; use one of "
            r"auto\|imagenet\|small\|none\.$",
        ),
        (dict(label_offset=-1), r"^label_offset=-1 is not an integer from 0 to 16777216\.$"),
        (dict(label_offset=True), r"^label_offset=True is not an integer"),
        (
            dict(label_offset=1),
            r"^label_offset=1 applies to tfrecord: datasets only; "
            r"dataset='shapes' has labels from 0 already: drop "
            r"label_offset\.$",
        ),
        (
            dict(dataset="tfrecord:/x/*", num_classes=4, label_offset=4),
            r"^label_offset=4 is not below num_classes=4; label_offset is the label of the first "
            r"class \(1 when labels run 1..num_classes, as ImageNet's TFRecords do\)\.$",
        ),
        (
            dict(crop_area_range=(0, 1)),
            r"^crop_area_range=\(0, 1\) is not a range \(min, max\) of fractions of the image's "
            r"area with 0 < min <= max <= 1; pass e.g. crop_area_range=\(0.08, 1\)\.$",
        ),
        (dict(crop_area_range=(0.5, 0.2)), r"^crop_area_range=\(0.5, 0.2\) is not a range"),
        (dict(crop_area_range=(0.1, 2)), r"^crop_area_range=\(0.1, 2\) is not a range"),
        (dict(crop_area_range=0.5), r"^crop_area_range=0.5 is not a range"),
        (dict(crop_area_range=(0.1, float("nan"))), r"^crop_area_range=\(0.1, nan\) is not"),
        (dict(crop_area_range=("0.1", 1)), r"^crop_area_range=\('0.1', 1\) is not a range"),
        (dict(crop_area_range=(True, 1)), r"^crop_area_range=\(True, 1\) is not a range"),
        (
            dict(crop_aspect_range=(0, 1)),
            r"^crop_aspect_range=\(0, 1\) is not a range \(min, "
            r"max\) of widths over heights with 0 < min <= max <= "
            r"100; pass e.g. crop_aspect_range=\(0.75, 1.333\)\.$",
        ),
        (dict(crop_aspect_range=(1, 2, 3)), r"^crop_aspect_range=\(1, 2, 3\) is not a range"),
    )
    def test_rejections_are_one_line(self, kwargs, pattern):
        with self.assertRaisesRegex(InputConfigError, pattern) as caught:
            InputConfig(**kwargs)
        self.assertNotIn("\n", str(caught.exception))

    def test_crop_ranges_become_pairs_of_floats(self):
        config = InputConfig(crop_area_range=[1, 1], crop_aspect_range=(0.5, 2))
        self.assertEqual(
            (config.crop_area_range, config.crop_aspect_range), ((1.0, 1.0), (0.5, 2.0))
        )
        self.assertEqual(
            (InputConfig().crop_area_range, InputConfig().crop_aspect_range),
            ((0.08, 1.0), (3 / 4, 4 / 3)),
        )
        hash(config)  # A cache key.

    def test_label_offset_for_tfrecords(self):
        config = InputConfig(dataset="tfrecord:/x/*", num_classes=1000, label_offset=1)
        self.assertEqual(config.label_offset, 1)


class ReadOptionsTest(parameterized.TestCase):
    def test_defaults(self):
        read = ReadOptions(split="train", training=True)
        self.assertEqual((read.placement, read.independent_order), (None, False))

    @parameterized.parameters(
        (
            dict(split="", training=True),
            r"^split='' is not a split name; pass e\.g\. "
            r"split='train'\.$",
        ),
        (dict(split=None, training=True), r"^split=None is not a split name"),
        (
            dict(split="train", training="yes"),
            r"^training='yes' is not a bool; pass True or "
            r"False\.$",
        ),
        (
            dict(split="train", training=True, independent_order=1),
            r"^independent_order=1 is not a bool",
        ),
        (dict(split="train", training=True, steps_done=-1), r"^steps_done=-1 is not a count"),
        (dict(split="train", training=True, steps_done=True), r"^steps_done=True is not a count"),
        (dict(split="train", training=True, steps_done=2.5), r"^steps_done=2.5 is not a count"),
    )
    def test_rejections_are_one_line(self, kwargs, pattern):
        with self.assertRaisesRegex(InputConfigError, pattern) as caught:
            ReadOptions(**kwargs)
        self.assertNotIn("\n", str(caught.exception))

    def test_keyword_only(self):
        with self.assertRaises(TypeError):
            ReadOptions("train", True)  # pylint: disable=too-many-function-args

    def test_placement_rejects_a_dtype_models_do_not_compute_in(self):
        with self.assertRaisesRegex(
            InputConfigError,
            r"^compute_dtype='int8' is not a dtype models compute in; "
            r"use one of float16, bfloat16, float32, float64\.$",
        ):
            Placement(PreprocessOn.HOST, "int8")


class PerReplicaBatchSizeTest(unittest.TestCase):
    def test_splits_evenly(self):
        self.assertEqual(per_replica_batch_size(128, 4), 32)

    def test_smaller_than_replicas(self):
        with self.assertRaisesRegex(
            InputConfigError,
            r"^global_batch_size=2 is smaller than the 4 replicas; .*"
            r"use global_batch_size=4 or more\.$",
        ):
            per_replica_batch_size(2, 4)

    def test_uneven(self):
        with self.assertRaisesRegex(
            InputConfigError,
            r"^global_batch_size=130 does not split evenly over 4 "
            r"replicas; .*e\.g\. global_batch_size=128 or 132\.$",
        ):
            per_replica_batch_size(130, 4)


if __name__ == "__main__":
    unittest.main()
