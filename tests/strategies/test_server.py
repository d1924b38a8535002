"""strategies.server: a port another process holds is one line naming the task, its address,
its job and the fix, not TensorFlow's `UnknownError: Could not start gRPC server`."""

import dataclasses
import socket
import unittest

import tensorflow as tf

from tfdist import strategies
from tfdist.strategies import ClusterConfigError
from tfdist.strategies import Origin
from tfdist.strategies import server

_ORIGIN = Origin(
    "Slurm job 42 step 0", "ports from the job id", "run the step with srun --resv-ports"
)


class PortTakenTest(unittest.TestCase):
    def _held_port(self) -> int:
        """A port another socket holds (listening on every interface, as gRPC would)."""
        held = self.enterContext(socket.socket())
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("0.0.0.0", 0))
        held.listen()
        return held.getsockname()[1]

    def _cluster(self, origin):
        port = self._held_port()
        cluster = strategies.make_cluster(num_workers=1, num_ps=1, chief=True, ports=[1, port, 2])
        return port, dataclasses.replace(cluster.for_task("worker", 0), origin=origin)

    def test_a_slurm_tasks_port_taken_names_the_job_and_the_fix(self):
        port, cluster = self._cluster(_ORIGIN)
        with self.assertRaises(ClusterConfigError) as raised:
            server.start_server(cluster)
        self.assertEqual(
            str(raised.exception),
            f"Slurm job 42 step 0: worker:0 cannot listen on 127.0.0.1:{port}: another process "
            "on that host holds the port (ports from the job id); run the step with srun "
            "--resv-ports.",
        )

    def test_a_tf_config_tasks_port_taken(self):
        port, cluster = self._cluster(None)
        with self.assertRaisesRegex(
            ClusterConfigError,
            rf"^worker:0 cannot listen on 127\.0\.0\.1:{port}: another process on that host "
            r"holds the port; end what holds the port, or give this task another one in "
            r"TF_CONFIG\.$",
        ):
            server.start_server(cluster)

    def test_other_errors_pass(self):
        with self.assertRaisesRegex(tf.errors.UnknownError, "something else"):
            with server.listening(self._cluster(_ORIGIN)[1]):
                raise tf.errors.UnknownError(None, None, "something else")


if __name__ == "__main__":
    unittest.main()
