"""Where a tf.data pipeline spends its time, read from TensorFlow's profiler trace.

`profile_stages` iterates a dataset under `tf.profiler.experimental` and reads the trace it
writes (an XSpace protobuf, parsed with the `xplane_pb2` that TensorFlow ships, so no
TensorBoard plugin is needed). tf.data records one trace event per iterator `GetNext`
("Iterator::Root::Prefetch::ParallelMapV2::BatchV2::...") and the executor one per op it runs
inside a map function. On each thread, events nest; an event's exclusive time is its duration
less that of the events nested in it. Those exclusive times, summed per stage, say what each
transformation and each op costs:

  stage     the last part of an iterator event's name without its index ("TFRecord",
            "ShuffleAndRepeat", "BatchV2"), or the type of an op run in a map function
            ("ParseExampleV2", "DecodeRaw"); everything an XLA-compiled function runs is "XLA".

A trace event lasts from its start to its end in wall time, so an exclusive time includes the
time its thread waited (a consumer blocked on a parallel stage's threads) or was descheduled
(more threads than cores). Read the figures as the time each stage's events took, not as CPU.
"""

import collections
import dataclasses
import glob
import os
import re
import tempfile
import time

import tensorflow as tf

# TensorFlow's generated protobuf module of the trace format: no public API exposes it. Checked
# with TF 2.21 (the pinned version); tests/input_pipelines/test_stage_profile.py fails if it moves.
from tensorflow.tsl.profiler.protobuf import xplane_pb2

_HOST_PLANE = "/host:CPU"
_XLA_RUN = "CpuExecutable::ExecuteAsyncOnStream"
_XLA = "XLA"
_INDEX = re.compile(r"\[\d+\]$")


@dataclasses.dataclass(frozen=True)
class StageProfile:
    """Exclusive trace time per stage over `num_elements` elements of the profiled dataset.

    Attributes:
      num_elements: elements (batches) taken from the dataset while tracing.
      wall_s: seconds those elements took.
      stage_s: stage name -> summed exclusive seconds of its events, largest first.
      stage_calls: stage name -> number of its events.
    """

    num_elements: int
    wall_s: float
    stage_s: dict[str, float]
    stage_calls: dict[str, int]

    def per_element_us(self, stage: str) -> float:
        """Microseconds of `stage` per element taken from the dataset."""
        return 1e6 * self.stage_s[stage] / self.num_elements


def stage_name(event_name: str) -> str:
    """The stage an event belongs to (see the module docstring)."""
    if event_name.startswith("Iterator::"):
        return _INDEX.sub("", event_name.rsplit("::", 1)[-1])
    if ":" in event_name and "::" not in event_name:  # "scope/Name:OpType", "Eager...: Op".
        return event_name.rsplit(":", 1)[-1].strip()
    return event_name.strip()


def _exclusive_times(
    events: list[tuple[int, int, str]],
) -> tuple[collections.Counter, collections.Counter]:
    """Exclusive picoseconds and event counts per stage of one thread's (start, end, name)
    events; events run by an XLA executable count to "XLA"."""
    totals, counts = collections.Counter(), collections.Counter()
    stack = []  # [end, stage, picoseconds of nested events, duration], outermost first.

    def close() -> None:
        _, stage, nested, duration = stack.pop()
        totals[stage] += duration - nested
        if stack:
            stack[-1][2] += duration

    for start, end, name in sorted(events, key=lambda event: (event[0], -event[1])):
        while stack and stack[-1][0] <= start:
            close()
        inside_xla = any(frame[1] == _XLA for frame in stack)
        stage = _XLA if inside_xla or name == _XLA_RUN else stage_name(name)
        counts[stage] += 1
        stack.append([end, stage, 0, end - start])
    while stack:
        close()
    return totals, counts


def read_xspace(path: str) -> tuple[dict[str, float], dict[str, int]]:
    """Exclusive seconds and event counts per stage of the host plane of a `*.xplane.pb`."""
    space = xplane_pb2.XSpace()
    with open(path, "rb") as trace_file:
        space.ParseFromString(trace_file.read())
    seconds, calls = collections.Counter(), collections.Counter()
    for plane in space.planes:
        if plane.name != _HOST_PLANE:
            continue
        names = {key: metadata.name for key, metadata in plane.event_metadata.items()}
        for line in plane.lines:
            picoseconds, counts = _exclusive_times(
                [
                    (event.offset_ps, event.offset_ps + event.duration_ps, names[event.metadata_id])
                    for event in line.events
                ]
            )
            seconds.update({stage: time / 1e12 for stage, time in picoseconds.items()})
            calls.update(counts)
    return dict(seconds.most_common()), dict(calls)


def read_trace(logdir: str) -> tuple[dict[str, float], dict[str, int]]:
    """`read_xspace` of the newest trace that `tf.profiler.experimental` wrote under `logdir`."""
    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise FileNotFoundError(f"no *.xplane.pb under {logdir}: was the profiler started there?")
    return read_xspace(max(paths, key=os.path.getmtime))


def profile_stages(
    dataset: tf.data.Dataset,
    *,
    num_elements: int,
    warmup_elements: int = 10,
    logdir: str | None = None,
) -> StageProfile:
    """Takes `warmup_elements` from `dataset`, then traces taking `num_elements` more; returns
    where that time went. The trace is kept under `logdir` when given (TensorBoard's profile
    plugin reads it), else deleted."""
    iterator = iter(dataset)
    for _ in range(warmup_elements):
        next(iterator)
    with tempfile.TemporaryDirectory() as scratch:
        trace_dir = logdir or scratch
        tf.profiler.experimental.start(trace_dir)
        start = time.perf_counter()
        for _ in range(num_elements):
            next(iterator)
        wall_s = time.perf_counter() - start
        tf.profiler.experimental.stop()
        seconds, calls = read_trace(trace_dir)
    return StageProfile(
        num_elements=num_elements, wall_s=wall_s, stage_s=seconds, stage_calls=calls
    )
