"""Keras 3 against tf-keras on the default job: `tfdist train --keras=3` and `--keras=2`,
alternating in the same run, under each strategy; prints each run, then the medians and the
ratio Keras 3 / tf-keras of examples/s (the goal: at least 0.9).

    python scripts/default_job/compare_keras.py [--rounds=2] [--json=PATH]

The built-in dataset is generated once, before the first run. Under parameter server the
launcher runs a chief, 2 workers and 1 ps; multi-worker mirrored runs 2 workers.
"""

import argparse
import os
import statistics
import sys
import tempfile

from tfdist.runtime.output_files import write_json

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # train_runs
from train_runs import train_and_read_metrics  # noqa: E402

_TIMEOUT_S = 900
# name: (train flags, launch flags or None)
_STRATEGIES = {
    "one_device": (["--strategy=one_device"], None),
    "mirrored (2 CPU replicas)": (["--strategy=mirrored", "--num_cpu_devices=2"], None),
    "multi_worker_mirrored (2 workers)": (
        ["--strategy=multi_worker_mirrored"],
        ["--num_workers=2"],
    ),
    "parameter_server (chief, 2 workers, 1 ps)": (
        ["--strategy=parameter_server"],
        ["--num_workers=2", "--num_ps=1", "--chief"],
    ),
}


def _run(data_dir: str, keras: int, train_flags: list[str], launch_flags) -> dict:
    metrics, wall_s = train_and_read_metrics(
        [f"--data_dir={data_dir}", f"--keras={keras}", *train_flags],
        timeout_s=_TIMEOUT_S,
        launch_flags=launch_flags,
    )
    return {
        "examples_per_sec": round(metrics["examples_per_sec"]),
        "val_accuracy": round(metrics["final"]["val_accuracy"], 4),
        "process_wall_s": round(wall_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs per flavour and strategy")
    parser.add_argument("--json", help="write every run and the medians to this path")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as data_dir:
        train_and_read_metrics(
            [f"--data_dir={data_dir}", "--epochs=1", "--steps_per_epoch=1", "--validation_steps=1"],
            timeout_s=_TIMEOUT_S,
        )
        for name, (train_flags, launch_flags) in _STRATEGIES.items():
            runs = {2: [], 3: []}
            for round_index in range(args.rounds):
                for keras in (2, 3):
                    run = _run(data_dir, keras, train_flags, launch_flags)
                    runs[keras].append(run)
                    print(f"{name} round {round_index + 1} keras={keras}: {run}", flush=True)
            medians = {
                keras: {
                    field: statistics.median(run[field] for run in keras_runs)
                    for field in keras_runs[0]
                }
                for keras, keras_runs in runs.items()
            }
            ratio = medians[3]["examples_per_sec"] / medians[2]["examples_per_sec"]
            print(
                f"{name}: median tf-keras {medians[2]}, Keras 3 {medians[3]}; "
                f"Keras 3 / tf-keras examples/s = {ratio:.2f}",
                flush=True,
            )
            results[name] = {"runs": runs, "medians": medians, "keras3_over_tf_keras": ratio}
    if args.json:
        write_json(
            "json", args.json, {"cpu_count": os.cpu_count(), "rounds": args.rounds, **results}
        )


if __name__ == "__main__":
    main()
