"""`tfdist.cluster.capacity`: how many tasks this machine can run, and why."""

import unittest

from tfdist.cluster import LaunchError
from tfdist.cluster import capacity


class CapacityTest(unittest.TestCase):
    def test_memory_bounds_the_tasks(self):
        limits = capacity.MachineLimits(
            memory_bytes=4 << 30, memory_source="memory", max_threads=None
        )
        self.assertEqual(
            limits.max_tasks(),
            (10, "4.0 GiB of memory at ~340 MiB per TensorFlow task plus 420 MiB shared"),
        )

    def test_rlimit_nproc_bounds_the_tasks_when_lower(self):
        limits = capacity.MachineLimits(
            memory_bytes=64 << 30, memory_source="memory", max_threads=1000
        )
        self.assertEqual(
            limits.max_tasks(), (5, "RLIMIT_NPROC=1000 threads at ~180 threads per TensorFlow task")
        )

    def test_check_names_the_count_and_the_derivation(self):
        limits = capacity.MachineLimits(
            memory_bytes=2 << 30, memory_source="memory", max_threads=None
        )
        capacity.check_capacity(num_workers=4, num_tasks=4, limits=limits)
        with self.assertRaisesRegex(
            LaunchError,
            r"^num_workers=4 makes 6 task\(s\) in all, more than this machine can run: at "
            r"most 4, from 2\.0 GiB of memory at ~340 MiB per TensorFlow task plus 420 MiB "
            r"shared \(measured for `tfdist train`\); launch fewer tasks",
        ):
            capacity.check_capacity(num_workers=4, num_tasks=6, limits=limits)

    def test_this_machine_runs_a_small_cluster(self):
        most, _ = capacity.MachineLimits.of_this_machine().max_tasks()
        self.assertGreaterEqual(most, 4)


if __name__ == "__main__":
    unittest.main()
