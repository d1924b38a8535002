"""Ring all-reduce between processes in overlapping chunks of at most 4 MiB.

TensorFlow's CollectiveReduceV2 takes `max_subdivs_per_device`, which tf.distribute never sets
(-1: one subdivision). A ring of 2 processes then cuts each pack into 2 chunks and moves them
one at a time over gRPC. With up to 8 subdivisions per device the ring cuts a pack into chunks
of at most 4 MiB (`kMaxChunkSizeBytes` in TF's ring_alg.cc) and starts all their transfers at
once; TF's DTensor sets 16. Measured between 2 processes on 127.0.0.1, 64 MiB
(scripts/cluster/benchmark_cluster.py, docs/PERFORMANCE.md "Cluster"): float32 8.2% of loopback
TCP with -1, 17.3% with 4, 16.6% with 8, 17.4% with 32; bfloat16 on the wire 22.6%, 35.8%, 37.5%
and 29.3%.

No public API sets it, so `apply` wraps `collective_ops.all_reduce_v2`, which tf.distribute's
collective launcher calls, once per process; a caller that passes its own value keeps it. The
wrapper reads `MAX_SUBDIVS_PER_DEVICE` when an all-reduce is traced.
"""

import functools

MAX_SUBDIVS_PER_DEVICE = 8


def apply() -> None:
    """Makes every later all-reduce without its own `max_subdivs_per_device` use ours."""
    # pylint: disable=import-outside-toplevel
    from tensorflow.python.ops import collective_ops  # No public equivalent.

    original = collective_ops.all_reduce_v2
    if getattr(original, "tfdist_ring_chunks", False):
        return

    @functools.wraps(original)
    def all_reduce_v2(*args, **kwargs):
        kwargs.setdefault("max_subdivs_per_device", MAX_SUBDIVS_PER_DEVICE)
        return original(*args, **kwargs)

    all_reduce_v2.tfdist_ring_chunks = True
    collective_ops.all_reduce_v2 = all_reduce_v2
