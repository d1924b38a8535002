"""Which Keras a process trains with (`--keras`): 2 is tf-keras, 3 is Keras 3 (`import keras`).

TensorFlow reads TF_USE_LEGACY_KERAS when `tf.keras` is first used: "1" or "true" makes
`tf.keras` tf-keras, anything else Keras 3. tfdist sets it to "1" at import when it is unset
(tf-keras is the default flavour), so the user's own setting is recorded here first: it is
the default of `--keras`. Pure Python.
"""

import os
import sys

VARIABLE = "TF_USE_LEGACY_KERAS"
_LEGACY_VALUES = ("1", "true", "True")
_USERS_SETTING = os.environ.get(VARIABLE)  # Before tfdist's own default below.


def default_to_tf_keras() -> None:
    """Selects tf-keras for `tf.keras` unless the user chose, or TensorFlow is imported."""
    if "tensorflow" not in sys.modules:
        os.environ.setdefault(VARIABLE, "1")


def environment_choice() -> int:
    """The Keras the environment chose before tfdist was imported: 3 when TF_USE_LEGACY_KERAS
    was set to anything but 1/true, else 2."""
    return 3 if _USERS_SETTING is not None and _USERS_SETTING not in _LEGACY_VALUES else 2


def environment(keras: int) -> dict[str, str]:
    """The environment variable that gives a process (a launched task) `keras` as `tf.keras`."""
    return {VARIABLE: "1" if keras == 2 else "0"}


def select(keras: int) -> None:
    """Points `tf.keras` at `keras` when TensorFlow is not imported yet, so user code written
    against `tf.keras` gets the flavour it trains with; afterwards `tfdist.setup` checks."""
    if "tensorflow" not in sys.modules:
        os.environ.update(environment(keras))
