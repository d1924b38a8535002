"""`import_tensorflow`: TensorFlow imported once, after the flags are parsed, with its start-up
logs hidden unless asked for. The rest of a process's set-up, in order, is `tfdist.setup`."""

import contextlib
import os
import sys

from tfdist.runtime import keras_env


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
    and its Python logger below ERROR.
    """
    if keras is not None:
        keras_env.select(keras)
    if show_logs or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with _stderr_silenced():
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tf.get_logger().setLevel("ERROR")

