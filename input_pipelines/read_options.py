"""What one dataset function is told besides the `InputConfig`: `ReadOptions` (the split, and
how to read it), the `Placement` of image preprocessing, and `DatasetInfo`, what a prepared
image dataset holds. Pure Python."""

import dataclasses

from .choices import Augment
from .choices import PreprocessOn
from .messages import InputConfigError

LABEL_BYTES = 8  # int64
_COMPUTE_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What a model and a training schedule need to know about an image dataset.

    `num_examples` has an entry per split the dataset has; no `validation` entry means the
    dataset has no validation split.
    """

    name: str
    num_classes: int
    image_shape: tuple[int, int, int]
    num_examples: dict[str, int]


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where image preprocessing runs (HOST or DEVICE, never AUTO) and the dtype the model
    computes in."""

    preprocess_on: PreprocessOn
    compute_dtype: str = "float32"

    def __post_init__(self):
        if self.compute_dtype not in _COMPUTE_DTYPE_BYTES:
            raise InputConfigError(
                f"compute_dtype={self.compute_dtype!r} is not a dtype models "
                f"compute in; use one of {', '.join(_COMPUTE_DTYPE_BYTES)}."
            )

    @property
    def on_device(self) -> bool:
        return self.preprocess_on is PreprocessOn.DEVICE

    def bytes_per_example(self, image_shape: tuple[int, int, int]) -> int:
        """Bytes of one example crossing host to device: uint8 images on DEVICE, else images in
        the compute dtype; plus the label."""
        height, width, channels = image_shape
        image_bytes = 1 if self.on_device else _COMPUTE_DTYPE_BYTES[self.compute_dtype]
        return height * width * channels * image_bytes + LABEL_BYTES

    def describe(self, image_shape: tuple[int, int, int], augment: Augment = Augment.SMALL) -> str:
        """One line: where preprocessing runs, and the bytes that cross to the device. With
        augment=imagenet the crop always runs on the host, in the decode."""
        work = {
            Augment.IMAGENET: "flip, normalisation and cast",
            Augment.NONE: "normalisation and cast",
        }.get(augment, "augmentation, normalisation and cast")
        images = (
            f"uint8 images; {work} run on each replica's device"
            if self.on_device
            else f"{self.compute_dtype} images; {work} run on the host"
        )
        return (
            f"preprocessing on {self.preprocess_on.value}: "
            f"{self.bytes_per_example(image_shape):,} bytes/example host->device ({images})"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """How one `DatasetFn` reads its data (`input_pipelines.dataset_fn`, `records_dataset_fn`).

    Attributes:
      split: the split to read, e.g. `train` or `validation`; it replaces `{split}` in file
        patterns.
      training: shuffle (seeded) and repeat, and drop each pipeline's last partial batch;
        otherwise read once, in order, keeping the tail.
      placement: where image preprocessing runs (`input_pipelines.resolve_placement`); image
        datasets need one, `Records` ignore it (their `parse_fn` does all the work).
      independent_order: every pipeline gets the same `InputContext` (ParameterServerStrategy),
        so nothing can be sharded: each pipeline reads the whole split in an order of its own.
      steps_done: training steps a resumed run has done: each pipeline starts where they left
        it (`pipeline.batches`).
    """

    split: str
    training: bool
    placement: Placement | None = None
    independent_order: bool = False
    steps_done: int = 0

    def __post_init__(self):
        if not isinstance(self.split, str) or not self.split:
            raise InputConfigError(
                f"split={self.split!r} is not a split name; pass e.g. split='train'."
            )
        for field in ("training", "independent_order"):
            if not isinstance(getattr(self, field), bool):
                raise InputConfigError(
                    f"{field}={getattr(self, field)!r} is not a bool; pass True or False."
                )
        if (
            not isinstance(self.steps_done, int)
            or isinstance(self.steps_done, bool)
            or self.steps_done < 0
        ):
            raise InputConfigError(
                f"steps_done={self.steps_done!r} is not a count of steps; pass 0 or more."
            )
