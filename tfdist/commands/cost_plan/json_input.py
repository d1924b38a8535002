"""The JSON files `tfdist plan` reads (`--from_benchmark`, `--input_benchmark`,
`--noise_scale_json`), each read as every plan input is: a regular file of UTF-8 text, of
bounded size, whose numbers are finite and of bounded length, or one line naming the flag."""

import json
import math

from tfdist.commands import flags as flags_lib
from tfdist.runtime.config import ConfigError

MAX_JSON_DIGITS = 32  # Of a number in a JSON file: 17 significant digits, zeros and an exponent.


def read_json(name: str, path: str, what: str, fix: str):
    """The JSON value in the file `path` that --`name` gives: a regular file of UTF-8 text, of
    bounded size (`flags.read_text`), whose numbers are finite, of at most MAX_JSON_DIGITS
    digits (checked as text, before any is converted).

    Raises:
      ConfigError: a file that cannot be read or is not JSON, in one line that ends in `fix`;
        `what` says what the file should have been.
    """
    try:
        return json.loads(
            flags_lib.read_text(path),
            parse_int=_bounded(int),
            parse_float=_bounded(float),
            parse_constant=_refuse_constant,
        )
    except _OutOfBounds as number:
        raise ConfigError(
            f"{name}={path!r}: it holds the number {number}, which is not a "
            f"finite number of at most {MAX_JSON_DIGITS} digits; {fix}."
        ) from None
    except ValueError as error:  # JSONDecodeError too.
        reason = "it is not JSON" if isinstance(error, json.JSONDecodeError) else error
        raise ConfigError(f"{name}={path!r}: {reason}; {fix}.") from None
    except RecursionError:
        raise ConfigError(
            f"{name}={path!r}: it is nested too deeply to be {what}; {fix}."
        ) from None


class _OutOfBounds(Exception):
    """A number of a JSON file that no tfdist figure can be; its text (shortened)."""


def _bounded(convert):
    """A json parse hook: `convert(text)` once the text has at most MAX_JSON_DIGITS digits
    and converts to a finite number."""

    def parse(text: str):
        value = convert(text) if sum(char.isdigit() for char in text) <= MAX_JSON_DIGITS else None
        if value is None or not math.isfinite(value):
            raise _OutOfBounds(text if len(text) <= 24 else f"{text[:20]}...")
        return value

    return parse


def _refuse_constant(text: str):
    raise _OutOfBounds(text)  # NaN, Infinity, -Infinity: not JSON, though Python writes them.
