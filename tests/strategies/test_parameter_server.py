"""ParameterServerStrategy over an in-process cluster of 1 worker + 1 ps: build, schedule, fit,
and the chief's check of its tasks' job (`strategies.job_check`).

Connecting to a cluster changes the process's TensorFlow context for good, so the cluster lives
in a child process (this file run as a script) and the test reads its report.
"""

import dataclasses
import json
import os
import subprocess
import sys
import unittest

import pytest

_TIMEOUT_S = 180


def _child() -> None:
    import portpicker  # pylint: disable=import-outside-toplevel
    import tfdist  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    from tfdist import strategies  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    ports = [portpicker.pick_unused_port() for _ in range(3)]
    cluster = strategies.make_cluster(num_workers=1, num_ps=1, chief=True, ports=ports)
    # Worker servers need inter-op threads >= num_workers + 1, or they hang on 2 cores.
    server_config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2)
    spec = tf.train.ClusterSpec({job: list(addresses) for job, addresses in cluster.jobs.items()})
    servers = [
        tf.distribute.Server(
            spec, job_name=job, task_index=0, protocol="grpc", config=server_config, start=True
        )
        for job in ("worker", "ps")
    ]
    plan = _plan(cluster, data_dir=sys.argv[1])  # Builds the strategy (tfdist.setup).
    strategy = plan.strategy
    with strategy.scope():
        big = tf.Variable(tf.ones([2 * 256 * 1024 // 4 * 2]))  # 2 MiB: split into 2 shards
        total = tf.Variable(0.0)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)

    @tf.function
    def step():
        total.assign_add(1.0)
        return total.read_value()

    for _ in range(3):
        coordinator.schedule(step)
    coordinator.join()
    print(
        json.dumps(
            {
                "kind": strategies.kind_of(strategy).value,
                "num_shards": len(getattr(big, "variables", [big])),
                "total": float(total.numpy()),
                "servers": len(servers),
                "fit": _fit(plan),
                "job_check": _job_check(cluster),
            }
        )
    )


def _job_check(cluster) -> dict:
    """The chief's check of its workers' and ps tasks' job (their environment's, which is this
    process's: SLURM_JOB_ID=7, SLURM_STEP_ID=0), against two jobs: what each check said."""
    from tfdist import strategies  # pylint: disable=import-outside-toplevel

    said = {}
    for job in ("Slurm job 7 step 0", "Slurm job 8 step 0"):
        origin = strategies.Origin(job, "ports the test picked", "give each job its own ports")
        try:
            strategies.check_job(
                dataclasses.replace(cluster, origin=origin),
                strategies.StrategyKind.PARAMETER_SERVER,
                None,
            )
            said[job] = "passed"
        except strategies.ClusterConfigError as error:
            said[job] = str(error)
    return said


def _plan(cluster, data_dir: str):
    """tfdist's set-up of the coordinator (the chief): a parameter-server strategy with
    variables split in 2, and the large-batch recipe's optimizer (LARS, warmup, clipping,
    noise, accumulation)."""
    # pylint: disable=import-outside-toplevel
    import tfdist
    from tfdist.input_pipelines import InputConfig

    config = tfdist.RunConfig(
        strategy=tfdist.StrategyConfig(
            strategy="parameter_server", variable_partition="max_shards:2"
        ),
        input=InputConfig(data_dir=data_dir, global_batch_size=16),
        train=tfdist.TrainConfig(epochs=1, steps_per_epoch=4, validation_steps=2),
        optimizer=tfdist.OptimizerConfig(
            optimizer="lars",
            learning_rate=0.5,
            warmup_epochs=0.5,
            lr_schedule="cosine",
            clip_norm=1.0,
            gradient_noise_eta=0.01,
            grad_accum_steps=2,
        ),
        cluster=cluster,
    )
    return tfdist.setup(config)


def _fit(plan) -> dict:
    """tfdist train's fit on the coordinator: DatasetCreator input, a few steps, validation."""
    from tfdist.training import from_config as train_command  # pylint: disable=import-outside-toplevel

    result = train_command.fit(plan)
    return {"steps": result["steps"], "metrics": sorted(result["final"])}


@pytest.mark.multiprocess
class ParameterServerBuildTest(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _data_dir(self, shapes_data_dir):
        self.data_dir = shapes_data_dir

    def test_coordinator_trains_on_in_process_cluster(self):
        result = subprocess.run(
            [sys.executable, __file__, self.data_dir],
            env={**os.environ, "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"},  # For `_job_check`.
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        report = json.loads(result.stdout.strip().splitlines()[-1])
        said = report.pop("job_check")
        self.assertEqual(said["Slurm job 7 step 0"], "passed")
        self.assertRegex(
            said["Slurm job 8 step 0"],
            r"^Slurm job 8 step 0: the task at worker:0's address 127\.0\.0\.1:\d+ is Slurm "
            r"job 7 step 0's, not this job's: another job's task holds this job's port there "
            r"\(ports the test picked\); give each job its own ports\.$",
        )
        self.assertEqual(
            report,
            {
                "kind": "parameter_server",
                "num_shards": 2,
                "total": 3.0,
                "servers": 2,
                "fit": {"steps": 4, "metrics": ["accuracy", "loss", "val_accuracy", "val_loss"]},
            },
        )


if __name__ == "__main__":
    _child()
