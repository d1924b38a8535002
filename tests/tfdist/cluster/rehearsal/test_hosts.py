"""Tests for tfdist.cluster.rehearsal.hosts: emulated hosts reach each other by name and nothing
else, links can be cut, and nothing is left behind, also by a rehearsal that was killed.

Needs root and network namespaces; skipped where this machine refuses them."""

from tests.tfdist.cluster.rehearsal.emulated_hosts import emulated_hosts_or_skip
from tests.tfdist.cluster.rehearsal.emulated_hosts import our_namespaces
from tests.tfdist.cluster import process_checks
import os
import subprocess
import sys
import textwrap
import unittest
from unittest import mock

import pytest

from tfdist.cluster.rehearsal import hosts as hosts_lib


def _run_on(host: hosts_lib.Host, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*host.enter(), sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.multiprocess
class HostsTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        emulated_hosts_or_skip()

    def test_hosts_reach_each_other_by_name_and_nothing_else(self):
        with hosts_lib.Hosts([("a-0", "a-0.sub"), ("b-0", "b-0.sub")]) as made:
            first, second = made.hosts
            server = subprocess.Popen(  # pylint: disable=consider-using-with
                [
                    *second.enter(),
                    sys.executable,
                    "-c",
                    "import socket; s = socket.create_server(('', 2222)); print('up', flush=True);"
                    " s.accept()",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            self.addCleanup(server.wait, 30)
            self.addCleanup(server.kill)
            self.assertEqual(server.stdout.readline().strip(), "up")
            result = _run_on(
                first,
                """
                import socket
                print(socket.gethostname(), socket.gethostbyname("b-0.sub"))
                socket.create_connection(("b-0.sub", 2222), timeout=10).close()
                try:
                    socket.create_connection(("10.0.0.1", 80), timeout=2)
                except OSError as error:
                    print("outside:", type(error).__name__)
                """,
            )
            self.assertEqual(result.returncode, 0, result.stderr)
            name_and_address, outside = result.stdout.splitlines()
            self.assertEqual(name_and_address, f"a-0 {second.address}")
            self.assertTrue(outside.startswith("outside: "), outside)  # No route out.

    def test_a_cut_link_stops_traffic(self):
        with hosts_lib.Hosts([("a-0",), ("b-0",)]) as made:
            first, second = made.hosts
            second.cut_link()
            result = _run_on(
                first,
                """
                import socket
                try:
                    socket.create_connection(("b-0", 2222), timeout=3)
                except OSError as error:
                    print(type(error).__name__)
                """,
            )
            self.assertIn(result.stdout.strip(), ("TimeoutError", "OSError"), result.stderr)

    def test_close_leaves_nothing(self):
        made = hosts_lib.Hosts([("a-0",), ("b-0",)])
        self.addCleanup(made.close)
        self.assertEqual(len(our_namespaces(os.getpid())), 3 * 2)  # And their /etc/netns dirs.
        made.close()
        self.assertEqual(our_namespaces(os.getpid()), [])
        made.close()

    @pytest.mark.usefixtures("rehearsals_alone")
    def test_a_killed_rehearsals_hosts_and_processes_are_cleaned_by_the_next(self):
        gone = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        dead_pid = int(gone.stdout)
        stale = hosts_lib.Hosts([("a-0",)], owner=dead_pid)  # Left as a killed rehearsal would.
        self.addCleanup(stale.close)
        sleeper = subprocess.Popen(  # pylint: disable=consider-using-with
            [*stale.hosts[0].enter(), "sh", "-c", "echo inside; exec sleep 600"],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.addCleanup(sleeper.stdout.close)
        self.addCleanup(sleeper.wait, 30)
        self.addCleanup(sleeper.kill)  # Only if the clean-up missed it (a failure below).
        # Inside its host before the clean-up looks, as a killed rehearsal's pods were long
        # since: one still on its way in would be missed by `ip netns pids` and kept alive.
        self.assertEqual(sleeper.stdout.readline().strip(), "inside")
        self.assertNotEqual(our_namespaces(dead_pid), [])
        removed = set(hosts_lib.clean_stale())
        # Beside this dead rehearsal's, what other dead rehearsals left (a pytest run killed
        # mid-rehearsal on this machine), and nothing of a live one.
        self.assertLessEqual(set(stale._made), removed)  # pylint: disable=protected-access
        owners = {int(name[len(hosts_lib.PREFIX) :].split("-")[0]) for name in removed}
        self.assertFalse([owner for owner in owners if process_checks.alive(owner)], removed)
        self.assertEqual(our_namespaces(dead_pid), [])
        self.assertIsNotNone(sleeper.wait(timeout=30))


class RefusalTest(unittest.TestCase):
    def test_without_root_one_line(self):
        with (
            mock.patch.object(hosts_lib.os, "geteuid", return_value=1000),
            mock.patch.object(hosts_lib.shutil, "which", return_value="/usr/sbin/ip"),
        ):
            with self.assertRaisesRegex(
                hosts_lib.NoHosts,
                r"need root; run `tfdist rehearse` "
                r"as root",
            ) as raised:
                hosts_lib.Hosts([("a-0",)])
        self.assertNotIn("\n", str(raised.exception))

    def test_without_iproute2_one_line(self):
        with mock.patch.object(hosts_lib.shutil, "which", return_value=None):
            with self.assertRaisesRegex(hosts_lib.NoHosts, "ip not on PATH"):
                hosts_lib.Hosts([("a-0",)])

    def test_too_many_hosts(self):
        with self.assertRaisesRegex(hosts_lib.NoHosts, "more than a rehearsal emulates"):
            hosts_lib.Hosts([(f"h{n}",) for n in range(hosts_lib.MAX_HOSTS + 1)])


if __name__ == "__main__":
    unittest.main()
