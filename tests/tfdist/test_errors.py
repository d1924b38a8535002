"""The one error model: every error class tfdist defines derives from `errors.TfdistError`, with
exit status 2 for bad input and 1 for a failed run; the root as `tfdist` exports it; one printer
that names the program."""

import ast
import contextlib
import importlib
import io
import pathlib
import sys
import unittest
from unittest import mock

import tfdist
from tfdist import errors
from tfdist.commands import app
from tfdist.commands import cli

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_PACKAGES = {
    "tfdist": "tfdist",
    "strategies": "tfdist.strategies",
    "input_pipelines": "tfdist.input_pipelines",
}
# Exceptions that never reach a user: signals between a module's own parts.
# Signals between tfdist's own parts, never shown to a user as they are (WorkerFailed fails a
# Ray worker, so that Ray's failure policy acts; `tfdist ray` says it in its closing line).
_INTERNAL = {"Stopped", "OutOfTime", "NoNamespace", "_Refused", "_OutOfBounds", "WorkerFailed"}


def _error_classes() -> list[tuple[str, str]]:
    """(module, class) of every exception class defined in the shipped packages."""
    found = []
    for folder, package in _PACKAGES.items():
        for path in sorted((_ROOT / folder).rglob("*.py")):
            module = ".".join([package, *path.relative_to(_ROOT / folder).with_suffix("").parts])
            module = module.removesuffix(".__init__")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(base).endswith(
                        ("Error", "Exception", "Failure", "Peer", "Unavailable", "NoHosts", "Saved")
                    )
                    for base in node.bases
                ):
                    found.append((module, node.name))
    return found


class HierarchyTest(unittest.TestCase):
    def test_every_error_a_user_can_meet_is_caught_by_user_errors(self):
        classes = _error_classes()
        self.assertGreater(len(classes), 15)
        for module, name in classes:
            if name in _INTERNAL:
                continue
            error = getattr(importlib.import_module(module), name)
            with self.subTest(error=f"{module}.{name}"):
                self.assertTrue(issubclass(error, app.USER_ERRORS))
                library = module.startswith(("tfdist.strategies", "tfdist.input_pipelines"))
                # The libraries import nothing of tfdist: their errors are ValueErrors, usage
                # errors; the core's derive from the one root.
                self.assertTrue(issubclass(error, ValueError if library else errors.TfdistError))
                self.assertIn(
                    getattr(error, "exit_status", errors.EXIT_USAGE),
                    (errors.EXIT_USAGE, errors.EXIT_RUN_FAILURE, errors.EXIT_PREEMPTED),
                )

    def test_bad_input_exits_2_a_failed_run_1(self):
        from tfdist.runtime.config import ConfigError  # pylint: disable=import-outside-toplevel

        self.assertEqual(ConfigError.exit_status, 2)
        self.assertTrue(issubclass(ConfigError, ValueError))  # As before: `except ValueError`.
        for failure in (errors.Diverged, errors.DiskFull, errors.LostPeer, errors.ResultNotSaved):
            self.assertEqual(failure.exit_status, 1)
        self.assertEqual(app.USER_ERRORS[0], errors.TfdistError)


class PublicRootTest(unittest.TestCase):
    """A user's program catches tfdist's errors by what `tfdist` exports."""

    def test_the_root_is_exported(self):
        self.assertIs(tfdist.TfdistError, errors.TfdistError)
        self.assertIn("TfdistError", tfdist.__all__)

    def test_except_the_root_catches_a_config_error(self):
        with self.assertRaises(tfdist.TfdistError) as caught:
            tfdist.TrainConfig(epochs=0)
        self.assertIsInstance(caught.exception, tfdist.ConfigError)
        self.assertEqual(caught.exception.exit_status, errors.EXIT_USAGE)

    def test_user_errors_are_the_root_and_the_libraries_config_errors(self):
        self.assertEqual(
            tfdist.USER_ERRORS,
            (
                tfdist.TfdistError,
                tfdist.StrategyConfigError,
                tfdist.ClusterConfigError,
                tfdist.InputConfigError,
            ),
        )
        for library_error in tfdist.USER_ERRORS[1:]:
            with self.subTest(error=library_error.__name__):
                self.assertTrue(issubclass(library_error, ValueError))
                self.assertFalse(issubclass(library_error, tfdist.TfdistError))

    def test_a_preemption_is_under_the_root_with_status_75(self):
        self.assertTrue(issubclass(errors.Preempted, tfdist.TfdistError))
        self.assertEqual(errors.Preempted.exit_status, 75)


class PrinterTest(unittest.TestCase):
    def _reported(self, error: errors.TfdistError) -> tuple[int, str]:
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            status = app.report(error)
        return status, stderr.getvalue()

    def test_named_after_the_program_its_fields_as_flags(self):
        with mock.patch.object(sys, "argv", ["/home/me/my_train.py"]):
            self.assertEqual(
                self._reported(errors.UsageError("epochs=0 is not from 1")),
                (2, "my_train.py: error: --epochs=0 is not from 1\n"),
            )
            with errors.running_as("tfdist train"):
                self.assertEqual(
                    self._reported(errors.Diverged("loss: training diverged")),
                    (1, "tfdist train: error: loss: training diverged\n"),
                )

    def test_a_library_config_error_is_bad_input_with_status_2(self):
        with mock.patch.object(sys, "argv", ["my_train.py"]):
            self.assertEqual(
                self._reported(tfdist.StrategyConfigError("num_cpu_devices=0 is not from 1")),
                (2, "my_train.py: error: --num_cpu_devices=0 is not from 1\n"),
            )

    def test_the_cli_prints_a_run_failure_with_status_1(self):
        stderr = io.StringIO()
        with (
            mock.patch.dict(
                cli.COMMANDS, doctor=mock.Mock(side_effect=errors.LostPeer("lost peer worker:1"))
            ),
            contextlib.redirect_stderr(stderr),
        ):
            status = cli.main(["tfdist", "doctor"])
        self.assertEqual(
            (status, stderr.getvalue()), (1, "tfdist doctor: error: lost peer worker:1\n")
        )


if __name__ == "__main__":
    unittest.main()
