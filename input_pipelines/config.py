"""`InputConfig`: which data to read and how to batch it. Pure Python."""

import dataclasses

DATASETS = ("shapes",)


class InputConfigError(ValueError):
    """An input option is invalid; the message is one line: field, value, fix."""


@dataclasses.dataclass(frozen=True)
class InputConfig:
    """Options for `input_pipelines.dataset_fn`.

    Attributes:
      dataset: `shapes`, the built-in 10-class image dataset generated locally.
      data_dir: where prepared datasets live; None means TFDS's default (~/tensorflow_datasets,
        or $TFDS_DATA_DIR).
      global_batch_size: examples per step across all replicas; each replica gets an equal share.
      shuffle_buffer_size: examples held by the training shuffle buffer.
      seed: seeds file and example shuffling.
    """
    dataset: str = "shapes"
    data_dir: str | None = None
    global_batch_size: int = 128
    shuffle_buffer_size: int = 10_000
    seed: int = 0

    def __post_init__(self):
        if self.dataset not in DATASETS:
            raise InputConfigError(
                f"dataset={self.dataset!r} is not known; use one of {'|'.join(DATASETS)}.")
        if self.global_batch_size < 1:
            raise InputConfigError(
                f"global_batch_size={self.global_batch_size} must be a positive integer.")
        if self.shuffle_buffer_size < 1:
            raise InputConfigError(
                f"shuffle_buffer_size={self.shuffle_buffer_size} must be a positive integer.")
