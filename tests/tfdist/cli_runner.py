"""Runs the `tfdist` CLI in a child process, as a user would, with a bounded wait; checks the
one-line error contract."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile

DEFAULT_TIMEOUT_S = 300
# A `tensorflow` package that fails to import, first on the path of a child that must answer
# without TensorFlow: deterministic where a wall-clock bound flakes on a busy machine.
_NO_TENSORFLOW = pathlib.Path(__file__).with_name("no_tensorflow")
TENSORFLOW_IMPORTED = "tfdist imported tensorflow"


def _child_env(extra_env: dict[str, str] | None) -> dict[str, str]:
    """This process's environment less TF_CONFIG, with `extra_env` over it."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    env.update(extra_env or {})
    return env


def _without_tensorflow(env: dict[str, str]) -> dict[str, str]:
    """`env` with a `tensorflow` that fails to import (TENSORFLOW_IMPORTED) first on the path."""
    return dict(
        env, PYTHONPATH=os.pathsep.join(filter(None, [str(_NO_TENSORFLOW), env.get("PYTHONPATH")]))
    )


def run_tfdist(
    *args: str,
    tf_config: str | None = None,
    extra_env: dict[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    without_tensorflow: bool = False,
) -> subprocess.CompletedProcess:
    """Runs `python -m tfdist ARGS...`; TF_CONFIG is exactly `tf_config` (unset when None).

    `without_tensorflow`: importing TensorFlow fails in the child with TENSORFLOW_IMPORTED.
    """
    env = _child_env(extra_env)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    if without_tensorflow:
        env = _without_tensorflow(env)
    return subprocess.run(
        [sys.executable, "-m", "tfdist", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


# Runs each case of argv[1] (a JSON list of [arguments, variables]) through `cli.main` in this
# one process, with the case's environment variables over the child's own (TF_CONFIG unset unless
# given), its fds 1 and 2 captured per case (TensorFlow's C++ logs included), and writes their
# [status, stdout, stderr, seconds] as JSON to the path argv[2].
_CASES_CHILD = """
import json, os, sys, tempfile, time
from tfdist.commands import cli
results = []
own_environment = dict(os.environ)
for args, variables in json.loads(sys.argv[1]):
    os.environ.clear()
    os.environ.update(own_environment, **variables)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = os.dup(1), os.dup(2)
        start = time.monotonic()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            status = cli.main(["tfdist", *args])
        except SystemExit as exit_:  # As the interpreter reads the code: None is 0.
            status = 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            seconds = time.monotonic() - start
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
        captured = []
        for stream in (out, err):
            stream.seek(0)
            captured.append(stream.read().decode(errors="replace"))
        results.append([status, *captured, seconds])
with open(sys.argv[2], "w", encoding="utf-8") as report:
    json.dump(results, report)
"""


def run_tfdist_cases(
    cases: list[list[str]],
    *,
    case_envs: list[dict[str, str]] | None = None,
    extra_env: dict[str, str] | None = None,
    without_tensorflow: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[subprocess.CompletedProcess]:
    """Runs `tfdist ARGS` for each ARGS of `cases` in one child process, one after the other:
    TensorFlow is imported once for all of them (`without_tensorflow`: never, as in
    `run_tfdist`). Each case sees the child's environment (this one's less TF_CONFIG, with
    `extra_env`) with its variables of `case_envs` over it, TF_CONFIG among them. For cases that
    need no process of their own: errors a user's plug-in or a combination of flags causes,
    short runs one after the other (process-wide state such as split CPU devices stays for the
    cases after). Each result is that case's status, stdout and stderr, and its `seconds`."""
    env = _child_env(extra_env)
    if without_tensorflow:
        env = _without_tensorflow(env)
    with tempfile.TemporaryDirectory() as scratch:
        report = os.path.join(scratch, "results.json")
        with_envs = list(zip(cases, case_envs or [{}] * len(cases), strict=True))
        child = subprocess.run(
            [sys.executable, "-c", _CASES_CHILD, json.dumps(with_envs), report],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
        if child.returncode != 0:
            raise AssertionError(
                f"the cases' child failed ({child.returncode}):\n{child.stderr[-3000:]}"
            )
        with open(report, encoding="utf-8") as results:
            return [
                _timed(
                    subprocess.CompletedProcess(["tfdist", *args], status, stdout, stderr), seconds
                )
                for args, (status, stdout, stderr, seconds) in zip(cases, json.load(results))
            ]


def _timed(result: subprocess.CompletedProcess, seconds: float) -> subprocess.CompletedProcess:
    result.seconds = seconds  # How long the case took in the child.
    return result


def assert_one_line_error(test, result: subprocess.CompletedProcess, *expected: str) -> None:
    """Asserts exit status 2 and exactly one stderr line, without a traceback, containing each
    of `expected`."""
    test.assertEqual(result.returncode, 2, result.stderr)
    lines = result.stderr.strip().splitlines()
    test.assertEqual(len(lines), 1, result.stderr)
    for text in expected:
        test.assertIn(text, lines[0])
    test.assertNotIn("Traceback", result.stderr)


def assert_evaluator_agrees(test, model_dir: str, metrics: dict, checkpoint: str) -> None:
    """Asserts that the evaluator task evaluated `checkpoint` (e.g. "epoch-002", the last) into
    `model_dir`/evaluations.json, with the accuracy and loss the workers' final validation has in
    `metrics` (--metrics_json): it reads the whole validation split on one task, the workers
    read it sharded, each example once, so the same weights give the same figures."""
    with open(os.path.join(model_dir, "evaluations.json"), encoding="utf-8") as file:
        evaluations = json.load(file)
    test.assertIn(checkpoint, evaluations, "the evaluator saw the last checkpoint")
    test.assertAlmostEqual(
        evaluations[checkpoint]["accuracy"],
        metrics["final"]["val_accuracy"],
        places=6,
        msg="the evaluator's accuracy is the workers' validation's",
    )
    test.assertAlmostEqual(
        evaluations[checkpoint]["loss"],
        metrics["final"]["val_loss"],
        places=4,
        msg="the evaluator's loss is the workers' validation's",
    )


def read_killing(stream, *, when: str, task: str) -> tuple[list[str], bool]:
    """Reads a launcher's or rehearsal's `stream` to its end, SIGKILLing the process it announced
    as `started TASK ... pid=N` at once when a line starts with `when` (mid-epoch, for an
    "Epoch k/" line: killed before its steps run). Returns the lines and whether it killed."""
    lines, killed = [], False
    for line in stream:
        lines.append(line)
        if not killed and line.startswith(when):
            pid = int(
                next(text for text in lines if f"started {task} " in text).rsplit("pid=", 1)[1]
            )
            os.kill(pid, signal.SIGKILL)
            killed = True
    return lines, killed


def launch_killing(
    command: list[str], *, when: str, task: str, env: dict | None = None
) -> tuple[str, bool, int]:
    """Runs a `tfdist launch` `command` to its end (its stderr into its stdout), SIGKILLing
    `task` at the line that starts with `when` (`read_killing`); returns its output, whether it
    killed, and its exit status. The launcher is killed if reading fails."""
    launcher = subprocess.Popen(  # pylint: disable=consider-using-with
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines: list[str] = []
    try:
        lines, killed = read_killing(launcher.stdout, when=when, task=task)
        status = launcher.wait(timeout=60)
    finally:
        launcher.kill()
        launcher.wait(timeout=60)
    return "".join(lines), killed, status


# The user's program the engine and preemption tests run (an MLP on generated data that prints
# its rank's final weights as one digest line; see its docstring).
MLP_PROGRAM = str(pathlib.Path(__file__).parents[1] / "data" / "programs" / "mlp_with_digest.py")


def digests(output: str) -> dict[str, str]:
    """{task: digest of its final weights} from MLP_PROGRAM's `digest {...}` lines."""
    found = {}
    for line in output.splitlines():
        if "digest {" in line:
            record = json.loads(line[line.index("{") :])
            found[record["task"]] = record["sha"]
    return found
