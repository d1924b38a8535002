"""Enforces docs/ARCHITECTURE.md by parsing every module's imports: the rooms' order, no
cycles, the two libraries on their own, Keras 3 behind its seam, flags in the command layer, and
what a user's program loads; and the house's measures (room and module sizes, packaging)."""

import ast
import configparser
import functools
import importlib.metadata
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The shipped packages: folder -> import name.
PACKAGES = {
    "tfdist": "tfdist",
    "strategies": "tfdist.strategies",
    "input_pipelines": "tfdist.input_pipelines",
}
LIBRARIES = ("tfdist.strategies", "tfdist.input_pipelines")
# tfdist's rooms from the top floor down: a room imports only rooms below it (and the
# libraries); the package's face (tfdist/__init__.py, __main__.py) stands above them all.
ROOMS = ("commands", "training", "optim", "runtime", "cluster")
FLAVOURS = ("tfdist.training.keras2", "tfdist.training.keras3")
COMMAND_LAYER = "tfdist.commands"
ENVIRON_MODULES = {  # Each reads or writes the environment for a documented reason.
    "tfdist.strategies.cluster",  # TF_CONFIG.
    "tfdist.strategies.jobset",  # A JobSet pod's.
    "tfdist.strategies.slurm",  # A Slurm job step's.
    "tfdist.cluster.launcher",  # Children's environments.
    "tfdist.cluster.ray_train",  # Ray workers' and their programs' environments.
    "tfdist.commands.ray_job",  # Ray's own variables, set before Ray is imported.
    "tfdist.commands.train_flags",  # The grace period the engine gives a task (GRACE_ENV).
    "tfdist.commands.benchmark.rounds",  # Children's environments.
    "tfdist.cluster.rehearsal.local_image",  # A rehearsal's.
    "tfdist.cluster.rehearsal.slurm_cluster",  # A real Slurm cluster's SLURM_CONF.
    "tfdist.runtime.keras_env",  # TensorFlow's own variables.
    "tfdist.runtime.tf_import",  # TensorFlow's own variables.
    "tfdist.runtime.ray_env",  # Ray processes' variables, set before Ray imports TensorFlow.
    # TFDIST_LEASE_S, where a bucket's lease is taken: by any model dir's holder, a user's own
    # CustomLoop too, not only through the command layer's flags.
    "tfdist.runtime.model_dir.lease",
}
KERAS3_SWITCH = "tfdist.runtime.keras_flavour"  # Imports Keras 3 on demand: the flavour's module.
OPTIONAL_MODULES = {
    "matplotlib": "plot",
    "ray": "ray",
    "gcp_storage_emulator": "rehearse",
}  # Imported inside a function that says how to install.
# The house's ~400 lines, in ruff's format: the modules past it when ruff was adopted were split
# by job (issue 40), and the largest is now 410 lines.
MAX_MODULE_LINES = 420
MAX_MODULES_PER_FOLDER = 12


def _module_name(path: pathlib.Path) -> str:
    """The import name of the shipped module at `path`."""
    relative = path.relative_to(ROOT)
    parts = [PACKAGES[relative.parts[0]].replace(".", "/"), *relative.parts[1:]]
    name = "/".join(parts)[: -len(".py")].replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _modules() -> dict[str, tuple[pathlib.Path, ast.Module]]:
    """Every shipped module by import name: (path, syntax tree)."""
    found = {}
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[_module_name(path)] = (path, ast.parse(path.read_text(), str(path)))
    return found


MODULES = _modules()


def _imports(name: str, tree: ast.Module) -> set[str]:
    """The modules of ours `name` imports, lazily too, relative imports resolved; a name
    imported from a package counts as the module of that name when there is one."""
    package = name if MODULES[name][0].name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            # A package a module sits in is imported before it: no arrow of the module's.
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


GRAPH = {name: _imports(name, tree) for name, (_, tree) in MODULES.items()}


def _third_party(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


def _room(name: str) -> str | None:
    """The room of a tfdist module ("training"), or None for the face and the libraries."""
    parts = name.split(".")
    if name.startswith(LIBRARIES) or len(parts) < 3:
        return None
    return parts[1]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _declared(requirements: str) -> set[str]:
    """Distribution names of a setup.cfg requirement list, normalised as PyPI does."""
    names = (re.split(r"[\s\[=<>!~;]", line.strip())[0] for line in requirements.splitlines())
    return {re.sub(r"[-_.]+", "-", name).lower() for name in names if name}


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    """importlib's map of top-level modules to distributions, read once: each call reads every
    installed distribution's file list (0.14 s here, some hundred calls in a test)."""
    return importlib.metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    found = _packages_distributions().get(module, [])
    return {re.sub(r"[-_.]+", "-", name).lower() for name in found}


class ArrowsTest(unittest.TestCase):
    def test_rooms_import_only_rooms_below_them(self):
        for name, targets in GRAPH.items():
            room = _room(name)
            if room is None:
                continue
            for target in targets:
                below = _room(target)
                if below is not None and below != room:
                    self.assertGreater(
                        ROOMS.index(below),
                        ROOMS.index(room),
                        f"{name} ({room}) imports {target} ({below})",
                    )

    def test_the_libraries_import_nothing_else_of_tfdist(self):
        for name, targets in GRAPH.items():
            for library in LIBRARIES:
                if name.startswith(library):
                    others = {target for target in targets if not target.startswith(library)}
                    self.assertEqual(others, set(), f"{name} imports {others}")

    def test_no_module_imports_the_command_layer_but_the_face_and_the_layer(self):
        for name, targets in GRAPH.items():
            if name in ("tfdist", "tfdist.__main__") or name.startswith(COMMAND_LAYER):
                continue
            self.assertEqual({t for t in targets if t.startswith(COMMAND_LAYER)}, set(), name)

    def test_shared_training_parts_never_import_a_keras_flavour(self):
        for name, targets in GRAPH.items():
            if not name.startswith("tfdist.training") or name.startswith(FLAVOURS):
                continue
            self.assertEqual({t for t in targets if t.startswith(FLAVOURS)}, set(), name)
        for flavour in FLAVOURS:
            other = next(each for each in FLAVOURS if each != flavour)
            for name, targets in GRAPH.items():
                if name.startswith(flavour):
                    self.assertEqual({t for t in targets if t.startswith(other)}, set(), name)

    def test_no_cycles(self):
        self.assertEqual(_cycles(GRAPH), [])

    def test_the_cycle_check_finds_a_cycle(self):
        self.assertEqual(
            _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}), [["a", "b", "c"]]
        )

    def test_keras_3_only_in_keras3_modules(self):
        for name, (path, tree) in MODULES.items():
            if name.startswith("tfdist.training.keras3") or name == KERAS3_SWITCH:
                continue
            for module in _third_party(tree):
                self.assertNotEqual((module or "").split(".")[0], "keras", f"{path}")

    def test_only_the_command_layer_touches_absl_flags(self):
        for name, (path, tree) in MODULES.items():
            if name.startswith(COMMAND_LAYER):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "absl":
                    self.assertNotIn("flags", {alias.name for alias in node.names}, f"{path}")
                if isinstance(node, ast.Name):
                    self.assertNotEqual(node.id, "FLAGS", f"{path} reads FLAGS")

    def test_environment_is_read_only_where_documented(self):
        for name, (path, tree) in MODULES.items():
            if name in ENVIRON_MODULES:
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
        for path, tree in MODULES.values():
            for module in _third_party(tree):
                top = (module or "").split(".")[0]
                if not top or top == "tfdist" or top in sys.stdlib_module_names:
                    continue
                if top in OPTIONAL_MODULES:
                    self.assertLessEqual(
                        _distributions(top), _declared(extras[OPTIONAL_MODULES[top]]), str(path)
                    )
                    continue
                self.assertTrue(
                    _distributions(top) & runtime,
                    f"{path} imports {top}, which install_requires does not declare",
                )

    def test_scripts_and_examples_use_the_libraries_faces_only(self):
        for path in sorted([*(ROOT / "scripts").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]):
            for module in _third_party(ast.parse(path.read_text())):
                for library in LIBRARIES:
                    self.assertFalse(
                        (module or "").startswith(library + "."),
                        f"{path} imports {module}, past {library}'s face",
                    )


class HouseTest(unittest.TestCase):
    def test_rooms_and_modules_stay_small(self):
        folders = {}
        for name, (path, _) in MODULES.items():
            lines = len(path.read_text().splitlines())
            self.assertLessEqual(lines, MAX_MODULE_LINES, f"{path} has {lines} lines")
            if (
                path.name != "__init__.py"
                and name.startswith("tfdist.")
                and not name.startswith(LIBRARIES)
            ):  # tfdist's rooms; the libraries are flat.
                folders.setdefault(path.parent, []).append(path.name)
        for folder, names in folders.items():
            self.assertLessEqual(len(names), MAX_MODULES_PER_FOLDER, f"{folder}: {names}")

    def test_no_module_is_hidden_by_a_name_its_package_exports(self):
        """`tfdist.train` is a function: a subpackage of that name would replace it once
        imported."""
        for name, (path, tree) in MODULES.items():
            if path.name != "__init__.py":
                continue
            children = {
                child.stem if child.suffix == ".py" else child.name
                for child in path.parent.iterdir()
                if child.suffix == ".py" or (child / "__init__.py").exists()
            }
            exported = set()
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    exported.add(node.name)
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    # A child module the package imports from itself, by its name, is itself.
                    exported.update(
                        alias.asname or alias.name
                        for alias in node.names
                        if node.module != name or alias.asname
                    )
                elif isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name) and target.id == "__all__":
                            exported.update(ast.literal_eval(node.value))
            self.assertEqual(exported & children, set(), f"{name} exports {exported & children}")

    def test_setup_cfg_ships_every_package(self):
        setup = configparser.ConfigParser()
        setup.read(ROOT / "setup.cfg")
        listed = set(setup["options"]["packages"].split())
        folders = {name for name, (path, _) in MODULES.items() if path.name == "__init__.py"}
        self.assertEqual(listed, folders)


@pytest.mark.multiprocess
class WhatLoadsTest(unittest.TestCase):
    """What importing tfdist loads, and a working directory with modules named like ours."""

    def _run(self, code: str, cwd: pathlib.Path = ROOT) -> str:
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            cwd=cwd,
            timeout=120,
        )
        return result.stdout.strip()

    def test_a_users_program_defining_tfdist_flags_loads_no_launcher_nor_tensorflow(self):
        loaded = self._run(
            "import sys, tfdist; tfdist.define_flags(); "
            "print(sorted(name for name in ('tensorflow', 'portpicker', "
            "'tfdist.cluster.launcher', 'tfdist.cluster.network') "
            "if name in sys.modules))"
        )
        self.assertEqual(loaded, "[]")

    def test_dir_lists_the_whole_api_without_loading_tensorflow(self):
        missing = self._run(
            "import sys, tfdist; print(sorted(set(tfdist.__all__) - "
            "set(dir(tfdist))), 'tensorflow' in sys.modules)"
        )
        self.assertEqual(missing, "[] False")

    def test_the_cli_starts_without_tensorflow(self):
        self.assertEqual(
            self._run("import sys, tfdist.commands.cli; print('tensorflow' in sys.modules)"),
            "False",
        )

    def test_modules_named_like_ours_in_the_working_directory_shadow_nothing(self):
        with tempfile.TemporaryDirectory() as directory:
            for name in ("strategies", "input_pipelines"):
                pathlib.Path(directory, f"{name}.py").write_text(
                    f"raise ImportError('the working directory\\'s {name}.py was imported')\n"
                )
            tfdist_cli = pathlib.Path(sys.executable).with_name("tfdist")
            runs = {
                "the CLI": [str(tfdist_cli), "train", "--epochs=0"],
                "python -m tfdist": [sys.executable, "-m", "tfdist", "doctor", "--tf_config={}"],
                "launch": [
                    str(tfdist_cli),
                    "launch",
                    "--num_workers=1",
                    "--timeout_s=300",
                    "--",
                    "doctor",
                ],
            }
            for label, argv in runs.items():
                with self.subTest(run=label):
                    result = subprocess.run(
                        argv,
                        capture_output=True,
                        text=True,
                        cwd=directory,
                        timeout=600,
                        check=False,
                    )
                    output = result.stdout + result.stderr
                    self.assertNotIn("was imported", output)
                    self.assertNotIn("Traceback", output)
                    if label == "the CLI":
                        self.assertEqual(result.returncode, 2, output)
                        self.assertIn("--epochs=0", output)
                    elif label == "launch":
                        self.assertEqual(result.returncode, 0, output)
                        self.assertIn("[worker:0] ok: no problems found", output)
                    else:
                        self.assertIn("TF_CONFIG", output)


if __name__ == "__main__":
    unittest.main()
