"""`tfdist train`: the model and data its flags name, handed to the public `setup` and `fit`.

`--model` is a built-in model function or the user's MODULE:FUNCTION, called with
`input_shape=` and `num_classes=` on image datasets (no arguments on a `python:` dataset).
`--dataset=python:MODULE:FUNCTION` names the user's data: FUNCTION(split) returns, for "train"
and "validation", a dataset function (InputContext -> tf.data.Dataset of per-replica
(features, labels) batches), a `tfdist.Records`, or None when there is no such split. An
uncompiled model is compiled for classification (sparse categorical cross-entropy, accuracy).
"""

import functools
from typing import Sequence

import tf_keras

from tfdist.input_pipelines import SourceKind
from tfdist.runtime import plugins
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import ModelName
from tfdist.runtime.config import RunConfig
from tfdist.runtime.setup import Plan
from tfdist.runtime.setup import Role
from tfdist.runtime.setup import setup
from tfdist.training import data
from tfdist.training import fit as training
from tfdist.training import models

METRICS = ("accuracy",)


def _image_model(plan: Plan):
    """`--model` for `config.input`'s images, as a function for `fit` to call in the scope."""
    info = data.dataset_info(plan, plan.config.input)
    return lambda: models.build(
        plan.config.train.model, info.image_shape, info.num_classes, plan.config.train.keras
    )


def _python_data(plan: Plan):
    """(model function, train data, validation data) for `--dataset=python:MODULE:FUNCTION`."""
    config = plan.config
    if config.train.model in {name.value for name in ModelName}:
        raise ConfigError(
            f"model={config.train.model!r} is built for image datasets; with "
            f"dataset={config.input.dataset!r} name your own model as "
            "model=MODULE:FUNCTION."
        )
    splits = plugins.dataset_splits(config.input.dataset)
    build = functools.partial(
        plugins.call, "model", config.train.model, models.model_function(config.train.model)
    )
    return build, splits["train"], splits["validation"]


def fit(
    plan: Plan, *, validate: bool = True, callbacks: Sequence[tf_keras.callbacks.Callback] = ()
) -> dict:
    """`tfdist.fit` of the model and data `plan.config`'s flags name (validating each epoch
    when `validate`); returns its summary."""
    if plan.role is Role.SERVE:
        return training.fit(plan, model=None)
    if plan.config.input.source_kind is SourceKind.PYTHON:
        model, train_data, validation_data = _python_data(plan)
    else:
        model, train_data, validation_data = _image_model(plan), plan.config.input, data.DEFAULT
    return training.fit(
        plan,
        model,
        train_data,
        validation_data if validate else None,
        loss="sparse_categorical_crossentropy",
        metrics=list(METRICS),
        callbacks=callbacks,
    )


def train(config: RunConfig) -> dict:
    """Runs this task's part of the `tfdist train` run `config` describes; returns `fit`'s
    summary (see `tfdist.fit`).

    Example:
      >>> summary = tfdist.train(tfdist.RunConfig(train=tfdist.TrainConfig(epochs=1)))
      >>> print(summary["final"]["val_accuracy"], summary["examples_per_sec"])
    """
    if not isinstance(config, RunConfig):
        raise ConfigError(
            f"config: {type(config).__name__} {config!r:.60} is not a RunConfig; "
            "pass tfdist.train(tfdist.RunConfig(...)), or "
            "tfdist.config_from_flags() in a program tfdist.run(main) runs."
        )
    # The user's modules are imported first, so a broken one fails before data is prepared.
    models.model_function(config.train.model)
    if config.input.source_kind is SourceKind.PYTHON:
        plugins.dataset_function(config.input.dataset)
    return fit(setup(config))
