"""What a `gs://` model dir costs against a local one: the slowest backup save (what a grace
period must cover) and a resumed run's time to its first step, on one emulated host that reaches
an emulated Cloud Storage as TensorFlow reaches the real one (root; `pip install -e
'.[rehearse]'`).

    python scripts/preemption/bucket_cost.py [--parameters=1e6,25e6] [--runs=3] [--json=PATH]

For each model size (save_time.py's tf-keras MLP with Adam) and each model dir, local then
`gs://`, each run trains 3 epochs of 1 step (3 backups and a final save; the figure is the
slowest, `summary["backup_save_s"]`), then resumes the same model dir for a 4th epoch: the
resume's figure is from `tfdist.fit`'s call to its first step's end (restoring the backup
included). Both model dirs are written from the same emulated host, one after the other, in
the same run; prints min / median / max over the runs, the ratio of the medians (bucket over
local), and how many requests a run made of the storage. The emulator runs on this machine: its
figures are what TensorFlow's object-storage protocol costs without a network's round trips.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def inside(model_dir: str, parameters: float) -> dict:
    """One run on this host: the slowest save of 3 epochs, then a resume's first step."""
    import math  # pylint: disable=import-outside-toplevel

    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    import save_time  # pylint: disable=import-outside-toplevel  # Beside this script.
    import tfdist  # pylint: disable=import-outside-toplevel

    width = int(math.sqrt(parameters / (save_time._LAYERS - 1)))  # pylint: disable=protected-access

    class FirstStep(tf.keras.callbacks.Callback):
        def __init__(self, start: float):
            super().__init__()
            self.start, self.took = start, None

        def on_train_batch_end(self, batch, logs=None):
            if self.took is None:
                self.took = time.monotonic() - self.start

    def fit(epochs: int, callbacks=()) -> dict:
        config = tfdist.RunConfig(
            input=tfdist.InputConfig(global_batch_size=8),
            train=tfdist.TrainConfig(epochs=epochs, steps_per_epoch=1, model_dir=model_dir),
            optimizer=tfdist.OptimizerConfig(optimizer="adam", learning_rate=1e-4),
        )
        summary = tfdist.fit(
            tfdist.setup(config),
            save_time._model_fn(width),  # pylint: disable=protected-access
            save_time._dataset_fn(width),  # pylint: disable=protected-access
            validation_data=None,
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            callbacks=list(callbacks),
        )
        tf.keras.backend.clear_session()
        return summary

    trained = fit(3)
    first_step = FirstStep(time.monotonic())
    fit(4, [first_step])
    return {
        "parameters": trained["trainable_parameters"],
        "slowest_save_s": trained["backup_save_s"],
        "resume_first_step_s": first_step.took,
    }


def _one(host, storage, model_dir: str, parameters: float) -> dict:
    """`inside` run on `host` with `storage`'s environment, and the requests it made."""
    requests_before = storage.log().count("\n")
    result = subprocess.run(
        [
            *host.enter(),
            sys.executable,
            os.path.abspath(__file__),
            "--inside",
            f"--model_dir={model_dir}",
            f"--parameters={parameters}",
        ],
        env={**os.environ, **storage.env(), "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode:
        raise SystemExit(f"a run failed ({result.returncode}):\n{result.stderr[-3000:]}")
    run = json.loads(result.stdout.strip().splitlines()[-1])
    run["storage_requests"] = storage.log().count("\n") - requests_before
    return run


def _spread(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parameters", default="1e6,25e6")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model_dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        print(json.dumps(inside(args.model_dir, float(args.parameters))), flush=True)
        return
    # pylint: disable=import-outside-toplevel
    from tfdist.cluster.rehearsal import cloud_storage
    from tfdist.cluster.rehearsal import hosts as hosts_lib

    cloud_storage.require()
    results = []
    with tempfile.TemporaryDirectory(prefix="bucket-cost-") as scratch:
        with hosts_lib.Hosts([cloud_storage.NAMES, ("trainer",)]) as made:
            storage_host, trainer = made.hosts
            with cloud_storage.CloudStorage(storage_host, scratch + "/gcs", ["bkt"]) as storage:
                for parameters in (float(size) for size in args.parameters.split(",")):
                    result = {"parameters": parameters}
                    for kind in ("local", "bucket"):
                        runs = [
                            _one(
                                trainer,
                                storage,
                                f"{scratch}/{parameters:g}-{run}"
                                if kind == "local"
                                else f"gs://bkt/{parameters:g}-{run}",
                                parameters,
                            )
                            for run in range(args.runs)
                        ]
                        result[kind] = {
                            "slowest_save_s": _spread([run["slowest_save_s"] for run in runs]),
                            "resume_first_step_s": _spread(
                                [run["resume_first_step_s"] for run in runs]
                            ),
                            "storage_requests": statistics.median(
                                run["storage_requests"] for run in runs
                            ),
                            "runs": runs,
                        }
                    results.append(result)
                    _say(result, args.runs)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"sizes": results}, out, indent=2)


def _say(result: dict, runs: int) -> None:
    local, bucket = result["local"], result["bucket"]
    for figure in ("slowest_save_s", "resume_first_step_s"):
        shown = " / ".join(
            f"{kind}: {spread['min']:.2f} / {spread['median']:.2f} / {spread['max']:.2f} s"
            for kind, spread in (("local", local[figure]), ("bucket", bucket[figure]))
        )
        ratio = bucket[figure]["median"] / local[figure]["median"]
        print(
            f"{result['parameters'] / 1e6:.0f}M parameters, {figure} (min / median / max of "
            f"{runs}) {shown}; bucket / local {ratio:.2f}x",
            flush=True,
        )
    print(f"  storage requests a run (median): {bucket['storage_requests']:.0f}", flush=True)


if __name__ == "__main__":
    main()
