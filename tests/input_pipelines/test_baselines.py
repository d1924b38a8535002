"""The pipelines `scripts/input_pipeline/benchmark_input.py` measures tfdist's against
(`baseline_pipeline`), on JPEG records of varying sizes in the ImageNet layout written here: what
each yields, and the one-line errors."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tfdist import input_pipelines
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import InputConfigError

_NUM_CLASSES = 3
_IMAGE_SIZE = 24
_GLOBAL_BATCH_SIZE = 4


def _example(seed: int) -> bytes:
    """A JPEG of a random size (20-40 px a side) and label `seed % _NUM_CLASSES`."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (*rng.integers(20, 41, size=2), 3), dtype=np.uint8)
    feature = {
        "image/encoded": tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[tf.io.encode_jpeg(pixels, quality=90).numpy()])
        ),
        "image/class/label": tf.train.Feature(
            int64_list=tf.train.Int64List(value=[seed % _NUM_CLASSES])
        ),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture(name="jpeg_config", scope="module")
def _jpeg_config(tmp_path_factory) -> InputConfig:
    """3 training files of 6 records each, 1 validation file of 4."""
    directory = tmp_path_factory.mktemp("jpeg_records")
    for split, num_files, per_file in (("train", 3, 6), ("validation", 1, 4)):
        for index in range(num_files):
            path = os.path.join(directory, f"{split}-{index:05d}-of-{num_files:05d}")
            with tf.io.TFRecordWriter(path) as writer:
                for seed in range(index * per_file, (index + 1) * per_file):
                    writer.write(_example(seed))
    return InputConfig(
        dataset=f"tfrecord:{directory}/{{split}}-*",
        num_classes=_NUM_CLASSES,
        image_size=_IMAGE_SIZE,
        global_batch_size=_GLOBAL_BATCH_SIZE,
    )


def _first_batch(config: InputConfig, kind: str):
    return next(iter(input_pipelines.baseline_pipeline(config, kind)))


@pytest.mark.parametrize("kind", ["naive", "best_practice"])
def test_augmenting_baselines_make_float_images_of_the_configured_size(jpeg_config, kind):
    images, labels = _first_batch(jpeg_config, kind)
    assert images.shape == (_GLOBAL_BATCH_SIZE, _IMAGE_SIZE, _IMAGE_SIZE, 3)
    assert images.dtype == tf.float32
    assert set(labels.numpy().tolist()) <= set(range(_NUM_CLASSES))
    if kind == "naive":  # Normalised to [-1, 1]; best_practice subtracts the channel means.
        assert -1.0 <= float(tf.reduce_min(images)) <= float(tf.reduce_max(images)) <= 1.0


def test_tfdist_device_leaves_uint8_crops_to_the_device(jpeg_config):
    batch = _first_batch(jpeg_config, "tfdist_device")
    assert batch["image"].shape == (_GLOBAL_BATCH_SIZE, _IMAGE_SIZE, _IMAGE_SIZE, 3)
    assert batch["image"].dtype == tf.uint8


def test_decode_only_keeps_one_decoded_pixel_per_image(jpeg_config):
    pixels, labels = _first_batch(jpeg_config, "decode_only")
    assert pixels.shape == (_GLOBAL_BATCH_SIZE, 3) and pixels.dtype == tf.uint8
    assert labels.shape == (_GLOBAL_BATCH_SIZE,)


def test_best_practice_repeats_past_an_epoch_in_full_batches(jpeg_config):
    batches = input_pipelines.baseline_pipeline(jpeg_config, "best_practice").take(10)
    assert [int(images.shape[0]) for images, _ in batches] == [_GLOBAL_BATCH_SIZE] * 10


def test_jpeg_baselines_refuse_raw_pixels_in_one_line(small_shapes_data_dir):
    config = InputConfig(data_dir=small_shapes_data_dir)
    with pytest.raises(
        InputConfigError,
        match=r"^kind='decode_only' reads JPEG records, and "
        r"dataset='shapes' stores raw pixels; pass dataset='tfrecord:<glob>'",
    ):
        input_pipelines.baseline_pipeline(config, "decode_only")


def test_an_unknown_kind_is_one_line_naming_the_kinds(jpeg_config):
    with pytest.raises(
        InputConfigError,
        match=r"^kind='fast' is not a baseline pipeline; pass "
        r"one of 'naive', 'tfdist', 'tfdist_device', 'best_practice', "
        r"'decode_only', 'read'",
    ):
        input_pipelines.baseline_pipeline(jpeg_config, "fast")
