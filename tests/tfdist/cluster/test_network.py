"""`tfdist.cluster.network`: which interfaces expose a port, and launch's loopback-only
namespace."""

import subprocess
import sys
import unittest

import pytest

from tfdist.cluster import network


class InterfacesTest(unittest.TestCase):
    def test_loopback_is_never_exposed(self):
        self.assertNotIn("lo", network.exposed_interfaces())
        self.assertTrue(network.interface_flags("lo") & 0x8)  # IFF_LOOPBACK

    @pytest.mark.multiprocess
    def test_nothing_is_exposed_in_launchs_namespace(self):
        refused = network.isolation_refusal()
        if refused:
            self.skipTest(f"this machine refuses network namespaces: {refused}")
        namespace = network.open_namespace()
        self.addCleanup(namespace.close)
        result = subprocess.run(
            [
                *namespace.enter,
                sys.executable,
                "-c",
                "from tfdist.cluster import network; print(network.exposed_interfaces(), "
                "network.interface_flags('lo') & 1)",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        self.assertEqual(result.stdout, "[] 1\n")  # Loopback is up, and alone.


if __name__ == "__main__":
    unittest.main()
