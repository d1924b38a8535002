"""tfdist programs under Ray Train (`tfdist ray`, `tfdist.cluster.ray_train`): what each Ray
worker runs, and whole runs on a real local Ray (`ray[train]`, installed by the test extra).

Where Ray is not installed the real-Ray tests skip, except under TFDIST_REQUIRE_RAY=1 (`.ci/run`
sets it), where a missing Ray fails them.
"""

import importlib.util
import contextlib
import functools
import io
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
import unittest
import unittest.mock

import pytest

from tests.tfdist.cli_runner import MLP_PROGRAM
from tests.tfdist.cli_runner import digests
from tests.tfdist.cli_runner import run_tfdist
from tests.tfdist.cli_runner import run_tfdist_cases
from tfdist.cluster import processes
from tfdist.cluster import ray_train
from tfdist.commands import ray_job
from tfdist.errors import UsageError
from tfdist.errors import EXIT_PREEMPTED
from tfdist.runtime import keras_env
from tfdist.runtime import ray_env

_IMPORTED_S = time.monotonic()

# A whole run's bound (its --timeout_s): Ray's start, two groups of workers importing
# TensorFlow, two runs at once, on a busy machine (one took over 360 s beside two CPU-bound
# processes and the suite's other worker); only a hang reaches it.
_RAY_TIMEOUT_S = 900
_RUN_S = _RAY_TIMEOUT_S + 60  # The driver's own bound, past its --timeout_s.


def _real_ray_or_skip() -> None:
    if importlib.util.find_spec("ray") is not None:
        return
    if os.environ.get("TFDIST_REQUIRE_RAY") == "1":
        pytest.fail("Ray is required here but not installed: pip install -e '.[ray]'")
    pytest.skip("Ray is not installed: pip install -e '.[ray]'")


class WorkerEnvTest(unittest.TestCase):
    def test_the_keras_flavour_quiet_logs_and_each_line_once(self):
        self.assertEqual(
            ray_env.worker_env(),
            {
                "TF_USE_LEGACY_KERAS": "1",
                "TF_CPP_MIN_LOG_LEVEL": "3",
                "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
            },
        )
        env = ray_env.worker_env(keras=3, tf_logs=True)
        self.assertEqual(env["TF_USE_LEGACY_KERAS"], "0")
        self.assertNotIn("TF_CPP_MIN_LOG_LEVEL", env)

    def test_the_runtime_env_names_a_hook_that_exists(self):
        env = ray_env.ray_runtime_env()
        module, _, name = env["worker_process_setup_hook"].rpartition(".")
        self.assertIs(getattr(sys.modules[module], name), ray_env.set_up_ray_process)

    def test_each_ray_process_is_told_its_own_rays_address(self):
        """So that Ray's own look-ups of "the" Ray on this machine (Ray Train's placement-group
        cleaner's) find the run's, where another Ray runs beside it."""
        context = types.SimpleNamespace(gcs_address="192.0.2.2:41234")
        fake_ray = types.SimpleNamespace(get_runtime_context=lambda: context)
        with (
            unittest.mock.patch.dict(sys.modules, {"ray": fake_ray}),
            unittest.mock.patch.dict(os.environ, {"RAY_ADDRESS": "auto"}),
        ):
            ray_env.set_up_ray_process()
            self.assertEqual(os.environ["RAY_ADDRESS"], "192.0.2.2:41234")

    def test_each_worker_gets_the_tf_config_of_its_place_in_the_group(self):
        with unittest.mock.patch.dict(os.environ):
            ray_train.set_tf_config(["10.0.0.1:4000", "10.0.0.2:4001"], 1)
            self.assertEqual(
                json.loads(os.environ["TF_CONFIG"]),
                {
                    "cluster": {"worker": ["10.0.0.1:4000", "10.0.0.2:4001"]},
                    "task": {"type": "worker", "index": 1},
                    "rpc_layer": "grpc",
                },
            )

    def test_the_cause_of_a_failed_run_is_the_first_failed_worker(self):
        class WorkerGroupError(Exception):
            worker_failures = {
                1: RuntimeError("Traceback ...\nWorkerFailed: `python x.py` exited with status -9"),
                0: RuntimeError("lost peer"),
            }

        self.assertEqual(
            ray_train.cause(WorkerGroupError("Training failed")), "worker 0: lost peer"
        )
        self.assertEqual(
            ray_train.cause(RuntimeError("controller died\ndetails")), "controller died"
        )

    def test_workers_that_did_not_start_name_the_lost_nodes_and_the_bound(self):
        _real_ray_or_skip()
        timed_out = RuntimeError(
            "Training failed.\nThe worker group startup timed out after 5.0 seconds waiting for "
            "2 workers."
        )
        why = functools.partial(
            ray_job._why_failed,  # pylint: disable=protected-access
            stop=None,
            tries=2,
            start_timeout_s=5,
        )
        with unittest.mock.patch.object(
            ray_train, "lost_nodes", return_value=["0123abcd at 10.0.0.2"]
        ):
            self.assertEqual(
                why(timed_out),
                "its workers did not start within 5 s, 2 time(s); gone since they started: "
                "node(s) 0123abcd at 10.0.0.2; add a node with room for them, or raise "
                "--start_timeout_s or --max_restarts",
            )
            self.assertEqual(why(RuntimeError("controller died\ndetails")), "controller died")

    def test_a_ray_job_whose_stop_kills_before_a_save_says_so_as_it_starts(self):
        warned = "tfdist ray: warning: `ray job stop` kills this job {} s after its SIGTERM"
        job = {"RAY_JOB_CONFIG_JSON_ENV_VAR": "{}"}
        for env, said in (
            ({}, ""),  # Not a Ray job.
            (job, warned.format(3)),
            ({**job, "RAY_JOB_STOP_WAIT_TIME_S": "10"}, warned.format(10)),
            ({**job, "RAY_JOB_STOP_WAIT_TIME_S": "30"}, ""),
        ):
            with self.subTest(env=env), unittest.mock.patch.dict(os.environ, env, clear=True):
                stderr = io.StringIO()
                with contextlib.redirect_stderr(stderr):
                    ray_job._warn_short_job_stop()  # pylint: disable=protected-access
                self.assertEqual(stderr.getvalue()[: len(said)], said)
                self.assertEqual(bool(stderr.getvalue()), bool(said))
                if said:
                    self.assertTrue(
                        stderr.getvalue().endswith(
                            "(15 s for the programs, then Ray's shutdown); start the head with "
                            "RAY_JOB_STOP_WAIT_TIME_S=30 to keep what a stop saves\n"
                        )
                    )

    def test_the_closing_lines_time_counts_from_the_process_start(self):
        age = ray_job._process_age_s()  # pylint: disable=protected-access
        # The process started before this module was imported, and not a day before.
        self.assertGreater(age, time.monotonic() - _IMPORTED_S)
        self.assertLess(age, 86400)

    def test_a_group_that_does_not_start_is_bounded_as_a_worker_failure_is(self):
        _real_ray_or_skip()
        trainer = ray_train.trainer(["true"], num_workers=2, max_failures=3, stop=None)
        failure = trainer.run_config.failure_config
        self.assertEqual((failure.max_failures, failure.controller_failure_limit), (3, 3))


@pytest.mark.multiprocess
class TrainLoopPerWorkerTest(unittest.TestCase):
    """The function each Ray worker runs, called here as Ray would (no Ray needed)."""

    def _run(self, program: str, env: dict[str, str] | None = None) -> None:
        ray_train.train_loop_per_worker(
            {
                "command": ["python", "-c", program],
                "tfdist_commands": ["train"],
                "env": env or {},
                "stop": None,
            }
        )

    def test_a_failed_program_fails_the_worker(self):
        with self.assertRaisesRegex(ray_train.WorkerFailed, r"`python -c .*` exited with status 3"):
            self._run("import sys; sys.exit(3)")
        self._run("pass")

    def test_a_stop_request_is_a_preemption_notice_to_the_program(self):
        # The program saves on SIGTERM and exits 75, as tfdist's programs do on a notice; it
        # says when its handler is in place (a SIGTERM before would end it with -15).
        program = subprocess.Popen(  # pylint: disable=consider-using-with
            [
                sys.executable,
                "-c",
                "import signal, sys, time; "
                "signal.signal(signal.SIGTERM, lambda *_: sys.exit(75)); "
                "print('ready', flush=True); time.sleep(60)",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.addCleanup(program.stdout.close)
        self.addCleanup(program.kill)
        self.assertEqual(program.stdout.readline(), "ready\n")
        asked = iter([False, True])
        start = time.monotonic()
        self.assertEqual(ray_train.wait_or_stop(program, lambda: next(asked)), (75, True))
        self.assertLess(time.monotonic() - start, 30)  # Asked twice, not its 60 s of sleep.
        finished = subprocess.Popen([sys.executable, "-c", "pass"])  # pylint: disable=consider-using-with
        self.assertEqual(ray_train.wait_or_stop(finished, lambda: False), (0, False))

    def test_a_program_that_saved_on_a_peers_notice_before_the_question_ended_on_the_stop(self):
        # Worker 1's program got the notice and shared it; worker 0's saved and exited 75
        # before worker 0 asked: once it ended, the worker asks, and the run was stopped.
        saved = subprocess.Popen([sys.executable, "-c", "raise SystemExit(75)"])  # pylint: disable=consider-using-with
        saved.wait()
        self.assertEqual(ray_train.wait_or_stop(saved, lambda: True), (75, True))
        failed = subprocess.Popen([sys.executable, "-c", "raise SystemExit(75)"])  # pylint: disable=consider-using-with
        self.assertEqual(ray_train.wait_or_stop(failed, lambda: False), (75, False))

    def test_the_program_gets_the_keras_flavour_ray_overrode(self):
        check = "import os, sys; sys.exit(os.environ['TF_USE_LEGACY_KERAS'] != '0')"
        with unittest.mock.patch.dict(os.environ, {"TF_USE_LEGACY_KERAS": "1"}):  # As Ray sets.
            self._run(check, env=keras_env.environment(3))


_KILLS_ITS_TREE = """
import os, subprocess, sys, time
from tfdist.cluster import ray_train
shell = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE)
grandchild = int(shell.stdout.readline())
ray_train.kill_descendants()
print(shell.wait(timeout=30), grandchild)
"""


@pytest.mark.multiprocess
class KillDescendantsTest(unittest.TestCase):
    def test_what_a_process_started_and_what_that_started_is_killed(self):
        result = subprocess.run(
            [sys.executable, "-c", _KILLS_ITS_TREE],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        status, grandchild = map(int, result.stdout.split())
        self.assertEqual(status, -9)
        for _ in range(100):  # Gone, or a zombie until its new parent reaps it.
            try:
                with open(f"/proc/{grandchild}/stat", encoding="utf-8") as stat:
                    if stat.read().rpartition(")")[2].split()[0] == "Z":
                        break
            except FileNotFoundError:
                break
            time.sleep(0.05)
        else:
            self.fail(f"the grandchild {grandchild} still runs")


class RayCommandInputTest(unittest.TestCase):
    @pytest.mark.multiprocess
    def test_bad_input_is_one_line_before_ray_starts(self):
        unreachable = "nothing there takes a connection: it "
        cases = (
            (["ray"], "needs the command every worker runs after `--`"),
            (["ray", "--", "no-such-program-here"], "is not an executable file or on PATH"),
            (["ray", "--", "train", "--epochs=-1"], "epochs"),
            (["ray", "--cpus_per_worker=nan", "--", "train"], "cpus_per_worker"),
            (["ray", "--cpus_per_worker=0", "--", "train"], "cpus_per_worker=0 reserves no CPU"),
            (["ray", "--address=h:99999", "--", "train"], "from 1 to 65535"),
            (
                ["ray", "--address=127.0.0.1:1", "--", "train"],
                f"address=127.0.0.1:1: {unreachable}does not answer (connection refused); start",
            ),
            (
                ["ray", "--address=ray://127.0.0.1:1", "--", "train"],
                f"address=ray://127.0.0.1:1: {unreachable}does not answer (connection refused)",
            ),
            (["ray", "--address=local:1", "--", "train"], f"{unreachable}does not resolve ("),
        )
        results = run_tfdist_cases([args for args, _ in cases], timeout_s=120)
        for (args, expected), result in zip(cases, results):
            with self.subTest(args=args):
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
                self.assertIn(expected, result.stderr)

    def test_a_worker_larger_than_every_node_is_one_line(self):
        _real_ray_or_skip()
        import ray  # pylint: disable=import-outside-toplevel

        nodes = [
            {"Alive": True, "Resources": {"CPU": 2.0}},
            {"Alive": True, "Resources": {"CPU": 4.0, "GPU": 1.0}},
            {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}},
        ]
        fits = {"cpus_per_worker": 4.0, "gpus_per_worker": 1}
        with unittest.mock.patch.object(ray, "nodes", return_value=nodes):
            ray_job._check_resources(fits)  # pylint: disable=protected-access
            for scaling, expected in (
                (
                    {**fits, "cpus_per_worker": 64.0},
                    "cpus_per_worker=64: no node of the Ray "
                    "cluster has that many CPUs (the most a node has is 4), so no worker would "
                    "start; pass at most 4, or add a node with more.",
                ),
                (
                    {**fits, "gpus_per_worker": 2},
                    "gpus_per_task=2: no node of the Ray cluster "
                    "has that many GPUs (the most a node has is 1)",
                ),
            ):
                with self.subTest(expected=expected[:16]):
                    with self.assertRaisesRegex(UsageError, "^" + re.escape(expected)):
                        ray_job._check_resources(scaling)  # pylint: disable=protected-access

    @pytest.mark.multiprocess
    def test_without_ray_one_line_says_how_to_install_it(self):
        with tempfile.TemporaryDirectory() as shadow:
            pathlib.Path(shadow, "ray.py").write_text("raise ImportError('no ray here')\n")
            result = run_tfdist(
                "ray", "--", "train", extra_env={"PYTHONPATH": shadow}, without_tensorflow=True
            )
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(
            result.stderr.strip(),
            "tfdist ray: error: Ray Train is not installed here; install it with pip install -e "
            "'.[ray]' (or pip install 'ray[train]').",
        )


def _tfdist_ray(home: str, *args: str, cwd: str | None = None) -> subprocess.Popen:
    """`tfdist ray ARGS` started in a child with its own HOME (Ray writes its token there),
    its output in one pipe."""
    return subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-m", "tfdist", "ray", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env={**{k: v for k, v in os.environ.items() if k != "TF_CONFIG"}, "HOME": home},
    )


@pytest.mark.multiprocess
class RealRayTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        _real_ray_or_skip()
        self.dir = self.enterContext(tempfile.TemporaryDirectory())

    def test_a_program_of_ones_own_and_tfdist_train_under_ray(self):
        """Two runs at once, each on a local Ray of its own (most of a run is Ray and
        TensorFlow starting, which overlap): a program of one's own whose worker 1 is killed,
        Ray restarting the group and the run resuming to equal weights on both workers; and
        `tfdist train` on one worker."""
        model_dir = os.path.join(self.dir, "model")
        own = _tfdist_ray(
            self.dir,
            "--num_workers=2",
            "--max_restarts=1",
            f"--timeout_s={_RAY_TIMEOUT_S}",
            "--",
            "python",
            os.path.basename(MLP_PROGRAM),  # Relative: where `tfdist ray` runs, not Ray's dir.
            "--strategy=multi_worker_mirrored",
            "--epochs=2",
            "--global_batch_size=32",
            f"--model_dir={model_dir}",
            "--kill_at_epoch=2",
            cwd=os.path.dirname(MLP_PROGRAM),
        )
        self.addCleanup(own.kill)
        train = _tfdist_ray(  # One worker: the program's run has two.
            self.dir,
            "--num_workers=1",
            f"--timeout_s={_RAY_TIMEOUT_S}",
            "--",
            "train",
            "--strategy=multi_worker_mirrored",
            "--dataset=synthetic",
            "--num_classes=4",
            "--image_size=8",
            "--epochs=1",
            "--steps_per_epoch=2",
            "--global_batch_size=16",
        )
        self.addCleanup(train.kill)
        output, _ = own.communicate(timeout=_RUN_S)
        self.assertEqual(own.returncode, 0, output[-6000:])
        self.assertIn("worker:1: sending myself SIGKILL at epoch 2", output)
        self.assertEqual(output.count("tfdist: resuming at epoch 2"), 2, output[-6000:])
        weights = digests(output)
        self.assertEqual(set(weights), {"worker:0", "worker:1"}, output[-6000:])
        self.assertEqual(len(set(weights.values())), 1, weights)
        self.assertNotIn("port.cc", output)  # TensorFlow's C++ start-up lines stay hidden.
        # The workers' command got the collective timeout: they wait for each other bounded.
        self.assertNotIn("without a time limit (set --collective_timeout_s", output)
        self.assertNotIn("across cluster]", output)  # Nor did Ray fold repeated lines.
        # Each run's Ray processes know their own Ray, though two run on this machine.
        self.assertNotIn("Found multiple active Ray instances", output)
        self.assertRegex(
            output, r"tfdist ray: Ray Train run tfdist finished on a local Ray with 2 worker"
        )
        output, _ = train.communicate(timeout=_RUN_S)
        self.assertEqual(train.returncode, 0, output[-6000:])
        self.assertIn("tfdist: multi_worker_mirrored on 1 replica(s)", output, output[-6000:])
        self.assertIn("Ray Train run tfdist finished on a local Ray with 1 worker(s)", output)
        self.assertNotIn("Found multiple active Ray instances", output)

    def test_a_stopped_run_saves_at_one_step_and_ends_as_preempted(self):
        """SIGTERM to `tfdist ray` (as `ray job stop` or a drained node sends the driver): each
        worker sends its program the notice, both programs save at one step, and the run ends
        with 75 and one line. Worker 1 holds at epoch 2 until the notice reaches it."""
        run = _tfdist_ray(
            self.dir,
            "--num_workers=2",
            f"--timeout_s={_RAY_TIMEOUT_S}",
            "--",
            "python",
            MLP_PROGRAM,
            "--strategy=multi_worker_mirrored",
            "--epochs=3",
            "--global_batch_size=32",
            f"--model_dir={os.path.join(self.dir, 'stopped')}",
            "--hold_at_epoch=2",
        )
        self.addCleanup(run.kill)
        seen = []
        for line in run.stdout:  # Until the hold, or the run's end (bounded by --timeout_s).
            seen.append(line)
            if "holding at epoch 2 until a preemption notice" in line:
                run.send_signal(signal.SIGTERM)
                break
        signalled = time.monotonic()
        rest, _ = run.communicate(timeout=_RUN_S)
        output = "".join(seen) + rest
        self.assertEqual(run.returncode, EXIT_PREEMPTED, output[-6000:])
        # Within the grace the driver gives the run, and Ray's shutdown after it, on a busy
        # machine too; a run that never heard would train on past its hold (120 s).
        self.assertLess(time.monotonic() - signalled, processes.STOP_GRACE_S + 60)
        saved = re.findall(r"mlp_with_digest\.py: preempted at epoch 2 step (\d+);", output)
        self.assertEqual(len(saved), 2, output[-6000:])
        self.assertEqual(len(set(saved)), 1, saved)  # One step for both.
        self.assertIn(
            "tfdist ray: stopped the run on signal 15; the training saved its state at one step "
            "(exit 75): run the same command again to resume there",
            output,
        )
        self.assertNotIn("Found multiple active Ray instances", output)


def _free_port() -> int:
    """A TCP port free now (Ray's daemons bind it moments later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _RayNode:
    """`ray start --block` of one node of a Ray cluster on this machine, in a session of its
    own (killed as one with what it started), its log in `log`."""

    def __init__(self, test: unittest.TestCase, env: dict[str, str], *args: str):
        self.log = os.path.join(test.dir, f"ray-node-{_free_port()}.log")
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(  # pylint: disable=consider-using-with
                [os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--block", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        test.addCleanup(self.stop)
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in pathlib.Path(self.log).read_text(errors="replace"):
            test.assertIsNone(self.process.poll(), pathlib.Path(self.log).read_text()[-3000:])
            test.assertLess(time.monotonic(), deadline, "a Ray node did not start")
            time.sleep(0.5)

    def stop(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                continue


@pytest.mark.multiprocess
class RayClusterTest(unittest.TestCase):
    """docs/ray.md's cluster path as written: a Ray cluster of 2 nodes (a head and a second
    node, each its own `ray start`), `ray job submit --working-dir` of `tfdist ray
    --address=auto`, and the program named relative to the job's working directory; then the
    second node lost under a run."""

    def setUp(self):
        super().setUp()
        _real_ray_or_skip()
        self.dir = self.enterContext(tempfile.TemporaryDirectory())

    def test_ray_job_submit_trains_with_the_weights_of_launch_and_a_lost_node_ends_a_run(self):
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "RAY_ADDRESS")},
            "HOME": self.dir,
            "RAY_AUTH_MODE": "disabled",
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]),
        }
        head_port, dashboard = _free_port(), _free_port()
        model_dir = os.path.join(self.dir, "model")
        program = ["--strategy=multi_worker_mirrored", "--epochs=2", "--global_batch_size=32"]
        launched = subprocess.Popen(  # pylint: disable=consider-using-with  # Meanwhile.
            [sys.executable, "-m", "tfdist", "launch", "--num_workers=2", "--", "python"]
            + [MLP_PROGRAM, *program, f"--model_dir={model_dir}-launch"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.addCleanup(launched.kill)
        _RayNode(
            self,
            env,
            "--head",
            f"--port={head_port}",
            "--num-cpus=1",
            f"--temp-dir={self.dir}/ray",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}",
            f"--ray-client-server-port={_free_port()}",
            f"--dashboard-agent-listen-port={_free_port()}",
        )
        second = _RayNode(
            self,
            env,
            f"--address=127.0.0.1:{head_port}",
            "--num-cpus=1",
            f"--dashboard-agent-listen-port={_free_port()}",
        )
        submitted = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "ray"), "job", "submit"]
            + [f"--address=http://127.0.0.1:{dashboard}", "--working-dir", "."]
            + ["--", "tfdist", "ray", "--address=auto", "--num_workers=2"]
            + [f"--timeout_s={_RAY_TIMEOUT_S}", "--", "python", os.path.basename(MLP_PROGRAM)]
            + [*program, f"--model_dir={model_dir}"],
            cwd=os.path.dirname(MLP_PROGRAM),  # The job's working directory.
            capture_output=True,
            text=True,
            env=env,
            timeout=_RUN_S,
            check=False,
        )
        output = submitted.stdout + submitted.stderr
        self.assertEqual(submitted.returncode, 0, output[-6000:])
        self.assertIn("Ray Train run tfdist finished on Ray at auto with 2 worker(s)", output)
        launch_output, _ = launched.communicate(timeout=_RUN_S)
        self.assertEqual(launched.returncode, 0, launch_output[-3000:])
        self.assertEqual(digests(output), digests(launch_output), output[-6000:])
        self.assertEqual(set(digests(output)), {"worker:0", "worker:1"})
        self._a_lost_node_ends_the_next_run(env, head_port, second, program)

    def _a_lost_node_ends_the_next_run(self, env, head_port, second, program) -> None:
        """The second node lost mid-run with no other to take its worker: the run ends within
        (max_restarts + 1) start timeouts, naming the node."""
        run = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-m", "tfdist", "ray", f"--address=127.0.0.1:{head_port}"]
            + ["--num_workers=2", "--max_restarts=1", "--start_timeout_s=5"]
            + ["--", "python", MLP_PROGRAM, *program, "--epochs=3", "--hold_at_epoch=2"]
            + [f"--model_dir={self.dir}/lost"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.addCleanup(run.kill)
        lines = []
        for line in run.stdout:
            lines.append(line)
            if "holding at epoch 2" in line:
                break
        second.stop()
        lost_at = time.monotonic()
        output = "".join(lines) + run.communicate(timeout=_RUN_S)[0]
        self.assertEqual(run.returncode, 1, output[-6000:])
        self.assertRegex(
            output.splitlines()[-1],
            r"^tfdist ray: Ray Train run tfdist failed on Ray at 127\.0\.0\.1:\d+ in \d+ s: "
            r"its workers did not start within 5 s, 2 time\(s\); gone since they started: "
            r"node\(s\) [0-9a-f]{8} at [\d.]+; add a node with room for them, or raise "
            r"--start_timeout_s or --max_restarts$",
        )
        # Ray notices the node gone, restarts the group once, then waits 5 s twice.
        self.assertLess(time.monotonic() - lost_at, 90, output[-3000:])
