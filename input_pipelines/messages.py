"""What the input pipelines tell the person running the job: `InputConfigError`, a refused
option in one line, and `log`'s notices. Pure Python."""

import sys


class InputConfigError(ValueError):
    """An input option is invalid; the message is one line: field, value, fix."""


def log(line: str) -> None:
    """Input-pipeline notices for the person running the job, one line each on stderr."""
    print(f"tfdist input: {line}", file=sys.stderr, flush=True)
