"""Test-session setup: tf-keras, and the host CPU split into 2 logical devices before any op;
and the rule that only tests marked `multiprocess` start processes.

In-process tests that need 2 replicas use "/cpu:0" and "/cpu:1"; tests that change process-wide
TensorFlow state (collectives, remote clusters) run in subprocesses instead, marked
`multiprocess`, so that `pytest -m "not multiprocess"` starts none.
"""

import _posixsubprocess
import os
import subprocess

import pytest

import tfdist  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tfdist import strategies

NUM_TEST_CPU_DEVICES = 2


def pytest_sessionstart(session):  # pylint: disable=unused-argument
    from tfdist.runtime.tf_import import import_tensorflow  # pylint: disable=import-outside-toplevel
    import_tensorflow(show_logs=False)
    strategies.configure_local_devices(
        strategies.StrategyConfig(num_cpu_devices=NUM_TEST_CPU_DEVICES))


@pytest.fixture(autouse=True)
def _processes_only_where_marked(request, monkeypatch):
    """Fails a test that starts a process without the `multiprocess` marker (the start is
    refused; the test fails at its end even if the code under test caught the refusal)."""
    if request.node.get_closest_marker("multiprocess") is not None:
        yield
        return
    started = []

    def refuse(*args, **kwargs):
        del args, kwargs
        started.append(True)
        raise OSError(f"{request.node.nodeid} starts a process: mark it multiprocess")

    # subprocess (its own binding) and multiprocessing's spawn go through fork_exec.
    for module, name in ((subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec"),
                         (os, "fork"), (os, "posix_spawn"), (os, "posix_spawnp"),
                         (os, "system")):
        monkeypatch.setattr(module, name, refuse)
    yield
    if started:
        pytest.fail(f"{request.node.nodeid} starts a process without the multiprocess marker; "
                    "add @pytest.mark.multiprocess", pytrace=False)


@pytest.fixture(scope="session")
def shapes_data_dir(tmp_path_factory):
    """A data dir holding the built-in dataset, generated once per test session."""
    return str(tmp_path_factory.mktemp("tensorflow_datasets"))


SMALL_TRAIN_SIZE = 640
SMALL_VALIDATION_SIZE = 160


@pytest.fixture(scope="session")
def small_shapes_data_dir(tmp_path_factory):
    """A data dir holding the built-in dataset shrunk to 640 train and 160 validation examples
    (8 files per split, as the full one), prepared once per test session."""
    from unittest import mock  # pylint: disable=import-outside-toplevel
    from tfdist.input_pipelines import shapes  # pylint: disable=import-outside-toplevel
    data_dir = str(tmp_path_factory.mktemp("small_shapes"))
    with mock.patch.multiple(shapes.TfdistShapes, TRAIN_SIZE=SMALL_TRAIN_SIZE,
                             VALIDATION_SIZE=SMALL_VALIDATION_SIZE):
        shapes.prepare(data_dir)
    return data_dir
