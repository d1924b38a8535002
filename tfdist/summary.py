"""The end-of-run summary: one line on stdout and, on request, a JSON file written atomically."""

import json
import os
import tempfile


def write_json(path: str, summary: dict) -> None:
    """Writes `summary` to `path` whole or not at all (temp file in the same dir, then rename)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=directory, suffix=".tmp", delete=False,
                                     encoding="utf-8") as temp:
        json.dump(summary, temp, indent=2, sort_keys=True)
        temp.write("\n")
    os.replace(temp.name, path)


def format_line(summary: dict) -> str:
    """One human line: strategy and shape of the run, final metrics, speed."""
    final = summary["final"]
    metrics = ", ".join(f"{name}={final[name]:.4f}" for name in
                        ("val_accuracy", "val_loss", "accuracy", "loss") if name in final)
    return (f"tfdist: {summary['strategy']} on {summary['num_replicas']} replica(s) x "
            f"{summary['num_workers']} worker(s), {summary['epochs']} epoch(s) of "
            f"{summary['steps_per_epoch']} steps in {summary['wall_s']:.1f}s: {metrics}; "
            f"{summary['examples_per_sec']:.0f} examples/s")
