"""The one message builder: every error of tfdist is one line, `<subject>=<value> <what>; <fix>.`,
its values cut to a bounded length. Pure Python, imported by the libraries' modules and, through
`strategies.config` and `tfdist.errors`, by every room of tfdist."""

import json

MAX_SHOWN = 80  # Characters of a value's repr in a message.
_NO_VALUE = object()


def cut(text: str, limit: int = MAX_SHOWN) -> str:
    """`text` cut to `limit` characters, " ..." marking the cut: how every message of tfdist
    quotes a value or a line of someone else's."""
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
