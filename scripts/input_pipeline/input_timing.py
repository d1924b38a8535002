"""What one child of benchmark_input.py does: builds one of the pipelines it compares
(`PIPELINES`, each by `tfdist.input_pipelines.baseline_pipeline`) and times it here, in this
process: examples/s (`examples_per_sec`), images/s and images per CPU-second (`image_rates`), or
the trace time per example of each stage under TensorFlow's profiler (`trace`)."""

import time

from typing import Iterable

from tfdist import input_pipelines  # Selects tf-keras before TensorFlow is imported.
from tfdist.input_pipelines import BASELINE_STAGES as STAGES
from tfdist.input_pipelines import InputConfig

GLOBAL_BATCH_SIZE = 128
_WARMUP_BATCHES = 10
# With --dataset: the pipelines compared, in the order each round times them.
JPEG_PIPELINES = ("naive", "tfdist", "tfdist_device", "best_practice", "decode_only")
# The warm-up of a timed JPEG pipeline goes on past `_WARMUP_BATCHES` until this many seconds
# (or --seconds, if shorter) have passed: TF's autotuner (on in best_practice) and the shuffle
# buffers settle in that time.
_WARMUP_S = 3.0


def examples_per_sec(dataset: Iterable, num_examples: int) -> float:
    """Examples/s of iterating `dataset` (batches of `GLOBAL_BATCH_SIZE`) after a warm-up."""
    iterator = iter(dataset)
    for _ in range(_WARMUP_BATCHES):
        next(iterator)
    num_batches = num_examples // GLOBAL_BATCH_SIZE
    start = time.perf_counter()
    for _ in range(num_batches):
        next(iterator)
    return num_batches * GLOBAL_BATCH_SIZE / (time.perf_counter() - start)


def image_rates(dataset: Iterable, seconds: float, global_batch_size: int) -> dict:
    """Images/s and images per CPU-second of iterating `dataset` (batches of
    `global_batch_size`) for `seconds` after a warm-up. The CPU time is this process's, all its
    threads, over the timed seconds."""
    iterator = iter(dataset)
    start = time.perf_counter()
    for _ in range(_WARMUP_BATCHES):
        next(iterator)
    while time.perf_counter() - start < min(_WARMUP_S, seconds):
        next(iterator)
    num_batches, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        next(iterator)
        num_batches += 1
    wall_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    images = num_batches * global_batch_size
    return {
        "images": images,
        "wall_s": round(wall_s, 3),
        "cpu_s": round(cpu_s, 3),
        "images_per_s": images / wall_s,
        "images_per_cpu_s": images / cpu_s,
    }


# With --stages: tfdist's training pipeline cut after each of its steps, in order; the last
# step (augment and normalise on the host) makes it the whole `tfdist` pipeline. parse_only is
# tfdist's reading (parallel interleave, batched parse), no shuffle, decode or augmentation.
PIPELINES = {
    **{
        name: (lambda config, name=name: input_pipelines.baseline_pipeline(config, name))
        for name in JPEG_PIPELINES
    },
    "parse_only": lambda config: input_pipelines.baseline_pipeline(config, "parse", shuffle=False),
    **{
        f"stage_{name}": (lambda config, name=name: input_pipelines.baseline_pipeline(config, name))
        for name in STAGES
    },
}
_TRACE_BATCHES = 200
_TRACE_MIN_US = 0.1  # Stages under this many microseconds per example are left out.


def trace(config: InputConfig) -> dict:
    """tfdist's pipeline under the profiler: trace microseconds per example of each stage."""
    profile = input_pipelines.profile_stages(
        input_pipelines.baseline_pipeline(config, "tfdist"),
        num_elements=_TRACE_BATCHES,
        warmup_elements=_WARMUP_BATCHES,
    )
    examples = profile.num_elements * GLOBAL_BATCH_SIZE
    per_example = {
        stage: round(1e6 * seconds / examples, 2) for stage, seconds in profile.stage_s.items()
    }
    return {
        "examples": examples,
        "wall_us_per_example": round(1e6 * profile.wall_s / examples, 2),
        "stage_us_per_example": {
            stage: value for stage, value in per_example.items() if value >= _TRACE_MIN_US
        },
    }
