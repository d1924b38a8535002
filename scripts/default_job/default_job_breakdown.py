"""Where the default job's wall time goes, over several runs in a row.

Each run is a fresh process doing what `tfdist train` with no flags does (`setup`, then `fit`),
with a Keras callback that stamps every phase: Python and TensorFlow's import, `setup` (the
strategy, and the built-in dataset, generated in the first run only when --fresh_data), model
build and compile up to the first batch, the first step (tracing), the other training steps
(input and compute), validation, the rest of each epoch (callbacks, iterators), the teardown
after the last epoch until `fit` returns, and the process's exit. Prints each run's line and the
min/median/max of each phase; --json writes them.

--trace adds one more run, left out of the spread, that traces 40 training steps of the second
epoch with TensorFlow's profiler: per step, the trace time of each op of the step (forward,
gradients, update), of the wait for input, and of each tf.data transformation and op of the
input pipeline running beside it on the same cores (`input_pipelines.read_trace`).

    python scripts/default_job/default_job_breakdown.py [--runs=5] [--json=PATH] [--fresh_data]
        [--trace]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tfdist.runtime import output_files  # noqa: E402  pylint: disable=wrong-import-position

_TIMEOUT_S = 600
_TRACED_EPOCH, _FIRST_TRACED_STEP, _TRACED_STEPS = 1, 10, 40
_TRACE_MIN_MS = 0.05  # Stages under this many milliseconds per step are left out.


def _child(data_dir: str, trace_dir: str | None) -> None:
    """One default-job run, stamped; prints its phases as one JSON line. With `trace_dir`, traces
    `_TRACED_STEPS` steps of epoch `_TRACED_EPOCH` there and adds "trace"."""
    started = time.perf_counter()
    import tfdist  # pylint: disable=import-outside-toplevel
    from tfdist.runtime.tf_import import import_tensorflow  # pylint: disable=import-outside-toplevel

    import_tensorflow(show_logs=False)
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    import tf_keras
    from tfdist import input_pipelines
    from tfdist.training import from_config

    imported = time.perf_counter()

    class Stamps(tf_keras.callbacks.Callback):
        """perf_counter at each event Keras reports."""

        def __init__(self):
            super().__init__()
            self.events: list[tuple[str, float]] = []
            self.epoch = 0

        def _stamp(self, name):
            self.events.append((name, time.perf_counter()))

        def on_train_begin(self, logs=None):
            self._stamp("train_begin")

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            self._stamp("epoch_begin")

        def on_train_batch_begin(self, batch, logs=None):
            if trace_dir and self._traced_step(batch, _FIRST_TRACED_STEP):
                tf.profiler.experimental.start(trace_dir)
            self._stamp("batch_begin")

        def on_train_batch_end(self, batch, logs=None):
            self._stamp("batch_end")
            if trace_dir and self._traced_step(batch, _FIRST_TRACED_STEP + _TRACED_STEPS - 1):
                tf.profiler.experimental.stop()
                self._stamp("trace_stopped")

        def _traced_step(self, batch, step):
            return self.epoch == _TRACED_EPOCH and batch == step

        def on_test_begin(self, logs=None):
            self._stamp("test_begin")

        def on_test_end(self, logs=None):
            self._stamp("test_end")

        def on_epoch_end(self, epoch, logs=None):
            self._stamp("epoch_end")

        def on_train_end(self, logs=None):
            self._stamp("train_end")

    # The default job: `tfdist train --data_dir=DIR`.
    plan = tfdist.setup(tfdist.RunConfig(input=tfdist.InputConfig(data_dir=data_dir)))
    set_up = time.perf_counter()
    stamps = Stamps()
    summary = from_config.fit(plan, callbacks=[stamps])
    fitted = time.perf_counter()
    phases = {"import_s": imported - started, "setup_s": set_up - imported}
    phases.update(_fit_phases(stamps.events, set_up, fitted))
    phases["val_accuracy"] = summary["final"]["val_accuracy"]
    if trace_dir:
        phases["trace"] = _per_step(input_pipelines.read_trace(trace_dir)[0], stamps.events)
    print(json.dumps(phases), flush=True)


def _per_step(stage_s: dict[str, float], events: list[tuple[str, float]]) -> dict:
    """The traced steps' wall time and each stage's trace time, in milliseconds per step."""
    stopped = next(index for index, (name, _) in enumerate(events) if name == "trace_stopped")
    begins = [moment for name, moment in events[:stopped] if name == "batch_begin"]
    wall_s = events[stopped][1] - begins[-_TRACED_STEPS]
    per_step = {
        stage: round(1e3 * seconds / _TRACED_STEPS, 3) for stage, seconds in stage_s.items()
    }
    return {
        "steps": _TRACED_STEPS,
        "wall_ms_per_step": round(1e3 * wall_s / _TRACED_STEPS, 2),
        "stage_ms_per_step": {
            stage: value for stage, value in per_step.items() if value >= _TRACE_MIN_MS
        },
    }


def _fit_phases(events: list[tuple[str, float]], fit_called: float, fit_returned: float) -> dict:
    """Splits `fit`'s time between the stamped events."""
    at = {}
    for name, moment in events:
        at.setdefault(name, []).append(moment)
    steps = [end - begin for begin, end in zip(at["batch_begin"], at["batch_end"])]
    validation = sum(end - begin for begin, end in zip(at["test_begin"], at["test_end"]))
    epochs = sum(end - begin for begin, end in zip(at["epoch_begin"], at["epoch_end"]))
    return {
        "build_and_compile_s": at["train_begin"][0] - fit_called,
        "first_step_s": steps[0],
        "other_steps_s": sum(steps[1:]),
        "validation_s": validation,
        "epoch_rest_s": epochs - sum(steps) - validation,
        "between_epochs_s": (at["epoch_begin"][0] - at["train_begin"][0])
        + sum(begin - end for begin, end in zip(at["epoch_begin"][1:], at["epoch_end"])),
        "teardown_s": fit_returned - at["train_end"][0],
        "fit_s": fit_returned - fit_called,
    }


def _run(data_dir: str, trace_dir: str | None = None) -> dict:
    started = time.perf_counter()
    command = [sys.executable, os.path.abspath(__file__), "--child", data_dir]
    if trace_dir:
        command.append(f"--trace_dir={trace_dir}")
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
    )
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"default_job_breakdown: a run failed:\n{result.stderr[-2000:]}")
    phases = json.loads(result.stdout.strip().splitlines()[-1])
    accounted = sum(value for key, value in phases.items() if key.endswith("_s") and key != "fit_s")
    phases["exit_and_rest_s"] = wall - accounted
    phases["wall_s"] = wall
    return phases


def _traced_run(data_dir: str) -> dict:
    """One more run with `_TRACED_STEPS` steps traced; prints and returns its per-step trace."""
    with tempfile.TemporaryDirectory() as trace_dir:
        trace = _run(data_dir, trace_dir)["trace"]
    print(
        f"traced run: {trace['steps']} steps of epoch {_TRACED_EPOCH + 1}, "
        f"{trace['wall_ms_per_step']:.2f} ms per step; trace time per step:"
    )
    for stage, milliseconds in trace["stage_ms_per_step"].items():
        print(f"  {stage:40s} {milliseconds:8.3f} ms")
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", help="write every run's phases and their spread here")
    parser.add_argument(
        "--fresh_data",
        action="store_true",
        help="start from an empty data dir (the first run generates the data)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="add a run that traces 40 steps with TensorFlow's profiler",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--trace_dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.trace_dir)
        return
    with tempfile.TemporaryDirectory() as data_dir:
        if not args.fresh_data:
            _run(data_dir)  # Generates the data, untimed.
        runs = []
        for number in range(1, args.runs + 1):
            runs.append(_run(data_dir))
            print(
                f"run {number}: "
                + ", ".join(f"{key} {value:.2f}" for key, value in runs[-1].items()),
                flush=True,
            )
        trace = _traced_run(data_dir) if args.trace else None
    spread = {
        key: {
            "min": min(run[key] for run in runs),
            "median": statistics.median(run[key] for run in runs),
            "max": max(run[key] for run in runs),
        }
        for key in runs[0]
    }
    for key, figures in spread.items():
        print(
            f"{key:>20}: min {figures['min']:.2f}  median {figures['median']:.2f}  "
            f"max {figures['max']:.2f}"
        )
    walls = spread["wall_s"]
    print(f"wall: max/min {walls['max'] / walls['min']:.3f} over {len(runs)} runs")
    if args.json:
        output_files.write_json(
            "json",
            args.json,
            {
                "cpu_count": os.cpu_count(),
                "runs": runs,
                "spread": spread,
                **({"trace": trace} if trace else {}),
            },
        )


if __name__ == "__main__":
    main()
