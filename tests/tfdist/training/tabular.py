"""A small tabular job for in-process training tests: its run config, a learnable dataset
function, models, and a test base that resets what training leaves process-wide."""

import numpy as np
import tensorflow as tf
import tf_keras

from tfdist.input_pipelines import InputConfig
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.strategies import StrategyConfig
from tests.tf_test_case import TfTestCase

MIRRORED = dict(strategy="mirrored", num_cpu_devices=2)
FEATURES = 6


def run_config(
    data_dir=None,
    global_batch_size=16,
    preprocess_on="auto",
    strategy=None,
    optimizer=None,
    **train,
) -> RunConfig:
    return RunConfig(
        strategy=StrategyConfig(**(strategy or {})),
        input=InputConfig(
            data_dir=data_dir, global_batch_size=global_batch_size, preprocess_on=preprocess_on
        ),
        optimizer=optimizer or OptimizerConfig(),
        train=TrainConfig(**{"epochs": 1, "steps_per_epoch": 2, "validation_steps": 1, **train}),
    )


def tabular(count: int, seed: int):
    """Features whose sign pattern decides the label: learnable in a few steps."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(count, FEATURES)).astype("float32")
    return features, (features[:, 0] + features[:, 1] > 0).astype("int64")


def tabular_dataset_fn(global_batch_size: int, count: int = 512, training: bool = True):
    features, labels = tabular(count, seed=int(training))

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices((features, labels)).shard(
            context.num_input_pipelines, context.input_pipeline_id
        )
        dataset = dataset.repeat() if training else dataset
        return dataset.batch(context.get_per_replica_batch_size(global_batch_size))

    return make


def tabular_model() -> tf_keras.Model:
    return tf_keras.Sequential(
        [
            tf_keras.layers.Input((FEATURES,)),
            tf_keras.layers.Dense(16, activation="relu"),
            tf_keras.layers.Dense(2, activation="softmax", dtype="float32"),
        ],
        name="tabular",
    )


class PolicyReset(TfTestCase):
    """Resets what a test's training leaves for the whole process: the precision policy (the
    notice signals' handlers: tests/conftest.py)."""

    def tearDown(self):
        tf_keras.mixed_precision.set_global_policy("float32")
        super().tearDown()


def training_step(loop):
    """A `CustomLoop` step function for `tabular_model`: each replica's per-example cross-entropy,
    minimized."""
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
        reduction=tf_keras.losses.Reduction.NONE
    )

    def step(features, labels):
        with tf.GradientTape() as tape:
            loss = loop.scale_loss(loss_fn(labels, loop.model(features, training=True)))
        loop.minimize(loss, tape)
        return loss

    return step


def arrays_dataset_fn(features, labels, *, repeat: bool = True):
    """A dataset function over the whole arrays, in batches of 16."""

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        del context
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        return (dataset.repeat() if repeat else dataset).batch(16, drop_remainder=True)

    return make


def linear_model() -> tf_keras.Model:
    """A model that passes NaN inputs on to its loss (a ReLU turns them into zeros)."""
    return tf_keras.Sequential(
        [tf_keras.layers.Input((FEATURES,)), tf_keras.layers.Dense(2, activation="softmax")],
        name="linear",
    )
