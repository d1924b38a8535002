"""Runs the `tfdist` CLI in a child process, as a user would, with a bounded wait; checks the
one-line error contract."""

import os
import subprocess
import sys

DEFAULT_TIMEOUT_S = 300


def run_tfdist(*args: str, tf_config: str | None = None, extra_env: dict[str, str] | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Runs `python -m tfdist ARGS...`; TF_CONFIG is exactly `tf_config` (unset when None)."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    env.update(extra_env or {})
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
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
