"""Runs the `tfdist` CLI in a child process, as a user would, with a bounded wait; checks the
one-line error contract."""

import os
import pathlib
import signal
import subprocess
import sys

DEFAULT_TIMEOUT_S = 300
# A `tensorflow` package that fails to import, first on the path of a child that must answer
# without TensorFlow: deterministic where a wall-clock bound flakes on a busy machine.
_NO_TENSORFLOW = pathlib.Path(__file__).with_name("no_tensorflow")
TENSORFLOW_IMPORTED = "tfdist imported tensorflow"


def run_tfdist(*args: str, tf_config: str | None = None, extra_env: dict[str, str] | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S,
               without_tensorflow: bool = False) -> subprocess.CompletedProcess:
    """Runs `python -m tfdist ARGS...`; TF_CONFIG is exactly `tf_config` (unset when None).

    `without_tensorflow`: importing TensorFlow fails in the child with TENSORFLOW_IMPORTED.
    """
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    env.update(extra_env or {})
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    if without_tensorflow:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_NO_TENSORFLOW),
                                                          env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "tfdist", *args], capture_output=True, text=True,
                          env=env, timeout=timeout_s, check=False)


def assert_one_line_error(test, result: subprocess.CompletedProcess, *expected: str) -> None:
    """Asserts exit status 2 and exactly one stderr line, without a traceback, containing each
    of `expected`."""
    test.assertEqual(result.returncode, 2, result.stderr)
    lines = result.stderr.strip().splitlines()
    test.assertEqual(len(lines), 1, result.stderr)
    for text in expected:
        test.assertIn(text, lines[0])
    test.assertNotIn("Traceback", result.stderr)


def read_killing(stream, *, when: str, task: str) -> tuple[list[str], bool]:
    """Reads a launcher's or rehearsal's `stream` to its end, SIGKILLing the process it announced
    as `started TASK ... pid=N` at once when a line starts with `when` (mid-epoch, for an
    "Epoch k/" line: killed before its steps run). Returns the lines and whether it killed."""
    lines, killed = [], False
    for line in stream:
        lines.append(line)
        if not killed and line.startswith(when):
            pid = int(next(text for text in lines if f"started {task} " in text)
                      .rsplit("pid=", 1)[1])
            os.kill(pid, signal.SIGKILL)
            killed = True
    return lines, killed


def launch_killing(command: list[str], *, when: str, task: str,
                   env: dict | None = None) -> tuple[str, bool, int]:
    """Runs a `tfdist launch` `command` to its end (its stderr into its stdout), SIGKILLing
    `task` at the line that starts with `when` (`read_killing`); returns its output, whether it
    killed, and its exit status. The launcher is killed if reading fails."""
    launcher = subprocess.Popen(  # pylint: disable=consider-using-with
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    try:
        lines, killed = read_killing(launcher.stdout, when=when, task=task)
        status = launcher.wait(timeout=60)
    finally:
        launcher.kill()
        launcher.wait(timeout=60)
    return "".join(lines), killed, status
