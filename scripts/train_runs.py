"""The measurement scripts' one way to run `tfdist train` and read its results: a fresh process
(TensorFlow's import included), its metrics JSON read back, its wall clock timed.

    from train_runs import train_and_read_metrics
    metrics, wall_s = train_and_read_metrics(["--epochs=1"], timeout_s=600)
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Sequence


def train_and_read_metrics(
    train_flags: Sequence[str], *, timeout_s: float, launch_flags: Sequence[str] | None = None
) -> tuple[dict, float]:
    """Runs `tfdist train TRAIN_FLAGS`, under `tfdist launch LAUNCH_FLAGS --` when given;
    returns (the run's metrics JSON, the process's wall seconds). A failed run ends the script
    with the command and the tail of its stderr."""
    with tempfile.TemporaryDirectory() as scratch:
        metrics_path = os.path.join(scratch, "metrics.json")
        launch = [] if launch_flags is None else ["launch", *launch_flags, "--"]
        command = [
            sys.executable,
            "-m",
            "tfdist",
            *launch,
            "train",
            *train_flags,
            f"--metrics_json={metrics_path}",
        ]
        started = time.perf_counter()
        result = subprocess.run(
            command,
            check=False,
            timeout=timeout_s,
            text=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wall_s = time.perf_counter() - started
        if result.returncode != 0:
            raise SystemExit(
                f"{os.path.basename(sys.argv[0])}: `{' '.join(command)}` failed with "
                f"status {result.returncode}:\n{result.stderr[-2000:]}"
            )
        with open(metrics_path, encoding="utf-8") as metrics_file:
            return json.load(metrics_file), wall_s
