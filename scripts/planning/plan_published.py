"""`tfdist plan` against published scaling results: each run's hardware and workload as plan
flags, the model's scaling efficiency against the paper's. Sources and the reasoning behind
every input are in docs/PLANNING.md ("Checked against published runs").

    python scripts/planning/plan_published.py [--overlap=0] [--json=PATH]

Efficiency is relative to what the paper compares with: one GPU (Horovod) or one 8-GPU server
(Goyal et al.); the latter is the ratio of the two rows' step times.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from tfdist.runtime.output_files import write_json

MIB = 2**20
# Horovod's benchmark (docs/benchmarks.md at the paper's date, 2018-02): 32 servers of 4 Pascal
# GPUs, 25 Gbit/s RoCE-capable Ethernet, NCCL 2's flat ring, 64 images per GPU; single-GPU
# step from TensorFlow's published P100 figures (batch 64, synthetic data).
_HOROVOD = [
    "--per_replica_batch_size=64",
    "--gpus_per_node=4",
    "--intra_link=pcie3",
    "--host_pcie=pcie3",
    "--inter_link=roce25",
    "--image_size=224",
    "--nodes=1,32",
]
PUBLISHED = (
    {
        "name": "Horovod, Inception V3, 128 GPUs (TCP)",
        "efficiency": 0.88,
        "baseline": "gpu",
        "flags": [
            *_HOROVOD,
            f"--compute_ms={64 / 142 * 1000:.1f}",
            f"--gradient_mib={23.9e6 * 4 / MIB:.1f}",
        ],
    },
    {
        "name": "Horovod, ResNet-101, 128 GPUs (TCP)",
        "efficiency": 0.88,
        "baseline": "gpu",
        "flags": [
            *_HOROVOD,
            f"--compute_ms={64 / 130 * 1000:.1f}",
            f"--gradient_mib={44.5e6 * 4 / MIB:.1f}",
        ],
    },
    {
        "name": "Horovod, VGG-16, 128 GPUs",
        "efficiency": 0.79,
        "baseline": "gpu",
        "flags": [
            *_HOROVOD,
            f"--compute_ms={64 / 154 * 1000:.1f}",
            f"--gradient_mib={138.4e6 * 4 / MIB:.1f}",
        ],
    },
    # Goyal et al. 2017: 32 Big Basin servers of 8 P100s on NVLink 1 (80 GB/s per direction),
    # 50 Gbit/s Ethernet, a 3-phase hierarchical all-reduce, 32 images per GPU; 0.23 s per
    # iteration on one server (29 hours for 90 epochs of 5,005 iterations).
    {
        "name": "Goyal et al., ResNet-50, 256 GPUs vs 8",
        "efficiency": 0.90,
        "baseline": "node",
        "flags": [
            "--per_replica_batch_size=32",
            "--gpus_per_node=8",
            "--intra_link=nvlink2",
            "--intra_gbps=640",
            "--host_pcie=pcie3",
            "--inter_link=eth100",
            "--inter_gbps=50",
            "--allreduce=hierarchical",
            "--image_size=224",
            "--nodes=1,32",
            "--compute_ms=230",
            f"--gradient_mib={25.6e6 * 4 / MIB:.1f}",
        ],
    },
)


def predicted_efficiency(run: dict, overlap: float) -> tuple[float, list[str]]:
    """`tfdist plan`'s efficiency for `run` at its largest node count, and the command."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "plan.json")
        command = ["tfdist", "plan", *run["flags"], f"--overlap={overlap:g}"]
        subprocess.run(
            [sys.executable, "-m", "tfdist", *command[1:], f"--json={path}"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        with open(path, encoding="utf-8") as file:
            rows = json.load(file)["configurations"]
    if run["baseline"] == "node":
        return rows[0]["step_s"] / rows[-1]["step_s"], command
    return rows[-1]["scaling_efficiency"], command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--overlaps", default="0,1", type=lambda text: [float(value) for value in text.split(",")]
    )
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    results = []
    print(
        "| published run | published | "
        + " | ".join(f"model, overlap {overlap:g}" for overlap in args.overlaps)
        + " |"
    )
    print("| --- | ---: |" + " ---: |" * len(args.overlaps))
    for run in PUBLISHED:
        predicted = {}
        for overlap in args.overlaps:
            predicted[overlap], command = predicted_efficiency(run, overlap)
        results.append(
            {
                "name": run["name"],
                "published": run["efficiency"],
                "predicted": {f"{overlap:g}": value for overlap, value in predicted.items()},
                "command": " ".join(command[:-1]),
            }
        )
        print(
            f"| {run['name']} | {run['efficiency']:.2f} | "
            + " | ".join(
                f"{value:.2f} ({value - run['efficiency']:+.2f})" for value in predicted.values()
            )
            + " |"
        )
    if args.json:
        write_json("json", args.json, results)


if __name__ == "__main__":
    main()
