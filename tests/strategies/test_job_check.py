"""strategies.job_check: a cluster that holds a task of another job is refused in one line at
join (TensorFlow's cluster spec alone joins whatever answers at its addresses)."""

import dataclasses
import json
import subprocess
import sys
import unittest
from unittest import mock

import pytest

from tfdist import strategies
from tfdist.strategies import ClusterConfigError
from tfdist.strategies import Origin
from tfdist.strategies import StrategyKind
from tfdist.strategies import job_check

_TIMEOUT_S = 120
_ORIGIN = Origin("Slurm job 42 step 0", "ports the test picked", "give each job its own ports")


def _cluster(origin=_ORIGIN, ports=(2001, 2002), index=0):
    cluster = strategies.make_cluster(num_workers=2, ports=list(ports), task=("worker", index))
    return dataclasses.replace(cluster, origin=origin)


class CompareTest(unittest.TestCase):
    def test_a_cluster_without_an_origin_is_not_checked(self):
        with mock.patch.object(job_check, "_through_coordination") as checked:
            job_check.check(_cluster(origin=None), StrategyKind.MULTI_WORKER_MIRRORED, None)
            job_check.check(None, StrategyKind.ONE_DEVICE, None)
        checked.assert_not_called()

    def test_multi_worker_tasks_check_through_the_coordination_service(self):
        with mock.patch.object(job_check, "_through_coordination") as checked:
            job_check.check(_cluster(), StrategyKind.MULTI_WORKER_MIRRORED, None)
        checked.assert_called_once_with(_cluster(), 60.0)

    def test_another_jobs_task_is_one_line_naming_both_jobs_the_address_and_the_fix(self):
        job_check._compare(_cluster(), "worker:1", "Slurm job 42 step 0", "")  # The same job.
        with self.assertRaises(ClusterConfigError) as raised:
            job_check._compare(_cluster(), "worker:1", "Slurm job 1042 step 0", "")
        self.assertEqual(
            str(raised.exception),
            "Slurm job 42 step 0: the task at worker:1's address 127.0.0.1:2002 is Slurm job 1042 "
            "step 0's, not this job's: another job's task holds this job's port there (ports the "
            "test picked); give each job its own ports.",
        )
        with self.assertRaisesRegex(ClusterConfigError, "address 127.0.0.1:2001 runs in no Slurm"):
            job_check._compare(_cluster(), "worker:0", None, "runs in no Slurm job step")

    def test_what_a_peer_says_is_cut(self):
        with self.assertRaisesRegex(ClusterConfigError, r"is xxxx.* \.\.\.'s, not this job's"):
            job_check._compare(_cluster(), "worker:1", "x" * 500, "")


def _child(ports: list[int], index: int, job: str) -> None:
    """Worker `index` of a 2-worker multi_worker_mirrored cluster on `ports`, of `job`: builds
    the strategy, checks its peer's job and prints what it found."""
    import tfdist  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import

    cluster = _cluster(dataclasses.replace(_ORIGIN, job=job), ports, index)
    config = strategies.StrategyConfig(strategy="multi_worker_mirrored", collective_timeout_s=60)
    strategies.build(config, cluster)
    try:
        strategies.check_job(cluster, StrategyKind.MULTI_WORKER_MIRRORED, 30)
    except ClusterConfigError as error:
        print(json.dumps({"refused": str(error)}), flush=True)
        return
    print(json.dumps({"refused": None}), flush=True)


@pytest.mark.multiprocess
class TwoJobsInOneClusterTest(unittest.TestCase):
    def test_both_tasks_refuse_the_other_jobs_task(self):
        """Two tasks of two jobs that derived the same ports: worker 0 (the leader) and worker
        1 each find the other's job in TensorFlow's coordination service."""
        import portpicker  # pylint: disable=import-outside-toplevel

        ports = [portpicker.pick_unused_port() for _ in range(2)]
        children = [
            subprocess.Popen(  # pylint: disable=consider-using-with
                [
                    sys.executable,
                    __file__,
                    json.dumps(ports),
                    str(index),
                    f"Slurm job {job} step 0",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for index, job in ((0, 42), (1, 1042))
        ]
        said = [child.communicate(timeout=_TIMEOUT_S) for child in children]
        refused = [json.loads(out.strip().splitlines()[-1])["refused"] for out, _ in said]
        self.assertRegex(
            refused[0] or said[0][1][-3000:],
            r"^Slurm job 42 step 0: the task at worker:1's address 127\.0\.0\.1:\d+ is Slurm job "
            r"1042 step 0's, not this job's",
        )
        self.assertRegex(
            refused[1] or said[1][1][-3000:],
            r"^Slurm job 1042 step 0: the task at worker:0's address 127\.0\.0\.1:\d+ is Slurm "
            r"job 42 step 0's, not this job's",
        )


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
