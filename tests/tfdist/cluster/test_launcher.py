"""`tfdist launch` with real processes on 127.0.0.1: output, logs, restarts, timeouts, errors,
limits, and which network the tasks' ports are open on.

The supervision and network tests launch small Python programs (no TensorFlow), so they take
seconds; the cluster tests run `tfdist train` under multi-worker mirrored and parameter server.
"""

import contextlib
import glob
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import unittest
from unittest import mock

import portpicker
import pytest
from absl.testing import parameterized

from tfdist import strategies
from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import launch_killing
from tests.tfdist.cli_runner import run_tfdist
from tests.tfdist.cli_runner import run_tfdist_cases
from tfdist.cluster import PYTHON
from tfdist.commands import cli
from tfdist.cluster import supervisor
from tfdist.cluster import launcher as launch
from tfdist.cluster import network
from tfdist.cluster import processes
from tests.tfdist.cluster import process_checks

# Prints its task from TF_CONFIG, the Keras and grace it was given, then records that it printed
# (a file in argv[1]). Worker 1 then fails with status 3: on its first run only, or (argv[2]
# "always") on every run once worker 0 has printed, while worker 0 sleeps.
_FLAKY_TASK = textwrap.dedent("""
    import json, os, sys, time
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    print("task", task["type"], task["index"], "keras", os.environ.get("TF_USE_LEGACY_KERAS"),
          "grace", os.environ.get("TFDIST_GRACE_S"), flush=True)
    open(os.path.join(sys.argv[1], f"printed-{task['index']}"), "w").close()
    marker = os.path.join(sys.argv[1], "failed-once")
    if sys.argv[2:] == ["always"]:
        if task["index"] == 0:
            time.sleep(600)
        printed, deadline = os.path.join(sys.argv[1], "printed-0"), time.monotonic() + 60
        while not os.path.exists(printed) and time.monotonic() < deadline:
            time.sleep(0.01)
        sys.exit(3)
    if task["index"] == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        sys.exit(3)
""")


# TensorFlow's multi-worker Keras tutorial in miniature: its own strategy and `model.fit`.
_KERAS_MULTI_WORKER_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Input((4,)), tf.keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    x = np.ones((64, 4), "float32")
    model.fit(x, x.sum(1), epochs=1, batch_size=16, verbose=0)
    print("replicas", strategy.num_replicas_in_sync, "keras", tf.keras.__name__)
""")


class _Scratch:
    @pytest.fixture(autouse=True)
    def _scratch(self, tmp_path):
        self.dir = str(tmp_path)

    def script(self, text: str) -> str:
        path = os.path.join(self.dir, "task.py")
        with open(path, "w", encoding="utf-8") as script_file:
            script_file.write(text)
        return path


@pytest.mark.multiprocess
class SupervisionTest(_Scratch, unittest.TestCase):
    """Each case runs a launcher and its tasks as processes (small Python programs)."""

    # Restarts, back-off doubling, the final lines, a lost ps task's restart of every task and
    # the timeout, exactly: test_supervision; the timeout with real processes: FaultToleranceTest.

    def test_prefixes_output_writes_logs_sets_tf_config_and_restarts_the_group(self):
        logs = os.path.join(self.dir, "logs")
        result = run_tfdist(
            "launch",
            "--num_workers=2",
            f"--log_dir={logs}",
            "--max_restarts=1",
            "--restart_backoff_s=0.1",
            "--grace_s=45",
            "--",
            sys.executable,
            self.script(_FLAKY_TASK),
            self.dir,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(
            result.stdout,
            r"tfdist launch: started worker:1 pid=\d+",
            "the launcher announces each task it starts",
        )
        for index in (0, 1):  # TF_USE_LEGACY_KERAS=1: tf.keras is tf-keras.
            self.assertIn(
                f"[worker:{index}] task worker {index} keras 1 grace 45",
                result.stdout,
                "each task's output, prefixed, with its TF_CONFIG task, Keras and grace",
            )
        self.assertIn(
            "worker:1 exited with status 3; restarting every task (1/1) in 0.1 s\n",
            result.stderr,
            "the failed task's restart",
        )
        self.assertEqual(
            result.stdout.count("[worker:0] task worker 0"),
            2,
            "the group restarts: worker 0 ran twice",
        )
        self.assertRegex(
            result.stdout.splitlines()[-1],
            r"^tfdist launch: job done: 2 task\(s\) exited 0, after 1 restart\(s\) "
            r"in \d+\.\d s$",
            "the last line says the job is done",
        )
        with open(os.path.join(logs, "worker-1.log"), encoding="utf-8") as log:
            self.assertEqual(
                log.read(),
                "task worker 1 keras 1 grace 45\n" * 2,
                "each task's log holds its output of every run, unprefixed",
            )

    def test_final_failure_stops_everything_and_every_task_gets_the_keras_launch_names(self):
        start = time.monotonic()
        result = run_tfdist(
            "launch",
            "--num_workers=2",
            "--keras=3",
            "--",
            sys.executable,
            self.script(_FLAKY_TASK),
            self.dir,
            "always",
        )
        self.assertEqual(result.returncode, 3, result.stderr)
        for index in (0, 1):  # TF_USE_LEGACY_KERAS=0: tf.keras is Keras 3.
            self.assertIn(
                f"[worker:{index}] task worker {index} keras 0",
                result.stdout,
                "--keras=3 reaches every task",
            )
        self.assertIn(
            "worker:1 exited with status 3 after 0 restart(s); stopped every task",
            result.stderr,
            "the final failure's line",
        )
        # Worker 0 sleeps 600 s: a bound far from both that a busy machine does not reach.
        self.assertLess(time.monotonic() - start, 240, "worker 0, asleep, was stopped")

    def test_tasks_and_what_they_started_die_with_a_killed_launcher(self):
        launcher = subprocess.Popen(  # pylint: disable=consider-using-with
            [
                sys.executable,
                "-m",
                "tfdist",
                "launch",
                "--num_workers=2",
                "--",
                sys.executable,
                "-c",
                process_checks.PARENT,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        pids = []
        try:
            for line in launcher.stdout:  # The tasks print within seconds, or sleep 120 s.
                if "] pids " in line:
                    pids.append([int(pid) for pid in line.split()[2:]])
                if len(pids) == 2:
                    break
            launcher.kill()
            tasks_gone_s = process_checks.seconds_until_gone([task for task, *_ in pids], 10)
            started_gone_s = process_checks.seconds_until_gone(sum(pids, []), 30)
        finally:
            launcher.kill()
            launcher.communicate(timeout=60)
            for pid in sum(pids, []):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.assertEqual(len(pids), 2)
        # Measured: 0.05 s and 0.3 s (the guardian's start); without their end, they sleep 120 s.
        self.assertLess(tasks_gone_s, 10.0)
        parent = _cgroups_parent()
        if parent:  # Else what a task started outlives a SIGKILLed launcher.
            self.assertLess(started_gone_s, 25.0)
            self.assertEqual(glob.glob(os.path.join(parent, f"tfdist-{launcher.pid}-*")), [])


def _cgroups_parent() -> str | None:
    """Where `tfdist launch` makes its cgroups on this machine; None where it makes none."""
    with processes.own_cgroups(announcer="test") as cgroups:
        return os.path.dirname(cgroups.root) if cgroups else None


_REFUSED = (
    ("no_command", ["--num_workers=2"], "launch needs a command after `--`"),
    ("empty_command", ["--num_workers=2", "--"], "launch needs a command after `--`"),
    (
        "not_executable",
        ["--", "no-such-program-xyz"],
        "command 'no-such-program-xyz' is not an executable file or on PATH",
    ),
    ("ps_without_chief", ["--num_ps=1", "--", "python"], "num_ps=1: 1 ps task(s) but no chief"),
    ("negative_restarts", ["--max_restarts=-1", "--", "python"], "--max_restarts=-1"),
    (
        "negative_backoff",
        ["--restart_backoff_s=-1", "--", "python"],
        "restart_backoff_s=-1.0 is not a number of seconds of 0 or more; pass e.g. "
        "--restart_backoff_s=1, or 0 to restart at once.",
    ),
    ("nan_backoff", ["--restart_backoff_s=nan", "--", "python"], "restart_backoff_s"),
    (
        "negative_join_check",
        ["--join_check_s=-1", "--", "python"],
        "join_check_s=-1.0 is not a number of seconds of 0 or more; pass e.g. "
        "--join_check_s=120, or 0 to check only when a task exits.",
    ),
    # The flag or LaunchConfig (library users) rejects these; either names the value.
    ("nan_timeout", ["--timeout_s=nan", "--", "python"], "timeout_s=nan"),
    ("infinite_timeout", ["--timeout_s=inf", "--", "python"], "timeout_s=inf"),
    ("negative_timeout", ["--timeout_s=-1", "--", "python"], "timeout_s=-1"),
    ("zero_timeout", ["--timeout_s=0", "--", "python"], "timeout_s=0"),
    (
        "more_tasks_than_memory",
        ["--num_workers=2000", "--", "python"],
        "num_workers=2000 makes 2000 task(s) in all, more than this machine can run: at most ",
    ),
)


@pytest.fixture(name="refused_launches", scope="module")
def _refused_launches(tmp_path_factory) -> tuple[dict, dict[str, str]]:
    """Runs each launch of _REFUSED, and with a --log_dir that cannot be written, through the
    CLI in one child process that cannot import TensorFlow; returns their results by name, and
    the log dirs by name."""
    a_file = tmp_path_factory.mktemp("launch") / "a_file"
    a_file.write_text("", encoding="utf-8")
    # Root may write anywhere a file system allows: these fail for root too.
    log_dirs = {
        "a_file": str(a_file),
        "under_a_file": os.path.join(a_file, "logs"),
        "proc": "/proc",
        "with_a_planted_link": str(tmp_path_factory.mktemp("planted") / "logs"),
    }
    os.makedirs(log_dirs["with_a_planted_link"])
    os.symlink(a_file, os.path.join(log_dirs["with_a_planted_link"], "worker-0.log"))
    cases = {name: ["launch", *args] for name, args, _ in _REFUSED}
    cases.update(
        {
            f"log_dir_{name}": ["launch", f"--log_dir={path}", "--", "python"]
            for name, path in log_dirs.items()
        }
    )
    results = run_tfdist_cases(list(cases.values()), without_tensorflow=True)
    return dict(zip(cases, results)), log_dirs


class BadLaunchTest(_Scratch, parameterized.TestCase):
    @pytest.fixture(autouse=True)
    def _refused(self, request):
        if request.node.get_closest_marker("multiprocess") is not None:
            self.refused, self.log_dirs = request.getfixturevalue("refused_launches")

    @parameterized.named_parameters(*((name, name, expected) for name, _, expected in _REFUSED))
    @pytest.mark.multiprocess
    def test_one_line_error(self, case, expected):
        result = self.refused[case]
        assert_one_line_error(self, result, expected)
        self.assertNotIn("started", result.stdout)

    @pytest.mark.multiprocess
    def test_log_dir_that_is_a_file(self):
        path = self.log_dirs["a_file"]
        result = self.refused["log_dir_a_file"]
        assert_one_line_error(self, result, f"log_dir={path!r} is a file; pass a directory.")
        self.assertNotIn("started", result.stdout)

    @parameterized.named_parameters(
        ("under_a_file", "under_a_file", "is a file, not a directory; pass a directory."),
        ("proc", "proc", ": cannot write in /proc ("),
    )
    @pytest.mark.multiprocess
    def test_log_dir_that_cannot_be_written(self, name, expected):
        path = self.log_dirs[name]
        result = self.refused[f"log_dir_{name}"]
        assert_one_line_error(self, result, f"log_dir={path!r}", expected)
        self.assertNotIn("started", result.stdout)

    @pytest.mark.multiprocess
    def test_a_link_planted_as_a_tasks_log_is_refused_and_its_target_untouched(self):
        path = self.log_dirs["with_a_planted_link"]
        result = self.refused["log_dir_with_a_planted_link"]
        assert_one_line_error(
            self,
            result,
            f"log_dir={path!r}: {path}/worker-0.log is not a regular file of its own, where a "
            "task's log goes; remove it, or pass another --log_dir.",
        )
        self.assertNotIn("started", result.stdout)
        self.assertEqual(os.path.getsize(self.log_dirs["a_file"]), 0)

    def test_too_many_tasks_for_the_free_ports(self):
        stderr = io.StringIO()
        with (
            mock.patch("portpicker.pick_unused_port", side_effect=portpicker.NoFreePortFoundError),
            contextlib.redirect_stderr(stderr),
        ):
            status = cli.main(["tfdist", "launch", "--num_workers=3", "--", "python"])
        self.assertEqual(status, 2)
        self.assertEqual(
            stderr.getvalue(),
            "tfdist launch: error: no free ports for 3 tasks on 127.0.0.1; launch "
            "fewer tasks or free some ports.\n",
        )

    @parameterized.parameters(float("nan"), float("inf"), -1.0, 0.0)
    def test_timeout_or_grace_that_never_or_always_expires(self, seconds):
        for field, fix in (("timeout_s", "--timeout_s=3600"), ("grace_s", "--grace_s=30")):
            with self.assertRaisesRegex(
                launch.LaunchError,
                rf"^{field}={seconds} is not a number of seconds above 0 and at most 2592000 "
                rf"\(30 days\); pass e\.g\. {fix}",
            ):
                launch.LaunchConfig(command=("python",), **{field: seconds})

    def test_unknown_keras(self):
        with self.assertRaisesRegex(launch.LaunchError, r"^keras=4 is not a Keras; pass 2 or 3\.$"):
            launch.LaunchConfig(command=("python",), keras=4)

    def test_unknown_network(self):
        with self.assertRaisesRegex(
            launch.LaunchError,
            r"^network='lan' is not understood; pass "
            r"'auto', 'isolated' or 'host'\.$",
        ):
            launch.LaunchConfig(command=("python",), network="lan")

    @pytest.mark.multiprocess
    def test_evaluator_without_a_model_dir(self):
        tf_config = json.dumps(
            {"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "evaluator", "index": 0}}
        )
        assert_one_line_error(  # Before TensorFlow's start-up.
            self,
            run_tfdist("train", tf_config=tf_config, without_tensorflow=True),
            "the evaluator task needs --model_dir=DIR",
        )


class CommandTest(parameterized.TestCase):
    @parameterized.parameters(
        ("train", "--epochs=1"),
        ("doctor",),
        ("data", "check"),
        ("data", "serve", "--port=5050"),
        ("benchmark",),
        ("manifest",),
    )
    def test_every_tfdist_command_runs_as_python_m_tfdist(self, *command):
        self.assertEqual(
            launch.resolve_command(command, cli.COMMANDS), [*PYTHON, "-m", "tfdist", *command]
        )

    @parameterized.parameters(
        (("train", "--tf_data_service=grpc://h:1"), "--tf_data_service=grpc://h:1"),
        (("train", "--download"), "--download"),
        (("train", "--download=true"), "--download=true"),
        (("train", "--model_dir=gs://bucket/run"), "--model_dir=gs://bucket/run"),
        (("train", "--model_dir=/tmp/run"), None),
        (("train", "--model_dir=file:///tmp/run"), None),
        (("train", "--model_dir=FILE:///tmp/run"), None),
        (("train", "--model_dir=ram://run"), None),
        (("train", "--model_dir=s3://bucket/run"), "--model_dir=s3://bucket/run"),
        (("train", "--data_dir=hdfs://namenode/data"), "--data_dir=hdfs://namenode/data"),
        (("train", "--data_dir=https://host/data"), "--data_dir=https://host/data"),
        (("train", "--model_dir=file:///a", "--x=file:///b,gs://c"), "--x=file:///b,gs://c"),
        (("train", "--download=False"), None),
        (("train", "--nodownload"), None),
        (("train", "--epochs=1"), None),
    )
    def test_flags_that_need_this_machines_network(self, command, expected):
        # pylint: disable-next=protected-access
        self.assertEqual(network.host_network_flag(command), expected)

    def test_restart_back_off_doubles_up_to_its_cap(self):
        self.assertEqual(
            [supervisor.backoff_s(1.0, restarts) for restarts in (1, 2, 5, 6, 500)],
            [1.0, 2.0, 16.0, 30.0, 30.0],
        )
        self.assertEqual(supervisor.backoff_s(0.0, 3), 0.0)
        self.assertEqual(
            supervisor.backoff_bound(1.0, 50, timed=True),
            " (the back-off doubles up to 30 s: at most 1,381 s over 50 restarts)",
        )
        self.assertEqual(
            supervisor.backoff_bound(1.0, 1, timed=False), ""
        )  # One wait: the line says it.
        self.assertEqual(supervisor.backoff_bound(0.0, 9, timed=False), "")

    def test_other_programs_are_looked_up_on_path_and_python_is_ours(self):
        self.assertEqual(
            launch.resolve_command(("env", "x"), cli.COMMANDS), [shutil.which("env"), "x"]
        )
        for python in ("python", "python3"):
            self.assertEqual(
                launch.resolve_command((python, "x.py"), cli.COMMANDS), [sys.executable, "x.py"]
            )


# Listens as TensorFlow's servers do (every interface, IPv6 and IPv4) on its TF_CONFIG port, says
# so once a connection to 127.0.0.1 works, and serves until the file argv[1] exists (120 s at most).
_LISTENING_TASK = textwrap.dedent("""
    import json, os, socket, sys, time
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    port = int(config["cluster"][task["type"]][task["index"]].rpartition(":")[2])
    if socket.has_dualstack_ipv6():
        server = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    else:
        server = socket.create_server(("0.0.0.0", port))
    socket.create_connection(("127.0.0.1", port)).close()
    print("listening", port, flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.1)
""")

# Runs `launch.main` with LaunchConfig fields from argv[1] (JSON) and the command after them.
_LAUNCH_DRIVER = textwrap.dedent("""
    import json, sys
    from tfdist.commands import cli
    from tfdist.cluster import launcher as launch
    fields = json.loads(sys.argv[1])
    config = launch.LaunchConfig(command=tuple(sys.argv[2:]), **fields)
    sys.exit(launch.main(config, tfdist_commands=cli.COMMANDS))
""")


def _listening_ports() -> set[int]:
    """The TCP ports something listens on in this process's network namespace."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table, encoding="ascii") as rows:
            for row in rows.readlines()[1:]:
                fields = row.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports


class NetworkTest(_Scratch, parameterized.TestCase):
    """Where the tasks' ports can be reached from, seen from the launcher's network namespace."""

    def _launch_listeners(
        self, launcher_argv: list[str], env: dict[str, str] | None = None
    ) -> tuple[list[int], set[int], str, str]:
        """Launches 2 listening tasks; returns their ports (worker 0's first), the ports listening
        in this namespace while they serve, and the launcher's stdout and stderr."""
        stop = os.path.join(self.dir, "stop")
        launcher = subprocess.Popen(  # pylint: disable=consider-using-with
            [*launcher_argv, sys.executable, self.script(_LISTENING_TASK), stop],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        lines = []
        try:
            for line in launcher.stdout:  # Ends when the tasks give up, after 120 s at most.
                lines.append(line)
                if sum(" listening " in text for text in lines) == 2:
                    break
            listening = _listening_ports()
        finally:
            open(stop, "w", encoding="utf-8").close()
            stdout, stderr = launcher.communicate(timeout=60)
        self.assertEqual(launcher.returncode, 0, stderr)
        stdout = "".join(lines) + stdout
        ports = [
            int(port) for _, port in sorted(re.findall(r"\[worker:(\d+)\] listening (\d+)", stdout))
        ]
        self.assertLen(ports, 2, stdout)
        self.assertIn("tfdist launch: job done: 2 task(s) exited 0", stdout)
        return ports, listening, stdout, stderr

    @pytest.mark.multiprocess
    def test_auto_keeps_the_tasks_off_this_namespace_or_warns(self):
        ports, listening, stdout, stderr = self._launch_listeners(
            [sys.executable, "-m", "tfdist", "launch", "--num_workers=2", "--"]
        )
        shown = f"port(s) {ports[0]}, {ports[1]}"
        if "tfdist launch: network isolated:" in stdout:
            self.assertIn(
                f"namespace with loopback only, so {shown} are reachable from the tasks alone",
                stdout,
            )
            self.assertFalse(set(ports) & listening, "a task listens in the launcher's namespace")
            for port in ports:
                with self.assertRaises(ConnectionRefusedError):
                    socket.create_connection(("127.0.0.1", port), timeout=10).close()
        else:  # This machine refuses namespaces: the tasks listen here, and the launcher says so.
            self.assertIn(f"{shown} accept unauthenticated connections through", stdout + stderr)
            self.assertLessEqual(set(ports), listening)

    @pytest.mark.multiprocess
    def test_without_util_linux_auto_warns_what_is_exposed(self):
        env = dict(os.environ, PATH=os.path.dirname(sys.executable))
        ports, listening, stdout, stderr = self._launch_listeners(
            [sys.executable, "-m", "tfdist", "launch", "--num_workers=2", "--"], env=env
        )
        self.assertLessEqual(set(ports), listening)
        exposed = (
            f"could not isolate the tasks' network (unshare and nsenter (util-linux) are "
            f"not on PATH): TensorFlow binds every interface (0.0.0.0 and [::]), so "
            f"port(s) {ports[0]}, {ports[1]} accept unauthenticated connections through "
        )
        interfaces = network.exposed_interfaces()
        where = ", ".join(interfaces) if interfaces else "loopback only (no other interface is up)"
        self.assertEqual(
            _without_join_warnings(stderr).splitlines(),
            [
                f"tfdist launch: warning: {exposed}{where}; run as root or allow unprivileged user "
                "namespaces, or firewall these ports."
            ],
        )

    @pytest.mark.multiprocess
    def test_host_network_says_what_is_exposed(self):
        ports, listening, stdout, stderr = self._launch_listeners(
            [
                sys.executable,
                "-c",
                _LAUNCH_DRIVER,
                json.dumps({"num_workers": 2, "network": "host"}),
            ]
        )
        self.assertLessEqual(set(ports), listening)
        self.assertRegex(
            _without_join_warnings(stderr),
            "^tfdist launch: warning: network=host: TensorFlow binds every "
            r"interface \(0\.0\.0\.0 and \[::\]\), so port\(s\) "
            f"{ports[0]}, {ports[1]} accept unauthenticated connections "
            r"through [^\n]+\.\n$",
        )
        self.assertNotIn("network=host", stdout)

    def test_a_command_that_needs_the_network_is_not_isolated(self):
        config = launch.LaunchConfig(
            command=("train", "--tf_data_service=grpc://h:1"), network="auto"
        )
        with (
            mock.patch.object(network, "open_namespace") as open_namespace,
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()) as stderr,
        ):
            self.assertIsNone(
                launch._open_network(  # pylint: disable=protected-access
                    config, strategies.make_cluster(num_workers=1, ports=[2222]), tfdist=True
                )
            )
        open_namespace.assert_not_called()
        self.assertRegex(
            stderr.getvalue(),
            "^tfdist launch: warning: the command passes "
            "--tf_data_service=grpc://h:1, which needs this "
            "machine's network: [^\n]+\n$",
        )

    def test_a_local_file_url_is_isolated(self):
        config = launch.LaunchConfig(command=("train", "--model_dir=file:///tmp/run"))
        with (
            mock.patch.object(network, "open_namespace") as open_namespace,
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()) as stderr,
        ):
            self.assertIs(
                launch._open_network(  # pylint: disable=protected-access
                    config, strategies.make_cluster(num_workers=1, ports=[2222]), tfdist=True
                ),
                open_namespace.return_value,
            )
        self.assertEqual(stderr.getvalue(), "")


@pytest.mark.multiprocess
class RefusedNamespaceTest(parameterized.TestCase):
    """A machine that refuses network namespaces, made by asking unshare for an unknown option."""

    def setUp(self):
        super().setUp()
        self.enterContext(
            mock.patch.object(network, "_NAMESPACE_KINDS", ((("--no-such-option",), ("--net",)),))
        )

    def test_isolated_is_a_one_line_error_before_any_task_starts(self):
        config = launch.LaunchConfig(command=("train",), network="isolated")
        with contextlib.redirect_stdout(io.StringIO()) as stdout:
            with self.assertRaisesRegex(
                launch.LaunchError,
                r"^network=isolated: this machine refuses the tasks a network namespace "
                r"\(`unshare --no-such-option`: .*\); run as root or allow unprivileged user "
                r"namespaces, or pass --network=host \(the tasks' ports are then open on "
                r"every interface\)\.$",
            ) as raised:
                launch.main(config)
        self.assertNotIn("\n", str(raised.exception))
        self.assertNotIn("started", stdout.getvalue())

    def test_isolation_refusal_says_why(self):
        self.assertRegex(network.isolation_refusal(), r"^`unshare --no-such-option`: .+")


@pytest.mark.multiprocess
class TfdistCommandLaunchTest(unittest.TestCase):
    def test_doctor_runs_as_each_task(self):
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                _LAUNCH_DRIVER,
                json.dumps({"num_workers": 1, "timeout_s": 300}),
                "doctor",
            ],
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr)
        self.assertRegex(result.stdout, r"\[worker:0\] this task: worker:0 at 127\.0\.0\.1:\d+")
        self.assertIn("[worker:0] ok: no problems found", result.stdout)
        if "network isolated" in result.stdout:
            self.assertRegex(
                result.stdout,
                r"\[worker:0\] network: loopback only here, so "
                r"this task's port \d+ is reachable from this "
                "network namespace alone",
            )


@pytest.mark.multiprocess
class ClusterLaunchTest(_Scratch, unittest.TestCase):
    """Users' own multi-worker programs as the tasks; `tfdist train` clusters (multi-worker
    mirrored with an evaluator, parameter server) are in FaultToleranceTest, where they also
    lose a task."""

    def test_unmodified_tf_keras_multi_worker_script(self):
        script = self.script(_KERAS_MULTI_WORKER_SCRIPT)
        result = run_tfdist(
            "launch", "--num_workers=2", "--timeout_s=300", "--", sys.executable, script
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:])
        for index in (0, 1):
            self.assertIn(f"[worker:{index}] replicas 2 keras tf_keras", result.stdout)

    def test_the_same_script_under_keras_3_is_pointed_at_tfdist_fit(self):
        # tf.keras is Keras 3 under --keras=3, whose own fit crashes (keras-team/keras#20585).
        script = self.script(_KERAS_MULTI_WORKER_SCRIPT)
        result = run_tfdist(
            "launch",
            "--keras=3",
            "--num_workers=2",
            "--timeout_s=300",
            "--",
            sys.executable,
            script,
        )
        self.assertEqual(result.returncode, 1, result.stdout[-3000:])
        hints = [line for line in result.stderr.splitlines() if "Keras 3's own" in line]
        self.assertIn(len(hints), (1, 2), result.stderr)  # The other task may be stopped first.
        for line in hints:
            self.assertRegex(
                line,
                r"^tfdist launch: worker:[01] crashed in Keras 3's own "
                r"model\.fit, .*; train the model through tfdist\.fit",
            )


# `tfdist train` with a callback that kills worker 1 at epoch 2, step 2 of its first attempt
# (a marker file records it) and prints a checksum of the weights when training ends.
_TRAIN_CRASHING_ONCE = textwrap.dedent("""
    import json, os, sys
    import tfdist
    from tfdist.commands import cli
    from tfdist.training.keras2 import fit as training
    import tensorflow as tf
    import tf_keras

    marker, args = sys.argv[1], sys.argv[2:]
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]

    class CrashOnce(tf_keras.callbacks.Callback):
        epoch = 0
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
        def on_train_batch_end(self, batch, logs=None):
            if index == 1 and self.epoch == 1 and batch == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(7)
        def on_train_end(self, logs=None):
            total = sum(float(tf.reduce_sum(weight)) for weight in self.model.weights)
            print(f"weights {total:.6f}", flush=True)

    callbacks = training._output_callbacks
    training._output_callbacks = lambda *a: callbacks(*a) + [CrashOnce()]
    sys.exit(cli.main(["tfdist", "train", *args]))
""")

# A program of a user's own through `tfdist.fit`: worker 1 hangs (alive, heartbeating) in its
# fourth epoch; each worker prints its OS threads at the end of epochs 1 and 3.
_WORKER_1_HANGS = textwrap.dedent("""
    import json, os, time
    import tensorflow as tf
    import tf_keras
    import tfdist

    tfdist.define_flags()
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]

    def threads():
        with open("/proc/self/status", encoding="utf-8") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))

    class HangInEpoch4(tf_keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
        def on_epoch_end(self, epoch, logs=None):
            if epoch in (0, 2):
                print(f"threads after epoch {epoch + 1}: {threads()}", flush=True)
        def on_train_batch_end(self, batch, logs=None):
            if index == 1 and self.epoch == 3 and batch == 5:
                print(f"hanging at {time.time()}", flush=True)
                time.sleep(600)

    def data(context):
        x = tf.random.stateless_uniform((256, 8), seed=(1, 2))
        labels = tf.zeros((256,), tf.int32)
        dataset = tf.data.Dataset.from_tensor_slices((x, labels))
        shard = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        return shard.repeat().batch(8)

    def main(argv):
        plan = tfdist.setup(tfdist.config_from_flags(), train_examples=256)
        build = lambda: tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(2)])
        tfdist.fit(plan, build, data, validation_data=None, callbacks=[HangInEpoch4()],
                   loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    tfdist.run(main)
""")

# Runs `tfdist launch ARGV[2:]` in this process with its --timeout_s counted from the moment a
# task's output holds ARGV[1] (120 s after the tasks start at the latest), not from their start:
# a launch timeout that ends a task stuck waiting without first waiting out the task's
# TensorFlow import. (The test passes --grace_s=1: a task whose wait ignores SIGTERM,
# tfdist.cluster.join_deadline says whose does, is not waited for 30 s before its SIGKILL.)
_LAUNCH_TIMED_FROM_A_LINE = textwrap.dedent("""
    import sys, threading, time
    from tfdist.commands import cli
    from tfdist.cluster import supervisor

    line, seen = sys.argv[1], threading.Event()

    class Watched:
        buffer = None  # No binary side: the launcher's pump writes text, which this watches.

        def __init__(self, stream):
            self._stream = stream
        def write(self, text):
            if line in text:
                seen.set()
            return self._stream.write(text)
        def __getattr__(self, name):
            return getattr(self._stream, name)

    sys.stdout = Watched(sys.stdout)
    out_of_time = supervisor.Supervisor.out_of_time
    def out_of_time_from_the_line(self):
        if not seen.is_set() and time.monotonic() - self.start_s < 120:
            return False
        if not seen.is_set() or getattr(self, "line_seen", False):
            return out_of_time(self)
        self.line_seen, self.start_s = True, time.monotonic()
        return False
    supervisor.Supervisor.out_of_time = out_of_time_from_the_line
    sys.exit(cli.main(["tfdist", "launch", *sys.argv[2:]]))
""")

# A task that trains, except worker 1, which never starts (it sleeps).
_WORKER_1_NEVER_STARTS = textwrap.dedent("""
    import json, os, sys, time
    if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
        time.sleep(600)
    from tfdist.commands import cli
    sys.exit(cli.main(["tfdist", "train", *sys.argv[1:]]))
""")


@pytest.mark.multiprocess
class FaultToleranceTest(_Scratch, unittest.TestCase):
    """`tfdist train` clusters under `tfdist launch` that lose a task, or never get one."""

    @pytest.fixture(autouse=True)
    def _data(self, small_shapes_data_dir):
        self.data_dir = small_shapes_data_dir

    def test_multi_worker_group_restarts_and_resumes_from_the_backup(self):
        """(An evaluator restarted with its group: tests/tfdist/training/keras3/
        test_step_on_clusters.py, the same launcher under Keras 3.)"""
        model_dir, metrics_path = os.path.join(self.dir, "model"), os.path.join(self.dir, "m.json")
        result = run_tfdist(
            "launch",
            "--num_workers=2",
            "--max_restarts=1",
            "--timeout_s=500",
            "--",
            sys.executable,
            self.script(_TRAIN_CRASHING_ONCE),
            os.path.join(self.dir, "crashed"),
            "--strategy=multi_worker_mirrored",
            f"--data_dir={self.data_dir}",
            "--epochs=2",
            "--steps_per_epoch=4",
            "--global_batch_size=32",
            f"--model_dir={model_dir}",
            "--collective_timeout_s=60",
            f"--metrics_json={metrics_path}",
        )
        self.assertEqual(result.returncode, 0, result.stdout[-4000:] + result.stderr[-2000:])
        self.assertIn(
            "worker:1 exited with status 7; restarting every task (1/1)",
            result.stderr,
            "the crashed worker restarts the group",
        )
        worker_0 = [line for line in result.stdout.splitlines() if line.startswith("[worker:0]")]
        self.assertEqual(sum("Epoch 1/2" in line for line in worker_0), 1, "epoch 1 redone")
        # The survivor says it lost its peer in one line (or is stopped first), no traceback.
        self.assertFalse([line for line in worker_0 if "Traceback" in line], worker_0[-40:])
        self.assertEqual(
            sum("Epoch 2/2" in line for line in worker_0),
            2,
            "epoch 2, begun when worker 1 crashed, run again from the backup",
        )
        checksums = {
            line.split("weights ")[1] for line in result.stdout.splitlines() if "] weights " in line
        }
        self.assertEqual(
            len(checksums), 1, f"the workers end with the same weights: {result.stdout[-2000:]}"
        )
        with open(metrics_path, encoding="utf-8") as metrics_file:
            metrics = json.load(metrics_file)
        self.assertEqual(
            (metrics["strategy"], metrics["num_workers"]),
            ("multi_worker_mirrored", 2),
            "the metrics name the cluster",
        )

    def test_parameter_server_job_trains_and_survives_a_killed_worker(self):
        metrics_path = os.path.join(self.dir, "m.json")
        command = [
            sys.executable,
            "-m",
            "tfdist",
            "launch",
            "--num_workers=2",
            "--num_ps=1",
            "--chief",
            "--max_restarts=1",
            "--timeout_s=400",
            "--",
            "train",
            "--strategy=parameter_server",
            f"--data_dir={self.data_dir}",
            "--epochs=3",
            "--steps_per_epoch=20",
            "--validation_steps=2",
            "--global_batch_size=32",
            f"--metrics_json={metrics_path}",
        ]
        output, killed, status = launch_killing(
            command, when="[chief:0] Epoch 2/3", task="worker:1"
        )
        self.assertTrue(killed, output[-3000:])
        self.assertEqual(status, 0, output[-3000:])
        self.assertIn("[chief:0] tfdist: parameter_server", output, "the chief's summary")
        self.assertIn("3 epoch(s) of 20 steps", output, "every epoch ran")
        with open(metrics_path, encoding="utf-8") as metrics_file:
            metrics = json.load(metrics_file)
        self.assertEqual(
            (metrics["strategy"], metrics["num_workers"]),
            ("parameter_server", 2),
            "the metrics name the cluster",
        )

    def test_worker_that_never_starts_fails_its_peer_at_the_collective_timeout(self):
        # The timeout counts from worker 0's join attempt (tfdist.runtime.setup).
        start = time.monotonic()
        result = run_tfdist(
            "launch",
            "--num_workers=2",
            "--timeout_s=300",
            "--",
            sys.executable,
            self.script(_WORKER_1_NEVER_STARTS),
            "--strategy=multi_worker_mirrored",
            f"--data_dir={self.data_dir}",
            "--collective_timeout_s=1",
        )
        self.assertNotIn(result.returncode, (0, 124), result.stderr[-2000:])
        self.assertRegex(
            result.stdout,
            r"\[worker:0\] tfdist train: error: worker:0 waited 1 s "
            r"\(--collective_timeout_s\) for the other 1 worker\(s\) to join; .* "
            r"Not answering: 127\.0\.0\.1:\d+\.",
        )
        self.assertLess(time.monotonic() - start, 240)  # Not the launch's 300 s, nor 600.

    def test_a_hung_peer_fails_the_step_at_the_collective_timeout_kept_by_one_thread(self):
        timeout_s = 5  # A step here takes milliseconds; the first call, tracing, gets 600 s.
        result = run_tfdist(
            "launch",
            "--num_workers=2",
            "--timeout_s=400",
            "--grace_s=1",  # Worker 1 sleeps through its SIGTERM: no 30 s before its SIGKILL.
            "--",
            sys.executable,
            self.script(_WORKER_1_HANGS),
            "--strategy=multi_worker_mirrored",
            "--epochs=5",
            "--steps_per_epoch=20",
            "--global_batch_size=16",
            f"--collective_timeout_s={timeout_s}",
        )
        ended = time.time()
        self.assertEqual(result.returncode, 1, result.stderr[-2000:])
        self.assertRegex(
            result.stdout,
            r"\[worker:0\] .*: error: lost peer worker:1 at 127\.0\.0\.1:\d+: a collective "
            r"waited for it longer than --collective_timeout_s; every task of the group stops",
        )
        (hung_at,) = re.findall(r"\[worker:1\] hanging at ([\d.]+)", result.stdout)
        self.assertLess(ended - float(hung_at), timeout_s + 60, "not the launch's 400 s")
        # TensorFlow's own timeout left ~8 threads per step for the timeout's length (320 here).
        for worker in (0, 1):
            counted = rf"\[worker:{worker}\] threads after epoch \d: (\d+)"
            after_1, after_3 = map(int, re.findall(counted, result.stdout))
            self.assertLess(after_3 - after_1, 40, f"worker:{worker}'s threads grew")

    def test_worker_that_never_starts_without_a_collective_timeout_ends_at_the_launch_timeout(self):
        # Also `tfdist launch --timeout_s` with real processes: exit 124 and its one line.
        waiting = "waiting for all 2 workers to join, without a time limit"
        start = time.monotonic()
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                _LAUNCH_TIMED_FROM_A_LINE,
                waiting,
                "--num_workers=2",
                "--timeout_s=2",
                "--grace_s=1",
                "--",
                sys.executable,
                self.script(_WORKER_1_NEVER_STARTS),
                "--strategy=multi_worker_mirrored",
                f"--data_dir={self.data_dir}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={name: value for name, value in os.environ.items() if name != "TF_CONFIG"},
        )
        self.assertIn(
            f"[worker:0] tfdist: worker:0 {waiting} (set --collective_timeout_s to bound it)",
            result.stdout,
            "worker 0 says it waits without a limit",
        )
        self.assertEqual(result.returncode, 124, result.stderr[-2000:])
        self.assertIn(
            "tfdist launch: timed out after 2 s; stopped every task\n",
            result.stderr,
            "the launch timeout ends the job, 2 s into worker 0's wait",
        )
        self.assertLess(time.monotonic() - start, 240)  # Not worker 1's 600 s of sleep.


def _without_join_warnings(stderr: str) -> str:
    """`stderr` less the launcher's join warnings: these listeners stop listening at once, maybe
    before the launcher's poll saw them (test_joining covers the warning)."""
    return "".join(line for line in stderr.splitlines(keepends=True) if "did not join" not in line)


if __name__ == "__main__":
    unittest.main()
