"""tf-keras models (`--keras=2`, the default flavour): compiled with tfdist's optimizer recipe
and step (`step`), trained by Keras' own `fit` (`fit`), evaluated by tf-keras' SidecarEvaluator
(`evaluator`); `CustomLoop` for hand-written loops (`custom_loop`). What `tfdist.training.fit`
reaches through its one seam: `train`, `build_model` and `evaluate_checkpoints`."""

from tfdist.training.keras2.evaluator import evaluate_checkpoints
from tfdist.training.keras2.fit import build_model
from tfdist.training.keras2.fit import train

__all__ = ["build_model", "evaluate_checkpoints", "train"]
