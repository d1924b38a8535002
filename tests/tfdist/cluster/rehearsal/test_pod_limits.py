"""`tfdist.cluster.rehearsal.pod_limits`, in a child process of its own: no user namespace under
the seccomp filter, and no more processes than the pids cgroup allows."""

import os
import subprocess
import sys
import textwrap
import unittest

import pytest

from tfdist.cluster.rehearsal import pod_limits


def _in_a_child(program: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


@pytest.mark.multiprocess
class PodLimitsTest(unittest.TestCase):
    def test_no_user_namespace_under_the_filter_and_threads_still_start(self):
        said = _in_a_child("""\
            import subprocess, threading
            from tfdist.cluster.rehearsal import pod_limits
            pod_limits.forbid_user_namespaces()
            print("child", subprocess.run(["unshare", "-Ur", "true"]).returncode)
            thread = threading.Thread(target=print, args=("thread ran",))
            thread.start(); thread.join()
            """)
        self.assertEqual(said, "child 1\nthread ran\n")  # unshare(1) fails with EPERM.

    def test_a_pod_forks_no_more_than_its_cgroup_allows_and_the_cgroup_goes(self):
        if pod_limits._own_pids_cgroup() is None:  # pylint: disable=protected-access
            self.skipTest("no cgroup v1 pids controller here")
        cgroup = pod_limits.pids_cgroup("probe", 8)
        self.addCleanup(pod_limits.remove_pids_cgroup, cgroup)
        said = _in_a_child(f"""\
            import os, signal
            with open({os.path.join(cgroup, "cgroup.procs")!r}, "w") as procs:
                procs.write(str(os.getpid()))
            children = []
            try:
                for _ in range(20):
                    child = os.fork()
                    if child == 0:
                        signal.pause()
                    children.append(child)
            except BlockingIOError:
                pass
            print("forked", len(children))
            for child in children:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
            """)
        self.assertEqual(said, "forked 7\n")  # 8 with the child itself.
        pod_limits.remove_pids_cgroup(cgroup)
        self.assertFalse(os.path.exists(cgroup))
