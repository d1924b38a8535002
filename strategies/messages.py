"""The strategies library's message builder: `problem` words a refused value in one line,
`<subject>=<value> <what>; <fix>.`, the value cut to a bounded length (`shown`, `cut`). Pure
Python. The library's field checks (`strategies.config`: `check_int`, `check_bounds`,
`coerce_enums`, `check_seconds`), which tfdist's core configs use too, and its TF_CONFIG errors
build their messages with it; tfdist's rooms reach `shown` and `cut` through `tfdist.errors`."""

import json

MAX_SHOWN = 80  # Characters of a value's repr in a message.
_NO_VALUE = object()


def cut(text: str, limit: int = MAX_SHOWN) -> str:
    """`text` cut to `limit` characters, " ..." marking the cut: how a message quotes a value or
    a line of someone else's."""
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def shown(value, limit: int = MAX_SHOWN) -> str:
    """`repr(value)` cut to `limit` characters."""
    return cut(repr(value), limit)


def shown_json(value) -> str:
    """Renders a received value (of a JSON document such as TF_CONFIG) for a message: JSON when
    possible, one line, truncated."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value).replace("\n", "\\n")
    return cut(text)


def problem(subject: str, what: str, fix: str, value=_NO_VALUE) -> str:
    """One message: `<subject>=<value> <what>; <fix>.` (the value cut by `shown`), or without a
    value `<subject>: <what>; <fix>.`."""
    said = f"{subject}: {what}" if value is _NO_VALUE else f"{subject}={shown(value)} {what}"
    return f"{said}; {fix.rstrip('.')}."
