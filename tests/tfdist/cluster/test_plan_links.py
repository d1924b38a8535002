"""`tfdist plan` against a link we control: one cell of scripts/planning/check_plan_links.py
(2 emulated hosts on a 0.1 Gbit/s link, ring all-reduce in float32, docs/PLANNING.md's
1,280-unit MLP) predicted within 25%, and nothing left behind; and the parts of the cost model
and of the shaping that it rests on.

The cell needs root, network namespaces and tc's token-bucket filter; skipped where this
machine refuses them."""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import unittest

import pytest

from tfdist import cost_model
from tfdist.cluster.rehearsal import hosts as hosts_lib

_SCRIPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
    "scripts",
    "planning",
    "check_plan_links.py",
)


def shaped_hosts_or_skip() -> None:
    """Skips the calling test unless this machine can emulate hosts and shape their links."""
    try:
        with hosts_lib.Hosts([("probe",)]) as made:
            made.shape(0.1)
    except hosts_lib.NoHosts as refused:
        pytest.skip(f"this machine cannot emulate shaped links: {refused}")


def _namespaces_of(owner: int) -> list[str]:
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    return [
        line.split()[0]
        for line in listed.splitlines()
        if line.startswith(f"{hosts_lib.PREFIX}{owner}-")
    ]


@pytest.mark.multiprocess
class PlanLinksTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        shaped_hosts_or_skip()

    def test_a_link_bound_ring_is_predicted_within_a_quarter(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "cells.json")
            script = subprocess.Popen(  # pylint: disable=consider-using-with
                [
                    sys.executable,
                    _SCRIPT,
                    "--hosts=2",
                    "--gbps=0.1",
                    "--exchanges=ring-float32",
                    "--width=1280",
                    "--epoch_s=3",
                    "--compute_steps=8",
                    f"--json={path}",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            self.addCleanup(script.kill)
            output, _ = script.communicate(timeout=300)
            self.assertEqual(script.returncode, 0, output)
            with open(path, encoding="utf-8") as cells:
                (row,) = json.load(cells)["rows"]
        self.assertGreater(row["predicted_exchange_s"], 0.8 * row["predicted_s"], row)
        self.assertLess(abs(row["ratio"] - 1), 0.25, row)
        self.assertEqual(_namespaces_of(script.pid), [])


class ShapingTest(unittest.TestCase):
    def test_the_bucket_holds_a_millisecond_and_a_whole_gso_packet(self):
        self.assertEqual(hosts_lib.tbf_sizes(10), (1_250_000, 1_250_000 + 25_000_000))
        self.assertEqual(hosts_lib.tbf_sizes(0.1), (65_536, 65_536 + 250_000))


class ParameterServerBytesTest(unittest.TestCase):
    def test_the_wire_dtype_does_not_shrink_a_parameter_servers_exchange(self):
        """Workers pull float32 variables and push float32 gradients: tfdist casts for the
        wire in all-reduce only (--allreduce_dtype is refused under parameter_server)."""
        workload = cost_model.Workload(compute_s=0.01, per_replica_batch=32, gradient_bytes=16e6)
        link = cost_model.Link("link", 1.0, 0.0)
        cluster = cost_model.Cluster(nodes=2, gpus_per_node=1, intra=link, inter=link, num_ps=1)
        bfloat16 = dataclasses.replace(cluster, wire_dtype="bfloat16")
        self.assertEqual(
            cost_model.predict(workload, bfloat16)["exchange_s"],
            cost_model.predict(workload, cluster)["exchange_s"],
        )


if __name__ == "__main__":
    unittest.main()
