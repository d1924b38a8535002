"""`tfdist.cluster.joining`: a launched task that never listens on its TF_CONFIG port (a program
that ignored TF_CONFIG) is named in one warning, at its exit or after `--join_check_s`; one that
joins is not. A task that crashes in Keras 3's own multi-worker `fit` is pointed at tfdist.fit."""

import contextlib
import io
import os
import socket
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

import pytest

from tests.tfdist.cli_runner import run_tfdist
from tfdist import strategies
from tfdist.cluster import joining

# Listens on its TF_CONFIG port, as TensorFlow's server does, for 3 s: the launcher, which looks
# every 0.2 s, must see it listen before it exits, on a busy machine too.
_JOINS = """
import json, os, socket, time
config = json.loads(os.environ["TF_CONFIG"])
address = config["cluster"][config["task"]["type"]][config["task"]["index"]]
server = socket.create_server(("127.0.0.1", int(address.rsplit(":", 1)[1])))
time.sleep(3)
"""

# Listens on its TF_CONFIG port as _JOINS does, except worker 1, which never does; both run until
# the file argv[1] exists (60 s at most).
_JOINS_UNLESS_WORKER_1_UNTIL_STOPPED = """
import json, os, socket, sys, time
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
if task["index"] != 1:
    address = config["cluster"][task["type"]][task["index"]]
    server = socket.create_server(("127.0.0.1", int(address.rsplit(":", 1)[1])))
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
"""

# What a task printed, as it came, when it ran Keras 3's own `model.fit` under
# MultiWorkerMirroredStrategy (keras 3.15.1, TF 2.21.0, `tfdist launch --keras=3 --num_workers=2
# -- python script.py`; keras-team/keras#20585): the script built the strategy, a Dense model
# in its scope, and called `model.fit(x, y, epochs=1, batch_size=16)` on NumPy arrays (a
# tf.data.Dataset gives the same traceback).
# pylint: disable=line-too-long
KERAS3_FIT_CRASH = """\
Traceback (most recent call last):
  File "/tmp/k3/k3_mwms.py", line 11, in <module>
    model.fit(x, y, epochs=1, batch_size=16)
  File "/work/main/.venv/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 122, in error_handler
    raise e.with_traceback(filtered_tb) from None
  File "/work/main/.venv/lib/python3.11/site-packages/tensorflow/python/framework/constant_op.py", line 108, in convert_to_eager_tensor
    return ops.EagerTensor(value, ctx.device_name, dtype)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ValueError: Attempt to convert a value (PerReplica:{
  0: <tf.Tensor: shape=(8, 4), dtype=float32, numpy=
array([[0.52911144, 0.44037598, 0.06549644, 0.6870546 ],
       [0.11447956, 0.06186145, 0.42888054, 0.9201982 ],
       [0.6434556 , 0.92064464, 0.49367866, 0.6915662 ],
       [0.2937294 , 0.9176251 , 0.7853647 , 0.9187297 ],
       [0.31547034, 0.8205071 , 0.3661758 , 0.43259084],
       [0.05026964, 0.40966424, 0.23680255, 0.27273592],
       [0.5306532 , 0.93787956, 0.18896623, 0.09927732],
       [0.9367628 , 0.32045147, 0.36837643, 0.5033706 ]], dtype=float32)>
}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.
"""
# pylint: enable=line-too-long
_HINT = (
    "tfdist launch: {} crashed in Keras 3's own model.fit, which cannot train under "
    "MultiWorkerMirroredStrategy (keras-team/keras#20585); train the model through "
    "tfdist.fit, which runs Keras 3 models under every strategy (docs/library.md and "
    "docs/keras.md)"
)


class ListeningPortsTest(unittest.TestCase):
    def test_a_listening_socket_is_seen_and_a_closed_one_is_not(self):
        with socket.create_server(("127.0.0.1", 0)) as server:
            port = server.getsockname()[1]
            self.assertIn(port, joining.listening_ports(os.getpid()))
        self.assertNotIn(port, joining.listening_ports(os.getpid()))
        self.assertEqual(joining.listening_ports(-1), set())


class _Task:
    """What JoinWatch reads of a `processes.Process`."""

    def __init__(self, name: str, pid: int):
        self.name, self.status, self.started_s = name, None, 0.0
        self.process = types.SimpleNamespace(pid=pid)

    def poll(self) -> int | None:
        return self.status


class JoinWatchTest(unittest.TestCase):
    """With a fake clock and fake listening sockets: pid N listens on port 1000 + N."""

    def _watch(self, tasks: list[_Task], steps, *, check_s: float) -> list[str]:
        """Runs `notice` at each (time, listening pids, {name: status}); returns the warnings."""
        watch = joining.JoinWatch(
            {task.name: 1000 + task.process.pid for task in tasks},
            check_s=check_s,
            announcer="tfdist launch",
        )
        stderr, listening = io.StringIO(), set()
        with (
            contextlib.redirect_stderr(stderr),
            mock.patch.object(joining.time, "monotonic") as clock,
            mock.patch.object(
                joining, "listening_ports", side_effect=lambda pid: {1000 + pid} & listening
            ),
        ):
            for now, pids, statuses in steps:
                clock.return_value, listening = now, {1000 + pid for pid in pids}
                for task in tasks:
                    task.status = statuses.get(task.name)
                watch.notice(tasks)
        return stderr.getvalue().splitlines()

    def test_named_once_after_the_wait_not_before_and_not_again_at_exit(self):
        tasks = [_Task(f"worker:{index}", index) for index in range(4)]
        warnings = self._watch(
            tasks,
            [
                (5.0, (), {}),
                (90.0, (0,), {}),  # worker:0 joins late, within the wait.
                (119.9, (), {"worker:2": 1}),  # worker:2 failed: the supervisor says so.
                (120.0, (), {"worker:2": 1, "worker:3": -15}),  # worker:3 stopped (a restart).
                (300.0, (), {"worker:1": 0, "worker:2": 1, "worker:3": -15}),
            ],
            check_s=120,
        )
        self.assertEqual(
            warnings,
            [
                "tfdist launch: warning: worker:1 has not listened on its TF_CONFIG port 1001 in "
                "120 s: the program did not join the cluster, so the tasks run as independent copies "
                "(their weights drift apart; they write the same paths); build the strategy from "
                "TF_CONFIG (tfdist.setup, or tf.distribute.MultiWorkerMirroredStrategy), or run the "
                "program without tfdist launch (a program that joins later: raise --join_check_s)"
            ],
        )

    def test_without_a_wait_only_a_task_that_exits_0_is_named(self):
        tasks = [_Task("worker:0", 0), _Task("worker:1", 1)]
        warnings = self._watch(tasks, [(1000.0, (), {}), (1001.0, (), {"worker:1": 0})], check_s=0)
        self.assertEqual(len(warnings), 1, warnings)
        self.assertRegex(
            warnings[0],
            r"^tfdist launch: warning: worker:1 ended without ever "
            r"listening on its TF_CONFIG port 1001: .* or run the "
            r"program without tfdist launch$",
        )

    def test_the_evaluator_serves_no_port_and_is_not_watched(self):
        cluster = strategies.make_cluster(
            num_workers=2, chief=True, evaluator=True, ports=[1, 2, 3, 4]
        )
        self.assertEqual(
            joining.serving_ports(cluster), {"chief:0": 1, "worker:0": 2, "worker:1": 3}
        )


class Keras3FitCrashTest(unittest.TestCase):
    def _read(self, outputs: dict[str, str]) -> list[str]:
        """Feeds each task's output through one Keras3FitCrash; returns what it said."""
        crashes, stderr = joining.Keras3FitCrash(announcer="tfdist launch"), io.StringIO()
        with contextlib.redirect_stderr(stderr):
            for name, output in outputs.items():
                read = crashes.reader(name)
                for line in output.splitlines(keepends=True):
                    read(line)
        return stderr.getvalue().splitlines()

    def test_the_real_traceback_names_its_task_once(self):
        # TensorFlow's own log lines may come between the traceback's lines.
        interleaved = KERAS3_FIT_CRASH.replace(
            "ValueError", "W0000 00:00:1796451279.78 15965 dataset.cc:997] Input of ...\nValueError"
        )
        self.assertEqual(
            self._read({"worker:0": KERAS3_FIT_CRASH * 2, "worker:1": interleaved}),
            [_HINT.format("worker:0"), _HINT.format("worker:1")],
        )

    def test_lookalikes_are_not_named(self):
        lookalikes = {
            "tf_keras": KERAS3_FIT_CRASH.replace("/keras/src/", "/tf_keras/src/"),
            "no_frame_of_keras": KERAS3_FIT_CRASH.replace("/keras/src/", "/mine/"),
            "another_error": KERAS3_FIT_CRASH.split("ValueError")[0] + "ValueError: bad shape\n",
            "no_traceback": KERAS3_FIT_CRASH.split("           ^^^")[1],
            "cut_short": KERAS3_FIT_CRASH.rsplit("})", 1)[0],
        }
        self.assertEqual(self._read(lookalikes), [])


@pytest.mark.multiprocess
class LaunchTest(unittest.TestCase):
    def test_tasks_that_never_join_are_named_and_those_that_join_are_not(self):
        ignored = run_tfdist(
            "launch",
            "--num_workers=2",
            "--",
            sys.executable,
            "-c",
            "print('trained alone')",
            timeout_s=120,
        )
        self.assertEqual(ignored.returncode, 0, ignored.stderr)
        warnings = [line for line in ignored.stderr.splitlines() if "warning:" in line]
        self.assertEqual(len(warnings), 2, ignored.stderr)
        for index, line in enumerate(sorted(warnings)):
            self.assertRegex(
                line,
                rf"^tfdist launch: warning: worker:{index} ended without ever "
                r"listening on its TF_CONFIG port \d+: the program did not "
                r"join the cluster, so the tasks ran as independent copies",
            )
        joined = run_tfdist(
            "launch", "--num_workers=2", "--", sys.executable, "-c", _JOINS, timeout_s=120
        )
        self.assertEqual(joined.returncode, 0, joined.stderr)
        self.assertNotIn("did not join", joined.stderr)

    def test_a_task_still_not_listening_after_the_wait_is_named_while_it_runs(self):
        # worker:0 joins; worker:1 never does and runs on past the wait, until the warning has
        # named it (then the file argv[1] ends both), so it is named then, not again at its exit.
        with tempfile.TemporaryDirectory() as scratch:
            stop = os.path.join(scratch, "stop")
            launcher = subprocess.Popen(  # pylint: disable=consider-using-with
                [
                    sys.executable,
                    "-m",
                    "tfdist",
                    "launch",
                    "--num_workers=2",
                    "--join_check_s=2",
                    "--",
                    sys.executable,
                    "-c",
                    _JOINS_UNLESS_WORKER_1_UNTIL_STOPPED,
                    stop,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={name: value for name, value in os.environ.items() if name != "TF_CONFIG"},
            )
            stderr = []
            try:
                for line in launcher.stderr:  # The tasks end by themselves after 60 s.
                    stderr.append(line)
                    if "did not join" in line:
                        break
            finally:
                open(stop, "w", encoding="utf-8").close()
                stdout, rest = launcher.communicate(timeout=120)
        stderr = "".join(stderr) + rest
        self.assertEqual(launcher.returncode, 0, stdout + stderr)
        warnings = [line for line in stderr.splitlines() if "did not join" in line]
        self.assertEqual(len(warnings), 1, stderr)
        self.assertRegex(
            warnings[0],
            r"^tfdist launch: warning: worker:1 has not listened on its "
            r"TF_CONFIG port \d+ in 2 s: the program did not join ",
        )

    def test_a_keras3_fit_crash_is_named_under_keras_3_only(self):
        crash = f"import sys\nsys.stderr.write({KERAS3_FIT_CRASH!r})\nsys.exit(1)"
        hints = {_HINT.format("worker:0"), _HINT.format("worker:1")}
        for keras in ("3", "2"):
            result = run_tfdist(
                "launch",
                f"--keras={keras}",
                "--num_workers=2",
                "--",
                sys.executable,
                "-c",
                crash,
                timeout_s=120,
            )
            self.assertEqual(result.returncode, 1, result.stderr)
            said = [line for line in result.stderr.splitlines() if "Keras 3" in line]
            if keras == "2":
                self.assertEqual(said, [], result.stderr)
                continue
            # The first task to crash is named; the other may be stopped before its output is
            # read. Each named once.
            self.assertTrue(said, result.stderr)
            self.assertEqual(len(said), len(set(said)), result.stderr)
            self.assertLessEqual(set(said), hints, result.stderr)


if __name__ == "__main__":
    unittest.main()
