"""What only Keras 3 models (`--keras=3`) need: tfdist's own distributed training loop (`fit`,
over epochs; `step`, a replica's step; `runner`, the steps over the data; `checkpoints`, the
backup and each epoch's weights; `shards`, split variables), the optimizer recipe on Keras 3's
optimizer base (`optim`) and the evaluator task (`evaluator`). What `tfdist.training.fit`
reaches through its one seam: `train`, `build_model` and `evaluate_checkpoints`; these modules
import the shared training parts, never the reverse."""

from tfdist.training.keras3.evaluator import evaluate_checkpoints
from tfdist.training.keras3.fit import build_model
from tfdist.training.keras3.fit import train

__all__ = ["build_model", "evaluate_checkpoints", "train"]
