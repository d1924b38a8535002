"""`tfdist.run`, the entry point of a user's own absl program: its flag files are checked as
`tfdist`'s are, so a FIFO or a binary file is one line instead of a hang or a traceback, and a
bad flag is one line and status 2 (absl's own parse prints two lines, status 1)."""

import os
import subprocess
import sys
import tempfile
import unittest

import pytest

_PROGRAM = """
import tfdist

def main(argv):
    print("main ran")

if __name__ == "__main__":
    tfdist.define_flags()
    tfdist.run(main)
"""


@pytest.mark.multiprocess
class FlagFileTest(unittest.TestCase):
    def setUp(self):
        scratch = tempfile.TemporaryDirectory()  # pylint: disable=consider-using-with
        self.addCleanup(scratch.cleanup)
        self.scratch = scratch.name
        self.program = os.path.join(self.scratch, "my_train.py")
        with open(self.program, "w", encoding="utf-8") as file:
            file.write(_PROGRAM)

    def _one_line_error(self, *flags: str) -> str:
        """The program's one line on stderr for `flags`, once it exited 2 before main ran."""
        result = subprocess.run(
            [sys.executable, self.program, *flags],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertNotIn("main ran", result.stdout)
        return result.stderr.strip()

    def test_a_fifo_or_binary_flag_file_is_one_line(self):
        fifo = os.path.join(self.scratch, "flags.fifo")
        os.mkfifo(fifo)
        binary = os.path.join(self.scratch, "flags.bin")
        with open(binary, "wb") as file:
            file.write(b"\x7fELF\x00\xff\xfe")
        for path, words in ((fifo, "it is not a regular file"), (binary, "not UTF-8")):
            with self.subTest(path=path):
                line = self._one_line_error(f"--flagfile={path}")
                self.assertIn(f"my_train.py: error: --flagfile={path!r}", line)
                self.assertIn(words, line)

    def test_a_bad_flag_is_one_line(self):
        for flags, words in (
            (["--epochs=-1"], "flag --epochs=-1: -1 is not an integer in the range"),
            (
                ["--global_batch_size=64", "--per_replica_batch_size=8"],
                "flags --global_batch_size=64, --per_replica_batch_size=8: both set the batch; "
                "give one",
            ),
            (["--no_such_flag"], "Unknown command line flag 'no_such_flag'"),
        ):
            with self.subTest(flags=flags):
                line = self._one_line_error(*flags)
                self.assertTrue(line.startswith(f"my_train.py: error: {words}"), line)
                self.assertTrue(line.endswith("; see `my_train.py --help`."), line)


if __name__ == "__main__":
    unittest.main()
