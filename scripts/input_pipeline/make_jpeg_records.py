"""Writes an ImageNet-like set of JPEG TFRecord files, generated here (no download), to time and
train tfdist's pipeline on JPEG data of ImageNet's layout and sizes.

    python scripts/input_pipeline/make_jpeg_records.py --out_dir=DIR [--train_images=2500]
        [--validation_images=500] [--num_classes=10] [--label_base=0] [--seed=0] [--files=8]
        [--validation_files=2] [--min_size=300] [--max_size=500] [--stripes_by=class]

Files: DIR/train-0000n-of-00008 and DIR/validation-0000n-of-00002 (`--dataset='tfrecord:DIR/
{split}-*'`), each record a tf.train.Example with ImageNet's `image/encoded` (a JPEG at
quality 90), `image/class/label` (int64), `image/format` (b"JPEG"), `image/height` and
`image/width`. Labels run from `--label_base`: 1 is ImageNet's layout (tfdist then needs
num_classes one more than the classes, label 0 unused). Each split holds every class equally
often, in a seeded random order.

The images are learnable, and random crops change what a model sees: each class is a colour
(the classes' hues spread evenly around the wheel, an image's within 0.05 of its class's) and a
pattern (stripes one way or the other, or a checkerboard; the number of stripes, 4, 6 or 8,
the class's too, or with --stripes_by=image drawn per image, so that no class is told by a
feature a crop changes), filling an ellipse whose box covers 20-80% of the image, at a random
place and aspect ratio; on a background of coloured cloud texture, in half of the images a
plain ellipse of a random colour beside it, and per-pixel noise over all.
Height and width are drawn independently from [--min_size, --max_size]. The noise is what gives
ImageNet's encoded size at quality 90 (flat colours compress to a few KB): the default set
measured 94.3 KiB (96.6 kB) per image on average, 54-144 KiB. A small CNN trained on it at 64 px
without augmentation (8 epochs, 22 s on 2 cores) reached 0.87 validation accuracy, still rising.

Image i of a split is drawn from (seed, split, i) alone: the same flags write the same bytes.
Refuses (exit 2, one line) when a file it would write exists; each file is written under a
temporary name and renamed once complete, and on failure none of its files are left.
"""

import argparse
import colorsys
import os
import sys
import time

import numpy as np

from tfdist.runtime.tf_import import import_tensorflow  # tfdist first: tf-keras is selected.

SPLITS = {"train": 0, "validation": 1}  # Split name -> its index in each image's seed.
QUALITY = 90
_NOISE = 26.0  # Standard deviation of the per-pixel noise, in 0-255 units: gives ~96 KB.
_OBJECT_AREA = (0.2, 0.8)  # Of the image, by the object's bounding box.
_ASPECT = (0.6, 1.6)  # Width / height of the object's box.
_EDGE_SHARPNESS = 8.0
# Of the hue circle: with 10 classes each class's hues touch its neighbours', with more they
# overlap; the pattern (which differs between neighbours) then tells them apart.
_HUE_JITTER = 0.05


def _smooth_noise(rng: np.random.Generator, height: int, width: int, cells: int, channels: int):
    """Unit-variance noise on a `cells` x `cells` grid, resized smoothly to the image."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    grid = rng.standard_normal((1, cells, cells, channels)).astype(np.float32)
    return tf.image.resize(grid, [height, width], method="bicubic")[0].numpy()


def _rgb(hue: float, saturation: float, value: float):
    return np.array(colorsys.hsv_to_rgb(hue % 1.0, saturation, value), np.float32) * 255


def _ellipse(rng: np.random.Generator, height: int, width: int, area: float):
    """(soft mask [H, W, 1], dy, dx) of an ellipse whose box covers `area` of the image, at a
    random place and aspect ratio; dy, dx are the pixels' coordinates in units of its radii."""
    aspect = np.exp(rng.uniform(*np.log(_ASPECT)))
    box_w = min(width, np.sqrt(area * height * width * aspect))
    box_h = min(height, area * height * width / box_w)
    center_y = rng.uniform(box_h / 2, height - box_h / 2)
    center_x = rng.uniform(box_w / 2, width - box_w / 2)
    rows, cols = np.mgrid[0:height, 0:width].astype(np.float32)
    dy, dx = (rows - center_y) / (box_h / 2), (cols - center_x) / (box_w / 2)
    mask = np.clip((1 - dy**2 - dx**2) * _EDGE_SHARPNESS, 0, 1)[..., None]
    return mask, dy, dx


def _pattern(class_index: int, dy, dx, rng: np.random.Generator, stripes_by: str):
    """The class's pattern over the object, +1 or -1 per pixel: stripes across (pattern 0) or
    along (1) the object, or a checkerboard (2), tilted up to 8 degrees; 4, 6 or 8 stripes, by
    the class or (`stripes_by` "image") drawn."""
    kind = class_index % 3
    stripes = 4 + 2 * (rng.integers(3) if stripes_by == "image" else (class_index // 3) % 3)
    theta = np.deg2rad((90.0 if kind == 1 else 0.0) + rng.uniform(-8, 8))
    along = dx * np.cos(theta) + dy * np.sin(theta)
    wave = np.sin(np.pi * stripes * along / 2)
    if kind == 2:
        wave = wave * np.sin(np.pi * stripes * (dy * np.cos(theta) - dx * np.sin(theta)) / 2)
    return np.sign(wave)[..., None]


def draw_image(
    rng: np.random.Generator,
    class_index: int,
    num_classes: int,
    *,
    min_size: int,
    max_size: int,
    stripes_by: str,
):
    """One uint8 [H, W, 3] image of class `class_index` (0-based); see the module's docstring."""
    height, width = (int(side) for side in rng.integers(min_size, max_size + 1, size=2))
    background = (
        _rgb(rng.random(), rng.uniform(0, 0.35), rng.uniform(0.3, 0.8))
        + 40 * _smooth_noise(rng, height, width, 6, 3)
        + 25 * _smooth_noise(rng, height, width, 40, 1)
    )
    if rng.random() < 0.5:  # A plain distractor, smaller than any object.
        mask, _, _ = _ellipse(rng, height, width, rng.uniform(0.05, 0.15))
        colour = _rgb(rng.random(), rng.uniform(0.5, 1.0), rng.uniform(0.5, 1.0))
        background = background * (1 - mask) + colour * mask
    mask, dy, dx = _ellipse(rng, height, width, rng.uniform(*_OBJECT_AREA))
    hue = class_index / num_classes + rng.uniform(-_HUE_JITTER, _HUE_JITTER)
    colour = _rgb(hue, rng.uniform(0.65, 1.0), rng.uniform(0.6, 1.0))
    texture = colour * (0.75 + 0.25 * _pattern(class_index, dy, dx, rng, stripes_by))
    texture = texture + 15 * _smooth_noise(rng, height, width, 30, 3)
    image = background * (1 - mask) + texture * mask
    image = (
        image
        + _NOISE * rng.standard_normal((height, width, 1), np.float32)
        + _NOISE / 3 * rng.standard_normal((height, width, 3), np.float32)
    )
    return np.clip(image, 0, 255).astype(np.uint8)


def file_names(split: str, num_files: int) -> list[str]:
    """ImageNet's names: `train-00000-of-01024`, ..."""
    return [f"{split}-{index:05d}-of-{num_files:05d}" for index in range(num_files)]


def _labels(rng: np.random.Generator, num_images: int, num_classes: int):
    """Every class equally often (to within one), in a seeded random order."""
    return rng.permutation(np.arange(num_images) % num_classes)


def _example(encoded: bytes, label: int, height: int, width: int) -> bytes:
    """A serialized tf.train.Example in ImageNet's layout; its features in sorted order (else
    the order of a protobuf map may change between processes)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def as_bytes(value: bytes) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def as_int(value: int) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "image/encoded": as_bytes(encoded),
                "image/format": as_bytes(b"JPEG"),
                "image/class/label": as_int(label),
                "image/height": as_int(height),
                "image/width": as_int(width),
            }
        )
    ).SerializeToString(deterministic=True)


def _write_split(
    args: argparse.Namespace, split: str, num_images: int, num_files: int, written: list[str]
) -> list[int]:
    """Writes `split`'s files (appending each finished path to `written`); returns the
    encoded sizes in bytes."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    labels = _labels(
        np.random.default_rng([args.seed, SPLITS[split]]), num_images, args.num_classes
    )
    sizes = []
    bounds = np.linspace(0, num_images, num_files + 1).round().astype(int)
    for name, first, end in zip(file_names(split, num_files), bounds[:-1], bounds[1:]):
        path = os.path.join(args.out_dir, name)
        temp = os.path.join(args.out_dir, f".{name}.tmp{os.getpid()}")
        written.append(temp)
        with tf.io.TFRecordWriter(temp) as writer:
            for index in range(first, end):
                rng = np.random.default_rng([args.seed, SPLITS[split], index])
                image = draw_image(
                    rng,
                    int(labels[index]),
                    args.num_classes,
                    min_size=args.min_size,
                    max_size=args.max_size,
                    stripes_by=args.stripes_by,
                )
                encoded = tf.io.encode_jpeg(image, quality=QUALITY).numpy()
                sizes.append(len(encoded))
                writer.write(
                    _example(encoded, int(labels[index]) + args.label_base, *image.shape[:2])
                )
        os.rename(temp, path)
        written[-1] = path
    return sizes


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out_dir", required=True, help="directory to write the files into (made if missing)"
    )
    parser.add_argument("--train_images", type=_positive, default=2500)
    parser.add_argument("--validation_images", type=_positive, default=500)
    parser.add_argument("--num_classes", type=_positive, default=10)
    parser.add_argument(
        "--label_base",
        type=int,
        choices=(0, 1),
        default=0,
        help="the first label: 0, or 1 as ImageNet's files",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--files", type=_positive, default=8, help="training files")
    parser.add_argument("--validation_files", type=_positive, default=2)
    parser.add_argument(
        "--min_size", type=_positive, default=300, help="smallest height or width in pixels"
    )
    parser.add_argument(
        "--max_size", type=_positive, default=500, help="largest height or width in pixels"
    )
    parser.add_argument(
        "--stripes_by",
        choices=("class", "image"),
        default="class",
        help="what sets an object's number of stripes: its class, or a draw "
        "per image (then a crop that shows fewer stripes changes no class)",
    )
    args = parser.parse_args()
    if args.min_size > args.max_size:
        parser.error(
            f"--min_size={args.min_size} is larger than --max_size={args.max_size}; "
            "pass min_size <= max_size."
        )
    if not 0 <= args.seed < 1 << 32:
        parser.error(f"--seed={args.seed} is not from 0 to {(1 << 32) - 1}.")
    for split, images, files in (
        ("train", args.train_images, args.files),
        ("validation", args.validation_images, args.validation_files),
    ):
        if files > images:
            parser.error(
                f"{files} {split} files for {images} {split} images would leave "
                "files empty; pass fewer files or more images."
            )
    return args


def _fail(message: str) -> None:
    """Exits 2 with `message` on stderr, one line."""
    print(f"make_jpeg_records: {message}", file=sys.stderr)
    sys.exit(2)


def _refuse_existing(args: argparse.Namespace) -> None:
    """Exits 2 naming the first file of the set that exists already."""
    for split, files in (("train", args.files), ("validation", args.validation_files)):
        for name in file_names(split, files):
            path = os.path.join(args.out_dir, name)
            if os.path.lexists(path):
                _fail(
                    f"{path} exists; this script does not overwrite: "
                    "remove the set first, or pass another --out_dir."
                )


def main() -> None:
    args = _parse_args()
    if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
        _fail(f"--out_dir={args.out_dir} is not a directory; pass one.")
    _refuse_existing(args)
    import_tensorflow(show_logs=False)
    os.makedirs(args.out_dir, exist_ok=True)
    start, written, sizes = time.perf_counter(), [], []
    try:
        for split, images, files in (
            ("train", args.train_images, args.files),
            ("validation", args.validation_images, args.validation_files),
        ):
            sizes += _write_split(args, split, images, files, written)
    except BaseException:
        for path in written:
            if os.path.exists(path):
                os.remove(path)
        raise
    print(
        f"make_jpeg_records: {args.train_images} train + {args.validation_images} validation "
        f"images in {args.files} + {args.validation_files} files in {args.out_dir}; "
        f"JPEG q{QUALITY} {np.mean(sizes) / 1024:.1f} KiB mean ({min(sizes) / 1024:.1f}-"
        f"{max(sizes) / 1024:.1f} KiB); {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
