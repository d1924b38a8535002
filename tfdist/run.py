"""`train`: one training run from a `RunConfig`, from process setup to summary."""

import time

import tensorflow as tf
import tf_keras

import strategies
from strategies import StrategyKind
from strategies import TaskType
from tfdist import precision
from tfdist import summary as run_summary
from tfdist import training
from tfdist.config import RunConfig
from tfdist.keras_flavour import require_tf_keras


def setup(config: RunConfig) -> tf.distribute.Strategy:
    """Process-wide state in the order `tfdist.process` documents; returns the strategy."""
    require_tf_keras()
    precision.apply_policy(config.train.mixed_precision)
    strategy = strategies.build(config.strategy, config.cluster)  # Splits the CPU first.
    tf_keras.utils.set_random_seed(config.train.seed)
    return strategy


def serves(config: RunConfig) -> bool:
    """Whether this task is a parameter-server `worker` or `ps`: it runs a server, not `fit`."""
    cluster = config.cluster
    if cluster is None or cluster.task.type not in (TaskType.WORKER, TaskType.PS):
        return False
    kind = strategies.resolve_kind(config.strategy.strategy, cluster,
                                   strategies.num_replica_devices(config.strategy))
    return kind is StrategyKind.PARAMETER_SERVER


def _num_workers(kind: StrategyKind, config: RunConfig) -> int:
    """Processes that run training steps: the cluster's workers (PS: not the coordinator)."""
    if config.cluster is None:
        return 1
    if kind is StrategyKind.PARAMETER_SERVER:
        return len(config.cluster.jobs.get("worker", ()))
    return config.cluster.num_workers


def train(config: RunConfig) -> dict:
    """Trains as `config` says; returns the summary, written to `metrics_json` by the chief.

    Raises:
      ValueError subclasses with one-line messages for input that does not fit the machine or
      the cluster (batch not divisible by replicas, strategy the cluster cannot run, ...).
    """
    start = time.perf_counter()
    strategy = setup(config)
    result = training.fit(config, strategy)
    kind = strategies.kind_of(strategy)
    num_replicas = strategy.num_replicas_in_sync
    summary = {
        "strategy": kind.value,
        "num_replicas": num_replicas,
        "num_workers": _num_workers(kind, config),
        "global_batch_size": config.input.global_batch_size,
        "per_replica_batch_size": config.input.global_batch_size // num_replicas,
        "mixed_precision": config.train.mixed_precision.value,
        "dataset": config.input.dataset,
        "model": config.train.model.value,
        "epochs": config.train.epochs,
        "steps_per_epoch": result.steps_per_epoch,
        "steps": result.steps,
        "final": result.final,
        "examples_per_sec": result.examples_per_sec,
        "wall_s": time.perf_counter() - start,
    }
    if config.train.metrics_json and (config.cluster is None or config.cluster.is_chief):
        run_summary.write_json(config.train.metrics_json, summary)
    return summary
