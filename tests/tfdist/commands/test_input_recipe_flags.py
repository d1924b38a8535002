"""The ImageNet recipe's flags (--augment, --crop_area_min, --crop_aspect_max, --label_offset)
become InputConfig's fields; `data check` takes --label_offset, which the records' check needs."""

import unittest

from absl import flags

from tfdist.commands import cli  # noqa: F401  (defines every command's flags)
from tfdist.commands import flags as tfdist_flags
from tfdist.commands import train_flags
from tfdist.input_pipelines.choices import Augment

_TFRECORD = ("--dataset=tfrecord:/data/{split}-*", "--num_classes=1000")


def _parse(command: str, *args: str) -> None:
    tfdist_flags.parse(command, ["tfdist", *args])


class RecipeFlagsTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.addCleanup(tfdist_flags.FLAGS.unparse_flags)

    def test_defaults_are_the_configs(self):
        _parse("train", *_TFRECORD)
        config = train_flags.input_config()
        self.assertEqual(
            (config.augment, config.augmentation, config.label_offset),
            (Augment.AUTO, Augment.IMAGENET, 0),
        )
        self.assertEqual(
            (config.crop_area_range, config.crop_aspect_range), ((0.08, 1.0), (3 / 4, 4 / 3))
        )

    def test_flags_set_the_fields(self):
        _parse(
            "train",
            *_TFRECORD,
            "--label_offset=1",
            "--augment=small",
            "--crop_area_min=0.25",
            "--crop_aspect_max=2",
        )
        config = train_flags.run_config(None).input
        self.assertEqual((config.augment, config.label_offset), (Augment.SMALL, 1))
        self.assertEqual(
            (config.crop_area_range, config.crop_aspect_range), ((0.25, 1.0), (0.5, 2.0))
        )

    def test_data_check_reads_labels_with_the_offset(self):
        self.assertIn("label_offset", tfdist_flags.COMMAND_FLAGS["data check"])
        self.assertNotIn("augment", tfdist_flags.COMMAND_FLAGS["data check"])
        _parse("data check", *_TFRECORD, "--label_offset=1")
        self.assertEqual(train_flags.input_config("data check").label_offset, 1)

    def test_out_of_range_values_name_the_flag(self):
        for arg, message in (
            ("--crop_area_min=0", r"crop_area_min=0.0: must lie in \[0.01, 1\]"),
            ("--crop_aspect_max=0.5", r"crop_aspect_max=0.5: must lie in \[1,"),
            ("--label_offset=-1", r"label_offset=-1: -1 is not an integer"),
        ):
            with self.subTest(arg=arg):
                with self.assertRaisesRegex(flags.IllegalFlagValueError, message):
                    _parse("train", arg)


if __name__ == "__main__":
    unittest.main()
