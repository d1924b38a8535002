"""Reading TensorFlow's profiler trace into time per tf.data stage and op."""

import tempfile

import pytest
import tensorflow as tf

from tfdist import input_pipelines
import tfdist
from tfdist.input_pipelines import stage_profile


@pytest.mark.parametrize(
    "event_name, stage",
    [
        ("Iterator::Root::Prefetch::ParallelMapV2::BatchV2", "BatchV2"),
        ("Iterator::Root::Prefetch::ParallelInterleaveV4[3]::FlatMap[0]::TFRecord", "TFRecord"),
        ("Iterator::Root::Prefetch::ParallelInterleaveV4[3]", "ParallelInterleaveV4"),
        ("ParseExample/ParseExampleV2:ParseExampleV2", "ParseExampleV2"),
        ("DecodeRaw:DecodeRaw", "DecodeRaw"),
        (" Sub", "Sub"),
        ("EagerLocalExecute: IteratorGetNext", "IteratorGetNext"),
        ("ExecutorState::Process", "ExecutorState::Process"),
    ],
)
def test_an_event_belongs_to_its_transformation_or_op_type(event_name, stage):
    assert stage_profile.stage_name(event_name) == stage


def test_exclusive_time_is_the_duration_less_nested_events_and_xla_takes_its_children():
    events = [  # (start, end, name) in picoseconds, one thread.
        (0, 100, "Iterator::Root::Prefetch::BatchV2"),
        (10, 40, "Iterator::Root::Prefetch::BatchV2::Shuffle"),
        (15, 25, "Iterator::Root::Prefetch::BatchV2::Shuffle::TFRecord"),
        (50, 90, "CpuExecutable::ExecuteAsyncOnStream"),
        (55, 80, "transpose_copy_fusion"),
        (200, 230, "Decode:DecodeRaw"),
    ]
    totals, counts = stage_profile._exclusive_times(events)  # pylint: disable=protected-access
    assert totals == {
        "BatchV2": 100 - 30 - 40,
        "Shuffle": 30 - 10,
        "TFRecord": 10,
        "XLA": 40,
        "DecodeRaw": 30,
    }
    assert counts == {"BatchV2": 1, "Shuffle": 1, "TFRecord": 1, "XLA": 2, "DecodeRaw": 1}


def test_a_pipeline_profile_names_its_transformations_and_ops():
    dataset = (
        tf.data.Dataset.range(1_000_000)
        .batch(256)
        .map(lambda values: tf.strings.as_string(values), num_parallel_calls=2)
        .prefetch(2)
    )
    profile = tfdist.profile_stages(dataset, num_elements=50, warmup_elements=2)
    assert profile.num_elements == 50 and profile.wall_s > 0
    assert {"ParallelMapV2", "BatchV2", "AsString"} <= set(profile.stage_s)
    assert profile.per_element_us("AsString") > 0
    assert profile.stage_calls["BatchV2"] > 0  # Some batches were prefetched before the trace.
    assert list(profile.stage_s.values()) == sorted(profile.stage_s.values(), reverse=True)


def test_reading_a_directory_with_no_trace_says_so():
    with tempfile.TemporaryDirectory() as empty:
        with pytest.raises(FileNotFoundError, match="no \\*.xplane.pb under .*profiler started"):
            input_pipelines.read_trace(empty)
