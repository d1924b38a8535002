"""TFRecord files: counting their records and finding the damaged ones."""

import tensorflow as tf

from input_pipelines.config import InputConfigError


def _count(dataset: tf.data.Dataset) -> int:
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda total, _: total + 1))


def _damage(path: str) -> tuple[int, str] | None:
    """(records readable, TF's complaint) when the file at `path` is damaged, else None."""
    try:
        _count(tf.data.TFRecordDataset(path))
    except tf.errors.DataLossError as error:
        reason = error.message.split("}}")[-1].split("[Op:")[0].strip()
        return _count(tf.data.TFRecordDataset(path).ignore_errors()), reason
    return None


def damaged_files(files: list[str] | tuple[str, ...]) -> dict[str, tuple[int, str]]:
    """The damaged files among `files`: path -> (records readable before the damage, reason)."""
    found = {path: _damage(path) for path in files}
    return {path: damage for path, damage in found.items() if damage}


def damage_error(path: str, damage: tuple[int, str]) -> InputConfigError:
    """The one-line error for a damaged file."""
    readable, reason = damage
    return InputConfigError(
        f"file {path} is damaged ({reason}; {readable} record(s) readable before it); re-create "
        "it, or pass --skip_corrupt_records to skip the rest of damaged files.")


def raise_if_damaged(files: list[str] | tuple[str, ...]) -> None:
    """Raises the `damage_error` of the first damaged file among `files`."""
    for path, damage in damaged_files(files).items():
        raise damage_error(path, damage)


def count(files: list[str] | tuple[str, ...], skip_corrupt: bool) -> int:
    """Records in `files`; a damaged file counts up to its damage when `skip_corrupt`, else
    raises its `damage_error`."""
    if skip_corrupt:
        return _count(tf.data.Dataset.from_tensor_slices(list(files)).interleave(
            lambda path: tf.data.TFRecordDataset(path).ignore_errors(), cycle_length=1))
    try:
        return _count(tf.data.TFRecordDataset(list(files)))
    except tf.errors.DataLossError:
        raise_if_damaged(files)
        raise
