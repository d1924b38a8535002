"""Users' functions named on the command line as MODULE:FUNCTION (`--model`, `--dataset=python:`),
imported when a run starts; every failure is one line that names the flag and the module."""

import importlib
import importlib.util
from typing import Any
from typing import Callable

from tfdist.input_pipelines.choices import PYTHON_PREFIX
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import ModelName


def first_line(error: BaseException) -> str:
    """`error` as "Type: its first line", for one-line messages about users' code."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _check_findable(field: str, value: str, spec: str) -> None:
    module_name = spec.partition(":")[0]
    try:
        found = importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):  # A parent package that is missing or broken.
        found = False
    if not found:
        raise ConfigError(
            f"{field}={value!r}: no module named {module_name!r} on the Python "
            "path; put its directory on PYTHONPATH (or install it)."
        )


def check_findable(*, dataset: str, model: str | None = None) -> None:
    """Checks that the modules `--model` and `--dataset=python:` name can be found, without
    importing them (so a misspelt name is reported before TensorFlow starts).

    Raises:
      ConfigError: a module that is not on the Python path.
    """
    if model is not None and model not in {name.value for name in ModelName}:
        _check_findable("model", model, model)
    if dataset.startswith(PYTHON_PREFIX):
        _check_findable("dataset", dataset, dataset[len(PYTHON_PREFIX) :])


def load(field: str, value: str, spec: str) -> Callable:
    """Imports `spec` (MODULE:FUNCTION, already checked by the config) and returns the function.

    `field` and `value` name the flag as the user wrote it (`value` may carry a prefix such as
    `python:`).

    Raises:
      ConfigError: the module does not import (fails or calls sys.exit while importing),
        has no such attribute, or the attribute is not callable.
    """
    module_name, _, function_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            raise ConfigError(
                f"{field}={value!r}: no module named {error.name!r}; put its "
                "directory on PYTHONPATH (or install it)."
            ) from None
        raise ConfigError(
            f"{field}={value!r}: importing {module_name} failed: "
            f"{first_line(error)}; fix the module."
        ) from None
    except Exception as error:  # pylint: disable=broad-except  (a user's module, any error)
        raise ConfigError(
            f"{field}={value!r}: importing {module_name} failed: "
            f"{first_line(error)}; fix the module."
        ) from None
    except SystemExit as error:
        raise ConfigError(
            f"{field}={value!r}: importing {module_name} called "
            f"sys.exit({error.code!r}) (an argument parser at import does); parse "
            'arguments only under `if __name__ == "__main__":`.'
        ) from None
    function = module
    for part in function_name.split("."):
        if not hasattr(function, part):
            raise ConfigError(
                f"{field}={value!r}: module {module_name} ({module.__file__}) has no "
                f"{function_name!r}; check the name after the colon."
            )
        function = getattr(function, part)
    if not callable(function):
        raise ConfigError(
            f"{field}={value!r}: {function_name} in {module_name} is a "
            f"{type(function).__name__}, not a function; name a function."
        )
    return function


def call(field: str, value: str, function: Callable, *args, **kwargs) -> Any:
    """`function(*args, **kwargs)`, the user's function that `--field=value` names.

    Raises:
      ConfigError: the call failed (a signature that does not take these arguments, an
        error inside it, or sys.exit), in one line that names the flag, the arguments and the
        error.
    """
    try:
        return function(*args, **kwargs)
    except ConfigError:
        raise
    except SystemExit as error:
        raise ConfigError(
            f"{field}={value!r}: {getattr(function, '__qualname__', function)} "
            f"called sys.exit({error.code!r}); return a value instead, or raise "
            "an exception that says what is wrong."
        ) from None
    except Exception as error:  # pylint: disable=broad-except  (the user's function)
        # `name value`, not `name=value`, which the CLI would show as one of its flags.
        shown = ", ".join(
            [*map(repr, args), *(f"{name} {argument!r}" for name, argument in kwargs.items())]
        )
        raise ConfigError(
            f"{field}={value!r}: calling it{' with ' if shown else ''}{shown} "
            f"failed: {first_line(error)}; fix the function."
        ) from None


def dataset_function(dataset: str) -> Callable:
    """The user's FUNCTION of `--dataset=python:MODULE:FUNCTION`, imported (see `load`)."""
    return load("dataset", dataset, dataset[len(PYTHON_PREFIX) :])


def dataset_splits(dataset: str) -> dict:
    """What `--dataset=python:MODULE:FUNCTION`'s FUNCTION(split) returns for "train" and
    "validation": a dataset function, a `tfdist.Records`, or None where there is no such split.

    Raises:
      ConfigError: the function cannot be loaded, fails, or has no training split.
    """
    function = dataset_function(dataset)
    splits = {}
    for split in ("train", "validation"):
        splits[split] = call("dataset", dataset, function, split)
    if splits["train"] is None:
        raise ConfigError(
            f"dataset={dataset!r} returned None for split 'train'; return a "
            "dataset function or a tfdist.Records."
        )
    return splits
