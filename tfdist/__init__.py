"""tfdist: TensorFlow distribution strategies, input sharding and cluster launches in one tool.

Importing tfdist selects tf-keras (Keras 2) as TensorFlow's Keras when TensorFlow is not imported
yet (see ARCHITECTURE.md); nothing here imports TensorFlow at import time.
"""

import os
import sys

if "tensorflow" not in sys.modules:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

# pylint: disable=wrong-import-position
from tfdist.config import ConfigError
from tfdist.config import ModelName
from tfdist.config import Precision
from tfdist.config import RunConfig
from tfdist.config import TrainConfig
from tfdist.optim_config import OptimizerConfig
from tfdist.optim_config import OptimizerName

__version__ = "0.1.0"


def train(config: RunConfig) -> dict:
    """Sets up this process for `config`, trains, and returns the run summary (see README)."""
    from tfdist import run  # pylint: disable=import-outside-toplevel
    return run.train(config)
