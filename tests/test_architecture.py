"""Enforces the dependency rule of ARCHITECTURE.md by parsing every module's imports."""

import ast
import configparser
import importlib.metadata
import pathlib
import re
import subprocess
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("strategies", "input_pipelines", "tfdist")
# Which of our packages each package may import (besides itself).
ALLOWED = {
    "strategies": set(),
    "input_pipelines": set(),
    "tfdist": {"strategies", "input_pipelines"},
}
COMMAND_LAYER = "tfdist/commands/"
ENVIRON_MODULES = {"strategies/cluster.py", "strategies/__init__.py", "input_pipelines/__init__.py",
                   "tfdist/cluster/launcher.py", "tfdist/commands/benchmark/rounds.py",  # Their children's environments.
                   "tfdist/runtime/keras_env.py", "tfdist/runtime/tf_import.py"}
# Keras 3 (`import keras`) is imported only by modules whose name says so, and by the switch
# between the flavours (ARCHITECTURE.md "Keras flavour").
KERAS3_SWITCH = "tfdist/runtime/keras_flavour.py"


# Modules shipped code may import only inside a function that says how to install them.
OPTIONAL_MODULES = {"matplotlib": "plot"}


def _declared(requirements: str) -> set[str]:
    """Distribution names of a setup.cfg requirement list, normalised as PyPI does."""
    names = (re.split(r"[\s\[=<>!~;]", line.strip())[0] for line in requirements.splitlines())
    return {re.sub(r"[-_.]+", "-", name).lower() for name in names if name}


def _distributions(module: str) -> set[str]:
    found = importlib.metadata.packages_distributions().get(module, [])
    return {re.sub(r"[-_.]+", "-", name).lower() for name in found}


def _modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield package, path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _imported_names(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


class DependencyRuleTest(unittest.TestCase):

    def test_packages_import_only_what_the_rule_allows(self):
        for package, path, tree in _modules():
            for name in _imported_names(tree):
                top = name.split(".")[0]
                if top in PACKAGES and top != package:
                    self.assertIn(top, ALLOWED[package], f"{path} imports {name}")

    def test_keras_3_only_in_keras3_modules(self):
        for _, path, tree in _modules():
            if "keras3" in path or path == KERAS3_SWITCH:
                continue
            for name in _imported_names(tree):
                self.assertNotEqual((name or "").split(".")[0], "keras",
                                    f"{path} imports Keras 3")

    def test_only_the_cli_touches_absl_flags(self):
        for _, path, tree in _modules():
            if path.startswith(COMMAND_LAYER):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "absl":
                    names = {alias.name for alias in node.names}
                    self.assertNotIn("flags", names, f"{path} imports absl.flags")
                if isinstance(node, ast.Name):
                    self.assertNotEqual(node.id, "FLAGS", f"{path} reads FLAGS")

    def test_environment_is_read_only_where_documented(self):
        for _, path, tree in _modules():
            if path in ENVIRON_MODULES:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                    self.fail(f"{path} reads os.{node.attr}")

    def test_every_third_party_import_is_a_declared_dependency(self):
        """A fresh `pip install -e .` (no extras) must hold every module the code imports."""
        setup = configparser.ConfigParser()
        setup.read(ROOT / "setup.cfg")
        runtime = _declared(setup["options"]["install_requires"])
        extras = setup["options.extras_require"]
        ours = set(PACKAGES) | set(sys.stdlib_module_names)
        for _, path, tree in _modules():
            for name in _imported_names(tree):
                top = (name or "").split(".")[0]
                if not top or top in ours:
                    continue
                if top in OPTIONAL_MODULES:
                    self.assertLessEqual(_distributions(top),
                                         _declared(extras[OPTIONAL_MODULES[top]]), path)
                    continue
                self.assertTrue(_distributions(top) & runtime,
                                f"{path} imports {top}, which install_requires does not declare")

    def test_cli_starts_without_tensorflow(self):
        code = ("import sys, tfdist.commands.cli, tfdist.commands.flags, strategies, input_pipelines; "
                "print('tensorflow' in sys.modules)")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True, cwd=ROOT, timeout=60)
        self.assertEqual(result.stdout.strip(), "False")


if __name__ == "__main__":
    unittest.main()
