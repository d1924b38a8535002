"""tfdist's generated sbatch scripts on a real Slurm cluster (Debian's slurm-wlm 22.05: munged,
slurmctld and one slurmd per node, on emulated hosts named node9 and node10, whose text and
numeric orders differ). Submitted as generated, with sbatch.

Where Slurm is not installed these tests skip, except under TFDIST_REQUIRE_SLURM=1 (`.ci/run`
installs Slurm and sets it), where a missing Slurm fails them.
"""

import json
import os
import re
import signal
import sys
import tempfile
import time
import unittest

import pytest

from tests.tfdist.cli_runner import MLP_PROGRAM
from tests.tfdist.cluster.rehearsal.emulated_hosts import real_slurm_or_skip
from tfdist.cluster import manifests
from tfdist.cluster.rehearsal import slurm_accounting
from tfdist.cluster.rehearsal import slurm_cluster

_NODES = ("node9", "node10")
_JOB_S = 180.0  # A job's bound, from submission to its end.
_ENDED_S = 30.0  # After a task is killed or the job cancelled: every task ends (KillWait 5 s).
_STEPS = 20  # Steps of an epoch of the preempted jobs.
# The program of one's own the side-by-side test runs: an MLP on generated data, 2 workers.
_MLP = ["--epochs=3", "--steps_per_epoch=4", "--global_batch_size=16", "--collective_timeout_s=60"]
_TRAIN = [
    "--dataset=synthetic",
    "--num_classes=4",
    "--image_size=8",
    "--global_batch_size=16",
    "--collective_timeout_s=60",
]


def _step_daemons(job_id: int) -> list[int]:
    """The pids of the slurmstepd processes of `job_id` still running on this machine."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if cmdline.read().startswith(f"slurmstepd: [{job_id}.".encode()):
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _task_pids(job_id: int) -> dict[int, int]:
    """{rank: pid} of the tasks of `job_id` still running on this machine (their environment
    names the job and the rank)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                env = dict(
                    entry.partition(b"=")[::2] for entry in environ.read().split(b"\0") if entry
                )
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                command = cmdline.read()
        except OSError:
            continue
        if env.get(b"SLURM_JOB_ID") == str(job_id).encode() and b"tfdist" in command:
            found[int(env.get(b"SLURM_PROCID", b"-1"))] = int(pid)
    return found


@pytest.mark.multiprocess
class RealSlurmTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._scratch = tempfile.TemporaryDirectory()  # pylint: disable=consider-using-with
        cls.cluster = None

    @classmethod
    def tearDownClass(cls):
        if cls.cluster is not None:
            cls.cluster.close()
        cls._scratch.cleanup()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        real_slurm_or_skip()
        if RealSlurmTest.cluster is None:
            os.chmod(self._scratch.name, 0o755)
            RealSlurmTest.cluster = slurm_cluster.SlurmCluster(
                _NODES,
                os.path.join(self._scratch.name, "slurm"),
                accounting=slurm_accounting.missing() is None,  # For sacct, where it can.
            )
        self.dir = tempfile.mkdtemp(dir=self._scratch.name)

    def _submit(self, name: str, *sbatch_options: str, **layout) -> tuple[int, str]:
        """Writes the script `tfdist manifest --format=slurm` writes for `layout` and submits
        it as written; its job id and output file."""
        path, output = os.path.join(self.dir, f"{name}.sh"), os.path.join(self.dir, f"{name}.out")
        with open(path, "w", encoding="utf-8") as script:
            script.write(manifests.slurm(job_name=name, python=sys.executable, **layout))
        job = self.cluster.submit(
            path, f"--chdir={self.dir}", f"--output={output}", *sbatch_options
        )
        return job, output

    def _wait_for(self, output: str, line: str, job: int, since: int = 0) -> None:
        """Waits until `line` is in `output` past offset `since`, while the job runs."""
        deadline = time.monotonic() + _JOB_S
        while time.monotonic() < deadline:
            text = open(output, encoding="utf-8").read() if os.path.exists(output) else ""
            if line in text[since:]:
                return
            self.assertNotIn(
                self.cluster.state(job),
                ("COMPLETED", "FAILED", "CANCELLED"),
                f"before {line!r}: {text[-3000:]}{self._show(job)}",
            )
            time.sleep(0.25)
        self.fail(f"no {line!r} in {output}")

    def _slurmctld_log(self) -> str:
        with open(os.path.join(self.cluster.directory, "slurmctld.log"), encoding="utf-8") as log:
            return "".join(log.readlines()[-30:])

    def _show(self, job: int) -> str:
        return self.cluster.command("scontrol", "show", "job", "--oneliner", str(job)).stdout

    def _trained(self, name: str, strategy: str, *sbatch_options: str, epochs: int = 1, **layout):
        """Submits a job of `tfdist train` under `strategy` (4 steps an epoch) laid out as
        `layout`, and waits until it COMPLETED; its id and output."""
        train_args = [*_TRAIN, f"--strategy={strategy}", f"--epochs={epochs}"]
        train_args += ["--steps_per_epoch=4", f"--model_dir={self.dir}/run"]
        job, output = self._submit(name, *sbatch_options, train_args=train_args, **layout)
        self.assertEqual(self.cluster.wait(job, _JOB_S), "COMPLETED", open(output).read()[-3000:])
        return job, open(output, encoding="utf-8").read()

    def test_multi_worker_mirrored_one_task_per_node_identical_metrics(self):
        job, text = self._trained("mwm", "multi_worker_mirrored", epochs=2, num_workers=2)
        self.assertIn("NumNodes=2", self._show(job))
        self.assertIn("NodeList=node[9-10]", self._show(job))
        summaries = re.findall(
            r"^(\d): tfdist: multi_worker_mirrored .*: (.*loss=[\d.]+)", text, re.M
        )
        self.assertEqual(sorted(rank for rank, _ in summaries), ["0", "1"], text[-3000:])
        self.assertEqual(summaries[0][1], summaries[1][1], "both workers end with one model")

    def test_parameter_server_two_tasks_per_node_laid_out_cyclic(self):
        job, text = self._trained(
            "ps",
            "parameter_server",
            "--distribution=cyclic",
            num_workers=2,
            num_ps=1,
            chief=True,
            tasks_per_node=2,
        )
        self.assertIn("NumNodes=2", self._show(job))
        self.assertRegex(text, r"(?m)^0: tfdist: parameter_server .*loss=")

    def test_an_uneven_layout_fewer_nodes_than_tasks(self):
        """--slurm_nodes=2 for a chief, a ps and a worker: Slurm lays 3 tasks out on 2 nodes
        (2 and 1) and each task derives that."""
        job, text = self._trained(
            "uneven", "parameter_server", num_workers=1, num_ps=1, chief=True, nodes=2
        )
        self.assertIn("NumNodes=2 NumCPUs=3 NumTasks=3", self._show(job))
        self.assertRegex(text, r"(?m)^0: tfdist: parameter_server .*loss=")

    def _digests(self, text: str) -> dict[str, str]:
        """{task: weights' sha} of the program's digest lines in `text` (srun --label's)."""
        found = [json.loads(line) for line in re.findall(r"^\d+: digest (.*)$", text, re.M)]
        return {digest["task"]: digest["sha"] for digest in found}

    def _mlp(self, name: str) -> list[str]:
        return ["python", MLP_PROGRAM, *_MLP, f"--model_dir={self.dir}/{name}"]

    def test_two_jobs_side_by_side_one_timed_out_one_requeued_train_as_a_plain_srun_alone(self):
        """A program of one's own: `srun -N2 -n2 python PROGRAM` alone trains 2 workers in one
        cluster (auto; with --resv-ports=0, as on a site without MpiParams=ports, on ports from
        the job id). Then two generated jobs of it run together on the same two nodes, each on
        ports reserved for its step: one nears its time limit (Slurm's `--signal=USR1@T`
        reaches both tasks), the other is ended by `scontrol requeue` (a SIGTERM to the
        tasks); in each the last task holds at epoch 2's start until its notice comes. Both
        save at one step and are requeued (the first by its script, given a longer limit while
        it waits; the second by Slurm), and both resumed runs end with the weights the plain
        run had alone. The requeued job, run again once finished, trains nothing."""
        srun = self.cluster.command(
            *("srun", "-N2", "-n2", "--resv-ports=0", "--label", f"--chdir={self.dir}"),
            sys.executable,
            *self._mlp("alone")[1:],
            timeout_s=_JOB_S,
        )
        self.assertEqual(srun.returncode, 0, srun.stderr[-3000:])
        alone = self._digests(srun.stdout)
        self.assertEqual(sorted(alone), ["worker:0", "worker:1"], srun.stdout[-3000:])
        self.assertEqual(len(set(alone.values())), 1, "one model in one cluster")
        self.assertRegex(
            srun.stderr,
            r"(?m)^1: tfdist: worker:1 at node10:\d+: the cluster of the Slurm job step "
            r"\(--cluster_resolver=auto: TF_CONFIG is unset and SLURM_STEP_NUM_TASKS=2\); "
            r"ports from the job id",
        )
        # The last task holds at epoch 2 (up to 240 s, within the collective timeout) until its
        # notice. USR1 is due 80 s into the 3-minute limit, past any start-up here; slurmctld
        # sends it within 30 s of that.
        held = ["--hold_at_epoch=2", "--hold_s=240", "--collective_timeout_s=300"]
        timed = self._submit(
            "timed",
            num_workers=2,
            train_args=None,
            program=[*self._mlp("timed"), *held],
            time_limit="00:03:00",
            grace_s=100,
        )
        requeued = self._submit(
            "requeued", num_workers=2, train_args=None, program=[*self._mlp("requeued"), *held]
        )
        self._wait_running_together(timed[0], requeued[0])
        self._wait_for(requeued[1], "1: worker:1: holding at epoch 2", requeued[0])
        self.cluster.command("scontrol", "requeue", str(requeued[0]))
        self._wait_for(
            timed[1], f"every task saved (exit 75): scontrol requeue {timed[0]}", timed[0]
        )
        self.cluster.command("scontrol", "update", f"JobId={timed[0]}", "TimeLimit=30")
        ports = []
        for job, output in (timed, requeued):
            self.cluster.start_requeued(job, restarts=1, timeout_s=_JOB_S)
            self.assertEqual(
                self.cluster.wait(job, _JOB_S), "COMPLETED", open(output).read()[-3000:]
            )
            self.assertIn("NodeList=node[9-10]", self._show(job))
            text = open(output, encoding="utf-8").read()
            saved = re.findall(
                r"^(\d): .*: preempted at epoch 2 step (\d+); state saved", text, re.M
            )
            self.assertEqual(sorted(rank for rank, _ in saved), ["0", "1"], text[-3000:])
            self.assertEqual(saved[0][1], saved[1][1], "both tasks saved at one step")
            for rank in (0, 1):
                resumed = f"{rank}: tfdist: resuming at epoch 2 step {int(saved[0][1]) + 1} from"
                self.assertIn(resumed, text)
            self.assertEqual(self._digests(text), alone, f"{output}: the weights of alone's")
            # Each attempt's two tasks say their step's ports; the first attempts ran together.
            found = re.findall(r"ports (\S+) reserved for the step by Slurm", text)
            self.assertEqual(len(found), 4, text[-3000:])
            ports.append(set(found[:2]))
        self.assertFalse(ports[0] & ports[1], f"each job its own ports: {ports}")
        self._run_again_once_finished(*requeued)

    def _wait_running_together(self, *jobs: int) -> None:
        """Waits until every one of `jobs` runs at once, on the same nodes."""
        deadline = time.monotonic() + _JOB_S
        while {self.cluster.state(job) for job in jobs} != {"RUNNING"}:
            self.assertLess(time.monotonic(), deadline, [self._show(job) for job in jobs])
            time.sleep(0.25)
        for job in jobs:
            self.assertIn("NodeList=node[9-10]", self._show(job))

    def _run_again_once_finished(self, job: int, output: str) -> None:
        """Requeues finished `job` (`scontrol requeue` requeues a finished job too, as it does
        a failed one): its run says it is already finished and ends COMPLETED without
        training; sacct keeps every run of the job."""
        self.cluster.command("scontrol", "requeue", str(job))
        self.cluster.start_requeued(job, restarts=2, timeout_s=_ENDED_S)
        self.assertEqual(self.cluster.wait(job, _JOB_S), "COMPLETED", open(output).read()[-3000:])
        self.assertEqual(self.cluster.exit_code(job), 0)
        text = open(output, encoding="utf-8").read()
        for rank in (0, 1):
            self.assertEqual(
                text.count(f"{rank}: tfdist: multi_worker_mirrored on 2 replica(s)"),
                1,
                "the summary of the one run that trained to the end, not of this one",
            )
            self.assertEqual(
                text.count(f"{rank}: tfdist: already finished at epoch 3 in model_dir="),
                1,
                text[-3000:],
            )
        if self.cluster.accounting:
            self._assert_runs(job, ["REQUEUED", "REQUEUED", "COMPLETED"])

    def _wait_ended(self, job: int, since: float, state: str) -> None:
        """Waits until `job` is in `state` and every task of it has ended, within _ENDED_S of
        `since`."""
        self.assertEqual(self.cluster.wait(job, _ENDED_S), state, self._show(job))
        while _task_pids(job) and time.monotonic() - since < _ENDED_S:
            time.sleep(0.25)
        self.assertEqual(_task_pids(job), {}, "every task of the job ended")
        self.assertLess(time.monotonic() - since, _ENDED_S)

    def test_a_killed_task_ends_the_job(self):
        job, output = self._submit(
            "killed",
            num_workers=2,
            train_args=[
                *_TRAIN,
                "--strategy=multi_worker_mirrored",
                "--epochs=1000",
                "--steps_per_epoch=20",
                f"--model_dir={self.dir}/run",
            ],
        )
        self._wait_for(output, "1: Epoch 2/", job)
        os.kill(_task_pids(job)[1], signal.SIGKILL)
        self._wait_ended(job, time.monotonic(), "FAILED")
        self.assertRegex(open(output).read(), r"srun: error: node10: task 1: Killed")
        # The script exits with srun's status: a signal's 128 + N, the killed task's SIGKILL
        # or the SIGTERM with which srun then ended its peer, whichever srun counts (both seen).
        self.assertRegex(self._show(job), r"ExitCode=(137|143):0")
        # Not requeued (the lost-peer line's hint names `scontrol requeue JOBID` for the user).
        self.assertNotIn(f"scontrol requeue {job}", open(output).read())
        self.assertIn("Restarts=0", self._show(job))

    def _requeued(self, job: int, output: str, notice: list[str], since: int) -> str:
        """Sends `notice` (scancel ARGS JOB) once the attempt in `output` past offset `since`
        trains, waits until the job requeued itself and its
        attempt's step daemons are gone, and starts it again; the attempt's output."""
        self._wait_for(output, "1: Epoch", job, since)
        restarts = int(re.search(r"Restarts=(\d+)", self._show(job)).group(1))
        self.cluster.command("scancel", *notice, str(job))
        # Requeued, Slurm holds the job back by about two minutes (BeginTime) while its nodes
        # clean up; once the attempt's step daemons are gone, start it now (sooner, under
        # load, a node still ending the first run refused the second: "Job credential revoked").
        deadline = time.monotonic() + _JOB_S
        while _step_daemons(job):
            self.assertLess(time.monotonic(), deadline, self._show(job) + self._slurmctld_log())
            time.sleep(0.25)
        self.cluster.start_requeued(job, restarts=restarts + 1, timeout_s=_JOB_S)
        self._wait_for(output, f"restart {restarts + 1} (SLURM_RESTART_COUNT)", job, since)
        return open(output, encoding="utf-8").read()[since:]

    def _saved_and_resumed(self, job: int, output: str, notice: list[str], since: int) -> int:
        """`_requeued`, checking that both tasks saved at one step and exited 75 and that they
        resume at the next step; the output's length then."""
        text = self._requeued(job, output, notice, since)
        saved = re.findall(
            r"^(\d): tfdist train: preempted at (epoch \d+ step \d+|the end of epoch \d+); "
            r"state saved in [\d.]+ s ",
            text,
            re.M,
        )
        self.assertEqual(sorted(rank for rank, _ in saved), ["0", "1"], text[-3000:])
        self.assertEqual(saved[0][1], saved[1][1], "both tasks saved at one step")
        self.assertIn(f"every task saved (exit 75): scontrol requeue {job}", text)
        # Stopped after the epoch's last step, the epoch ends first and the run resumes at the
        # next one.
        numbers = [int(number) for number in re.findall(r"\d+", saved[0][1])]
        epoch, step = numbers if len(numbers) == 2 else (numbers[0], _STEPS)
        resumed = f"epoch {epoch} step {step + 1}" if step < _STEPS else f"epoch {epoch + 1}"
        for rank in (0, 1):
            self._wait_for(output, f"{rank}: tfdist: resuming at {resumed} from the backup", job)
        return len(open(output, encoding="utf-8").read())

    def test_every_notice_saves_requeues_and_resumes(self):
        """In one job, one after the other: a SIGUSR1 to the batch shell alone (`--batch`, as
        `--signal=B:USR1@T` sends it) and to the shell, srun and the tasks (`--full`): each
        time both tasks save at one step and exit 75, the script requeues its own job, and
        the job resumes at the next step (the SIGUSR1 Slurm sends the tasks alone, before the
        time limit, is the side-by-side test's). Then a SIGTERM to all of them (`--full`), which
        srun answers with SIGKILL to the tasks: the job requeues itself and resumes from the
        last backup (an epoch's end). Every attempt's lines are in the one output file; a
        plain scancel, which also reaches the batch shell, ends the job for good."""
        job, output = self._submit(
            "preempted",
            num_workers=2,
            train_args=[
                *_TRAIN,
                "--strategy=multi_worker_mirrored",
                "--epochs=1000",
                f"--steps_per_epoch={_STEPS}",
                f"--model_dir={self.dir}/run",
            ],
        )
        since = self._saved_and_resumed(job, output, ["--batch", "--signal=USR1"], 0)
        since = self._saved_and_resumed(job, output, ["--full", "--signal=USR1"], since)
        text = self._requeued(job, output, ["--full", "--signal=TERM"], since)
        self.assertRegex(text, rf"srun ended 1\d\d after SIGTERM .*: scontrol requeue {job}")
        for rank in (0, 1):
            self._wait_for(output, f"{rank}: tfdist: resuming at epoch ", job, since)
        text = open(output, encoding="utf-8").read()
        for restart in range(4):  # Each attempt's lines, kept in one file.
            self.assertIn(f"tfdist sbatch: job {job} starts: restart {restart} ", text)
        self.assertIn("SIGUSR1 reached the batch shell", text)
        cancelled = time.monotonic()
        self.cluster.command("scancel", str(job))
        self._wait_ended(job, cancelled, "CANCELLED")
        # Not requeued a fourth time. (The script's own line saying so may not come: Slurm kills
        # the batch shell KillWait after the scancel, and srun can outlast that on a busy node.)
        self.assertEqual(open(output).read().count(f": scontrol requeue {job}\n"), 3)
        self.assertNotIn("Restarts=4", self._show(job))
        if self.cluster.accounting:
            self._assert_runs(job, ["REQUEUED"] * 3 + ["CANCELLED by 0"])  # By root.

    def test_a_sweep_runs_each_array_task_in_its_own_model_dir(self):
        sweep = manifests.Sweep(grid=(("learning_rate", ("0.05", "0.2")),))
        job, _ = self._submit(
            "sweep",
            f"--output={self.dir}/sweep-%A_%a.out",
            num_workers=1,
            sweep=sweep,
            train_args=[*_TRAIN, "--epochs=1", "--steps_per_epoch=2", f"--model_dir={self.dir}/sw"],
        )
        for index, rate in enumerate(("0.05", "0.2")):
            state = self.cluster.wait(f"{job}_{index}", _JOB_S)
            with open(f"{self.dir}/sweep-{job}_{index}.out", encoding="utf-8") as log:
                self.assertEqual(state, "COMPLETED", log.read()[-3000:])
            with open(f"{self.dir}/sw/{index}/sweep.json", encoding="utf-8") as values:
                self.assertEqual(
                    json.load(values),
                    {"array_task_id": index, "flags": {"learning_rate": rate}},
                )
            with open(f"{self.dir}/sw/{index}/metrics.json", encoding="utf-8") as metrics:
                self.assertEqual(json.load(metrics)["steps"], 2)

    def _assert_runs(self, job: int, states: list[str]) -> None:
        """Asserts that sacct says `states`, one per run of `job`, within _ENDED_S (slurmctld
        sends its records to slurmdbd on its own time)."""
        said, deadline = [], time.monotonic() + _ENDED_S
        while said != states and time.monotonic() < deadline:
            said = self.cluster.command(
                "sacct",
                "--duplicates",
                "--allocations",
                "--noheader",
                "--parsable2",
                "--format=State",
                f"--jobs={job}",
            ).stdout.splitlines()
            time.sleep(0.25)
        self.assertEqual(said, states)


if __name__ == "__main__":
    unittest.main()
