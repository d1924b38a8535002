"""`InputConfig`: which data to read, how to shard, batch and preprocess it; each field with
its help, default and bounds (`option`) and checked when made; `per_replica_batch_size`.
Pure Python."""

import dataclasses
import enum
import math
import numbers
import os

from .choices import Augment
from .choices import AutoShard
from .choices import BUILTIN_DATASET
from .choices import DATASET_FORMS
from .choices import DATASET_SOURCES
from .choices import PreprocessOn
from .choices import ServiceMode
from .choices import SourceKind
from .choices import parse_service_address
from .choices import source_kind
from .messages import InputConfigError

# Upper bounds, past which TensorFlow overflows or the machine cannot hold the tensors.
MAX_GLOBAL_BATCH_SIZE = 1 << 24  # 256x the largest published ImageNet batch (65,536).
MAX_NUM_CLASSES = 1 << 24
MAX_IMAGE_SIZE = 8192  # One 8192x8192 RGB image is 201 MB.
MAX_BUFFER_SIZE = (1 << 31) - 1
MAX_THREADS = 1024
MAX_SEED = (1 << 32) - 1  # NumPy's limit.
MAX_NUM_EXAMPLES = 1 << 40  # About 10^12: far more than any dataset on disk holds.
MAX_CROP_ASPECT = 100.0  # Width over height of a random-resized crop; ImageNet's is 3/4 to 4/3.
# The random-resized crop's defaults (Inception; TF's official ResNet preprocessing).
CROP_AREA_RANGE = (0.08, 1.0)
CROP_ASPECT_RANGE = (3 / 4, 4 / 3)


def option(
    default,
    help: str | None = None,
    *,  # pylint: disable=redefined-builtin
    bounds: tuple[int, int] | None = None,
) -> dataclasses.Field:
    """A config field that carries its `tfdist train` flag's default, help and integer bounds
    once (as `strategies.config.option`: the two libraries import nothing of each other)."""
    metadata = {"help": help, "bounds": bounds}
    return dataclasses.field(
        default=default,
        metadata={key: value for key, value in metadata.items() if value is not None},
    )


def per_replica_batch_size(global_batch_size: int, num_replicas: int) -> int:
    """`global_batch_size / num_replicas`; raises InputConfigError unless that is a whole,
    positive number."""
    if global_batch_size < num_replicas:
        raise InputConfigError(
            f"global_batch_size={global_batch_size} is smaller than the {num_replicas} replicas; "
            f"every replica needs at least one example: use global_batch_size={num_replicas} "
            "or more."
        )
    if global_batch_size % num_replicas:
        lower = global_batch_size // num_replicas * num_replicas
        raise InputConfigError(
            f"global_batch_size={global_batch_size} does not split evenly over {num_replicas} "
            f"replicas; use a multiple of {num_replicas}, e.g. global_batch_size={lower} or "
            f"{lower + num_replicas}."
        )
    return global_batch_size // num_replicas


def _fraction_range(
    field: str, value, what: str, highest: float, example: tuple[float, float]
) -> tuple[float, float]:
    """`value` as a (min, max) pair of floats with 0 < min <= max <= highest; raises
    InputConfigError naming `field` otherwise."""
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not (
        len(pair) == 2
        and all(
            isinstance(number, numbers.Real)
            and not isinstance(number, bool)
            and math.isfinite(number)
            for number in pair
        )
        and 0 < pair[0] <= pair[1] <= highest
    ):
        raise InputConfigError(
            f"{field}={value!r} is not a range (min, max) of {what} with 0 < min <= max <= "
            f"{highest:g}; pass e.g. {field}=({example[0]:.4g}, {example[1]:.4g})."
        )
    return float(pair[0]), float(pair[1])


def _check_bounds(config) -> None:
    """Each field of the dataclass `config` with bounds (`option`) holds an integer within them;
    None passes where it is the default."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if "bounds" not in field.metadata or (value is None and field.default is None):
            continue
        lowest, highest = field.metadata["bounds"]
        if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= highest:
            raise InputConfigError(
                f"{field.name}={value!r} is not an integer from {lowest} to {highest}."
            )


def _as_enum(field: str, value, enum_type: type[enum.Enum]):
    try:
        return enum_type(value)
    except ValueError:
        choices = "|".join(member.value for member in enum_type)
        raise InputConfigError(
            f"{field}={value!r} is not a known value; use one of {choices}."
        ) from None


@dataclasses.dataclass(frozen=True)
class InputConfig:
    """Options for `input_pipelines.dataset_fn`. Each field carries its help, default and bounds
    (`option`), which the `tfdist train` flag of its name, where there is one, is made of.

    Example:
      >>> InputConfig(dataset="tfrecord:/data/{split}-*", num_classes=1000, image_size=224,
      ...             global_batch_size=1024, autoshard="file", preprocess_on="device")
    """

    dataset: str = option(
        BUILTIN_DATASET,
        f"Training data, one of {DATASET_FORMS}: "
        f"{'; '.join(' '.join(form) for form in DATASET_SOURCES.items())}.",
    )
    data_dir: str | None = option(
        None, "Where prepared datasets live; unset uses $TFDS_DATA_DIR or ~/tensorflow_datasets."
    )
    download: bool = option(
        False, "Let TFDS download and prepare a dataset that is not prepared (needs network)."
    )
    num_classes: int | None = option(
        None, "Classes of a tfrecord: or synthetic dataset.", bounds=(1, MAX_NUM_CLASSES)
    )
    image_size: int | None = option(
        None,
        "Resize images to this square size; unset keeps a TFDS dataset's size, 224 for "
        "tfrecord:, 32 for synthetic.",
        bounds=(1, MAX_IMAGE_SIZE),
    )
    global_batch_size: int = option(
        128,
        "Examples per step over all replicas; must divide by the replica count. Or give "
        "--per_replica_batch_size instead (not both).",
        bounds=(1, MAX_GLOBAL_BATCH_SIZE),
    )
    shuffle_buffer_size: int = option(
        10_000, "Examples in the training shuffle buffer.", bounds=(1, MAX_BUFFER_SIZE)
    )
    seed: int = option(
        0, "Seeds file and example shuffling and host augmentation.", bounds=(0, MAX_SEED)
    )
    autoshard: AutoShard = option(
        AutoShard.AUTO,
        "How input pipelines divide the data: file (whole files each), data "
        "(every N-th example), off (all read everything), auto (file when there are enough "
        "files, else data).",
    )
    cache: bool = option(False, "Keep the records in memory after the first epoch.")
    deterministic: bool | None = option(
        None,
        "Produce input in a fixed order (--nodeterministic trades order for speed); unset "
        "keeps tf.data's default.",
    )
    datasets_num_private_threads: int | None = option(
        None,
        "Give each input pipeline a private thread pool of this size.",
        bounds=(1, MAX_THREADS),
    )
    preprocess_on: PreprocessOn = option(
        PreprocessOn.AUTO,
        "Where augmentation, normalisation and the cast run: host (tf.data), "
        "device (inside each replica's step; the host only decodes and batches uint8), auto "
        "(device when there are GPUs).",
    )
    tf_data_service: str | None = option(
        None,
        "grpc://host:port of a tf.data service dispatcher (see `tfdist data serve`) to run "
        "the input pipeline on.",
    )
    tf_data_service_mode: ServiceMode = option(
        ServiceMode.DISTRIBUTED_EPOCH,
        "distributed_epoch: service workers split each epoch, "
        "every example once; parallel_epochs: every service worker produces the whole epoch.",
    )
    skip_corrupt_records: bool = option(
        False, "Skip the rest of a damaged TFRecord file (logged and counted) instead of failing."
    )
    label_offset: int = option(
        0,
        "Subtracted from every label of a tfrecord: dataset; 1 reads ImageNet's, labelled 1..1000.",
        bounds=(0, MAX_NUM_CLASSES),
    )
    augment: Augment = option(
        Augment.AUTO,
        "Training augmentation: imagenet (random-resized crop in the JPEG decode, "
        "flip; evaluation: 0.875 centre crop), small (4 px shift, flip, brightness), none; auto: "
        "imagenet for tfrecord: and TFDS datasets given --image_size, else small.",
    )
    crop_area_range: tuple[float, float] = option(
        CROP_AREA_RANGE,
        "augment=imagenet: the (min, max) fraction of an image's area that a random crop covers.",
    )
    crop_aspect_range: tuple[float, float] = option(
        CROP_ASPECT_RANGE, "augment=imagenet: the (min, max) width over height of a random crop."
    )

    def __post_init__(self):
        if not isinstance(self.dataset, str):
            raise InputConfigError(
                f"dataset={self.dataset!r} is a {type(self.dataset).__name__}, "
                f"not a dataset name; use {DATASET_FORMS}."
            )
        if isinstance(self.data_dir, os.PathLike):
            object.__setattr__(self, "data_dir", os.fspath(self.data_dir))
        if self.data_dir is not None and not isinstance(self.data_dir, str):
            raise InputConfigError(
                f"data_dir={self.data_dir!r} is a "
                f"{type(self.data_dir).__name__}, not a path; pass a string "
                "(or None for TFDS' default)."
            )
        kind = source_kind(self.dataset)
        object.__setattr__(self, "autoshard", _as_enum("autoshard", self.autoshard, AutoShard))
        object.__setattr__(
            self, "preprocess_on", _as_enum("preprocess_on", self.preprocess_on, PreprocessOn)
        )
        object.__setattr__(
            self,
            "tf_data_service_mode",
            _as_enum("tf_data_service_mode", self.tf_data_service_mode, ServiceMode),
        )
        object.__setattr__(self, "augment", _as_enum("augment", self.augment, Augment))
        object.__setattr__(
            self,
            "crop_area_range",
            _fraction_range(
                "crop_area_range",
                self.crop_area_range,
                "fractions of the image's area",
                1.0,
                CROP_AREA_RANGE,
            ),
        )
        object.__setattr__(
            self,
            "crop_aspect_range",
            _fraction_range(
                "crop_aspect_range",
                self.crop_aspect_range,
                "widths over heights",
                MAX_CROP_ASPECT,
                CROP_ASPECT_RANGE,
            ),
        )
        _check_bounds(self)
        if self.tf_data_service is not None:
            parse_service_address(self.tf_data_service)
        if kind is SourceKind.TFRECORD and self.num_classes is None:
            raise InputConfigError(
                f"dataset={self.dataset!r} needs num_classes=N, the "
                "number of classes its labels index."
            )
        self._check_label_offset(kind)

    def _check_label_offset(self, kind: SourceKind) -> None:
        if not self.label_offset:
            return
        if kind is not SourceKind.TFRECORD:
            raise InputConfigError(
                f"label_offset={self.label_offset} applies to tfrecord: datasets only; "
                f"dataset={self.dataset!r} has labels from 0 already: drop label_offset."
            )
        if self.label_offset >= self.num_classes:
            raise InputConfigError(
                f"label_offset={self.label_offset} is not below num_classes="
                f"{self.num_classes}; label_offset is the label of the first class (1 when "
                "labels run 1..num_classes, as ImageNet's TFRecords do)."
            )

    @property
    def source_kind(self) -> SourceKind:
        return source_kind(self.dataset)

    @property
    def augmentation(self) -> Augment:
        """The augmentation recipe `augment` resolves to for this dataset (never AUTO):
        imagenet for encoded images resized to `image_size` (`tfrecord:`, and TFDS datasets
        given an `image_size`), small for the rest (the built-in dataset, synthetic, TFDS
        datasets at their own size)."""
        if self.augment is not Augment.AUTO:
            return self.augment
        kind = self.source_kind
        resized = kind is SourceKind.TFRECORD or (
            kind is SourceKind.TFDS and self.image_size is not None
        )
        return Augment.IMAGENET if resized else Augment.SMALL
