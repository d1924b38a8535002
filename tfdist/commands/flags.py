"""The command layer's flag machinery: which flags each `tfdist` command takes, parsing argv for
one command, `--help`, and config errors worded as flags.

Flags are defined where they are read, as `FlagHolder`s: the train flags in `train_flags` (users'
programs take them too, through `tfdist.define_flags`), every other command's in that command's
module, which only `tfdist` itself imports (`cli`): names such as --name, --port or --format
would collide with a user's own flags. Each module registers its command's flags here, in the
order `--help` lists them. Pure Python: TensorFlow is imported after parsing.
"""

import math
import re

from absl import flags

from tfdist.runtime.config import ConfigError
from tfdist.strategies.config import MAX_TIMEOUT_S
from tfdist.strategies.config import is_duration

FLAGS = flags.FLAGS
Holders = dict[str, flags.FlagHolder]  # A group of flags by name, in the order help lists them.
MAX_TASKS = 4096  # Tasks of one job in flags; `launch` also checks what this machine can run.
# The flags each command takes, registered by the modules that define them.
COMMAND_FLAGS: dict[str, Holders] = {}
_PARSING = {"command": "train"}  # What `parse` parses for; a user's program parses train flags.

# The helpers below define flags for other modules: those are the key flags of their callers.
flags.disclaim_key_flags()


class UsageError(ValueError):
    """A flag was given to a command that does not take it, or a stray argument."""


def group(*holders: flags.FlagHolder) -> Holders:
    """`holders` by flag name, in order."""
    return {holder.name: holder for holder in holders}


def register(command: str, *groups: Holders) -> None:
    """Records that `command` takes the flags of `groups`, in that order."""
    COMMAND_FLAGS[command] = {name: holder for holders in groups
                              for name, holder in holders.items()}


def _is_finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)


def define_float(name: str, default: float | None, text: str) -> flags.FlagHolder:
    """A float flag that must be finite: NaN passes absl's bounds (every comparison with it is
    false)."""
    holder = flags.DEFINE_float(name, default, text)
    flags.register_validator(holder, _is_finite, message="must be a finite number")
    return holder


def define_duration(name: str, default: float | None, text: str) -> flags.FlagHolder:
    """A float flag of seconds, above 0 and at most MAX_TIMEOUT_S."""
    holder = define_float(name, default, text)
    flags.register_validator(holder, lambda value: value is None or is_duration(value),
                             message=f"must be a number of seconds above 0 and at most "
                                     f"{MAX_TIMEOUT_S:.0f} (30 days)")
    return holder


def define_measure(name: str, text: str, lowest: float, highest: float) -> flags.FlagHolder:
    """A float flag of a physical quantity, unset by default, in [lowest, highest]."""
    holder = define_float(name, None, text)
    flags.register_validator(holder, lambda value: value is None or lowest <= value <= highest,
                             message=f"must lie in [{lowest:g}, {highest:,.0f}]")
    return holder


def define_enum(name: str, default, enum_type, text: str) -> flags.FlagHolder:
    """A flag whose value is a member of the string enum `enum_type`, written as its value
    (`--strategy=mirrored`)."""
    return flags.DEFINE_enum_class(name, default, enum_type, text, case_sensitive=False)


def counts(text: list[str], highest: int) -> list[int] | None:
    """`text` (a list flag's value) as sorted distinct integers from 1 to `highest`; None when
    one is not such an integer."""
    if not text or not all(count.isdigit() and 0 < int(count) <= highest for count in text):
        return None
    return sorted({int(count) for count in text})


def parsing_for() -> str:
    """The command whose flags are being parsed (train in a user's program)."""
    return _PARSING["command"]


def parse(command: str, argv: list[str], *, arguments: bool = False) -> list[str]:
    """Parses `argv` (program name first) into FLAGS for `command`; returns the positional
    arguments, which only a command that takes `arguments` may have.

    Raises:
      flags.Error: a malformed or out-of-range value, an unknown flag, a rule between flags.
      UsageError: a flag of another command, or a stray positional argument.
    """
    FLAGS.unparse_flags()
    _PARSING["command"] = command
    try:
        remaining = FLAGS(argv)
    finally:
        _PARSING["command"] = "train"
    if len(remaining) > 1 and not arguments:
        raise UsageError(f"unexpected argument {remaining[1]!r}; flags are written --name=value.")
    every = {name: holder for holders in COMMAND_FLAGS.values()
             for name, holder in holders.items()}
    for name, holder in every.items():
        if holder.present and name not in COMMAND_FLAGS[command]:
            raise UsageError(f"--{name} is not a flag of `tfdist {command}`; see "
                             f"`tfdist {command} --help`.")
    return remaining[1:]


def require_parsed(caller: str) -> None:
    """Raises ConfigError when argv is not parsed yet, so `caller` cannot read the flags."""
    if not FLAGS.is_parsed():
        raise ConfigError(f"{caller}: the flags are not parsed yet; call it in the main that "
                          "tfdist.run(main) runs (after tfdist.define_flags()), or build a "
                          "tfdist.RunConfig(...) yourself.")


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
    them; the CLI and users' absl programs print their errors through this."""
    names = sorted({name for holders in COMMAND_FLAGS.values() for name in holders},
                   key=len, reverse=True)
    return re.sub(rf"(?<![\w.-])({'|'.join(map(re.escape, names))})=", r"--\1=", message)
