"""`tfdist.cluster.probe` against real sockets on 127.0.0.1: answering, closed, unresolvable,
hanging."""

import socket
import threading
import time
from unittest import mock

from absl.testing import parameterized

from tests import ports as ports_lib
from tfdist import strategies
from tfdist.cluster import probe

_SHORT_S = 0.5
# The probe returns within timeout_s plus this: room for a busy machine, none for a probe
# without its bound, which waits out the kernel's connect retries (over a minute).
_SLACK_S = 10.0


class ProbeTest(parameterized.TestCase):
    def listening_port(self) -> int:
        """A port on 127.0.0.1 that accepts connections until the test ends."""
        return ports_lib.listening_port(self)

    def closed_port(self) -> int:
        """A port on 127.0.0.1 that refuses connections until the test ends."""
        return ports_lib.refusing_port(self)

    def unresponsive_port(self) -> int:
        """A port whose accept queue is full, so a new connect times out (Linux drops the SYN)."""
        server = self.enterContext(socket.socket())
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        for _ in range(3):
            client = self.enterContext(socket.socket())
            client.setblocking(False)
            client.connect_ex(server.getsockname())
        time.sleep(0.1)
        return server.getsockname()[1]

    def probe_in_time(
        self, cluster: strategies.ClusterConfig, timeout_s: float = _SHORT_S, **kwargs
    ) -> probe.ProbeReport:
        started = time.monotonic()
        report = probe.probe(cluster, timeout_s=timeout_s, **kwargs)
        self.assertLess(time.monotonic() - started, timeout_s + _SLACK_S)
        for line in report.problems + report.warnings + report.lines:
            self.assertNotIn("\n", line)
        return report

    def test_answering_peers_pass_and_this_task_is_not_connected_to(self):
        ports = [self.closed_port(), self.listening_port(), self.listening_port()]
        cluster = strategies.make_cluster(num_workers=3, ports=ports, task=("worker", 0))
        report = self.probe_in_time(cluster)
        self.assertEqual(report.problems, [])
        self.assertEqual(report.warnings, [])
        text = "\n".join(report.lines)
        self.assertIn(
            f"worker:0 at 127.0.0.1:{ports[0]}: resolves (127.0.0.1); not connected to: this task",
            text,
        )
        self.assertIn(f"worker:1 at 127.0.0.1:{ports[1]}: answers (127.0.0.1)", text)
        self.assertIn(f"worker:2 at 127.0.0.1:{ports[2]}: answers", text)

    def test_summary_counts_the_peers_that_answered(self):
        ports = [
            self.closed_port(),
            self.listening_port(),
            self.closed_port(),
        ]
        cluster = strategies.make_cluster(num_workers=3, ports=ports, task=("worker", 0))
        report = self.probe_in_time(cluster)
        self.assertEqual(
            report.lines[0], f"probe: 3 task(s); 1 of 2 peer(s) answered within {_SHORT_S:g} s"
        )

    def test_closed_port_is_a_problem(self):
        ports = [self.listening_port(), self.closed_port(), self.listening_port()]
        cluster = strategies.make_cluster(num_workers=2, chief=True, ports=ports)
        report = self.probe_in_time(cluster)
        self.assertLen(report.problems, 1)
        self.assertRegex(
            report.problems[0],
            rf"^worker:0 at 127\.0\.0\.1:{ports[1]} does not answer \(connection "
            r"refused\); start that task, or check the address and firewall$",
        )

    def test_silent_port_times_out_within_the_bound(self):
        ports = [self.listening_port(), self.unresponsive_port()]
        cluster = strategies.make_cluster(num_workers=2, ports=ports)
        report = self.probe_in_time(cluster)
        self.assertLen(report.problems, 1)
        self.assertRegex(
            report.problems[0],
            rf"^worker:1 at 127\.0\.0\.1:{ports[1]} does not "
            rf"answer \(timed out after {_SHORT_S:g} s\); start that task",
        )

    def test_unresolvable_host_is_a_problem(self):
        port = self.listening_port()
        cluster = strategies.parse_tf_config(
            {
                "cluster": {"worker": [f"localhost:{port}", "no-such-host.invalid:2222"]},
                "task": {"type": "worker", "index": 0},
            }
        )
        report = self.probe_in_time(cluster, timeout_s=3.0)
        self.assertLen(report.problems, 1)
        self.assertRegex(
            report.problems[0],
            r'^worker:1 at no-such-host\.invalid:2222: host "no-such-host\.invalid" '
            r"does not resolve \(.+\); fix the host in TF_CONFIG, or add it to DNS",
        )

    def test_hanging_lookup_is_bounded(self):
        release = threading.Event()
        self.addCleanup(release.set)
        real_getaddrinfo = socket.getaddrinfo

        def getaddrinfo(host, *args, **kwargs):
            if host == "slow.example":
                release.wait(60)  # Until the test ends; then fail without a real DNS query.
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return real_getaddrinfo(host, *args, **kwargs)

        cluster = strategies.parse_tf_config(
            {
                "cluster": {"worker": [f"127.0.0.1:{self.listening_port()}", "slow.example:2222"]},
                "task": {"type": "worker", "index": 0},
            }
        )
        with mock.patch.object(socket, "getaddrinfo", getaddrinfo):
            report = self.probe_in_time(cluster)
        self.assertEqual(
            report.problems,
            [
                f'worker:1 at slow.example:2222: host "slow.example" does not resolve (timed out '
                f"after {_SHORT_S:g} s); fix the host in TF_CONFIG, or add it to DNS or /etc/hosts "
                "on this machine"
            ],
        )

    def test_loopback_in_a_multi_host_cluster_warns(self):
        port = self.listening_port()
        cluster = strategies.parse_tf_config(
            {
                "cluster": {"worker": [f"127.0.0.1:{port}", "10.0.0.2:2222"]},
                "task": {"type": "worker", "index": 1},
            }
        )
        report = self.probe_in_time(cluster)  # 10.0.0.2 may answer, refuse or time out here.
        self.assertEqual(
            report.warnings,
            [
                f"worker:0 at 127.0.0.1:{port} is a loopback address, but the cluster also lists "
                "10.0.0.2: tasks on other machines cannot reach it there; use this machine's host "
                "name or network IP address in TF_CONFIG"
            ],
        )

    @parameterized.named_parameters(
        ("ipv4_and_localhost", ["127.0.0.1", "localhost"]),
        ("other_loopback_ip", ["127.0.0.1", "127.0.0.2"]),
        ("one_remote_host", ["10.0.0.2", "10.0.0.2"]),
    )
    def test_single_host_clusters_do_not_warn(self, hosts):
        cluster = strategies.parse_tf_config(
            {
                "cluster": {"worker": [f"{host}:{2222 + i}" for i, host in enumerate(hosts)]},
                "task": {"type": "worker", "index": 0},
            }
        )
        self.assertEqual(self.probe_in_time(cluster).warnings, [])

    def test_evaluator_is_resolved_but_not_connected_to(self):
        ports = [self.listening_port(), self.closed_port()]
        cluster = strategies.make_cluster(
            num_workers=1, evaluator=True, ports=ports, task=("worker", 0)
        )
        report = self.probe_in_time(cluster)
        self.assertEqual(report.problems, [])
        self.assertIn(
            f"  evaluator:0 at 127.0.0.1:{ports[1]}: resolves (127.0.0.1); not "
            "connected to: evaluators serve no port",
            report.lines,
        )

    @parameterized.named_parameters(
        ("multi_worker", dict(num_workers=2), None, True),
        ("chief_and_worker", dict(num_workers=1, chief=True), None, True),
        ("single_worker", dict(num_workers=1), None, False),
        ("parameter_server", dict(num_workers=2, num_ps=1, chief=True), None, False),
        ("timeout_already_set", dict(num_workers=2), 60.0, False),
    )
    def test_collective_timeout_hint(self, sizes, collective_timeout_s, hinted):
        ports = [self.listening_port() for _ in range(sum(sizes.values()))]
        cluster = strategies.make_cluster(ports=ports, **sizes)
        report = self.probe_in_time(cluster, collective_timeout_s=collective_timeout_s)
        hint = (
            "hint: pass --collective_timeout_s=300 to `tfdist train` so a lost peer fails the "
            "step instead of hanging"
        )
        self.assertEqual(hint in report.lines, hinted)
        if collective_timeout_s:
            self.assertIn("collective timeout: 60 s, so a lost peer fails the step", report.lines)

    @parameterized.parameters(0.0, -1.0, float("nan"), float("inf"))
    def test_bad_timeout_is_rejected(self, timeout_s):
        cluster = strategies.make_cluster(num_workers=1, ports=[2222])
        with self.assertRaisesRegex(
            ValueError,
            r"timeout_s=.* must be a positive number of "
            r"seconds; pass e\.g\. timeout_s=5\.$",
        ):
            probe.probe(cluster, timeout_s=timeout_s)

    def test_answers(self):
        self.assertTrue(probe.answers(f"127.0.0.1:{self.listening_port()}", timeout_s=_SHORT_S))
        self.assertFalse(probe.answers(f"127.0.0.1:{self.closed_port()}", timeout_s=_SHORT_S))
        self.assertFalse(probe.answers("no-such-host.invalid:2222", timeout_s=_SHORT_S))
