"""`InputConfig`: which data to read, how to shard, batch and preprocess it; `ReadOptions`: how
one dataset function reads a split; `Placement` and `DatasetInfo`; `log`, the input pipelines'
notices. Pure Python."""

import dataclasses
import enum
import math
import numbers
import os
import re
import sys


BUILTIN_DATASET = "shapes"
SYNTHETIC_DATASET = "synthetic"
TFRECORD_PREFIX = "tfrecord:"
PYTHON_PREFIX = "python:"  # A user's dataset function, imported by the program that trains.
SPLIT_PLACEHOLDER = "{split}"
# What `dataset` takes, each form once with what it reads: the field's help and errors say it.
DATASET_SOURCES = {
    BUILTIN_DATASET: "is the built-in 10-class image dataset, generated locally on first use",
    SYNTHETIC_DATASET: "is one random batch repeated (compute throughput only)",
    f"{TFRECORD_PREFIX}<glob>": "reads image/encoded and image/class/label ({split} in the glob "
    "becomes train and validation)",
    f"{PYTHON_PREFIX}MODULE:FUNCTION": "is a dataset function of yours (docs/library.md)",
    "<tfds name>[:<version>]": "is a prepared TFDS dataset",
}
DATASET_FORMS = "|".join(DATASET_SOURCES)
_DOTTED_NAME = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
PYTHON_FUNCTION = re.compile(  # MODULE:FUNCTION, both dotted names.
    rf"{_DOTTED_NAME}:{_DOTTED_NAME}"
)
SERVICE_PROTOCOL = "grpc"
HOST_PATTERN = r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]"
_ADDRESS = re.compile(rf"(?P<protocol>[a-z]+)://(?P<host>{HOST_PATTERN}):(?P<port>[0-9]+)")
_ADDRESS_FIX = "write grpc://host:port, e.g. grpc://127.0.0.1:5050"
_TFDS_NAME = re.compile(r"^[a-z][a-z0-9_]*(/[a-zA-Z0-9_.-]+)?(:[0-9.*]+)?$")
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
LABEL_BYTES = 8  # int64
_COMPUTE_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# The steps of tfdist's training pipeline that `baseline_pipeline` can cut it after, in order.
BASELINE_STAGES = ("read", "shuffle", "parse", "decode")


class InputConfigError(ValueError):
    """An input option is invalid; the message is one line: field, value, fix."""


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


def log(line: str) -> None:
    """Input-pipeline notices for the person running the job, one line each on stderr."""
    print(f"tfdist input: {line}", file=sys.stderr, flush=True)


class AutoShard(str, enum.Enum):
    """How input pipelines (one per worker, or per replica) divide the data.

    `file`: whole files per pipeline. `data`: every pipeline reads every file and keeps every
    N-th example. `off`: every pipeline reads everything. `auto`: `file` when there are at least
    as many files as pipelines, else `data`.
    """

    AUTO = "auto"
    FILE = "file"
    DATA = "data"
    OFF = "off"


class PreprocessOn(str, enum.Enum):
    """Where augmentation, normalisation and the cast to the compute dtype run."""

    AUTO = "auto"
    HOST = "host"
    DEVICE = "device"


class Augment(str, enum.Enum):
    """How training images are augmented (input_pipelines/imagenet_recipe.py has the details).

    `imagenet`: a random-resized crop, fused with the JPEG decode, then a horizontal flip;
    evaluation reads a centre crop. `small`: an offset of up to 4 pixels from a reflect-padded
    image, a flip and a brightness change; evaluation reads the whole image. `none`: training
    reads images as evaluation does. `auto`: imagenet for encoded images resized to
    `image_size` (`tfrecord:` datasets, TFDS datasets given an `image_size`), else small.
    """

    AUTO = "auto"
    IMAGENET = "imagenet"
    SMALL = "small"
    NONE = "none"


class ServiceMode(str, enum.Enum):
    """tf.data service processing mode.

    `distributed_epoch`: the service workers split one epoch between them, each example once.
    `parallel_epochs`: every service worker produces the whole epoch.
    """

    DISTRIBUTED_EPOCH = "distributed_epoch"
    PARALLEL_EPOCHS = "parallel_epochs"


class SourceKind(str, enum.Enum):
    BUILTIN = "builtin"
    SYNTHETIC = "synthetic"
    TFRECORD = "tfrecord"
    TFDS = "tfds"
    PYTHON = "python"  # Read by the user's function; input_pipelines only knows its name.


def source_kind(dataset: str) -> SourceKind:
    """What kind of source `--dataset` names; raises InputConfigError for malformed values."""
    if dataset == BUILTIN_DATASET:
        return SourceKind.BUILTIN
    if dataset == SYNTHETIC_DATASET:
        return SourceKind.SYNTHETIC
    if dataset.startswith(TFRECORD_PREFIX):
        if not dataset[len(TFRECORD_PREFIX) :]:
            raise InputConfigError(
                f"dataset={dataset!r} has no file pattern; write "
                f"{TFRECORD_PREFIX}/data/train-*.tfrecord."
            )
        return SourceKind.TFRECORD
    if dataset.startswith(PYTHON_PREFIX):
        if not PYTHON_FUNCTION.fullmatch(dataset[len(PYTHON_PREFIX) :]):
            raise InputConfigError(
                f"dataset={dataset!r} is not {PYTHON_PREFIX}MODULE:FUNCTION; "
                f"write e.g. {PYTHON_PREFIX}my_project.data:splits (a module "
                "on PYTHONPATH)."
            )
        return SourceKind.PYTHON
    if _TFDS_NAME.match(dataset):
        return SourceKind.TFDS
    raise InputConfigError(f"dataset={dataset!r} is not a dataset name; use {DATASET_FORMS}.")


def parse_service_address(address: str) -> tuple[str, str]:
    """Splits a dispatcher address `grpc://host:port` into `("grpc", "host:port")`."""
    match = _ADDRESS.fullmatch(address) if isinstance(address, str) else None
    if (
        match is None
        or match["protocol"] != SERVICE_PROTOCOL
        or not 1 <= int(match["port"]) <= 65535
    ):
        raise InputConfigError(
            f"tf_data_service={address!r}: not a dispatcher address; {_ADDRESS_FIX}."
        )
    return SERVICE_PROTOCOL, f"{match['host']}:{match['port']}"


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
    """

    split: str
    training: bool
    placement: Placement | None = None
    independent_order: bool = False

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
