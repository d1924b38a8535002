"""Output flags as a user passes them (`tfdist plan --json/--plot`, without TensorFlow): device
nodes, FIFOs and symlinks written through, never replaced; missing directories made; what cannot
take output refused before the work. Special files are scratch ones made in a temp dir."""

import json
import os
import stat
import tempfile
import unittest

import pytest

from tests import scratch_files
from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist

_PLAN = (
    "plan",
    "--compute_ms=100",
    "--per_replica_batch_size=64",
    "--gradient_mib=100",
    "--nodes=1,2",
)


def _plan(*flags: str):
    return run_tfdist(*_PLAN, *flags, without_tensorflow=True, timeout_s=120)


@pytest.mark.multiprocess
class OutputFlagsTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.enterContext(tempfile.TemporaryDirectory())

    def test_json_and_plot_into_missing_directories(self):
        json_path = os.path.join(self.dir, "a", "plan.json")
        plot_path = os.path.join(self.dir, "b", "c", "plan.svg")
        result = _plan(f"--json={json_path}", f"--plot={plot_path}")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(json_path, encoding="utf-8") as report:
            self.assertIn("configurations", json.load(report))
        with open(plot_path, encoding="utf-8") as plot:
            self.assertIn("<svg", plot.read())

    def test_a_plot_format_matplotlib_lacks_is_refused_before_the_work(self):
        result = _plan(f"--plot={os.path.join(self.dir, 'plan.xyz')}")
        assert_one_line_error(self, result, "plot=", "cannot write 'xyz' files", ".png")
        self.assertEqual(result.stdout, "")

    def test_json_through_a_symlink_to_stdout(self):
        link = os.path.join(self.dir, "stdout")
        os.symlink("/proc/self/fd/1", link)
        result = _plan(f"--json={link}")
        self.assertEqual(result.returncode, 0, result.stderr)
        report = result.stdout[result.stdout.index("\n{\n") + 1 :]
        self.assertIn("configurations", json.loads(report))
        self.assertTrue(os.path.islink(link))

    def test_device_nodes_stay_devices(self):
        null = scratch_files.device(self.dir, "null", scratch_files.NULL)
        self.assertEqual(_plan(f"--json={null}").returncode, 0)
        full = scratch_files.device(self.dir, "full", scratch_files.FULL)
        assert_one_line_error(
            self,
            _plan(f"--json={full}"),
            f"json={full!r}: could not write it (No space left on device)",
        )
        disk = scratch_files.device(self.dir, "disk", scratch_files.LOOP0, block=True)
        result = _plan(f"--json={disk}")
        assert_one_line_error(self, result, f"json={disk!r} is a block device")
        self.assertEqual(result.stdout, "")  # Refused before the work.
        for path, test in ((null, stat.S_ISCHR), (full, stat.S_ISCHR), (disk, stat.S_ISBLK)):
            self.assertTrue(test(os.stat(path).st_mode), path)
        self.assertEqual(sorted(os.listdir(self.dir)), ["disk", "full", "null"])

    def test_a_fifo_reaches_its_reader(self):
        fifo = os.path.join(self.dir, "fifo")
        os.mkfifo(fifo)
        assert_one_line_error(self, _plan(f"--json={fifo}"), "a FIFO that no process reads")
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # Open before the writer comes.
        self.addCleanup(os.close, reader)
        result = _plan(f"--json={fifo}")  # A small report: the pipe's buffer holds it.
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("configurations", json.loads(os.read(reader, 1 << 20)))
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))


if __name__ == "__main__":
    unittest.main()
