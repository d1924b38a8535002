"""The suite's own shape: no collected test that tests nothing. `tf.test.TestCase` carries a
method named like a test (`test_session`, TF 1's session helper) that pytest collects and
TensorFlow skips in every class that inherits it; the suite's classes take TensorFlow's test
case from tests/tf_test_case.py, which drops it. Parses the test modules with `ast`, so nothing
here imports TensorFlow or starts a process."""

import ast
import pathlib

_TESTS = pathlib.Path(__file__).resolve().parent
_BASE = _TESTS / "tf_test_case.py"
# TensorFlow's test case under the names a test module can reach it by.
_TENSORFLOW_TEST_CASES = {
    "tf.test.TestCase",
    "tensorflow.test.TestCase",
    "test_util.TensorFlowTestCase",
    "tensorflow.python.framework.test_util.TensorFlowTestCase",
}
_TENSORFLOW_TEST_MODULES = {"tensorflow.test", "tensorflow.python.framework.test_util"}


def _dotted(node: ast.expr) -> str:
    """`a.b.c` for an attribute chain on a name, else ""."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def _tensorflow_test_cases(tree: ast.Module) -> list[int]:
    """The lines where a module names TensorFlow's test case itself."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _dotted(node) in _TENSORFLOW_TEST_CASES:
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module in _TENSORFLOW_TEST_MODULES:
            if {alias.name for alias in node.names} & {"TestCase", "TensorFlowTestCase"}:
                found.append(node.lineno)
    return sorted(found)


def test_the_check_sees_tensorflow_test_case():
    tree = ast.parse(
        "import tensorflow as tf\n"
        "class A(tf.test.TestCase): pass\n"
        "from tensorflow.test import TestCase\n"
        "class B(parameterized.TestCase, absltest.TestCase): pass\n"
    )
    assert _tensorflow_test_cases(tree) == [2, 3]


def test_test_classes_take_tensorflow_test_case_from_the_base():
    direct = [
        f"{path.relative_to(_TESTS.parent)}:{line}"
        for path in sorted(_TESTS.rglob("*.py"))
        if path != _BASE
        for line in _tensorflow_test_cases(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not direct, (
        f"{', '.join(direct)}: derive from tests.tf_test_case.TfTestCase instead of "
        "tf.test.TestCase, which adds a skipped `test_session` to every class"
    )


def test_no_collected_test_is_a_ghost(request):
    # A ghost: TensorFlow's `test_session`, collected and then skipped. Under pytest-xdist each
    # worker collects the whole run, so this sees every item collected.
    ghosts = [
        item.nodeid for item in request.session.items if item.name.split("[")[0] == "test_session"
    ]
    assert not ghosts, (
        f"{', '.join(ghosts)}: a test that tests nothing; derive the class from "
        "tests.tf_test_case.TfTestCase (no `test_session`)"
    )
