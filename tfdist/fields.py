"""A config field that carries what its `tfdist train` flag is made of, once: its default, its
help and, for an integer, its bounds, which the config checks too. Shared by the configs of both
libraries and the core; imports nothing of tfdist."""

import dataclasses

MAX_COUNT = (1 << 31) - 1  # Steps, epochs and other counts TensorFlow keeps in int32 or more.
MAX_FLOAT32 = 3.4028234663852886e38  # Floats TensorFlow computes in float32 stay below it.


def option(
    default,
    help: str | None = None,
    *,  # pylint: disable=redefined-builtin
    bounds: tuple[int, int] | None = None,
    fix: str | None = None,
) -> dataclasses.Field:
    """A dataclass field with its flag's `help`, integer `bounds` [lowest, highest] and the
    `fix` that ends a bad value's error (`fix_of`)."""
    metadata = {"help": help, "bounds": bounds, "fix": fix}
    return dataclasses.field(
        default=default,
        metadata={key: value for key, value in metadata.items() if value is not None},
    )


def fix_of(field: dataclasses.Field) -> str:
    """How to fix a bad value of `field`, which ends its error: its `fix`, else its default as
    an example."""
    return field.metadata.get("fix", f"e.g. {field.default}")
