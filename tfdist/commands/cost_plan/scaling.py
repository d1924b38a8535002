"""`tfdist plan --noise_scale_json` / `--critical_batch`: where more replicas stop paying.

The critical batch B_crit comes from the flag, or is estimated by the gradient noise scale
B_simple that `tfdist train --measure_noise_scale` wrote into its metrics JSON (the median of
its `noise_scale` history). With it each row of the plan gets the steps to the target relative
to one replica and the time to the target relative to one GPU, and one advice line says past
which node count a doubling of the GPUs cuts that time by less than `cost_model.PAYING_CUT`
(the model and the rule: `tfdist.cluster.cost_model`, docs/PLANNING.md).
"""

import dataclasses
import statistics

from tfdist.cluster import cost_model
from tfdist.commands.cost_plan import forecast
from tfdist.commands.cost_plan import json_input
from tfdist.runtime.config import ConfigError

MAX_NOISE_SCALE = 1e12  # Examples; Dota's, the largest McCandlish et al. measured, is ~1e7.
# The batch-scaling study's fitted knee over its median B_simple: 44 / 13
# (docs/results/batch_scaling.md).
STUDY_KNEE_OVER_B_SIMPLE = 3.4
# A history whose largest B_simple is this many times its smallest grew as training converged
# (26, 158, 3,756 over 3 epochs in the large-batch experiment): the median then depends on how
# far past its target the run went.
GREW = 10
_FIX = (
    "give a metrics JSON that `tfdist train --measure_noise_scale --metrics_json=FILE` "
    "wrote, or the critical batch as --critical_batch=N"
)


@dataclasses.dataclass(frozen=True)
class CriticalBatch:
    """The critical batch B_crit in examples, and where it came from: `b_simple` holds the
    median, min, max and last of the measured noise scale and the epochs it covers when it was
    estimated from --noise_scale_json; None when --critical_batch gave it."""

    examples: float
    b_simple: dict | None = None


def _noise_scales(report, path: str) -> list[float]:
    """The measured noise scales of a metrics JSON's history: the positive ones (an epoch where
    it was not measurable holds null, or a value of 0 or below).

    Raises:
      ConfigError: no such history, a value that is not a number up to MAX_NOISE_SCALE, or no
        positive one.
    """
    try:
        history = report["history"]["noise_scale"]
        if not isinstance(history, list):
            raise TypeError(history)
    except (KeyError, TypeError):
        raise ConfigError(
            f"noise_scale_json={path!r} has no noise_scale history; {_FIX}."
        ) from None
    numbers = [value for value in history if value is not None]
    if not all(
        isinstance(value, (int, float)) and not isinstance(value, bool) and value <= MAX_NOISE_SCALE
        for value in numbers
    ):
        raise ConfigError(
            f"noise_scale_json={path!r} has a noise_scale that is not a number of "
            f"at most {MAX_NOISE_SCALE:.0e} examples; {_FIX}."
        )
    measured = [float(value) for value in numbers if value > 0]
    if not measured:
        raise ConfigError(
            f"noise_scale_json={path!r} has no positive noise_scale (it was not "
            f"measurable in any epoch); {_FIX}."
        )
    return measured


def read_noise_scale(path: str) -> CriticalBatch:
    """B_crit estimated by the median B_simple of the metrics JSON at `path`, read as every
    plan input is (`json_input.read_json`).

    Raises:
      ConfigError: a file that cannot be read, is not JSON or holds no measured noise scale.
    """
    measured = _noise_scales(
        json_input.read_json("noise_scale_json", path, "a metrics JSON", _FIX), path
    )
    median = statistics.median(measured)
    return CriticalBatch(
        median,
        {
            "median": median,
            "min": min(measured),
            "max": max(measured),
            "last": measured[-1],
            "epochs": len(measured),
        },
    )


def from_request(request) -> CriticalBatch | None:
    """The critical batch `plan` was given (--critical_batch or --noise_scale_json), or None.

    Raises:
      ConfigError: both flags, or a file `read_noise_scale` refuses.
    """
    if request.noise_scale_json is not None and request.critical_batch is not None:
        raise ConfigError(
            f"noise_scale_json={request.noise_scale_json!r} and critical_batch="
            f"{request.critical_batch:g}: give one of them, not both."
        )
    if request.noise_scale_json is not None:
        return read_noise_scale(request.noise_scale_json)
    return None if request.critical_batch is None else CriticalBatch(request.critical_batch)


def _examples(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def with_steps(rows: list[dict], critical: CriticalBatch, per_replica_batch: int) -> list[dict]:
    """`rows` with the steps to the target relative to one replica (`steps_ratio`), the time to
    it relative to one GPU (`time_to_target_speedup`: the efficiency over the steps ratio) and
    the time saved per doubling of the GPUs since the row before, or the 1-GPU run
    (`time_cut_per_doubling`; None at 1 GPU)."""
    out, gpus, time = [], 1, 1.0
    for row in rows:
        steps = cost_model.steps_ratio(row["global_batch"], critical.examples, per_replica_batch)
        speedup = row["scaling_efficiency"] / steps
        cut = (
            cost_model.cut_per_doubling(time, 1 / speedup, gpus, row["gpus"])
            if row["gpus"] > gpus
            else None
        )
        out.append(
            {
                **row,
                "steps_ratio": steps,
                "time_to_target_speedup": speedup,
                "time_cut_per_doubling": cut,
            }
        )
        gpus, time = row["gpus"], 1 / speedup
    return out


def _share(value: float) -> str:
    """`value` as a whole percentage, with no minus sign on 0%."""
    text = f"{value:.0%}"
    return "0%" if text == "-0%" else text


COLUMNS: tuple[forecast.Column, ...] = (
    ("steps vs 1 GPU", lambda row: f"{row['steps_ratio']:.2f}"),
    ("time to target speed-up", lambda row: f"{row['time_to_target_speedup']:,.1f}"),
    (
        "time cut per doubling",
        lambda row: (
            "-" if row["time_cut_per_doubling"] is None else _share(row["time_cut_per_doubling"])
        ),
    ),
)


def describe(critical: CriticalBatch) -> str:
    """One line: the critical batch and where it came from."""
    if critical.b_simple is None:
        return (
            f"critical batch B_crit = {_examples(critical.examples)} examples (--critical_batch)."
        )
    simple = critical.b_simple
    grew = (
        f"; it grew {simple['max'] / simple['min']:,.0f}x during the run, as it does once "
        "the loss nears its floor: give a run that stops near the target you plan for"
        if simple["max"] > GREW * simple["min"]
        else ""
    )
    return (
        f"critical batch B_crit ~ {_examples(critical.examples)} examples, estimated by the "
        f"median gradient noise scale B_simple of {simple['epochs']} epoch(s) in "
        f"--noise_scale_json ({_examples(simple['min'])} to {_examples(simple['max'])}, "
        f"last {_examples(simple['last'])}{grew}); an estimate: B_simple tends to fall "
        f"below B_crit, and the batch-scaling study measured its knee "
        f"{STUDY_KNEE_OVER_B_SIMPLE}x above it (docs/PLANNING.md)."
    )


def _knee_place(critical: CriticalBatch, per_replica_batch: int, gpus_per_node: int) -> str:
    replicas = critical.examples / per_replica_batch
    if replicas < 1:
        return "one replica is already past it"
    if replicas < gpus_per_node:
        return f"about {replicas:.1f} replicas, inside one node of {gpus_per_node} GPUs"
    return f"about {replicas:,.1f} replicas, {replicas / gpus_per_node:,.1f} nodes"


def stops_paying(rows: list[dict]) -> tuple[dict | None, dict | None]:
    """(the last row whose doubling still paid, None for the 1-GPU run; the first that did not,
    None when every row paid) of rows `with_steps`."""
    last = None
    for row in rows:
        cut = row["time_cut_per_doubling"]
        if cut is not None and cut < cost_model.PAYING_CUT:
            return last, row
        last = row
    return last, None


def _where(row: dict | None) -> str:
    return "1 GPU" if row is None else f"{row['nodes']} node{'s' * (row['nodes'] > 1)}"


def advice(
    rows: list[dict], critical: CriticalBatch, per_replica_batch: int, gpus_per_node: int
) -> str:
    """One line: past which node count a doubling of the GPUs cuts the time to the target by
    less than `cost_model.PAYING_CUT`, and past which global batch the steps alone stop paying."""
    last, first = stops_paying(rows)
    steps = (
        f"for the steps alone from a global batch of about {_examples(critical.examples)} "
        f"(B_crit; at {per_replica_batch} examples per replica "
        f"{_knee_place(critical, per_replica_batch, gpus_per_node)})"
    )
    if first is None:
        return (
            f"scaling pays up to {_where(last)}: each doubling of the GPUs cuts the time to "
            f"the target by {cost_model.PAYING_CUT:.0%} or more "
            f"({last['time_to_target_speedup']:,.1f}x the 1-GPU run's there); it stops "
            f"paying {steps}."
        )
    return (
        f"scaling stops paying past {_where(last)}: from there a doubling of the GPUs cuts "
        f"the time to the target by under {cost_model.PAYING_CUT:.0%}, half of what perfect "
        f"scaling would ({_where(last)} to {_where(first)}: "
        f"{_share(first['time_cut_per_doubling'])} per doubling); {steps}."
    )


def summary(rows: list[dict], critical: CriticalBatch, per_replica_batch: int) -> dict:
    """The JSON report's `critical_batch`: B_crit, its source and where scaling stops paying."""
    last, first = stops_paying(rows)
    return {
        "b_crit": critical.examples,
        "source": "critical_batch" if critical.b_simple is None else "noise_scale_json",
        "b_simple": critical.b_simple,
        "knee_global_batch": critical.examples,
        "knee_replicas": critical.examples / per_replica_batch,
        "paying_cut": cost_model.PAYING_CUT,
        "pays_up_to": {
            "nodes": None if last is None else last["nodes"],
            "gpus": 1 if last is None else last["gpus"],
        },
        "stops_paying_at": None
        if first is None
        else {"nodes": first["nodes"], "gpus": first["gpus"]},
    }
