"""The runs of scripts/planning/check_plan_links.py: `tfdist train` tasks on emulated hosts,
each with its own log, and the compute-only runs beside them (the check's table, plot and
predictions are in check_plan_links.py).

The model, `--model=plan_links_runs:wide_mlp`, is found on PYTHONPATH: every task gets this
folder on it.
"""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

from tfdist.cluster.rehearsal import hosts as hosts_lib

_SCRIPTS = os.path.dirname(os.path.abspath(__file__))
_PORT = 2222
_TASK_TIMEOUT_S = 900


def wide_mlp(*, input_shape: tuple[int, int, int], num_classes: int):
    """`--model=plan_links_runs:wide_mlp`: flatten, one hidden layer of $PLAN_LINKS_WIDTH
    units (default 1280), softmax; built in the strategy's scope by `tfdist train`."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    width = int(os.environ.get("PLAN_LINKS_WIDTH", "1280"))
    layers = tf.keras.layers
    return tf.keras.Sequential(
        [
            layers.Input(input_shape),
            layers.Flatten(),
            layers.Dense(width, activation="relu"),
            layers.Dense(num_classes),
            layers.Activation("softmax", dtype="float32"),
        ],
        name="wide_mlp",
    )


def _train_flags(batch: int, steps: int, metrics_path: str) -> list[str]:
    return [
        "--model=plan_links_runs:wide_mlp",
        "--dataset=synthetic",
        f"--per_replica_batch_size={batch}",
        "--optimizer=sgd",
        "--epochs=2",
        f"--steps_per_epoch={steps}",
        "--validation_steps=1",
        f"--metrics_json={metrics_path}",
    ]


def _environment(width: int, tf_config: dict | None) -> dict:
    env = dict(
        os.environ,
        PLAN_LINKS_WIDTH=str(width),
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.pathsep.join(filter(None, (_SCRIPTS, os.environ.get("PYTHONPATH")))),
    )
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


class Tasks:
    """Processes of one measurement, each with its own log; `stop` kills those still running
    (their process groups), and `failure` names the first that failed with its log's tail."""

    def __init__(self, scratch: str):
        self._scratch = scratch
        self._running: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict) -> subprocess.Popen:
        with open(os.path.join(self._scratch, f"{name}.log"), "w", encoding="utf-8") as log:
            process = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._running.append((name, process))
        return process

    def wait(self, names: list[str], timeout_s: float) -> None:
        """Waits for the tasks `names` to exit 0; SystemExit with a log's tail otherwise."""
        deadline = time.monotonic() + timeout_s
        waited = {name: process for name, process in self._running if name in names}
        while waited:
            for name, process in list(waited.items()):
                status = process.poll()
                if status is None:
                    continue
                if status:
                    raise SystemExit(self.failure(name, f"exit status {status}"))
                del waited[name]
            if time.monotonic() > deadline:
                raise SystemExit(self.failure(next(iter(waited)), f"no end in {timeout_s:g} s"))
            time.sleep(0.2)

    def failure(self, name: str, why: str) -> str:
        with open(os.path.join(self._scratch, f"{name}.log"), encoding="utf-8") as log:
            tail = log.read()[-3000:]
        return f"check_plan_links: task {name} failed ({why}):\n{tail}"

    def stop(self) -> None:
        for _, process in self._running:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 9)
            process.wait(timeout=30)
        self._running = []


def _metrics(path: str) -> dict:
    with open(path, encoding="utf-8") as metrics_file:
        return json.load(metrics_file)


def compute_step(hosts: int, batch: int, width: int, steps: int, wire: str) -> tuple[float, int]:
    """(seconds per step of the slowest, trainable parameters) of `hosts` independent 1-worker
    multi_worker_mirrored jobs run at once on this machine, with `wire` on the wire."""
    with tempfile.TemporaryDirectory() as scratch:
        tasks = Tasks(scratch)
        try:
            for index in range(hosts):
                argv = [
                    sys.executable,
                    "-m",
                    "tfdist",
                    "train",
                    "--strategy=multi_worker_mirrored",
                    f"--allreduce_dtype={wire}",
                    *_train_flags(batch, steps, os.path.join(scratch, f"{index}.json")),
                ]
                tasks.start(f"compute-{index}", argv, _environment(width, None))
            tasks.wait([f"compute-{index}" for index in range(hosts)], _TASK_TIMEOUT_S)
        finally:
            tasks.stop()
        runs = [_metrics(os.path.join(scratch, f"{index}.json")) for index in range(hosts)]
    return (max(batch / run["examples_per_sec"] for run in runs), runs[0]["trainable_parameters"])


def _layout(made: hosts_lib.Hosts, workers: int, num_ps: int) -> dict[str, hosts_lib.Host]:
    """Task name ("worker-0", "ps-1", "chief-0") -> its host: workers first, then ps tasks, the
    coordinator last."""
    names = [f"worker-{index}" for index in range(workers)]
    if num_ps:
        names += [f"ps-{index}" for index in range(num_ps)] + ["chief-0"]
    return dict(zip(names, made.hosts))


def measured_step(
    made: hosts_lib.Hosts, exchange: str, workers: int, batch: int, width: int, steps: int
) -> dict:
    """One cell's `tfdist train` on the emulated hosts: its step (seconds, the synchronous
    equivalent under parameter server) and the run's metrics."""
    kind, _, setting = exchange.partition("-")
    num_ps = int(setting) if kind == "ps" else 0
    layout = _layout(made, workers, num_ps)
    cluster = {}
    for task, host in layout.items():
        cluster.setdefault(task.split("-")[0], []).append(f"{host.address}:{_PORT}")
    if kind == "ring":
        flags = [
            "--strategy=multi_worker_mirrored",
            f"--allreduce_dtype={setting}",
            "--collective_timeout_s=600",
        ]
        primary = "worker-0"
    else:
        flags = ["--strategy=parameter_server"] + (
            [f"--variable_partition=max_shards:{num_ps}"] if num_ps > 1 else []
        )
        primary = "chief-0"
    with tempfile.TemporaryDirectory() as scratch:
        tasks = Tasks(scratch)
        try:
            for task, host in layout.items():
                job, index = task.split("-")
                tf_config = {"cluster": cluster, "task": {"type": job, "index": int(index)}}
                argv = [
                    *host.enter(),
                    sys.executable,
                    "-m",
                    "tfdist",
                    "train",
                    *flags,
                    *_train_flags(batch, steps, os.path.join(scratch, f"{task}.json")),
                ]
                tasks.start(task, argv, _environment(width, tf_config))
            done = (
                [task for task in layout if task.startswith("worker")]
                if kind == "ring"
                else [primary]
            )
            tasks.wait(done, _TASK_TIMEOUT_S)
        finally:
            tasks.stop()
        metrics = _metrics(os.path.join(scratch, f"{primary}.json"))
    return {
        "step_s": workers * batch / metrics["examples_per_sec"],
        "examples_per_sec": metrics["examples_per_sec"],
        "epoch_train_s": metrics.get("epoch_train_s"),
        "steps_per_epoch": steps,
    }
