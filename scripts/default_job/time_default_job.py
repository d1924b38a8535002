"""Times the default job as a new user meets it: `tfdist train` with no flags, wall clock.

Run 1 starts from an empty data dir (the built-in dataset is generated); run 2 reuses it. Each
run is a fresh process, so TensorFlow's import is included. Prints one line per run and, with
--json=PATH, writes the figures.

    python scripts/default_job/time_default_job.py [--json=PATH] [-- extra tfdist train flags]
"""

import argparse
import os
import sys
import tempfile

from tfdist.runtime.output_files import write_json

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # train_runs
from train_runs import train_and_read_metrics  # noqa: E402

_TIMEOUT_S = 600


def _run_once(data_dir: str, extra: list[str]) -> dict:
    metrics, wall_s = train_and_read_metrics(
        [f"--data_dir={data_dir}", *extra], timeout_s=_TIMEOUT_S
    )
    return {
        "process_wall_s": round(wall_s, 1),
        "val_accuracy": round(metrics["final"]["val_accuracy"], 4),
        "examples_per_sec": round(metrics["examples_per_sec"]),
        "strategy": metrics["strategy"],
        "epochs": metrics["epochs"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures to this path")
    parser.add_argument("extra", nargs="*", help="extra `tfdist train` flags (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        runs = {
            "first_run_generates_data": _run_once(data_dir, args.extra),
            "second_run_reuses_data": _run_once(data_dir, args.extra),
        }
    for name, figures in runs.items():
        print(f"{name}: {figures}")
    if args.json:
        write_json(
            "json", args.json, {"cpu_count": os.cpu_count(), "extra_flags": args.extra, **runs}
        )


if __name__ == "__main__":
    main()
