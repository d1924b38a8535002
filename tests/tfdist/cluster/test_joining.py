"""`tfdist.cluster.joining`: a launched task that never listens on its TF_CONFIG port (a program
that ignored TF_CONFIG) is named in one warning; one that joins is not."""

import os
import socket
import sys
import unittest

import pytest

from tests.tfdist.cli_runner import run_tfdist
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


if __name__ == "__main__":
    unittest.main()
