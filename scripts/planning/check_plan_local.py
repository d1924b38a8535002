"""`tfdist plan`'s cost model against this machine: the predicted step time of 1, 2 and 4
multi-worker processes on 127.0.0.1 against the measured one, all in one run.

The model's inputs, each measured here:
  compute(N)  N independent 1-worker `tfdist train --strategy=multi_worker_mirrored
              --dataset=synthetic` processes at once: each step as the job's workers compute
              it, sharing this host's cores as they do, with no network between them (the
              slowest process counts: a synchronous step waits for it)
  link        all-reduce between 2 processes over loopback (`benchmark_cluster.py`): the
              bandwidth from 64 MiB, the latency of a message from 4 KiB
  gradients   4 x the model's trainable parameters (the run summary reports them)
Predicted step: compute(N) + ring all-reduce of the gradients over N processes on that link
(`tfdist.cost_model`, overlap 0: TensorFlow all-reduces after the backward pass).
Measured step: global batch / examples/s of `tfdist train --strategy=multi_worker_mirrored
--dataset=synthetic` over N processes (`tfdist launch`), the second epoch.

    python scripts/planning/check_plan_local.py [--processes=1,2,4] [--json=PATH]
"""

import argparse
import concurrent.futures
import os
import sys

from tfdist import cost_model
from tfdist.runtime.output_files import write_json

_SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_SCRIPTS, os.path.join(_SCRIPTS, "cluster")]  # train_runs, benchmark_cluster
from benchmark_cluster import ALLREDUCE_CASES  # noqa: E402
from benchmark_cluster import allreduce_seconds  # noqa: E402
from train_runs import train_and_read_metrics  # noqa: E402

_TIMEOUT_S = 1200
_BANDWIDTH_CASE, _LATENCY_CASE = "1 x 64 MiB float32", "1 x 4 KiB float32 (latency)"


def loopback_link() -> cost_model.Link:
    """The 2-process ring's link: t(S) = S / bandwidth + 2 x latency, from two sizes."""
    seconds = allreduce_seconds([_BANDWIDTH_CASE, _LATENCY_CASE])
    sizes = {case[0]: case[1] for case in ALLREDUCE_CASES}
    large, small = sizes[_BANDWIDTH_CASE], sizes[_LATENCY_CASE]
    bytes_per_s = (large - small) / (seconds[_BANDWIDTH_CASE] - seconds[_LATENCY_CASE])
    latency_s = max(seconds[_LATENCY_CASE] - small / bytes_per_s, 0.0) / 2
    return cost_model.Link("loopback", bytes_per_s / cost_model.GBIT_PER_S, latency_s * 1e6)


def _step_s(metrics: dict) -> float:
    return metrics["global_batch_size"] / metrics["examples_per_sec"]


def _train(
    model: str,
    replicas: int,
    batch: int,
    steps: int,
    flags: list[str],
    launch: list[str] | None = None,
) -> dict:
    """The metrics of `tfdist train` on synthetic data, `replicas` x `batch` examples a step."""
    train = [
        f"--model={model}",
        "--dataset=synthetic",
        f"--global_batch_size={batch * replicas}",
        "--epochs=2",
        f"--steps_per_epoch={steps}",
        "--validation_steps=1",
        *flags,
    ]
    metrics, _ = train_and_read_metrics(train, timeout_s=_TIMEOUT_S, launch_flags=launch)
    return metrics


def compute_step(model: str, processes: int, batch: int, steps: int) -> tuple[float, int]:
    """(seconds per step of the slowest, trainable parameters) of `processes` independent
    1-worker jobs run at once."""
    flags = ["--strategy=multi_worker_mirrored"]
    with concurrent.futures.ThreadPoolExecutor(processes) as pool:
        runs = list(pool.map(lambda _: _train(model, 1, batch, steps, flags), range(processes)))
    return max(_step_s(metrics) for metrics in runs), runs[0]["trainable_parameters"]


def measured_step(model: str, processes: int, batch: int, steps: int) -> float:
    """Seconds per step of `processes` multi-worker processes (epochs after the first)."""
    launch = [f"--num_workers={processes}", f"--timeout_s={_TIMEOUT_S}"]
    return _step_s(
        _train(
            model,
            processes,
            batch,
            steps,
            ["--strategy=multi_worker_mirrored", "--collective_timeout_s=600"],
            launch if processes > 1 else None,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--processes",
        default=[1, 2, 4],
        type=lambda text: [int(count) for count in text.split(",")],
    )
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--per_replica_batch", type=int, default=64)
    parser.add_argument(
        "--steps", type=int, default=40, help="steps per epoch; the second of 2 epochs is timed"
    )
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    link = loopback_link()
    print(
        f"loopback all-reduce link: {link.gbit_per_s:.2f} Gbit/s, {link.latency_us:.0f} µs "
        "per message",
        flush=True,
    )
    rows = []
    for count in args.processes:
        compute_s, parameters = compute_step(args.model, count, args.per_replica_batch, args.steps)
        exchange_s = cost_model.ring_allreduce_s(4 * parameters, count, link)
        measured = measured_step(args.model, count, args.per_replica_batch, args.steps)
        rows.append(
            {
                "processes": count,
                "compute_s": compute_s,
                "exchange_s": exchange_s,
                "predicted_s": compute_s + exchange_s,
                "measured_s": measured,
                "ratio": (compute_s + exchange_s) / measured,
            }
        )
        print(
            f"{count} process(es): predicted {rows[-1]['predicted_s'] * 1000:.1f} ms "
            f"(compute {compute_s * 1000:.1f} + all-reduce {exchange_s * 1000:.1f}), "
            f"measured {measured * 1000:.1f} ms: {rows[-1]['ratio']:.2f}x",
            flush=True,
        )
    print(
        "\n| processes | compute ms | all-reduce ms | predicted ms | measured ms | "
        "predicted / measured |\n| ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for row in rows:
        print(
            f"| {row['processes']} | {row['compute_s'] * 1000:.1f} | "
            f"{row['exchange_s'] * 1000:.1f} | {row['predicted_s'] * 1000:.1f} | "
            f"{row['measured_s'] * 1000:.1f} | {row['ratio']:.2f} |"
        )
    if args.json:
        write_json(
            "json",
            args.json,
            {
                "model": args.model,
                "per_replica_batch": args.per_replica_batch,
                "link": {"gbit_per_s": link.gbit_per_s, "latency_us": link.latency_us},
                "trainable_parameters": parameters,
                "rows": rows,
            },
        )


if __name__ == "__main__":
    main()
