"""`tfdist data serve` says what it exposes; training with no dispatcher fails in bounded time."""

import subprocess
import unittest
from unittest import mock

import portpicker
import pytest
from absl.testing import absltest

from tests.tfdist.cli_runner import run_tfdist
from tfdist.commands import data as data_service_command
from tfdist.cluster import network


class ExposureTest(unittest.TestCase):

    def test_names_every_port_and_interface(self):
        addresses = ["grpc://127.0.0.1:5050", "127.0.0.1:6001", "127.0.0.1:6002"]
        with mock.patch.object(network, "exposed_interfaces", return_value=["eth0"]):
            exposure = data_service_command._exposure(addresses)  # pylint: disable=protected-access
            self.assertEqual(exposure, (
                "TensorFlow binds every interface (0.0.0.0 and [::]), so port(s) 5050, 6001, 6002 "
                "accept unauthenticated connections through eth0; firewall them on an untrusted "
                "network"))
        with mock.patch.object(network, "exposed_interfaces", return_value=[]):
            exposure = data_service_command._exposure(addresses)  # pylint: disable=protected-access
            self.assertIn("connections through loopback only", exposure)


@pytest.mark.multiprocess
class NoDispatcherTest(absltest.TestCase):

    def test_train_fails_in_one_line_instead_of_hanging(self):
        address = f"grpc://127.0.0.1:{portpicker.pick_unused_port()}"
        try:
            result = run_tfdist("train", f"--tf_data_service={address}", "--epochs=1",
                                "--steps_per_epoch=2", timeout_s=240)
        except subprocess.TimeoutExpired:
            self.fail("tfdist train waited for a dispatcher that is not there")
        self.assertEqual(result.returncode, 2, result.stderr[-3000:])
        self.assertNotIn("Traceback", result.stderr)
        self.assertLen(result.stderr.strip().splitlines(), 1, result.stderr)
        self.assertRegex(result.stderr.splitlines()[-1],
                         rf"^tfdist train: error: --tf_data_service='{address}': no dispatcher "
                         r"answered there within 20 s \(last try: connection refused\); start one "
                         r"with `tfdist data serve --port=\d+`, or fix the address\.$")
