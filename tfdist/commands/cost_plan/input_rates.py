"""The host's input rates `tfdist plan` plans host cores from: examples/s one host core delivers
with tfdist's training pipeline (preprocessing on the host) and with only decoding and batching
(preprocessing on the device). `--host_examples_per_core` and `--decode_examples_per_core` give
them; `--input_benchmark` takes both from a `scripts/input_pipeline/benchmark_input.py --json`
file, which measures them as images per CPU-second on the user's own files; unset, the host is
not a limit and the table's host-core column stays empty."""

import dataclasses
import math

from tfdist.commands.cost_plan import json_input
from tfdist.runtime.config import ConfigError

RATES = ("host_examples_per_core", "decode_examples_per_core")
_MAX_RATE = 1e9  # The flags' bound: examples/s per core.


@dataclasses.dataclass(frozen=True)
class HostRates:
    """Each rate (None: not given) and where it came from ("flag", "input benchmark" or
    "default"), and the image side the benchmark measured at (None: not from one)."""

    rates: dict[str, float | None]
    sources: dict[str, str]
    image_size: int | None = None


def read(path: str) -> tuple[dict[str, float], int | None]:
    """The two rates and the image side of a `benchmark_input.py --json` file.

    Raises:
      ConfigError: a file that cannot be read, is not such a JSON, or holds a rate that is not a
        positive number.
    """
    fix = (
        "give a file `python scripts/input_pipeline/benchmark_input.py --json=FILE` wrote "
        "(with --dataset=tfrecord:GLOB for your own images)"
    )
    report = json_input.read_json("input_benchmark", path, "an input benchmark", fix)
    values = [report.get(name) for name in RATES] if isinstance(report, dict) else [None]
    if not all(
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 < value <= _MAX_RATE
        for value in values
    ):
        raise ConfigError(
            f"input_benchmark={path!r} has no positive {' and '.join(RATES)} "
            f"(at most {_MAX_RATE:.0e}); {fix}."
        )
    image_size = report.get("image_size")
    return dict(zip(RATES, map(float, values))), image_size if isinstance(image_size, int) else None


def from_request(request) -> HostRates:
    """The rates of `request`: a flag given on the command line, else the input benchmark's,
    else None."""
    from_file, image_size = read(request.input_benchmark) if request.input_benchmark else ({}, None)
    rates, sources = {}, {}
    for name in RATES:
        if name in request.given or name not in from_file:
            rates[name] = getattr(request, name)
            sources[name] = "flag" if name in request.given else "default"
        else:
            rates[name], sources[name] = from_file[name], "input benchmark"
    return HostRates(rates, sources, image_size if from_file else None)
