"""Test-session setup: tf-keras, and the host CPU split into 2 logical devices before any op;
the rule that only tests marked `multiprocess` start processes; SIGINT's and SIGTERM's handlers
put back after each test (a supervisor stopped in-process leaves them ignored, as its process
ends); and the lock that keeps rehearsals from removing the hosts another test left behind on
purpose (under `pytest -n`).

In-process tests that need 2 replicas use "/cpu:0" and "/cpu:1"; tests that change process-wide
TensorFlow state (collectives, remote clusters) run in subprocesses instead, marked
`multiprocess`, so that `pytest -m "not multiprocess"` starts none.
"""

import _posixsubprocess
import contextlib
import fcntl
import os
import signal
import subprocess
import tempfile
import time

import pytest

import tfdist  # noqa: F401  (selects tf-keras before TensorFlow is imported)
from tests import leaving
from tfdist import strategies
from tfdist.runtime import notice

NUM_TEST_CPU_DEVICES = 2


def pytest_sessionstart(session):  # pylint: disable=unused-argument
    from tfdist.runtime.tf_import import import_tensorflow  # pylint: disable=import-outside-toplevel

    import_tensorflow(show_logs=False)
    strategies.configure_local_devices(
        strategies.StrategyConfig(num_cpu_devices=NUM_TEST_CPU_DEVICES)
    )


@pytest.fixture(autouse=True)
def _stop_signal_handlers_put_back():
    """The handlers of SIGINT, SIGTERM and the other notice signals as they were before the test
    (a run's notice handles them to its process's end)."""
    signums = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
    handlers = {signum: signal.getsignal(signum) for signum in signums}
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


@pytest.fixture(autouse=True)
def _notices_leave_the_test_not_the_process(monkeypatch):
    """A notice before or after training raises `tests.leaving.Left` instead of ending pytest's
    process (`tfdist.runtime.notice.leave_now`)."""
    monkeypatch.setattr(notice, "leave_now", leaving.fake_leave_now)


@pytest.fixture(autouse=True)
def _op_determinism_off():
    """TensorFlow's op determinism off after a test that turned it on (`--deterministic`): it
    stays on for the rest of a process, and refuses random ops without a seed."""
    yield
    from tensorflow.python.framework import config  # pylint: disable=import-outside-toplevel

    config.disable_op_determinism()


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
    for module, name in (
        (subprocess, "_fork_exec"),
        (_posixsubprocess, "fork_exec"),
        (os, "fork"),
        (os, "posix_spawn"),
        (os, "posix_spawnp"),
        (os, "system"),
    ):
        monkeypatch.setattr(module, name, refuse)
    yield
    if started:
        pytest.fail(
            f"{request.node.nodeid} starts a process without the multiprocess marker; "
            "add @pytest.mark.multiprocess",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def shapes_data_dir(tmp_path_factory):
    """A data dir holding the built-in dataset, generated once per test session."""
    return str(tmp_path_factory.mktemp("tensorflow_datasets"))


# Rehearsals share this machine's network namespaces: each one's start removes every dead
# rehearsal's emulated hosts. A test that leaves such hosts behind on purpose holds this lock
# alone; tests that run rehearsals share it, side by side under `pytest -n`. Lock files in the
# temp dir, so that every worker and every session on this machine sees them. The test that
# waits to hold the lock alone first takes the turnstile, which tests that would share the lock
# pass through: without it, the other worker's rehearsal tests took the shared lock one after
# another and starved the waiting test (72 s idle in one CI run).
_REHEARSAL_HOSTS_LOCK = os.path.join(tempfile.gettempdir(), "tfdist-tests-rehearsal-hosts.lock")
_REHEARSAL_HOSTS_TURNSTILE = _REHEARSAL_HOSTS_LOCK + ".turnstile"
_REHEARSAL_HOSTS_WAIT_S = 600


@contextlib.contextmanager
def _locked(path: str, mode: int, nodeid: str):
    with open(path, "a", encoding="utf-8") as lock:
        deadline = time.monotonic() + _REHEARSAL_HOSTS_WAIT_S
        while True:
            try:
                fcntl.flock(lock, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"{nodeid}: another test held {path} for {_REHEARSAL_HOSTS_WAIT_S} s",
                        pytrace=False,
                    )
                time.sleep(0.1)
        yield  # Closing the file releases the lock.


@pytest.fixture
def rehearsals_side_by_side(request):
    """For a test that runs rehearsals: others may run beside it, but no test that leaves a dead
    rehearsal's hosts behind (its start would remove them)."""
    with _locked(_REHEARSAL_HOSTS_TURNSTILE, fcntl.LOCK_SH, request.node.nodeid):
        pass  # Waits while a test waits to hold the lock alone.
    with _locked(_REHEARSAL_HOSTS_LOCK, fcntl.LOCK_SH, request.node.nodeid):
        yield


@pytest.fixture
def rehearsals_alone(request):
    """For a test that leaves a dead rehearsal's hosts behind and checks who removes them: no
    rehearsal starts while it runs, and none starts while it waits for those running to end."""
    with _locked(_REHEARSAL_HOSTS_TURNSTILE, fcntl.LOCK_EX, request.node.nodeid):
        with _locked(_REHEARSAL_HOSTS_LOCK, fcntl.LOCK_EX, request.node.nodeid):
            yield


SMALL_TRAIN_SIZE = 640
SMALL_VALIDATION_SIZE = 160


@pytest.fixture(scope="session")
def small_shapes_data_dir(tmp_path_factory):
    """A data dir holding the built-in dataset shrunk to 640 train and 160 validation examples
    (8 files per split, as the full one), prepared once per test session."""
    from unittest import mock  # pylint: disable=import-outside-toplevel
    from tfdist.input_pipelines import shapes  # pylint: disable=import-outside-toplevel

    data_dir = str(tmp_path_factory.mktemp("small_shapes"))
    with mock.patch.multiple(
        shapes.TfdistShapes, TRAIN_SIZE=SMALL_TRAIN_SIZE, VALIDATION_SIZE=SMALL_VALIDATION_SIZE
    ):
        shapes.prepare(data_dir)
    return data_dir
