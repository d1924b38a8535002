"""`tfdist.commands.manifest` as a user runs it, and the Slurm flags of `tfdist train`."""

import os
import unittest

import pytest

from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist


@pytest.mark.multiprocess
class ManifestCommandTest(unittest.TestCase):
    """`tfdist manifest` and the Slurm flags of `tfdist train`, as a user runs them."""

    def test_tfjob_from_the_command_line(self):
        result = run_tfdist("manifest", "--image=me/tfdist:1", "--num_workers=2", "--num_ps=1",
                            "--chief", "--", "train", "--strategy=parameter_server")
        self.assertEqual(result.returncode, 0, result.stderr)
        for text in ("kind: TFJob", "Chief:", "Worker:", "PS:", "replicas: 2",
                     '- "--strategy=parameter_server"'):
            self.assertIn(text, result.stdout)

    def test_slurm_from_the_command_line(self):
        result = run_tfdist("manifest", "--format=slurm", "--num_workers=2", "--", "train",
                            "--epochs=5")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("srun tfdist train --cluster_resolver=slurm --slurm_port_base=8888 "
                      "--epochs=5", result.stdout)

    def test_errors(self):
        assert_one_line_error(self, run_tfdist("manifest", "--num_workers=2", "--", "train"),
                              "pass --image=IMAGE")
        assert_one_line_error(self, run_tfdist("manifest", "--format=slurm"),
                              "manifest needs the train command after `--`")
        assert_one_line_error(self, run_tfdist("train", "--num_ps=1"),
                              "--num_ps=1, --chief=False: given without --cluster_resolver=slurm")
        outside_slurm = {name: "" for name in os.environ if name.startswith("SLURM_")}
        result = run_tfdist("train", "--cluster_resolver=slurm", extra_env=outside_slurm)
        assert_one_line_error(self, result, "Slurm cluster")


if __name__ == "__main__":
    unittest.main()
