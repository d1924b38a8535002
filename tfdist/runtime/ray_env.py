"""What a Ray process of a tfdist run needs before Ray imports TensorFlow in it (Ray Train does,
in its controller and workers, before any code of ours): its environment and a set-up hook, as
the `runtime_env` Ray takes (`ray.init(runtime_env=...)`, `RunConfig(worker_runtime_env=...)`).
"""

import logging
import os

from tfdist.runtime import keras_env
from tfdist.runtime import tf_import

# Ray Train copies every print of a worker into its log through the root logger, and the line
# then reaches the driver twice; "0" keeps print as it is.
_RAY_PRINT_PATCH = "RAY_TRAIN_ENABLE_PRINT_PATCH"
_TF_CPP_MIN_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"
_QUIET = "3"
_CLEANER_LOGGER = "ray.train.v2._internal.execution.controller.placement_group_cleaner"
_RAY_ADDRESS = "RAY_ADDRESS"


def worker_env(keras: int = 2, tf_logs: bool = False) -> dict[str, str]:
    """The environment Ray's workers need from the start, before Ray imports TensorFlow in
    them: `tf.keras` the flavour `keras`, TensorFlow's C++ start-up logs hidden unless
    `tf_logs`, and each printed line sent to the driver once."""
    env = {**keras_env.environment(keras), _RAY_PRINT_PATCH: "0"}
    if not tf_logs:
        env[_TF_CPP_MIN_LOG_LEVEL] = _QUIET
    return env


def ray_runtime_env(keras: int = 2, tf_logs: bool = False) -> dict:
    """The runtime_env of a tfdist run's Ray processes (`ray.init(runtime_env=...)` for the
    whole job, `RunConfig(worker_runtime_env=...)` for a `TensorflowTrainer`'s workers):
    `worker_env`, and `set_up_ray_process` as each process's set-up hook.

    Example:
      >>> ray.init(runtime_env=tfdist.ray_runtime_env())
    """
    return {
        "env_vars": worker_env(keras, tf_logs),
        "worker_process_setup_hook": f"{__name__}.set_up_ray_process",
    }


def set_up_ray_process() -> None:
    """Ray's set-up hook for each process of a tfdist run, before it runs anything: the process
    told its own Ray's address, and TensorFlow quiet in it (`_own_address`, `_quiet`)."""
    _own_address()
    _quiet()


def _own_address() -> None:
    """RAY_ADDRESS set to the address of the Ray this process belongs to. Ray's code that looks
    for "the" Ray by itself (Ray Train's placement-group cleaner asks Ray's state API without an
    address) otherwise searches this machine, and raises ConnectionError ("Found multiple active
    Ray instances") in a run whose machine runs another Ray too, such as a second `tfdist ray`
    with its own local Ray."""
    import ray  # pylint: disable=import-outside-toplevel  # This process is Ray's.

    os.environ[_RAY_ADDRESS] = ray.get_runtime_context().gcs_address


def _quiet() -> None:
    """Has TensorFlow imported quietly whenever the process imports it (Ray Train does, in its
    controller and workers, before any code of ours), its C++ start-up lines hidden
    (TF_CPP_MIN_LOG_LEVEL no longer hides them), unless `worker_env` was asked for
    TensorFlow's logs. And hides the warnings of Ray Train's
    placement-group cleaner, which asks Ray's state API (the dashboard, which `ray[train]` alone
    lacks) every few seconds whether the controller lives, and warns each time it cannot;
    those lines say nothing about the run (a module of Ray Train 2.60's, named by its logger).
    """
    logging.getLogger(_CLEANER_LOGGER).setLevel(logging.ERROR)
    if os.environ.get(_TF_CPP_MIN_LOG_LEVEL) == _QUIET:
        tf_import.quiet_when_imported()
