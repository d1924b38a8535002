"""The model `fit` and `CustomLoop` train, in either Keras: the user's model or model function,
checked and built in the plan's strategy's scope, and what tfdist compiles it with (the loss and
metric names checked, the optimizer recipe's gradient path)."""

import contextlib
import inspect
import sys

import tf_keras

from tfdist.optim.gradient_path import GradientTransforms
from tfdist.runtime import keras_flavour
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import Precision
from tfdist.runtime.setup import Plan
from tfdist.training import guards
from tfdist.training import models


def strategy_scope(plan: Plan):
    """The plan's strategy's scope; none without a strategy (the evaluator)."""
    return plan.strategy.scope() if plan.strategy is not None else contextlib.nullcontext()


def checked_model(plan: Plan, model):
    """`model`, or what the function `model` returns (call in `strategy_scope`), once it is
    a model of the plan's Keras with float32 outputs, built in the scope."""
    if isinstance(model, tf_keras.Model) or keras_flavour.is_keras3(model):
        _check_built_in_scope(plan, model)
        return model
    if not callable(model):
        raise ConfigError(
            f"model is a {type(model).__name__}; pass a Keras model or a function that builds one."
        )
    _check_no_arguments(model)
    return models.check_model(
        model(), f"model function {guards.name_of(model)}", plan.config.train.keras
    )


def _check_no_arguments(function) -> None:
    """Raises ConfigError when the model function `function` cannot be called without
    arguments (fit calls it so, in the strategy's scope)."""
    try:
        inspect.signature(function).bind()
    except TypeError as error:
        raise ConfigError(
            f"model: model function {guards.name_of(function)} needs arguments "
            f"({error}); fit calls it with none: pass a function of no arguments, "
            "e.g. functools.partial or a lambda around yours."
        ) from None
    except ValueError:  # No signature to read (a builtin): calling it will tell.
        pass


def _check_built_in_scope(plan: Plan, model) -> None:
    """Raises ConfigError unless `model` is a model of the plan's Keras, built in the plan's
    strategy's scope."""
    models.check_model(model, "model", plan.config.train.keras)
    if plan.strategy is None:
        return
    # A Keras 3 variable holds its tf.Variable as `value`.
    variables = (
        [variable.value for variable in model.variables]
        if plan.config.train.keras == 3
        else model.variables
    )
    if not all(
        plan.strategy.extended.variable_created_in_scope(variable) for variable in variables
    ):
        raise ConfigError(
            f"model {model.name!r} was built outside plan.strategy.scope(); pass a "
            "function that builds it (fit calls it in the scope), or build it "
            "inside `with plan.strategy.scope():`."
        )


def check_compile_arguments(keras_module, loss, metrics) -> None:
    """Raises ConfigError when an uncompiled model comes without a loss to compile it with, or
    with a loss or metric name that `keras_module` (tf_keras or Keras 3) does not know."""
    if loss is None:
        raise ConfigError(
            "loss: the model is not compiled; pass fit(..., loss=..., "
            "metrics=[...]), or compile the model yourself."
        )
    guards.check_compile_names(keras_module, loss, metrics)


def gradient_transforms(plan: Plan) -> GradientTransforms:
    """What the gradient path does in this run: `--optimizer`'s gradient options, the
    all-reduce dtype, and loss scaling under mixed_float16."""
    config = plan.config
    return GradientTransforms.of(
        config.optimizer,
        wire_dtype=config.strategy.allreduce_dtype,
        seed=config.train.seed,
        global_batch_size=plan.global_batch_size,
        loss_scaling=config.train.mixed_precision is Precision.MIXED_FLOAT16,
    )


def log_shards(name: str, shards: list) -> None:
    """Says which ps task holds which rows of the variable `name`, split by the partitioner
    (`--variable_partition`) into `shards` (tf.Variables, in row order): one line on stderr, the
    same in both Keras flavours."""
    row, placed = 0, []
    for shard in shards:
        fields = dict(part.split(":", 1) for part in shard.device.split("/") if ":" in part)
        placed.append(
            f"rows {row}-{row + shard.shape[0] - 1} on "
            f"{fields.get('job', '?')}:{fields.get('task', '?')}"
        )
        row += shard.shape[0]
    size = sum(shard.shape.num_elements() * shard.dtype.size for shard in shards)
    print(
        f"tfdist: variable {name} {row}x{'x'.join(map(str, shards[0].shape[1:]))} "
        f"({size / 2**20:.1f} MiB) in {len(shards)} shards: {', '.join(placed)}",
        file=sys.stderr,
        flush=True,
    )
