"""tfdist: TensorFlow distribution strategies, input sharding and cluster launches in one tool.

The public API (docs/library.md): a user's absl program defines
tfdist's flags beside its own, builds the run's config from them, sets the process up once
(`setup` returns the frozen `Plan`), and hands its own model and data to `fit`, which trains
under the plan's strategy, or serves or evaluates when this task of the cluster should. Custom
training loops use `CustomLoop`. tfdist's own errors derive from `TfdistError` (one line, and
the exit status in `exit_status`); `USER_ERRORS` adds the libraries' config errors to it.

Importing tfdist selects tf-keras (Keras 2) as TensorFlow's Keras when TensorFlow is not imported
yet and the environment has not chosen (docs/ARCHITECTURE.md); `--keras=3` trains Keras 3 models
(docs/keras.md). Nothing here imports TensorFlow at import time.
"""

from tfdist.runtime import keras_env

keras_env.default_to_tf_keras()

# pylint: disable=wrong-import-position,import-outside-toplevel
from tfdist.cluster import cost_model
from tfdist.commands.app import USER_ERRORS
from tfdist.commands.app import config_from_flags
from tfdist.commands.app import define_flags
from tfdist.commands.app import run
from tfdist.errors import TfdistError
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import InputConfigError
from tfdist.input_pipelines import Records
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import ModelName
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.runtime.optimizer_config import OptimizerName
from tfdist.runtime.config import Precision
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.strategies import ClusterConfigError
from tfdist.strategies import StrategyConfig
from tfdist.strategies import StrategyConfigError
from tfdist.strategies import StrategyKind

__version__ = "0.1.0"
__all__ = [
    "define_flags",
    "config_from_flags",
    "run",
    "setup",
    "fit",
    "serve",
    "dataset_fn",
    "CustomLoop",
    "train",
    "gradient_noise_scale",
    "Plan",
    "Role",
    "Records",
    "RunConfig",
    "StrategyConfig",
    "InputConfig",
    "TrainConfig",
    "OptimizerConfig",
    "StrategyKind",
    "ModelName",
    "OptimizerName",
    "Precision",
    "TfdistError",
    "ConfigError",
    "StrategyConfigError",
    "ClusterConfigError",
    "InputConfigError",
    "USER_ERRORS",
    "cost_model",
    "ray_runtime_env",
    "profile_stages",
    "read_trace",
]
_LAZY = {
    "setup": "tfdist.runtime.setup",
    "Plan": "tfdist.runtime.setup",
    "Role": "tfdist.runtime.setup",
    "fit": "tfdist.training.fit",
    "serve": "tfdist.training.ps_task",
    "dataset_fn": "tfdist.training.data",
    "CustomLoop": "tfdist.training.keras2.custom_loop",
    "train": "tfdist.training.from_config",
    "gradient_noise_scale": "tfdist.optim.gradient_path",
    "ray_runtime_env": "tfdist.runtime.ray_env",
    "profile_stages": "tfdist.input_pipelines",
    "read_trace": "tfdist.input_pipelines",
}


def __getattr__(name: str):
    """The TensorFlow-backed names, imported on first use (so `import tfdist` stays fast)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'tfdist' has no attribute {name!r}")
    import importlib
    from tfdist.commands.app import import_tensorflow

    import_tensorflow()  # Quietly, unless --tf_logs.
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    """The module's names with the lazy ones, so `dir(tfdist)` and tab completion list the API."""
    return sorted({*globals(), *__all__})
