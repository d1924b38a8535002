"""`tfdist_shapes`: the built-in 10-class image-classification dataset, generated locally.

Each 32x32 RGB image shows one light shape (circle, ring, square, ...) on a dark background, at a
random position, size and slight rotation, in random colours, with Gaussian pixel noise. Images
are drawn with NumPy from a fixed seed per split, so the dataset is the same on every machine and
needs no network. The first `prepare` writes it through TFDS as sharded TFRecord files into a data
directory; later calls only load it.
"""

import contextlib
import fcntl
import io
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from absl import logging
import tensorflow_datasets as tfds

from .messages import InputConfigError

NAME = "tfdist_shapes"
IMAGE_SHAPE = (32, 32, 3)

_MIN_SIZE = 6.0
_MAX_SIZE = 12.0
_MAX_ROTATION = np.pi / 12
_MIN_COLOUR_DISTANCE = 150.0
_NOISE_STDDEV = 12.0
_LOCK_FILE_NAME = f".{NAME}.lock"

# A shape mask maps pixel coordinates `u, v` (`[n, H, W]`, relative to each shape's centre, in its
# rotated frame; `v` points down) and per-image half-size and stroke width (`[n, 1, 1]`) to a
# boolean `[n, H, W]` mask of the shape.
_ShapeMask = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
_KeyExample = tuple[int, dict[str, Any]]


def _circle(u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Filled disc of radius `size`."""
    del width
    return np.hypot(u, v) <= size


def _ring(u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Circle outline of outer radius `size` and thickness `width`."""
    radius = np.hypot(u, v)
    return (radius <= size) & (radius >= size - width)


def _square(u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Filled square (slightly smaller than `size`, to match the disc's area better)."""
    del width
    return np.maximum(np.abs(u), np.abs(v)) <= size * 0.85


def _hollow_square(u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Square outline of thickness `width`."""
    extent = np.maximum(np.abs(u), np.abs(v))
    return (extent <= size * 0.85) & (extent >= size * 0.85 - width)


def _triangle(u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Filled triangle pointing up."""
    del width
    return (v <= size * 0.8) & (np.abs(u) <= (v + size) * 0.55)


def _diamond(u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Filled square standing on a corner."""
    del width
    return np.abs(u) + np.abs(v) <= size


def _horizontal_bar(
    u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray
) -> np.ndarray:
    """Bar of length `2 * size` and thickness `width`."""
    return (np.abs(u) <= size) & (np.abs(v) <= width / 2)


def _vertical_bar(u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Horizontal bar turned upright."""
    return _horizontal_bar(v, u, size, width)


def _plus(u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Horizontal and vertical bar crossing at the centre."""
    return _horizontal_bar(u, v, size, width) | _vertical_bar(u, v, size, width)


def _x(u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Plus turned by 45 degrees."""
    return _plus((u + v) / np.sqrt(2.0), (v - u) / np.sqrt(2.0), size, width)


_SHAPES: tuple[tuple[str, _ShapeMask], ...] = (
    ("circle", _circle),
    ("ring", _ring),
    ("square", _square),
    ("hollow_square", _hollow_square),
    ("triangle", _triangle),
    ("diamond", _diamond),
    ("plus", _plus),
    ("x", _x),
    ("horizontal_bar", _horizontal_bar),
    ("vertical_bar", _vertical_bar),
)
CLASS_NAMES: tuple[str, ...] = tuple(name for name, _ in _SHAPES)


def _sample_shape_frames(
    rng: np.random.Generator, num_examples: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Samples each shape's placement; returns pixel coordinates in the shapes' frames.

    Args:
        rng: Random generator to draw from.
        num_examples: Number of images.

    Returns:
        `(u, v, size, width)` as a `_ShapeMask` takes them, all float32.
    """
    height, width = IMAGE_SHAPE[:2]
    size = rng.uniform(_MIN_SIZE, _MAX_SIZE, num_examples).astype(np.float32)
    stroke = np.maximum(size * rng.uniform(0.3, 0.5, num_examples).astype(np.float32), 2.0)
    margin = size * 0.8
    centre_x = rng.uniform(margin, width - margin).astype(np.float32)
    centre_y = rng.uniform(margin, height - margin).astype(np.float32)
    angle = rng.uniform(-_MAX_ROTATION, _MAX_ROTATION, num_examples).astype(np.float32)
    rows, cols = np.mgrid[0:height, 0:width].astype(np.float32) + 0.5
    dx = cols[None] - centre_x[:, None, None]
    dy = rows[None] - centre_y[:, None, None]
    cos, sin = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    return cos * dx + sin * dy, cos * dy - sin * dx, size[:, None, None], stroke[:, None, None]


def _shape_masks(
    labels: np.ndarray, u: np.ndarray, v: np.ndarray, size: np.ndarray, width: np.ndarray
) -> np.ndarray:
    """Returns the boolean `[n, H, W]` mask of each image's shape, `labels` picking the shape."""
    masks = np.zeros(u.shape, dtype=bool)
    for label, (_, shape_mask) in enumerate(_SHAPES):
        chosen = labels == label
        masks[chosen] = shape_mask(u[chosen], v[chosen], size[chosen], width[chosen])
    return masks


def _sample_colours(rng: np.random.Generator, num_examples: int) -> tuple[np.ndarray, np.ndarray]:
    """Samples random light foreground and dark background RGB colours.

    Foreground channels are in [128, 255], background channels in [0, 127]. Pairs whose channels
    differ by less than `_MIN_COLOUR_DISTANCE` in total are redrawn, so every shape stays visible.

    Args:
        rng: Random generator to draw from.
        num_examples: Number of colour pairs.

    Returns:
        `(foreground, background)`, float32 arrays of shape `[n, 3]`.
    """
    foreground = np.empty((num_examples, 3), dtype=np.float32)
    background = np.empty((num_examples, 3), dtype=np.float32)
    redraw = np.ones(num_examples, dtype=bool)
    while redraw.any():
        count = int(redraw.sum())
        foreground[redraw] = rng.integers(128, 256, (count, 3))
        background[redraw] = rng.integers(0, 128, (count, 3))
        redraw = (foreground - background).sum(axis=1) < _MIN_COLOUR_DISTANCE
    return foreground, background


def draw_examples(num_examples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Draws random shape images, the same ones for the same arguments.

    Classes are balanced (their counts differ by at most one) and in random order.

    Args:
        num_examples: Number of images to draw.
        seed: Seed of the NumPy random generator.

    Returns:
        `(images, labels)`: uint8 images `[n, 32, 32, 3]` and int64 labels `[n]` that index
        `CLASS_NAMES`.
    """
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(num_examples) % len(CLASS_NAMES))
    masks = _shape_masks(labels, *_sample_shape_frames(rng, num_examples))
    foreground, background = _sample_colours(rng, num_examples)
    images = np.where(masks[..., None], foreground[:, None, None], background[:, None, None])
    images += _NOISE_STDDEV * rng.standard_normal(images.shape, dtype=np.float32)
    return np.clip(np.rint(images), 0, 255).astype(np.uint8), labels.astype(np.int64)


class TfdistShapes(tfds.core.GeneratorBasedBuilder):
    """TFDS builder of `tfdist_shapes`: raw uint8 `image`, `label` and an `id` unique across
    splits.

    Images are stored as their raw 3,072 bytes, not PNG: the Gaussian noise leaves PNG only 17%
    smaller, and decoding a 32x32 PNG cost ~55 us of CPU per image (7 ms per batch of 128, the
    largest cost of the input pipeline), where raw bytes decode as one op per batch.

    Train ids are `0..TRAIN_SIZE-1`; validation ids follow them. Every split is written as
    `NUM_SHARDS` files, so that workers can each read a subset of the files. Split sizes and the
    shard count are class attributes so that tests can shrink them.
    """

    VERSION = tfds.core.Version("2.0.0")
    RELEASE_NOTES = {
        "1.0.0": "Initial release.",
        "2.0.0": "Images stored as raw uint8 bytes instead of PNG.",
    }
    TRAIN_SIZE = 10_000
    VALIDATION_SIZE = 2_000
    TRAIN_SEED = 0
    VALIDATION_SEED = 1
    NUM_SHARDS = 8

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=__doc__,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Tensor(
                        shape=IMAGE_SHAPE, dtype=np.uint8, encoding=tfds.features.Encoding.BYTES
                    ),
                    "label": tfds.features.ClassLabel(names=CLASS_NAMES),
                    "id": tfds.features.Scalar(dtype=np.int64),
                }
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(
        self, dl_manager: tfds.download.DownloadManager
    ) -> dict[str, Iterator[_KeyExample]]:
        del dl_manager  # Nothing to download.
        return {
            "train": self._generate_examples(self.TRAIN_SIZE, self.TRAIN_SEED, first_id=0),
            "validation": self._generate_examples(
                self.VALIDATION_SIZE, self.VALIDATION_SEED, first_id=self.TRAIN_SIZE
            ),
        }

    def _generate_examples(
        self, num_examples: int, seed: int, first_id: int
    ) -> Iterator[_KeyExample]:
        """Yields the `(key, example)` pairs of one split, keyed by example id.

        Args:
            num_examples: Number of examples in the split.
            seed: Seed to draw the split's images with.
            first_id: Id of the split's first example.
        """
        images, labels = draw_examples(num_examples, seed)
        for example_id, image, label in zip(
            range(first_id, first_id + num_examples), images, labels
        ):
            yield example_id, {"image": image, "label": label, "id": example_id}


@contextlib.contextmanager
def _exclusive_lock(path: str) -> Iterator[None]:
    """Holds an exclusive `flock` on the file at `path` (created if missing) while active."""
    with open(path, "a", encoding="utf-8") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


@contextlib.contextmanager
def tfds_chatter_hidden() -> Iterator[None]:
    """Hides TFDS's stdout lines ("Downloading and preparing ...") and its absl logs about the
    version folder it is about to write."""
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.set_verbosity(verbosity)


def prepare(data_dir: str) -> tfds.core.DatasetBuilder:
    """Returns the `tfdist_shapes` builder, generating and writing the data on first use.

    Several processes may call this at once on the same `data_dir`: a file lock in `data_dir`
    lets one of them generate the data while the others wait, then load it. Data already there
    is loaded without the lock, so `data_dir` may then be read-only. Never touches the network
    (TFDS's GCS lookups are off by default and disabled here too).

    Args:
        data_dir: TFDS data directory to write the dataset to or load it from.

    Returns:
        The prepared builder; read it with `builder.as_dataset(...)`.

    Raises:
        InputConfigError: the data is not there and cannot be written there.
    """
    tfds.disable_progress_bar()
    with tfds_chatter_hidden():
        builder = TfdistShapes(data_dir=data_dir)
        if builder.is_prepared():  # TFDS moves a finished dataset into place: it is complete.
            return builder
    with contextlib.ExitStack() as stack:
        try:
            os.makedirs(data_dir, exist_ok=True)
            stack.enter_context(_exclusive_lock(os.path.join(data_dir, _LOCK_FILE_NAME)))
        except OSError as error:
            raise InputConfigError(
                f"data_dir={data_dir!r}: the built-in dataset is not there "
                f"and cannot be written there ({error.strerror or error}); "
                "pass a directory you may write."
            ) from None
        stack.enter_context(tfds_chatter_hidden())
        # Built again under the lock: another process may have generated the data meanwhile,
        # and a builder reads what is there when it is made.
        builder = TfdistShapes(data_dir=data_dir)
        if not builder.is_prepared():
            print(
                f"tfdist: generating the built-in dataset {NAME} in {builder.data_dir} "
                "(first use only)",
                file=sys.stderr,
                flush=True,
            )
            builder.download_and_prepare(
                download_config=tfds.download.DownloadConfig(
                    try_download_gcs=False, num_shards=builder.NUM_SHARDS
                )
            )
    return builder
