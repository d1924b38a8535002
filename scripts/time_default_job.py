"""Times the default job as a new user meets it: `tfdist train` with no flags, wall clock.

Run 1 starts from an empty data dir (the built-in dataset is generated); run 2 reuses it. Each
run is a fresh process, so TensorFlow's import is included. Prints one line per run and, with
--json=PATH, writes the figures.

    python scripts/time_default_job.py [--json=PATH] [-- extra tfdist train flags]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

_TIMEOUT_S = 600


def _run_once(data_dir: str, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as out:
        metrics_path = os.path.join(out, "metrics.json")
        command = [sys.executable, "-m", "tfdist", "train", f"--data_dir={data_dir}",
                   f"--metrics_json={metrics_path}", *extra]
        start = time.perf_counter()
        subprocess.run(command, check=True, timeout=_TIMEOUT_S, stdout=subprocess.DEVNULL)
        wall_s = time.perf_counter() - start
        with open(metrics_path, encoding="utf-8") as metrics_file:
            metrics = json.load(metrics_file)
    return {"process_wall_s": round(wall_s, 1),
            "val_accuracy": round(metrics["final"]["val_accuracy"], 4),
            "examples_per_sec": round(metrics["examples_per_sec"]),
            "strategy": metrics["strategy"], "epochs": metrics["epochs"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures to this path")
    parser.add_argument("extra", nargs="*", help="extra `tfdist train` flags (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        runs = {"first_run_generates_data": _run_once(data_dir, args.extra),
                "second_run_reuses_data": _run_once(data_dir, args.extra)}
    for name, figures in runs.items():
        print(f"{name}: {figures}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as json_file:
            json.dump({"cpu_count": os.cpu_count(), "extra_flags": args.extra, **runs}, json_file,
                      indent=2)


if __name__ == "__main__":
    main()
