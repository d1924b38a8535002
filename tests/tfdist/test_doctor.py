"""`tfdist doctor`: the parameter-server roles, and what this machine's network exposes."""

import json
from unittest import mock

from absl.testing import parameterized

from tfdist import strategies
from tests.tfdist.cli_runner import run_tfdist
from tfdist.commands import doctor
from tfdist.cluster import network

_PS_CLUSTER = {"cluster": {"chief": ["127.0.0.1:2001"], "worker": ["127.0.0.1:2002",
                                                                  "127.0.0.1:2003"],
                           "ps": ["127.0.0.1:2004"]},
               "task": {"type": "worker", "index": 1}}


class StrategyLineTest(parameterized.TestCase):

    def test_parameter_server_counts_the_chief_as_the_coordinator(self):
        result = run_tfdist("doctor", f"--tf_config={json.dumps(_PS_CLUSTER)}")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("strategy: auto picks parameter_server (1 coordinator, 2 worker(s), 1 ps, "
                      "1 local replica device(s))", result.stdout)
        self.assertIn("keras: tf-keras 2.21.", result.stdout)


class KerasLineTest(parameterized.TestCase):

    def test_says_which_keras_the_task_trains_with(self):
        for keras, expected in (("2", "keras: tf-keras 2.21.0 (--keras=2): models are built "
                                      "with tf.keras or tf_keras and trained with Keras' fit"),
                                ("3", "keras: Keras 3.15.1 (--keras=3): models are built with "
                                      "`import keras` and trained with tfdist's own "
                                      "distributed step; tf.keras is Keras 3 here")):
            with self.subTest(keras=keras):
                result = run_tfdist("doctor", f"--keras={keras}")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn(expected, result.stdout)


class NetworkLineTest(parameterized.TestCase):

    def _line(self, cluster, interfaces, refusal=None):
        with mock.patch.object(network, "exposed_interfaces", return_value=interfaces), \
                mock.patch.object(network, "isolation_refusal", return_value=refusal):
            return doctor._network_line(cluster)  # pylint: disable=protected-access

    def test_task_exposed_beyond_loopback_warns(self):
        cluster = strategies.parse_tf_config(_PS_CLUSTER)
        self.assertEqual(self._line(cluster, ["eth0", "wlan0"]), (
            "warning: this task's gRPC server will listen on port 2003 of every interface "
            "(TensorFlow binds 0.0.0.0 and [::]), open without authentication through eth0, "
            "wlan0; run a one-machine job under `tfdist launch` (loopback-only network), else "
            "firewall port 2003 to the cluster's hosts"))

    def test_task_in_a_loopback_only_namespace_is_fine(self):
        cluster = strategies.parse_tf_config(_PS_CLUSTER)
        self.assertEqual(self._line(cluster, []), "network: loopback only here, so this task's "
                         "port 2003 is reachable from this network namespace alone")

    def test_evaluator_serves_no_port(self):
        cluster = strategies.make_cluster(num_workers=1, evaluator=True, ports=[2001, 2002],
                                          task=("evaluator", 0))
        self.assertIsNone(self._line(cluster, ["eth0"]))

    def test_without_a_cluster_it_checks_launchs_isolation(self):
        self.assertEqual(self._line(None, ["eth0"]),
                         "network: `tfdist launch` runs its tasks in a network namespace with "
                         "loopback only here, so nothing else reaches their ports")
        self.assertEqual(self._line(None, ["eth0"], refusal="`unshare --net`: refused"), (
            "warning: `tfdist launch` cannot isolate its tasks here (`unshare --net`: refused), "
            "so their ports would accept unauthenticated connections through eth0 (TensorFlow "
            "binds every interface); run as root or allow unprivileged user namespaces, or "
            "firewall the ports"))
