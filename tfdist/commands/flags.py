"""The command layer's flag machinery: which flags each `tfdist` command takes, parsing argv for
one command, `--help`, and config errors worded as flags.

Flags are defined where they are read, as `FlagHolder`s: the train flags in `train_flags` (users'
programs take them too, through `tfdist.define_flags`), every other command's in that command's
module, which only `tfdist` itself imports (`cli`): names such as --name, --port or --format
would collide with a user's own flags. Each module registers its command's flags here, in the
order `--help` lists them. Pure Python: TensorFlow is imported after parsing.
"""

import dataclasses
import enum
import math
import os
import re
import stat
import types
import typing
from typing import Callable

from absl import flags

from tfdist import errors

from tfdist.runtime.config import ConfigError
from tfdist.strategies.config import MAX_TIMEOUT_S
from tfdist.strategies.config import is_duration

FLAGS = flags.FLAGS
Holders = dict[str, flags.FlagHolder]  # A group of flags by name, in the order help lists them.
MAX_TASKS = 4096  # Tasks of one job in flags; `launch` also checks what this machine can run.
MAX_TEXT_BYTES = 1 << 20  # A flag file or a benchmark JSON: far more than either holds.
MAX_FLAGFILE_DEPTH = 32  # Flag files that name flag files, nested.
# The flags each command takes, registered by the modules that define them.
COMMAND_FLAGS: dict[str, Holders] = {}
# The flags made from a config's field (`define_field`): flag name -> (config class, field name).
FIELDS: dict[str, tuple[type, str]] = {}
_PARSING = {"command": "train"}  # What `parse` parses for; a user's program parses train flags.

MAX_NUMBER_DIGITS = 19  # Of a number flag: more than any count or size tfdist takes.
_INTEGER_TEXT = re.compile(rf"[-+]?[0-9]{{1,{MAX_NUMBER_DIGITS}}}", re.ASCII)
_FLOAT_TEXT = re.compile(
    rf"[-+]?([0-9]{{1,{MAX_NUMBER_DIGITS}}}(\.[0-9]{{0,{MAX_NUMBER_DIGITS}}})?"
    rf"|\.[0-9]{{1,{MAX_NUMBER_DIGITS}}})([eE][-+]?[0-9]{{1,3}})?",
    re.ASCII,
)

# The helpers below define flags for other modules: those are the key flags of their callers.
flags.disclaim_key_flags()


UsageError = errors.UsageError  # A flag a command does not take, a stray argument, ...


def group(*holders: flags.FlagHolder) -> Holders:
    """`holders` by flag name, in order."""
    return {holder.name: holder for holder in holders}


def register(command: str, *groups: Holders) -> None:
    """Records that `command` takes the flags of `groups`, in that order."""
    COMMAND_FLAGS[command] = {
        name: holder for holders in groups for name, holder in holders.items()
    }


class _DecimalIntegerParser(flags.IntegerParser):
    """absl's integer parser, taking plain decimal text only: ASCII digits (not `٣٢`, `0x8`,
    `1_000` or ` 8`, which Python's int() takes), at most MAX_NUMBER_DIGITS of them, checked
    before conversion."""

    def convert(self, argument):
        if isinstance(argument, str) and not _INTEGER_TEXT.fullmatch(argument):
            raise ValueError(
                f"{printable(argument)!r} is not a decimal integer (ASCII digits, "
                f"at most {MAX_NUMBER_DIGITS})"
            )
        return super().convert(argument)


class _DecimalFloatParser(flags.FloatParser):
    """absl's float parser, taking plain decimal text only (ASCII digits, a point, an exponent
    of at most 3 digits; not `nan`, `inf` or `٠.1`), checked before conversion."""

    def convert(self, argument):
        if isinstance(argument, str) and not _FLOAT_TEXT.fullmatch(argument):
            raise ValueError(
                f"{printable(argument)!r} is not a decimal number (ASCII digits, e.g. 0.1 or 1e-3)"
            )
        value = super().convert(argument)
        if not math.isfinite(value):
            raise ValueError(f"{argument} is not a finite number")
        return value


def define_integer(
    name: str,
    default: int | None,
    text: str,
    *,
    lower_bound: int | None = None,
    upper_bound: int | None = None,
) -> flags.FlagHolder:
    """An integer flag of decimal ASCII digits (`_DecimalIntegerParser`), within the bounds."""
    return _define_number(_DecimalIntegerParser(lower_bound, upper_bound), name, default, text)


def define_float(
    name: str,
    default: float | None,
    text: str,
    *,
    lower_bound: float | None = None,
    upper_bound: float | None = None,
) -> flags.FlagHolder:
    """A finite float flag of decimal ASCII text (`_DecimalFloatParser`), within the bounds."""
    return _define_number(_DecimalFloatParser(lower_bound, upper_bound), name, default, text)


def _define_number(parser: flags.ArgumentParser, name: str, default, text: str) -> flags.FlagHolder:
    holder = flags.DEFINE(parser, name, default, text, serializer=flags.ArgumentSerializer())
    flags.register_validator(  # A value set in code, not parsed (a default, a test's).
        holder,
        lambda value: (
            value is None or (math.isfinite(value) and not parser.is_outside_bounds(value))
        ),
        message=f"must be a finite {parser.syntactic_help.removeprefix('a ')}",
    )
    return holder


def define_duration(name: str, default: float | None, text: str) -> flags.FlagHolder:
    """A float flag of seconds, above 0 and at most MAX_TIMEOUT_S."""
    holder = define_float(name, default, text)
    flags.register_validator(
        holder,
        lambda value: value is None or is_duration(value),
        message=f"must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:.0f} (30 days)",
    )
    return holder


def define_measure(name: str, text: str, lowest: float, highest: float) -> flags.FlagHolder:
    """A float flag of a physical quantity, unset by default, in [lowest, highest]."""
    holder = define_float(name, None, text)
    flags.register_validator(
        holder,
        lambda value: value is None or lowest <= value <= highest,
        message=f"must lie in [{lowest:g}, {highest:,.0f}]",
    )
    return holder


def define_enum(name: str, default, enum_type, text: str) -> flags.FlagHolder:
    """A flag whose value is a member of the string enum `enum_type`, written as its value
    (`--strategy=mirrored`)."""
    return flags.DEFINE_enum_class(name, default, enum_type, text, case_sensitive=False)


def define_field(
    config: type,
    field: str,
    *,
    name: str | None = None,
    help: str | None = None,
    define: Callable[[str, object, str], flags.FlagHolder] | None = None,
) -> flags.FlagHolder:
    """The flag of the dataclass `config`'s `field` (named `name`, else as the field): the
    field's default, help (unless `help` is given) and bounds (`fields.option`), and
    the parse its type calls for: an enum's members, a bool, an integer within the bounds, a
    float, a string, a list (a tuple field), the text form of a type that `parse`s it;
    `define(name, default, help)` for another."""
    spec = next(each for each in dataclasses.fields(config) if each.name == field)
    kind = _without_none(spec.type)
    name, default, text = name or field, spec.default, help or spec.metadata["help"]
    if define is not None:
        holder = define(name, default, text)
    elif isinstance(kind, type) and issubclass(kind, enum.Enum):
        holder = define_enum(name, default, kind, text)
    elif kind is int:
        lowest, highest = spec.metadata["bounds"]
        holder = define_integer(name, default, text, lower_bound=lowest, upper_bound=highest)
    elif kind is tuple:
        holder = flags.DEFINE_list(name, list(default), text)
    elif kind in (bool, float, str):
        holder = {bool: flags.DEFINE_bool, float: define_float, str: flags.DEFINE_string}[kind](
            name, default, text
        )
    elif hasattr(kind, "parse"):
        holder = flags.DEFINE_string(name, str(default), text)
    else:
        raise TypeError(f"{config.__name__}.{field}: no flag for {spec.type}; pass `define`.")
    FIELDS[name] = (config, field)
    return holder


def from_fields(config: type, *names: str | flags.FlagHolder) -> Holders:
    """A group of flags in order: those of `config`'s fields `names` (`define_field`), and
    flags defined otherwise, given as their holders."""
    return group(*(define_field(config, name) if isinstance(name, str) else name for name in names))


def _without_none(annotation):
    """`int` of `int | None`; `tuple` of `tuple[str, ...]`; else `annotation`."""
    if isinstance(annotation, types.UnionType):
        (annotation,) = (each for each in typing.get_args(annotation) if each is not type(None))
    return typing.get_origin(annotation) or annotation


def counts(text: list[str], highest: int) -> list[int] | None:
    """`text` (a list flag's value) as sorted distinct integers from 1 to `highest`; None when
    one is not such an integer."""
    if not text or not all(
        count.isascii() and count.isdigit() and 0 < int(count) <= highest for count in text
    ):
        return None
    return sorted({int(count) for count in text})


def read_text(path: str) -> str:
    """The UTF-8 text of the regular file `path`, of at most MAX_TEXT_BYTES.

    Raises:
      ValueError: why not, in a few words (a FIFO or device, which would hang or never end, is
        refused before it is opened).
    """
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise ValueError(f"it is {kind}")
        with open(path, "rb") as file:
            data = file.read(MAX_TEXT_BYTES + 1)
    except OSError as error:
        raise ValueError(f"it cannot be read: {error.strerror}") from None
    if len(data) > MAX_TEXT_BYTES:
        raise ValueError(f"it is larger than {MAX_TEXT_BYTES >> 20} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"it is not UTF-8 text (byte {error.start})") from None
    if "\0" in text:
        raise ValueError("it is binary, not text")
    return text


def _flagfile_names(args) -> list[str]:
    """The files `--flagfile=F` (or `--flagfile F`) in `args` name, before any `--`."""
    names, args = [], list(args)
    for index, arg in enumerate(args):
        if arg == "--":
            break
        name, equals, value = arg.lstrip("-").partition("=")
        if name == "flagfile" and arg.startswith("-"):
            if equals:
                names.append(os.path.expanduser(value.strip()))
            elif index + 1 < len(args):
                names.append(os.path.expanduser(args[index + 1]))
    return names


def check_flagfiles(argv: list[str]) -> None:
    """Reads each flag file `argv` names, and those they name, as absl would, so one that is
    binary, endless (a FIFO, a device) or nested past MAX_FLAGFILE_DEPTH fails in one line.

    Raises:
      UsageError: naming the flag file.
    """
    pending = [(name, 1) for name in reversed(_flagfile_names(argv[1:]))]
    seen = set()
    while pending:
        path, depth = pending.pop()
        if depth > MAX_FLAGFILE_DEPTH:
            raise UsageError(
                f"--flagfile={path!r} is nested {depth} flag files deep, past "
                f"{MAX_FLAGFILE_DEPTH}; name the flag files from fewer levels."
            )
        if path in seen or not path:
            continue
        seen.add(path)
        try:
            text = read_text(path)
        except ValueError as error:
            raise UsageError(
                f"--flagfile={path!r}: {error}; pass a text file of --name=value lines."
            ) from None
        lines = [line.strip() for line in text.splitlines()]
        pending.extend(
            (name, depth + 1)
            for name in reversed(
                _flagfile_names(line for line in lines if not line.startswith(("#", "//")))
            )
        )


def parsing_for() -> str:
    """The command whose flags are being parsed (train in a user's program)."""
    return _PARSING["command"]


def parse(
    command: str, argv: list[str], *, arguments: bool = False, takes_a_command: bool = False
) -> list[str]:
    """Parses `argv` (program name first) into FLAGS for `command`; returns the positional
    arguments, which only a command that takes `arguments` may have (one that
    `takes_a_command` takes it after `--`, and says so).

    Raises:
      flags.Error: a malformed or out-of-range value, an unknown flag, a rule between flags.
      UsageError: a flag of another command, a stray positional argument, or a flag file
        that cannot be read as one.
    """
    check_flagfiles(argv)
    FLAGS.unparse_flags()
    _PARSING["command"] = command
    try:
        remaining = FLAGS(argv)
    finally:
        _PARSING["command"] = "train"
    if len(remaining) > 1 and not arguments:
        if takes_a_command:
            raise UsageError(
                f"unexpected argument {remaining[1]!r}; put the command to run "
                f"after `--`: tfdist {command} [--flag=value ...] -- "
                f"{' '.join(remaining[1:3])} ..."
            )
        raise UsageError(f"unexpected argument {remaining[1]!r}; flags are written --name=value.")
    every = {name: holder for holders in COMMAND_FLAGS.values() for name, holder in holders.items()}
    for name, holder in every.items():
        if holder.present and name not in COMMAND_FLAGS[command]:
            raise UsageError(
                f"--{name} is not a flag of `tfdist {command}`; see `tfdist {command} --help`."
            )
    return remaining[1:]


def require_parsed(caller: str) -> None:
    """Raises ConfigError when argv is not parsed yet, so `caller` cannot read the flags."""
    if not FLAGS.is_parsed():
        raise ConfigError(
            f"{caller}: the flags are not parsed yet; call it in the main that "
            "tfdist.run(main) runs (after tfdist.define_flags()), or build a "
            "tfdist.RunConfig(...) yourself."
        )


def given(holders: Holders) -> list[str]:
    """The flags of `holders` set on the command line, as arguments (`--epochs=2`)."""
    return [holder.serialize() for holder in holders.values() if holder.present]


def help_text(command: str) -> str:
    """The help of `command`'s flags, one block per flag."""
    blocks = []
    for name in COMMAND_FLAGS[command]:
        flag = FLAGS[name]
        default = "unset" if flag.default is None else flag.default_as_str
        blocks.append(f"  --{name}: {flag.help}\n    (default: {default})")
    return "\n".join(blocks)


def as_flags(message: str) -> str:
    """A config error worded for the command line: each `field=value` that a tfdist flag sets
    becomes `--field=value`. Configs and pipelines name fields, as a library's caller writes
    them; the CLI and users' absl programs print their errors through this (`printable`)."""
    names = sorted(
        {name for holders in COMMAND_FLAGS.values() for name in holders}, key=len, reverse=True
    )
    return re.sub(rf"(?<![\w.-])({'|'.join(map(re.escape, names))})=", r"--\1=", printable(message))


def printable(text: str) -> str:
    """`text` with its control characters (a terminal's escape sequences, line breaks) written
    as Python escapes, so a value echoed in an error is one line that does nothing to the
    terminal."""
    return _CONTROL.sub(lambda match: match[0].encode("unicode_escape").decode("ascii"), text)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
