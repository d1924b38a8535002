"""The imagenet recipe (`augment=imagenet`): random-resized crops fused with the JPEG decode for
training, the 0.875 centre crop for evaluation, PNG decoded whole then cut; which recipe `auto`
picks; ImageNet's 1-based labels read with `label_offset`; the announce line."""

from tests.input_pipelines.imagenet_examples import encode_image
from tests.input_pipelines.imagenet_examples import imagenet_example
from tests.input_pipelines.imagenet_examples import smooth_pixels
import contextlib
import io
import os

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized

from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import Placement
from tfdist.input_pipelines import PreprocessOn
from tfdist.input_pipelines import ReadOptions
from tfdist.input_pipelines import image_batches
from tfdist.input_pipelines import imagenet_recipe
from tfdist.input_pipelines.choices import Augment
from tests.input_pipelines.records import write_records
from tests.tf_test_case import TfTestCase

_CONTEXT = tf.distribute.InputContext()
_DEVICE = Placement(PreprocessOn.DEVICE)


def _mean_difference(first: tf.Tensor, second: tf.Tensor) -> float:
    return float(np.abs(np.asarray(first, int) - np.asarray(second, int)).mean())


def _crop(training: bool, image_size: int = 32) -> imagenet_recipe.Crop:
    return imagenet_recipe.Crop(
        training=training,
        image_size=image_size,
        channels=3,
        area_range=(0.08, 1.0),
        aspect_range=(3 / 4, 4 / 3),
    )


class WindowTest(TfTestCase):
    def test_random_windows_vary_within_the_image_and_the_ranges(self):
        shape = tf.constant([300, 400, 3])
        crop = _crop(training=True)
        windows = np.stack(
            [
                imagenet_recipe.random_window(shape, tf.constant([seed, 7]), crop).numpy()
                for seed in range(300)
            ]
        )
        top, left, height, width = windows.T
        self.assertAllInRange(top, 0, 300)
        self.assertAllInRange(left, 0, 400)
        self.assertAllInRange(top + height, 1, 300)
        self.assertAllInRange(left + width, 1, 400)
        centre = imagenet_recipe.centre_window(shape).numpy()
        sampled = ~np.all(windows == centre, axis=1)
        self.assertGreater(sampled.mean(), 0.9)
        area = height * width / (300 * 400)
        self.assertAllInRange(area[sampled], 0.08 - 0.01, 1.0)
        # Sizes are whole pixels: the aspect ratio may miss its range by a pixel's worth.
        self.assertAllInRange((width / height)[sampled], 0.75 - 0.02, 4 / 3 + 0.02)
        self.assertGreater(len(np.unique(windows, axis=0)), 250)
        self.assertLess(area[sampled].min(), 0.2)
        self.assertGreater(area[sampled].max(), 0.8)

    def test_no_window_that_fits_falls_back_to_the_centre_crop(self):
        crop = imagenet_recipe.Crop(
            training=True,
            image_size=32,
            channels=3,
            area_range=(0.5, 0.5),
            aspect_range=(10.0, 10.0),
        )
        shape = tf.constant([100, 60, 3])
        self.assertAllEqual(
            imagenet_recipe.random_window(shape, tf.constant([1, 2]), crop),
            imagenet_recipe.centre_window(shape),
        )

    def test_centre_window_is_the_central_0_875_at_every_size(self):
        self.assertAllEqual(
            imagenet_recipe.centre_window(tf.constant([256, 320, 3])), [16, 48, 224, 224]
        )
        self.assertAllEqual(
            imagenet_recipe.centre_window(tf.constant([375, 500, 3])), [24, 86, 328, 328]
        )  # int(0.875 * 375) = 328.
        self.assertAllEqual(imagenet_recipe.centre_window(tf.constant([1, 1, 3])), [0, 0, 1, 1])
        self.assertAllEqual(
            imagenet_recipe.centre_window(tf.constant([64, 80, 3])), [4, 12, 56, 56]
        )  # Not 64 / (64 + 32) as TF's official code.


class CropTest(TfTestCase):
    def test_evaluation_reads_the_centre_crop_of_a_png_exactly(self):
        # At 224 the crop of a 256x320 image is 224x224: resizing it changes nothing.
        pixels = smooth_pixels(256, 320, seed=1)
        images = imagenet_recipe.crop_encoded(
            tf.constant([encode_image(pixels, "PNG")]), _crop(training=False, image_size=224)
        )
        self.assertEqual(images.dtype, tf.uint8)
        self.assertAllEqual(images[0], pixels[16:240, 48:272])

    def test_evaluation_of_a_jpeg_is_the_resized_centre_crop(self):
        # 0.875 of the short side 40: the central 35x35, at rows 3.. and columns 13..
        pixels = smooth_pixels(40, 60, seed=2)
        encoded = encode_image(pixels, "JPEG")
        decoded = tf.io.decode_jpeg(encoded, channels=3)
        expected = tf.cast(tf.image.resize(decoded[3:38, 13:48], [32, 32]), tf.uint8)
        images = imagenet_recipe.crop_encoded(tf.constant([encoded]), _crop(training=False))
        self.assertEqual(images.shape, (1, 32, 32, 3))
        shifted = tf.cast(tf.image.resize(decoded[5:40, 15:50], [32, 32]), tf.uint8)
        # The fused decode upsamples chroma at the window's edges apart from a whole decode.
        self.assertLess(_mean_difference(images[0], expected), 1.0)
        self.assertGreater(_mean_difference(images[0], shifted), 4.0)

    def test_training_crops_vary_and_png_and_jpeg_mix_in_a_batch(self):
        pixels = smooth_pixels(120, 160, seed=3)
        encoded = tf.constant([encode_image(pixels, "JPEG"), encode_image(pixels, "PNG")] * 8)
        images = imagenet_recipe.crop_encoded(encoded, _crop(training=True)).numpy()
        self.assertEqual((images.shape, images.dtype), ((16, 32, 32, 3), np.uint8))
        self.assertLen({image.tobytes() for image in images}, 16)
        again = imagenet_recipe.crop_encoded(encoded, _crop(training=True)).numpy()
        self.assertFalse(np.array_equal(images, again))

    def test_decoded_batches_are_cut_the_same_way(self):
        pixels = np.stack([smooth_pixels(64, 64, seed) for seed in range(4)])
        centre = imagenet_recipe.crop_decoded(tf.constant(pixels), _crop(training=False))
        # 0.875 of 64: the central 56x56, from row and column 4, resized to 32.
        expected = tf.cast(tf.image.resize(pixels[2][4:60, 4:60], [32, 32]), tf.uint8)
        self.assertAllEqual(centre[2], expected)
        self.assertEqual(
            imagenet_recipe.crop_decoded(tf.constant(pixels), _crop(training=True)).shape,
            (4, 32, 32, 3),
        )


class PipelineTest(TfTestCase, parameterized.TestCase):
    @pytest.fixture(autouse=True)
    def _files(self, tmp_path):
        self.directory = str(tmp_path)
        for split, count in (("train", 12), ("validation", 4)):
            records = [
                imagenet_example(
                    encode_image(
                        smooth_pixels(50 + 9 * index, 70 - 3 * index, index),
                        "PNG" if index % 4 == 3 else "JPEG",
                    ),
                    1 + index % 3,
                )
                for index in range(count)
            ]
            write_records(os.path.join(self.directory, f"{split}-0"), records)

    def _config(self, **options) -> InputConfig:
        return InputConfig(
            **{
                "dataset": f"tfrecord:{self.directory}/{{split}}-*",
                "num_classes": 3,
                "image_size": 32,
                "global_batch_size": 4,
                "label_offset": 1,
                **options,
            }
        )

    @parameterized.parameters(True, False)
    def test_uint8_crops_for_the_device_and_0_based_labels(self, training):
        read = ReadOptions(
            split="train" if training else "validation", training=training, placement=_DEVICE
        )
        batch = next(iter(image_batches.examples(self._config(), read, _CONTEXT, announce=False)))
        self.assertEqual((batch["image"].shape, batch["image"].dtype), ((4, 32, 32, 3), tf.uint8))
        self.assertAllInRange(batch["label"], 0, 2)

    def test_labels_read_with_the_offset_are_the_stored_ones_less_it(self):
        read = ReadOptions(split="validation", training=False, placement=_DEVICE)
        batch = next(iter(image_batches.examples(self._config(), read, _CONTEXT, announce=False)))
        self.assertAllEqual(batch["label"], [0, 1, 2, 0])

    def test_host_placement_flips_and_normalises(self):
        read = ReadOptions(split="train", training=True, placement=Placement(PreprocessOn.HOST))
        batch = next(iter(image_batches.examples(self._config(), read, _CONTEXT, announce=False)))
        self.assertEqual(batch["image"].dtype, tf.float32)
        self.assertAllInRange(batch["image"], -1.0 - 1e-6, 1.0 + 1e-6)

    def test_the_announce_line_names_the_recipe(self):
        read = ReadOptions(split="train", training=True, placement=_DEVICE)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            image_batches.examples(self._config(image_size=224), read, _CONTEXT)
        self.assertRegex(
            stderr.getvalue(),
            (
                r"tfdist input: preprocessing on device: [0-9,]+ "
                r"bytes/example host->device \(uint8 "
                r"images; flip, normalisation and cast run on each replica's device\); "
                r"augmentation: imagenet \(random-resized crop 8-100% area, aspect 3/4-4/3, fused "
                r"with the decode on the host; flip\), evaluation: centre crop 0.875 of the short "
                r"side\n"
            ),
        )

    def test_small_recipe_on_jpeg_reads_whole_images(self):
        read = ReadOptions(split="validation", training=False, placement=_DEVICE)
        batch = next(
            iter(
                image_batches.examples(
                    self._config(augment="small"), read, _CONTEXT, announce=False
                )
            )
        )
        first = tf.io.decode_jpeg(encode_image(smooth_pixels(50, 70, 0), "JPEG"), channels=3)
        expected = tf.cast(tf.image.resize(first, [32, 32]), tf.uint8)
        self.assertLess(_mean_difference(batch["image"][0], expected), 1.0)

    def test_describes_every_recipe(self):
        self.assertEqual(
            imagenet_recipe.describe(self._config(augment="none")),
            "augmentation: none (training reads images as evaluation does)",
        )
        self.assertIn(
            "augmentation: small (shift of up to 4 px from a reflect-padded image, "
            "flip, brightness +-12.5%)",
            imagenet_recipe.describe(self._config(augment="small")),
        )
        self.assertIn(
            "random-resized crop 25-100% area, aspect 1/2-2",
            imagenet_recipe.describe(
                self._config(crop_area_range=(0.25, 1), crop_aspect_range=(0.5, 2))
            ),
        )


class RawImagesTest(TfTestCase):
    @pytest.fixture(autouse=True)
    def _data(self, small_shapes_data_dir):
        self.data_dir = small_shapes_data_dir

    def test_the_builtin_dataset_takes_the_imagenet_recipe_when_asked(self):
        config = InputConfig(data_dir=self.data_dir, global_batch_size=8, augment="imagenet")
        read = ReadOptions(split="train", training=True, placement=_DEVICE)
        batch = next(iter(image_batches.examples(config, read, _CONTEXT, announce=False)))
        self.assertEqual((batch["image"].shape, batch["image"].dtype), ((8, 32, 32, 3), tf.uint8))


class AutoTest(parameterized.TestCase):
    @parameterized.parameters(
        (dict(dataset="tfrecord:/data/{split}-*", num_classes=1000), Augment.IMAGENET),
        (dict(dataset="imagenet2012", image_size=224), Augment.IMAGENET),
        (dict(dataset="cifar10"), Augment.SMALL),
        (dict(dataset="shapes"), Augment.SMALL),
        (dict(dataset="shapes", image_size=64), Augment.SMALL),
        (dict(dataset="synthetic", image_size=224), Augment.SMALL),
        (dict(dataset="tfrecord:/data/*", num_classes=9, augment="small"), Augment.SMALL),
        (dict(dataset="shapes", augment="none"), Augment.NONE),
    )
    def test_auto_is_imagenet_for_encoded_images_resized_to_image_size(self, options, expected):
        self.assertIs(InputConfig(**options).augmentation, expected)
