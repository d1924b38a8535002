"""The GPU proof kit: every GPU path of tfdist run once, each figure into one JSON.

On a GPU machine (in under 8 minutes on one GPU):
  doctor              `tfdist doctor`: devices, Keras, the strategy auto picks
  default_job         `tfdist train` on the GPU (one_device): val_accuracy, examples/s
  deterministic       the same twice with --deterministic (op determinism): whether the two
                      runs' final metrics are identical, and its examples/s over default_job's
  mirrored_logical    mirrored over 2 logical GPUs split from GPU 0 (hierarchical copy)
  mirrored_nccl       mirrored over 2 physical GPUs with NCCL, when there are 2 or more
  mixed_float16       the default job under mixed_float16 with loss scaling: finite loss
                      (mirrored_logical and mixed_float16 train the default 3 epochs)
  preprocess_host / preprocess_device
                      `tfdist benchmark` on real data with preprocessing on the host against
                      on the device: examples/s, and host-to-device bytes per second (the
                      batch's bytes: float32 images from the host, uint8 to the device)
  resnet50            `tfdist benchmark --model=resnet50 --image_size=224` on synthetic and
                      real data with device preprocessing: input_bound_ratio (goal >= 0.95)
  resnet50_mixed_float16
                      the same on synthetic data under mixed_float16 at batch 128
  plan                `tfdist plan --from_benchmark` on the ResNet-50 figures
Without a GPU it says so in one line, runs doctor and exits 0. Exit 1 when a step failed.

    bash scripts/gpu_check.sh [OUT_DIR]    # writes OUT_DIR/gpu_check.json (default: .)
"""

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tfdist.runtime import output_files  # noqa: E402  pylint: disable=wrong-import-position

_STEP_TIMEOUT_S = 300
_BUDGET_S = 8 * 60
_IMAGE_BYTES = 32 * 32 * 3  # The built-in dataset's images.
# Doctor's line of the devices TensorFlow shows this process.
_DOCTOR_DEVICES = re.compile(r"^local devices: \d+ CPU, (\d+) GPU$", re.MULTILINE)


def _run(
    name: str,
    args: list[str],
    report: dict,
    started: float,
    path: str,
    output_to: list[str] | None = None,
) -> dict | None:
    """Runs `python -m tfdist ARGS`; records status, seconds and the tail of its output under
    report["steps"][name] (and appends the whole output to `output_to`); returns the JSON the
    step wrote to {json}, if any. Saves the report to PATH first, so a run cut short keeps every
    figure measured before it."""
    report["seconds"] = round(time.perf_counter() - started, 1)
    output_files.write_json("json", path, report)
    if time.perf_counter() - started > _BUDGET_S:
        report["steps"][name] = {"skipped": "over the 8-minute budget"}
        return None
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "out.json")
        command = [arg.replace("{json}", path) for arg in args]
        begun = time.perf_counter()
        try:
            result = subprocess.run(
                [sys.executable, "-m", "tfdist", *command],
                text=True,
                capture_output=True,
                timeout=_STEP_TIMEOUT_S,
                check=False,
            )
            status, output = result.returncode, result.stdout + result.stderr
        except subprocess.TimeoutExpired as error:
            status, output = "timeout", str(error.stdout or "")
        step = {
            "command": "tfdist " + " ".join(args),
            "status": status,
            "seconds": round(time.perf_counter() - begun, 1),
            "output_tail": output.strip().splitlines()[-8:],
        }
        report["steps"][name] = step
        if output_to is not None:
            output_to.append(output)
        print(f"gpu_check: {name}: status {status} in {step['seconds']} s", flush=True)
        if status == 0 and os.path.exists(path):
            with open(path, encoding="utf-8") as file:
                return json.load(file)
    return None


def _visible_gpus(doctor_output: str) -> int:
    """The GPUs TensorFlow shows, as doctor counted them; asked of TensorFlow in a process of
    its own where doctor did not say (it failed)."""
    counted = _DOCTOR_DEVICES.search(doctor_output)
    if counted:
        return int(counted.group(1))
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tfdist.runtime.tf_import as t; t.import_tensorflow(False); "
            "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))",
        ],
        capture_output=True,
        text=True,
        timeout=_STEP_TIMEOUT_S,
        check=True,
    )
    return int(probe.stdout.strip().splitlines()[-1])


def _train_figures(metrics: dict | None) -> dict:
    if not metrics:
        return {}
    return {
        "val_accuracy": metrics["final"].get("val_accuracy"),
        "loss": metrics["final"].get("loss"),
        "examples_per_sec": metrics["examples_per_sec"],
        "num_replicas": metrics["num_replicas"],
    }


def _determinism_figures(default_job: dict, runs: list[dict]) -> dict:
    """Two --deterministic runs: whether they ended alike, and their speed over default_job's."""
    if not (default_job and all(runs)):
        return {}
    rate = min(run["examples_per_sec"] for run in runs)
    return {
        "identical_final_metrics": runs[0]["val_accuracy"] == runs[1]["val_accuracy"]
        and runs[0]["loss"] == runs[1]["loss"],
        "runs": runs,
        "examples_per_sec_over_default_job": rate / default_job["examples_per_sec"],
    }


def _benchmark_figures(report: dict | None, data: str) -> dict:
    if not report:
        return {}
    entry = next(entry for entry in report["configurations"] if entry["data"] == data)
    return {
        "examples_per_sec": entry["examples_per_sec"]["median"],
        "input_bound_ratio": entry.get("input_bound_ratio"),
    }


def main(out_dir: str) -> int:
    started = time.perf_counter()
    report = {"steps": {}}
    path = os.path.join(out_dir, "gpu_check.json")
    run = functools.partial(_run, report=report, started=started, path=path)
    doctor_output = []
    run("doctor", ["doctor"], output_to=doctor_output)
    gpus = report["gpus"] = _visible_gpus("".join(doctor_output))
    if not gpus:
        print("gpu_check: no GPU visible to TensorFlow; ran doctor only, every GPU check skipped.")
    else:
        train = ["train", "--metrics_json={json}"]
        report["default_job"] = _train_figures(run("default_job", train))
        report["deterministic"] = _determinism_figures(
            report["default_job"],
            [
                _train_figures(run(f"deterministic_{n}", [*train, "--deterministic"]))
                for n in (1, 2)
            ],
        )
        report["mirrored_logical"] = _train_figures(
            run("mirrored_logical", [*train, "--strategy=mirrored", "--num_logical_gpus=2"])
        )
        if gpus > 1:
            report["mirrored_nccl"] = _train_figures(
                run(
                    "mirrored_nccl",
                    [
                        *train,
                        "--strategy=mirrored",
                        "--num_gpus=2",
                        "--all_reduce=nccl",
                        "--epochs=1",
                    ],
                )
            )
        report["mixed_float16"] = _train_figures(
            run("mixed_float16", [*train, "--mixed_precision=mixed_float16"])
        )
        bench = ["benchmark", "--replicas=1", "--rounds=1", "--nooverhead", "--json={json}"]
        for where, value_bytes in (("host", 4), ("device", 1)):
            figures = _benchmark_figures(
                run(f"preprocess_{where}", [*bench, "--data=real", f"--preprocess_on={where}"]),
                "real",
            )
            if figures:
                figures["host_to_device_bytes_per_s"] = (
                    figures["examples_per_sec"] * _IMAGE_BYTES * value_bytes
                )
            report[f"preprocess_{where}"] = figures
        resnet = run(
            "resnet50",
            [
                *bench,
                "--model=resnet50",
                "--image_size=224",
                "--global_batch_size=64",
                "--data=synthetic,real",
                "--preprocess_on=device",
                "--timed_steps=20",
            ],
        )
        report["resnet50"] = {
            "synthetic": _benchmark_figures(resnet, "synthetic"),
            "real": _benchmark_figures(resnet, "real"),
        }
        report["resnet50_mixed_float16"] = _benchmark_figures(
            run(
                "resnet50_mixed_float16",
                [
                    *bench,
                    "--model=resnet50",
                    "--image_size=224",
                    "--global_batch_size=128",
                    "--data=synthetic",
                    "--mixed_precision=mixed_float16",
                    "--timed_steps=20",
                ],
            ),
            "synthetic",
        )
        if resnet:
            with tempfile.TemporaryDirectory() as scratch:
                benchmark = os.path.join(scratch, "resnet50.json")
                output_files.write_json("json", benchmark, resnet)
                run(
                    "plan",
                    [
                        "plan",
                        f"--from_benchmark={benchmark}",
                        "--gpus_per_node=8",
                        "--intra_link=nvlink4",
                        "--inter_link=ib_ndr",
                        "--gpudirect_rdma",
                        "--json={json}",
                    ],
                )
    report["seconds"] = round(time.perf_counter() - started, 1)
    output_files.write_json("json", path, report)
    failed = [name for name, step in report["steps"].items() if step.get("status") not in (0, None)]
    print(
        f"gpu_check: wrote {path} after {report['seconds']} s"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
