"""The values input options take: the enums of `InputConfig`'s choices; the forms `dataset`
takes, each a `SourceKind`; a tf.data service dispatcher's address; the stages
`baseline_pipeline` cuts tfdist's pipeline after. Pure Python."""

import enum
import re

from .messages import InputConfigError

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
# The steps of tfdist's training pipeline that `baseline_pipeline` can cut it after, in order.
BASELINE_STAGES = ("read", "shuffle", "parse", "decode")


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
