"""`import_tensorflow`: TensorFlow imported once, after the flags are parsed, with its start-up
logs hidden unless asked for. The rest of a process's set-up, in order, is `tfdist.setup`."""

import contextlib
import importlib.abc
import importlib.machinery
import logging
import os
import resource
import sys

from tfdist.runtime import keras_env
from tfdist.runtime.config import ConfigError


# Address space TensorFlow needs to load and train on CPU: measured on 2 cores, `ulimit -v` of
# 3.0 GB ends in a C++ abort (bad_alloc, pthread_create) that Python cannot catch; 3.8 GB trains.
MIN_ADDRESS_SPACE = 7 << 29  # 3.5 GiB


class TensorFlowUnavailable(ConfigError):
    """TensorFlow failed to import (too little memory, a broken install); one line says why."""


def _check_address_space() -> None:
    """Raises TensorFlowUnavailable when `ulimit -v` leaves TensorFlow too little room: past
    the import, it would abort in C++ without a word."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < MIN_ADDRESS_SPACE:
        raise TensorFlowUnavailable(
            f"the address-space limit (ulimit -v) is {soft >> 20} MiB; TensorFlow needs at "
            f"least {MIN_ADDRESS_SPACE / (1 << 30):g} GiB to load and train; raise it, e.g. "
            "`ulimit -v unlimited`."
        )


@contextlib.contextmanager
def _stderr_silenced():
    """Sends file descriptor 2 to /dev/null: TF's C++ start-up lines bypass Python logging."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def import_tensorflow(show_logs: bool, keras: int | None = None) -> None:
    """Imports TensorFlow once, quietly unless `show_logs`, with `tf.keras` the flavour
    `keras` (2 or 3) when given.

    Quiet hides TF's C++ logs, errors included (failures still surface as Python exceptions),
    and its Python logger below ERROR; where a program imported TensorFlow itself, only the
    latter (its C++ start-up lines are out already).

    Raises:
      TensorFlowUnavailable: TensorFlow cannot load, or too little address space is left.
    """
    if keras is not None:
        keras_env.select(keras)
    if "tensorflow" not in sys.modules:
        _check_address_space()
        if not show_logs:
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        with contextlib.nullcontext() if show_logs else _stderr_silenced():
            _import()
    if not show_logs:
        _quiet_python_logs()


def _quiet_python_logs() -> None:
    """TensorFlow's Python logger below ERROR hidden, and its modules' INFO lines in absl's."""
    logging.getLogger("tensorflow").setLevel(logging.ERROR)  # tf.get_logger()
    absl_logger = logging.getLogger("absl")  # Where TF's modules also log, e.g. at saves.
    if _not_tensorflow_info not in absl_logger.filters:
        absl_logger.addFilter(_not_tensorflow_info)


def quiet_when_imported() -> None:
    """Hides TensorFlow's C++ start-up lines and its Python logs below ERROR, as
    `import_tensorflow(show_logs=False)` does, whoever imports it later (Ray, in its processes
    of a tfdist run); a process that never imports it pays nothing."""
    if "tensorflow" in sys.modules or any(
        isinstance(finder, _QuietTensorFlowFinder) for finder in sys.meta_path
    ):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.meta_path.insert(0, _QuietTensorFlowFinder())
    _quiet_python_logs()


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` as Python would, with a loader that runs its module quietly."""

    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)  # Once: what the module imports is found as usual.
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    """`loader`, with fd 2 silenced while it runs the module."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        with _stderr_silenced():
            self._loader.exec_module(module)


_LIBRARIES = tuple(f"{os.sep}{name}{os.sep}" for name in ("tensorflow", "tf_keras", "keras"))


def _not_tensorflow_info(record: logging.LogRecord) -> bool:
    """False for an INFO (or lower) record logged by TensorFlow's or Keras' own modules: a
    program's own absl logging stays as it is."""
    return record.levelno >= logging.WARNING or not any(
        part in record.pathname for part in _LIBRARIES
    )


def _import():
    """TensorFlow, imported; TensorFlowUnavailable when it cannot load."""
    try:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
    except (ImportError, OSError, MemoryError) as error:
        lines = str(error).strip().splitlines() or [""]
        raise TensorFlowUnavailable(
            f"TensorFlow cannot load ({type(error).__name__}: {lines[-1][:200]}); check the "
            "memory limit (`ulimit -v`: it maps several GB) and the installation "
            "(`python -c 'import tensorflow'`)."
        ) from None
    return tf
