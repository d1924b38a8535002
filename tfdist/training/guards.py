"""Checks around Keras `fit` for runs that would otherwise fail late with a traceback, or end
with status 0 having done something other than what was asked: a dataset function that returns
no dataset, training data that runs out before the run's last step (Keras only logs a warning
and stops), a training step that fails on a batch, and a loss that is no longer finite (Keras
trains on, and saves, NaN weights)."""

import contextlib
import math
from typing import Callable

import numpy as np
import tensorflow as tf
import tf_keras

from tfdist import errors
from tfdist.cluster import liveness
from tfdist.input_pipelines import records
from tfdist.runtime.config import ConfigError
from tfdist.fields import MAX_COUNT
from tfdist.runtime.setup import Plan
from tfdist.strategies import ClusterConfig
from tfdist.strategies import StrategyKind
from tfdist.strategies.config import check_int

# Metric names Keras resolves from the loss, not by `metrics.get`.
_METRICS_BY_LOSS = ("accuracy", "acc", "crossentropy", "ce")
_EXAMPLES = {"loss": "sparse_categorical_crossentropy", "metric": "accuracy"}
# What the training step says of batches that hold features only, for a compiled loss.
NO_LOSS = "the batches hold no labels, so the compiled loss has nothing to compare with"
# Keras' words (and the step's) for a batch that does not fit the model (raised while tracing
# the first step).
_MISFIT_WORDS = (
    "is incompatible with the layer",
    "expects",
    "are incompatible",
    "Incompatible shapes",
    "Missing data for input",
    NO_LOSS,
)
_KERAS_NO_BATCH = "Empty logs"  # Keras' words for an epoch whose first step found no batch.
# How a collective fails when a peer is lost (killed, or its link cut).
_PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.DeadlineExceededError,
    tf.errors.CancelledError,
    tf.errors.InternalError,
)


def name_of(function) -> str:
    """MODULE:QUALNAME of a user's function."""
    return f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', function)}"


def check_arguments(validation_steps, callbacks) -> list:
    """`fit`'s `validation_steps` checked, and its `callbacks` as a list (None: none), each
    checked to be a Keras callback."""
    if validation_steps is not None:
        check_int(
            "validation_steps",
            validation_steps,
            1,
            MAX_COUNT,
            "pass the batches each validation runs, or None for one pass",
            error=ConfigError,
        )
    callbacks = list(callbacks or ())
    for index, callback in enumerate(callbacks):
        if not all(hasattr(callback, name) for name in ("set_model", "on_epoch_end")):
            raise ConfigError(
                f"callbacks[{index}] is a {type(callback).__name__}, not a Keras "
                "callback; pass instances of tf_keras.callbacks.Callback "
                "(keras.callbacks.Callback under keras=3)."
            )
    return callbacks


def check_flag(name: str, value) -> None:
    """Raises ConfigError unless the argument `name` is True or False."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={errors.shown(value)} is not True or False; pass a bool.")


def check_compile_names(keras_module, loss, metrics) -> None:
    """Raises ConfigError when `loss`, or a metric of `metrics`, is a name that `keras_module`
    (tf_keras or Keras 3) does not know; Keras itself says so only while tracing the first
    step, in a traceback; or a loss or metric that is neither a name nor callable."""
    if metrics is not None and not isinstance(metrics, (list, tuple, dict)):
        raise ConfigError(
            f"metrics={errors.shown(metrics)} is not a list; pass e.g. metrics=['accuracy']."
        )
    for field, kind, given in (("loss", "loss", loss), ("metrics", "metric", metrics)):
        for value in tf.nest.flatten(given) if given is not None else ():
            if not (isinstance(value, str) or callable(value)):
                raise ConfigError(
                    f"{field}: {errors.shown(value)} is not a {kind}; pass a {kind} "
                    f"name (e.g. {_EXAMPLES[kind]!r}), a function or a Keras "
                    f"{kind} object."
                )
    if isinstance(loss, str):
        _known("loss", "loss", loss, keras_module.losses.get)
    for metric in tf.nest.flatten(metrics):
        if isinstance(metric, str) and metric not in _METRICS_BY_LOSS:
            _known("metrics", "metric", metric, keras_module.metrics.get)


def _known(field: str, kind: str, name: str, get: Callable) -> None:
    """Raises ConfigError naming `field` unless `get` (Keras' lookup of a `kind`) knows `name`."""
    try:
        found = get(name)
    except ValueError:
        found = None
    if not callable(found):  # tf_keras' metrics.get returns an unknown name as it is.
        raise ConfigError(
            f"{field}: Keras knows no {kind} named {name!r}; pass a {kind} name "
            f"(e.g. {_EXAMPLES[kind]!r}), a function or a Keras {kind} "
            "object."
        )


def returning_dataset(function: Callable, field: str) -> Callable:
    """The user's dataset function `function`, checked to return a `tf.data.Dataset`."""

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = function(context)
        if not isinstance(dataset, tf.data.Dataset):
            raise ConfigError(
                f"{field}: dataset function {name_of(function)} returned a "
                f"{type(dataset).__name__}, not a tf.data.Dataset; return the dataset of "
                "per-replica (features, labels) batches."
            )
        return dataset

    return dataset_fn


class BatchCounts:
    """A dataset function that notes, for each input pipeline it makes, how many batches the
    pipeline holds (when tf.data knows: not for an infinite or filtered dataset) and how many
    replicas it feeds, for `require_enough`."""

    def __init__(self, function: Callable):
        self._function = function
        self.pipelines: list[tuple[int, int]] = []  # (batches, replicas fed)

    def __call__(self, context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = self._function(context)
        batches = tf.get_static_value(dataset.cardinality())
        if batches is not None and batches >= 0:
            replicas = max(1, context.num_replicas_in_sync // context.num_input_pipelines)
            self.pipelines.append((int(batches), replicas))
        return dataset


def require_enough(
    counts: BatchCounts, *, steps_per_epoch: int, epochs: int, new_iterator_each_epoch: bool
) -> None:
    """Raises ConfigError when a pipeline `counts` noted runs out before the run's last step.

    Keras reads a distributed dataset with one iterator for the whole run, so each pipeline
    must hold every epoch's batches; a dataset that is not distributed (the default strategy)
    it reads afresh each epoch when it holds exactly one epoch (`new_iterator_each_epoch`).
    """
    for batches, replicas in counts.pipelines:
        epoch = steps_per_epoch * replicas
        if batches >= epoch * epochs or (new_iterator_each_epoch and batches == epoch):
            continue
        takes = f"{steps_per_epoch} steps x {epochs} epochs" + (
            f" x {replicas} replicas it feeds" if replicas > 1 else ""
        )
        raise ConfigError(
            f"train_data: an input pipeline holds {batches} batches but the run takes {takes} = "
            f"{epoch * epochs} of them; end the dataset with .repeat() (or lower epochs=N or "
            "steps_per_epoch=N)."
        )


def step_failure(error: tf.errors.OpError, model_name: str) -> ConfigError:
    """The one-line error for a training or validation step that failed reading or taking a
    batch (an error in the step's own input or ops, not a damaged file tfdist can name)."""
    field = "validation_data" if "test_function" in error.message else "train_data"
    if isinstance(error, tf.errors.DataLossError):
        return ConfigError(
            f"{field}: reading it failed ({records.complaint(error)}); check its files."
        )
    return ConfigError(
        f"{field}: model {model_name!r} failed on one of its batches "
        f"({records.complaint(error)}); make the dataset yield what the model "
        "takes."
    )


def ran_out(field: str = "train_data") -> ConfigError:
    """The one-line error for training data that ran out, uncounted, before the last step
    (tfdist's own Keras 3 step and `CustomLoop.run` raise it; tf-keras' `fit` stops early
    instead)."""
    return ConfigError(
        f"{field}: it ran out of batches before the run's last step; end the "
        "dataset with .repeat() (or lower epochs=N or steps_per_epoch=N)."
    )


def no_batch(model_name: str) -> ConfigError:
    """The one-line error for an epoch whose first step found no batch (Keras' "Empty logs")."""
    return ConfigError(
        f"train_data: it gave model {model_name!r} no batch for an epoch's first "
        "step (an empty dataset, or fewer examples than one batch with "
        "drop_remainder=True); make it yield batches, and end it with .repeat()."
    )


class FiniteLoss(tf_keras.callbacks.Callback):
    """Stops the run with a one-line `errors.Diverged` when an epoch ends with a loss (or
    weights) that is NaN or infinite, a ConfigError when only the validation loss is. Put it
    before the callbacks that save: the diverged epoch is then neither backed up nor
    checkpointed (a backup of the last good epoch stays).

    With `weights_every_epoch` it also reads the weights at every epoch's end: workers of a
    multi-worker run log their own losses, but hold the same weights, so they all stop at the
    same epoch (one that stopped alone would leave the others waiting in a collective).
    """

    def __init__(self, learning_rate: float, *, weights_every_epoch: bool = False):
        super().__init__()
        self._learning_rate = learning_rate
        self._weights_every_epoch = weights_every_epoch

    def _diverged(self, loss: float) -> str | None:
        """What shows that training diverged, if it did."""
        if not math.isfinite(loss):
            return f"loss {loss}"
        if not all(np.isfinite(weights).all() for weights in self.model.get_weights()):
            return "weights not all finite"
        return None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        loss, val_loss = logs.get("loss", 0.0), logs.get("val_loss", 0.0)
        finite = math.isfinite(loss) and math.isfinite(val_loss)
        if finite and not self._weights_every_epoch:
            return
        sign = self._diverged(loss)
        if finite and not sign:
            return
        if sign:
            raise errors.Diverged(
                f"loss: training diverged in epoch {epoch + 1} ({sign}); its checkpoint was "
                "not written. Lower the learning rate "
                f"(learning_rate={self._learning_rate:g}, unless the model came compiled with "
                "its own optimizer), or check train_data for NaN or infinite values."
            )
        raise ConfigError(
            f"val_loss: {val_loss} after epoch {epoch + 1}, while the training loss and the "
            "weights are finite; check validation_data for NaN or infinite values."
        )


def finite_loss(plan: Plan) -> FiniteLoss:
    """The divergence check; multi-worker mirrored workers judge by the weights they share."""
    return FiniteLoss(
        plan.config.optimizer.learning_rate,
        weights_every_epoch=(
            plan.num_workers > 1 and plan.kind is StrategyKind.MULTI_WORKER_MIRRORED
        ),
    )


def _misfit(error: ValueError) -> str | None:
    """Keras' line saying a batch does not fit the model, if that is what `error` is."""
    for line in str(error).splitlines():
        if any(words in line for words in _MISFIT_WORDS):
            return line.strip().removeprefix("ValueError: ")
    return None


@contextlib.contextmanager
def explained(
    model_name: str, explain: Callable[[Exception], None], cluster: ClusterConfig | None = None
):
    """Turns a damaged record (`explain` names it, raising), a batch that does not fit model
    `model_name` or a step that fails on it, training data with no batch or that runs out, and
    a peer of `cluster` lost mid-run (`LostPeer`) into one line, around either Keras'
    training."""
    try:
        yield
    except _PEER_ERRORS as error:
        lost = liveness.lost_peer(error.message, cluster)
        if lost is None:
            raise
        raise lost from None
    except (
        tf.errors.DataLossError,
        tf.errors.InvalidArgumentError,
        tf.errors.UnimplementedError,  # A cast from strings.
        tf.errors.UnknownError,
    ) as error:  # A Python error in a generator or py_function.
        explain(error)
        raise step_failure(error, model_name) from error
    except tf.errors.OutOfRangeError as error:
        raise ran_out() from error
    except ValueError as error:
        if _KERAS_NO_BATCH in str(error):
            raise no_batch(model_name) from error
        line = _misfit(error)
        if line is None:
            raise
        raise ConfigError(
            f"train_data: its batches do not fit model {model_name!r} ({line}); "
            "make the dataset yield what the model takes."
        ) from None
