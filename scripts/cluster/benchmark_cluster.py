"""Measures multi-worker training on 127.0.0.1: steps/s of 2 workers against 1, and all-reduce
throughput between 2 processes against raw loopback TCP, all in one run.

  raw TCP     one process streams a 64 MiB buffer to another over a loopback socket; the
              ceiling for moving gradient bytes between two processes on this machine.
  all-reduce  2 processes, each a MultiWorkerMirroredStrategy worker (ring collectives over
              gRPC), sum 64 MiB of float32 gradients (and 4 KiB, whose time is about the
              latency of the ring's messages): as one tensor or as 64 tensors of 1 MiB
              with several pack sizes (CommunicationOptions.bytes_per_pack), and compressed
              for the wire (cast to bfloat16 or float16 before the all-reduce, back after, as
              Horovod's fp16 compression); in tfdist's chunks of at most 4 MiB
              (strategies.ring_chunks) and, for comparison, in TF's default one subdivision.
              Throughput = the float32 gradient bytes / time per all-reduce; a 2-worker ring
              sends and receives about that many bytes per worker.
  training    `tfdist train --strategy=multi_worker_mirrored` on the built-in dataset, one
              worker against `tfdist launch --num_workers=2` (plain, with bfloat16 all-reduce,
              with 16 MiB packs), same global batch of 128; examples/s of the epochs after the
              first.

Each all-reduce case runs WARMUP times, then REPS timed times; the median is reported. Prints
a table, and with --json=PATH writes every figure.

    python scripts/cluster/benchmark_cluster.py [--json=PATH] [--steps_per_epoch=N]
        [--skip_training]
"""

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from tfdist.runtime.output_files import write_json

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # train_runs
from train_runs import train_and_read_metrics  # noqa: E402

MIB = 1024 * 1024
PAYLOAD_BYTES = 64 * MIB
WARMUP = 2
REPS = 5
_TIMEOUT_S = 600
# (name, float32 bytes, number of tensors, wire dtype, bytes_per_pack (0 lets TF choose),
# max_subdivs_per_device (None: tfdist's, strategies.ring_chunks; -1: TF's one subdivision))
ALLREDUCE_CASES = (
    ("1 x 64 MiB float32", PAYLOAD_BYTES, 1, "float32", 0, None),
    ("1 x 64 MiB float32, TF's 1 subdivision", PAYLOAD_BYTES, 1, "float32", 0, -1),
    ("1 x 64 MiB bfloat16 on the wire", PAYLOAD_BYTES, 1, "bfloat16", 0, None),
    ("1 x 64 MiB bfloat16, TF's 1 subdivision", PAYLOAD_BYTES, 1, "bfloat16", 0, -1),
    ("1 x 64 MiB float16 on the wire", PAYLOAD_BYTES, 1, "float16", 0, None),
    ("64 x 1 MiB float32, pack auto", PAYLOAD_BYTES, 64, "float32", 0, None),
    ("64 x 1 MiB float32, pack 4 MiB", PAYLOAD_BYTES, 64, "float32", 4 * MIB, None),
    ("64 x 1 MiB float32, pack 16 MiB", PAYLOAD_BYTES, 64, "float32", 16 * MIB, None),
    ("64 x 1 MiB float32, pack 64 MiB", PAYLOAD_BYTES, 64, "float32", 64 * MIB, None),
    ("64 x 1 MiB bfloat16, pack 16 MiB", PAYLOAD_BYTES, 64, "bfloat16", 16 * MIB, None),
    ("1 x 4 KiB float32 (latency)", 4096, 1, "float32", 0, None),
)

GLOBAL_BATCH_SIZE = 128  # tfdist train's default.
# (name, workers, extra `tfdist train` flags); the first is the baseline.
TRAINING_CASES = (
    ("1 worker", 1, ()),
    ("2 workers", 2, ()),
    ("2 workers, bfloat16 all-reduce", 2, ("--allreduce_dtype=bfloat16",)),
    ("2 workers, 16 MiB packs", 2, ("--allreduce_pack_mib=16",)),
)


def _send(port: int, num_bytes: int, reps: int) -> None:
    payload = memoryview(bytes(num_bytes))
    with socket.create_connection(("127.0.0.1", port)) as connection:
        for _ in range(reps):
            connection.sendall(payload)
        connection.recv(1)  # Wait until the receiver has everything.


def tcp_bytes_per_sec(num_bytes: int = PAYLOAD_BYTES, reps: int = REPS + WARMUP) -> float:
    """Loopback TCP throughput from one process to another, median over `reps` buffers."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = multiprocessing.get_context("fork").Process(
            target=_send, args=(server.getsockname()[1], num_bytes, reps)
        )
        sender.start()
        connection, _ = server.accept()
        buffer = memoryview(bytearray(num_bytes))
        times = []
        with connection:
            for _ in range(reps):
                start, received = time.perf_counter(), 0
                while received < num_bytes:
                    received += connection.recv_into(buffer[received:])
                times.append(time.perf_counter() - start)
            connection.sendall(b"x")
        sender.join(timeout=60)
    return num_bytes / statistics.median(times[WARMUP:])


def _allreduce_worker(output_path: str, names: list[str]) -> None:
    """One worker of the all-reduce benchmark (TF_CONFIG set by the parent): the cases named
    `names`; worker 0 writes {case: seconds per all-reduce} to `output_path`."""
    import tfdist  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    from tfdist.runtime.tf_import import import_tensorflow  # pylint: disable=import-outside-toplevel

    import_tensorflow(show_logs=False)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tfdist import strategies  # pylint: disable=import-outside-toplevel

    tfdist_subdivs = strategies.use_ring_chunks()  # As tfdist's multi_worker_mirrored does.
    communication = tf.distribute.experimental.CommunicationOptions
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=communication(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING,
            timeout_seconds=_TIMEOUT_S,
        )
    )
    results = {}
    for name, num_bytes, num_tensors, wire_dtype, bytes_per_pack, subdivs in ALLREDUCE_CASES:
        if name not in names:
            continue
        # Read when the all-reduce is traced, below.
        strategies.use_ring_chunks(tfdist_subdivs if subdivs is None else subdivs)
        size = num_bytes // 4 // num_tensors
        tensors = [tf.random.uniform([size]) for _ in range(num_tensors)]
        options = communication(bytes_per_pack=bytes_per_pack)

        @tf.function
        def all_reduce(tensors=tensors, wire_dtype=wire_dtype, options=options):
            def replica_fn():
                wire = [tf.cast(tf.identity(tensor), wire_dtype) for tensor in tensors]
                reduced = tf.distribute.get_replica_context().all_reduce(
                    tf.distribute.ReduceOp.SUM, wire, options=options
                )
                return tf.add_n([tf.cast(tensor[0], tf.float32) for tensor in reduced])

            return strategy.run(replica_fn)

        times = []
        for _ in range(WARMUP + REPS):
            start = time.perf_counter()
            all_reduce().numpy()
            times.append(time.perf_counter() - start)
        results[name] = statistics.median(times[WARMUP:])
    if strategy.cluster_resolver.task_id == 0:
        write_json("json", output_path, results)


def allreduce_seconds(names: list[str] | None = None) -> dict[str, float]:
    """Runs the all-reduce cases named `names` (default: all) on 2 worker processes; returns
    seconds per all-reduce."""
    names = names or [case[0] for case in ALLREDUCE_CASES]
    import portpicker  # pylint: disable=import-outside-toplevel

    ports = [portpicker.pick_unused_port() for _ in range(2)]
    workers = [f"127.0.0.1:{port}" for port in ports]
    with tempfile.TemporaryDirectory() as scratch:
        output = os.path.join(scratch, "allreduce.json")
        processes = []
        for index in range(2):
            tf_config = json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            )
            processes.append(
                subprocess.Popen(  # pylint: disable=consider-using-with
                    [
                        sys.executable,
                        __file__,
                        "--_allreduce_worker",
                        output,
                        "--_allreduce_cases",
                        json.dumps(names),
                    ],
                    env=dict(os.environ, TF_CONFIG=tf_config, TF_USE_LEGACY_KERAS="1"),
                )
            )
        for process in processes:
            if process.wait(timeout=_TIMEOUT_S) != 0:
                raise SystemExit(f"all-reduce worker failed with status {process.returncode}")
        with open(output, encoding="utf-8") as results:
            return json.load(results)


def training_examples_per_sec(
    num_workers: int, steps_per_epoch: int, extra_flags: tuple[str, ...]
) -> float:
    """`tfdist train --strategy=multi_worker_mirrored` on 1 worker, or under `tfdist launch`."""
    train = [
        "--strategy=multi_worker_mirrored",
        "--epochs=3",
        f"--steps_per_epoch={steps_per_epoch}",
        "--validation_steps=1",
        "--collective_timeout_s=300",
        *extra_flags,
    ]
    launch = [f"--num_workers={num_workers}", f"--timeout_s={_TIMEOUT_S}"]
    metrics, _ = train_and_read_metrics(
        train, timeout_s=_TIMEOUT_S, launch_flags=launch if num_workers > 1 else None
    )
    return metrics["examples_per_sec"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--steps_per_epoch", type=int, default=20)
    parser.add_argument("--skip_training", action="store_true")
    parser.add_argument("--_allreduce_worker", help=argparse.SUPPRESS)
    parser.add_argument("--_allreduce_cases", help=argparse.SUPPRESS, type=json.loads)
    args = parser.parse_args()
    if args._allreduce_worker:  # pylint: disable=protected-access
        _allreduce_worker(
            args._allreduce_worker,  # pylint: disable=protected-access
            args._allreduce_cases,
        )  # pylint: disable=protected-access
        return
    figures: dict = {"payload_mib": PAYLOAD_BYTES // MIB}
    tcp = tcp_bytes_per_sec()
    figures["tcp_mib_per_s"] = tcp / MIB
    print(f"raw loopback TCP, one process to another: {tcp / MIB:,.0f} MiB/s")
    figures["allreduce"] = {}
    payloads = {case[0]: case[1] for case in ALLREDUCE_CASES}
    for name, seconds in allreduce_seconds().items():
        rate = payloads[name] / seconds
        figures["allreduce"][name] = {
            "seconds": seconds,
            "mib_per_s": rate / MIB,
            "fraction_of_tcp": rate / tcp,
        }
        print(
            f"all-reduce {name:34s} {seconds * 1000:8.1f} ms  {rate / MIB:8,.0f} MiB/s  "
            f"{rate / tcp:6.1%} of TCP"
        )
    if not args.skip_training:
        figures["training"] = {}
        baseline = None
        for name, num_workers, flags in TRAINING_CASES:
            rate = training_examples_per_sec(num_workers, args.steps_per_epoch, flags)
            baseline = baseline or rate
            figures["training"][name] = {
                "examples_per_sec": rate,
                "steps_per_sec": rate / GLOBAL_BATCH_SIZE,
                "vs_one_worker": rate / baseline,
            }
            print(
                f"training {name:34s} {rate:6.0f} examples/s  {rate / GLOBAL_BATCH_SIZE:5.2f} "
                f"steps/s  {rate / baseline:5.2f}x one worker",
                flush=True,
            )
    if args.json:
        write_json("json", args.json, figures)


if __name__ == "__main__":
    main()
