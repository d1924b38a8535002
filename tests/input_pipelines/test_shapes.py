"""The built-in `tfdist_shapes` dataset: drawing, writing through TFDS, and concurrent prepares.

Preparing tests shrink the splits (class attributes of the builder) so that they run in seconds.
"""

import contextlib
import glob
import os
import subprocess
import sys
import textwrap
from unittest import mock

import numpy as np
import pytest
import tensorflow_datasets as tfds

from tfdist.input_pipelines import shapes
from tfdist.input_pipelines.messages import InputConfigError
from tests.tf_test_case import TfTestCase

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TRAIN_SIZE = 240
_VALIDATION_SIZE = 60
_NUM_CLASSES = 10

# Prepares the shrunk dataset into argv[1], printing "drew" on each draw_examples call. The draw
# sleeps so that a concurrent prepare arrives while this one is still generating.
_PREPARE_SCRIPT = textwrap.dedent(f"""
    import sys
    import time
    from tfdist.input_pipelines import shapes

    def draw_slowly(num_examples, seed, draw=shapes.draw_examples):
        print("drew", file=sys.__stdout__, flush=True)
        time.sleep(2)
        return draw(num_examples, seed)

    shapes.draw_examples = draw_slowly
    shapes.TfdistShapes.TRAIN_SIZE = {_TRAIN_SIZE}
    shapes.TfdistShapes.VALIDATION_SIZE = {_VALIDATION_SIZE}
    shapes.prepare(sys.argv[1])
""")


def _small_splits() -> contextlib.AbstractContextManager:
    """Patches the builder's split sizes down to `_TRAIN_SIZE` and `_VALIDATION_SIZE`."""
    return mock.patch.multiple(
        shapes.TfdistShapes, TRAIN_SIZE=_TRAIN_SIZE, VALIDATION_SIZE=_VALIDATION_SIZE
    )


def _read_split(
    builder: tfds.core.DatasetBuilder, split: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns a split's `(ids, images, labels)`, sorted by id."""
    examples = list(builder.as_dataset(split=split).as_numpy_iterator())
    examples.sort(key=lambda example: example["id"])
    return (
        np.array([example["id"] for example in examples]),
        np.stack([example["image"] for example in examples]),
        np.array([example["label"] for example in examples]),
    )


def _shard_files(data_dir: str, split: str) -> list[str]:
    """Returns the TFRecord files of `split` written under `data_dir`."""
    return glob.glob(os.path.join(data_dir, shapes.NAME, "*", f"{shapes.NAME}-{split}.tfrecord-*"))


class _TempDataDir:
    """Gives each test an empty `self.data_dir`."""

    @pytest.fixture(autouse=True)
    def _data_dir(self, tmp_path):
        self.data_dir = str(tmp_path)


class DrawExamplesTest(TfTestCase):
    def test_shapes_and_dtypes(self):
        images, labels = shapes.draw_examples(20, seed=0)
        self.assertEqual(images.shape, (20, *shapes.IMAGE_SHAPE))
        self.assertEqual(images.dtype, np.uint8)
        self.assertEqual(labels.shape, (20,))
        self.assertEqual(labels.dtype, np.int64)
        self.assertLen(shapes.CLASS_NAMES, _NUM_CLASSES)

    def test_same_seed_draws_the_same_examples(self):
        first_images, first_labels = shapes.draw_examples(50, seed=3)
        second_images, second_labels = shapes.draw_examples(50, seed=3)
        self.assertAllEqual(first_images, second_images)
        self.assertAllEqual(first_labels, second_labels)

    def test_different_seeds_draw_different_examples(self):
        first_images, first_labels = shapes.draw_examples(50, seed=3)
        second_images, second_labels = shapes.draw_examples(50, seed=4)
        self.assertNotAllEqual(first_images, second_images)
        self.assertNotAllEqual(first_labels, second_labels)

    def test_classes_are_balanced(self):
        _, labels = shapes.draw_examples(1005, seed=0)
        counts = np.bincount(labels, minlength=_NUM_CLASSES)
        self.assertLen(counts, _NUM_CLASSES)
        self.assertBetween(counts.min(), 100, 101)
        self.assertBetween(counts.max(), 100, 101)

    def test_every_image_shows_a_shape(self):
        images, _ = shapes.draw_examples(200, seed=0)
        brightness = images.astype(np.float32).mean(axis=-1).reshape(len(images), -1)
        spread = np.percentile(brightness, 99, axis=1) - np.percentile(brightness, 1, axis=1)
        self.assertGreater(spread.min(), 60)


class PrepareTest(_TempDataDir, TfTestCase):
    def setUp(self):
        super().setUp()
        self.enter_context(_small_splits())

    def test_writes_sharded_splits_with_unique_ids(self):
        builder = shapes.prepare(self.data_dir)
        splits = builder.info.splits
        self.assertEqual(splits["train"].num_examples, _TRAIN_SIZE)
        self.assertEqual(splits["validation"].num_examples, _VALIDATION_SIZE)
        for split in ("train", "validation"):
            self.assertGreater(splits[split].num_shards, 1)
            self.assertLen(_shard_files(self.data_dir, split), splits[split].num_shards)
        train_ids, _, _ = _read_split(builder, "train")
        validation_ids, _, _ = _read_split(builder, "validation")
        self.assertAllEqual(
            np.concatenate([train_ids, validation_ids]), np.arange(_TRAIN_SIZE + _VALIDATION_SIZE)
        )
        self.assertEqual(builder.info.features["label"].names, list(shapes.CLASS_NAMES))

    def test_stores_the_drawn_examples_losslessly(self):
        builder = shapes.prepare(self.data_dir)
        _, images, labels = _read_split(builder, "validation")
        drawn_images, drawn_labels = shapes.draw_examples(
            _VALIDATION_SIZE, shapes.TfdistShapes.VALIDATION_SEED
        )
        self.assertAllEqual(images, drawn_images)
        self.assertAllEqual(labels, drawn_labels)

    def test_second_prepare_loads_without_regenerating(self):
        first = shapes.prepare(self.data_dir)
        files = sorted(_shard_files(self.data_dir, "train"))
        modified = [os.path.getmtime(path) for path in files]
        with mock.patch.object(shapes, "draw_examples", wraps=shapes.draw_examples) as draw:
            second = shapes.prepare(self.data_dir)
        draw.assert_not_called()
        self.assertEqual(
            second.info.splits["train"].num_examples, first.info.splits["train"].num_examples
        )
        self.assertEqual(sorted(_shard_files(self.data_dir, "train")), files)
        self.assertEqual([os.path.getmtime(path) for path in files], modified)

    def test_prepared_data_loads_without_writing(self):
        shapes.prepare(self.data_dir)
        with mock.patch.object(shapes, "_exclusive_lock", side_effect=PermissionError(13, "no")):
            builder = shapes.prepare(self.data_dir)  # As from a read-only directory.
        self.assertEqual(builder.info.splits["train"].num_examples, _TRAIN_SIZE)

    def test_a_directory_it_cannot_write_is_one_line(self):
        for data_dir in ("/proc", "/proc/tfdist_data"):  # /proc refuses new entries, even root's.
            with self.subTest(data_dir=data_dir):
                with self.assertRaisesRegex(
                    InputConfigError,
                    rf"^data_dir='{data_dir}': the built-in dataset is "
                    r"not there and cannot be written there \(.*\); "
                    r"pass a directory you may write\.$",
                ):
                    shapes.prepare(data_dir)


@pytest.mark.multiprocess
class ConcurrentPrepareTest(_TempDataDir, TfTestCase):
    def test_two_processes_generate_once_and_agree(self):
        env = dict(os.environ, PYTHONPATH=_REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", _PREPARE_SCRIPT, self.data_dir],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [process.communicate(timeout=120) for process in processes]
        for process, (_, stderr) in zip(processes, outputs):
            self.assertEqual(process.returncode, 0, stderr[-3000:])
        draws = sum(stdout.split().count("drew") for stdout, _ in outputs)
        self.assertEqual(draws, 2, "expected one draw per split, by one process only")
        with _small_splits():
            builder = shapes.prepare(self.data_dir)
        train_ids, _, _ = _read_split(builder, "train")
        validation_ids, _, _ = _read_split(builder, "validation")
        self.assertAllEqual(
            np.concatenate([train_ids, validation_ids]), np.arange(_TRAIN_SIZE + _VALIDATION_SIZE)
        )
        self.assertEmpty(glob.glob(os.path.join(self.data_dir, shapes.NAME, "*incomplete*")))
