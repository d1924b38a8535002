"""The join deadline kills a process stuck past its deadline, and stays out of the way otherwise."""

import signal
import subprocess
import sys
import textwrap
import time
import unittest

import pytest

from tfdist.cluster import join_deadline


@pytest.mark.multiprocess
class DeadlineTest(unittest.TestCase):
    def test_block_that_ends_in_time_is_left_alone(self):
        start = time.monotonic()
        with join_deadline.deadline(30, "never printed"):
            time.sleep(0.2)
        self.assertLess(time.monotonic() - start, 10)

    def test_stuck_process_is_killed_with_the_message_and_its_silent_peers(self):
        stuck = textwrap.dedent("""
            import time
            from tfdist.cluster import join_deadline
            with join_deadline.deadline(1, "stuck: gave up", ["127.0.0.1:1"]):
                time.sleep(60)
            print("not reached")
        """)
        start = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-c", stuck], capture_output=True, text=True, timeout=60, check=False
        )
        self.assertEqual(result.returncode, -signal.SIGKILL)
        self.assertEqual(result.stderr.strip(), "stuck: gave up Not answering: 127.0.0.1:1.")
        self.assertNotIn("not reached", result.stdout)
        self.assertLess(time.monotonic() - start, 45)  # Not the block's 60 s.


if __name__ == "__main__":
    unittest.main()
