"""`tfdist.cluster.joining`: a launched task that never listens on its TF_CONFIG port (a program
that ignored TF_CONFIG) is named in one warning, at its exit or after `--join_check_s`; one that
joins is not."""

import contextlib
import io
import os
import socket
import sys
import types
import unittest
from unittest import mock

import pytest

from tests.tfdist.cli_runner import run_tfdist
from tfdist import strategies
from tfdist.cluster import joining

# Listens on its TF_CONFIG port, as TensorFlow's server does, for a moment.
_JOINS = """
import json, os, socket, time
config = json.loads(os.environ["TF_CONFIG"])
address = config["cluster"][config["task"]["type"]][config["task"]["index"]]
server = socket.create_server(("127.0.0.1", int(address.rsplit(":", 1)[1])))
time.sleep(1)
"""

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
        watch = joining.JoinWatch({task.name: 1000 + task.process.pid for task in tasks},
                                  check_s=check_s, announcer="tfdist launch")
        stderr, listening = io.StringIO(), set()
        with contextlib.redirect_stderr(stderr), \
                mock.patch.object(joining.time, "monotonic") as clock, \
                mock.patch.object(joining, "listening_ports",
                                  side_effect=lambda pid: {1000 + pid} & listening):
            for now, pids, statuses in steps:
                clock.return_value, listening = now, {1000 + pid for pid in pids}
                for task in tasks:
                    task.status = statuses.get(task.name)
                watch.notice(tasks)
        return stderr.getvalue().splitlines()

    def test_named_once_after_the_wait_not_before_and_not_again_at_exit(self):
        tasks = [_Task(f"worker:{index}", index) for index in range(4)]
        warnings = self._watch(tasks, [
            (5.0, (), {}),
            (90.0, (0,), {}),                         # worker:0 joins late, within the wait.
            (119.9, (), {"worker:2": 1}),             # worker:2 failed: the supervisor says so.
            (120.0, (), {"worker:2": 1, "worker:3": -15}),  # worker:3 stopped (a restart).
            (300.0, (), {"worker:1": 0, "worker:2": 1, "worker:3": -15})], check_s=120)
        self.assertEqual(warnings, [
            "tfdist launch: warning: worker:1 has not listened on its TF_CONFIG port 1001 in "
            "120 s: the program did not join the cluster, so the tasks run as independent copies "
            "(their weights drift apart; they write the same paths); build the strategy from "
            "TF_CONFIG (tfdist.setup, or tf.distribute.MultiWorkerMirroredStrategy), or run the "
            "program without tfdist launch (a program that joins later: raise --join_check_s)"])

    def test_without_a_wait_only_a_task_that_exits_0_is_named(self):
        tasks = [_Task("worker:0", 0), _Task("worker:1", 1)]
        warnings = self._watch(tasks, [(1000.0, (), {}), (1001.0, (), {"worker:1": 0})],
                               check_s=0)
        self.assertEqual(len(warnings), 1, warnings)
        self.assertRegex(warnings[0], r"^tfdist launch: warning: worker:1 ended without ever "
                                      r"listening on its TF_CONFIG port 1001: .* or run the "
                                      r"program without tfdist launch$")

    def test_the_evaluator_serves_no_port_and_is_not_watched(self):
        cluster = strategies.make_cluster(num_workers=2, chief=True, evaluator=True,
                                          ports=[1, 2, 3, 4])
        self.assertEqual(joining.serving_ports(cluster),
                         {"chief:0": 1, "worker:0": 2, "worker:1": 3})


@pytest.mark.multiprocess
class LaunchTest(unittest.TestCase):

    def test_tasks_that_never_join_are_named_and_those_that_join_are_not(self):
        ignored = run_tfdist("launch", "--num_workers=2", "--", sys.executable, "-c",
                             "print('trained alone')", timeout_s=120)
        self.assertEqual(ignored.returncode, 0, ignored.stderr)
        warnings = [line for line in ignored.stderr.splitlines() if "warning:" in line]
        self.assertEqual(len(warnings), 2, ignored.stderr)
        for index, line in enumerate(sorted(warnings)):
            self.assertRegex(line, rf"^tfdist launch: warning: worker:{index} ended without ever "
                                   r"listening on its TF_CONFIG port \d+: the program did not "
                                   r"join the cluster, so the tasks ran as independent copies")
        joined = run_tfdist("launch", "--num_workers=2", "--", sys.executable, "-c", _JOINS,
                            timeout_s=120)
        self.assertEqual(joined.returncode, 0, joined.stderr)
        self.assertNotIn("did not join", joined.stderr)

    def test_a_task_still_not_listening_after_the_wait_is_named_while_it_runs(self):
        # worker:0 joins; worker:1 never does and runs on past the wait, so it is named then,
        # not again at its exit.
        late = ("import json, os, time\n"
                "if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 1:\n"
                "    time.sleep(6)\n"
                "    raise SystemExit\n") + _JOINS.replace("time.sleep(1)", "time.sleep(4)")
        result = run_tfdist("launch", "--num_workers=2", "--join_check_s=2", "--",
                            sys.executable, "-c", late, timeout_s=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        warnings = [line for line in result.stderr.splitlines() if "did not join" in line]
        self.assertEqual(len(warnings), 1, result.stderr)
        self.assertRegex(warnings[0], r"^tfdist launch: warning: worker:1 has not listened on its "
                                      r"TF_CONFIG port \d+ in 2 s: the program did not join ")


if __name__ == "__main__":
    unittest.main()
