"""`train`: one training run from a `RunConfig`, from process setup to summary."""

import contextlib
import sys
import time

import tensorflow as tf
import tf_keras

import input_pipelines
import strategies
from strategies import StrategyKind
from strategies import TaskType
from tfdist import paths
from tfdist import precision
from tfdist import summary as run_summary
from tfdist import training
from tfdist import watchdog
from tfdist.config import ConfigError
from tfdist.config import RunConfig
from tfdist.keras_flavour import require_tf_keras


class ResultNotSaved(ConfigError):
    """The run trained, but `--metrics_json` could not be written; `summary` holds the result."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary


def _kind(config: RunConfig) -> StrategyKind:
    """The strategy this task's `--strategy` resolves to in its cluster."""
    return strategies.resolve_kind(config.strategy.strategy, config.cluster,
                                   strategies.num_replica_devices(config.strategy))


def _build_strategy(config: RunConfig) -> tf.distribute.Strategy:
    """The strategy; a multi-worker task that joins peers waits at most
    `--collective_timeout_s` for them (`tfdist.watchdog` says why it takes a process)."""
    cluster = config.cluster
    if cluster is None or cluster.num_workers < 2 or \
            _kind(config) is not StrategyKind.MULTI_WORKER_MIRRORED:
        return strategies.build(config.strategy, cluster)
    task = f"{cluster.task.type.value}:{cluster.task.index}"
    timeout_s = config.strategy.collective_timeout_s
    if timeout_s is None:
        print(f"tfdist: {task} waiting for all {cluster.num_workers} workers to join, without a "
              "time limit (set --collective_timeout_s to bound it)", file=sys.stderr, flush=True)
        return strategies.build(config.strategy, cluster)
    peers = [address for job in ("chief", "worker") for address in cluster.jobs.get(job, ())
             if address != cluster.task_address]
    message = (f"tfdist train: error: {task} waited {timeout_s:g} s (--collective_timeout_s) "
               f"for the other {cluster.num_workers - 1} worker(s) to join; start every task, "
               "check them with `tfdist doctor --probe`, or raise --collective_timeout_s.")
    with watchdog.deadline(timeout_s, message, peers):
        return strategies.build(config.strategy, cluster)


def _announce_ignored_options(config: RunConfig, kind: StrategyKind) -> None:
    """Says which strategy options the strategy `auto` picked does not use."""
    for ignored in config.strategy.ignored_by(kind):
        print(f"tfdist: --{ignored} (auto picked {kind.value}), so it has no effect",
              file=sys.stderr, flush=True)


def setup(config: RunConfig) -> tf.distribute.Strategy:
    """Process-wide state in the order `tfdist.process` documents; returns the strategy."""
    require_tf_keras()
    precision.apply_policy(config.train.mixed_precision)
    strategy = _build_strategy(config)  # Splits the CPU first.
    _announce_ignored_options(config, strategies.kind_of(strategy))
    tf_keras.utils.set_random_seed(config.train.seed)
    return strategy


def serves(config: RunConfig) -> bool:
    """Whether this task is a parameter-server `worker` or `ps`: it runs a server, not `fit`."""
    cluster = config.cluster
    if cluster is None or cluster.task.type not in (TaskType.WORKER, TaskType.PS):
        return False
    return _kind(config) is StrategyKind.PARAMETER_SERVER


def evaluates(config: RunConfig) -> bool:
    """Whether this task is the cluster's `evaluator`: it evaluates checkpoints, not `fit`."""
    return config.cluster is not None and config.cluster.task.type is TaskType.EVALUATOR


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
      ResultNotSaved: the run trained but its metrics JSON could not be written.
    """
    start = time.perf_counter()
    paths.check(config)
    input_pipelines.check_dispatcher(config.input)  # Before the job's first log line.
    with contextlib.ExitStack() as stack:
        if config.train.model_dir and config.writes_results:
            stack.enter_context(paths.owned_model_dir(config.train.model_dir))
        return _train(config, start)


def _train(config: RunConfig, start: float) -> dict:
    """`train` once the paths are checked and the model dir is ours; `wall_s` counts this
    attempt only (after a resume, not the attempts before it)."""
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
        "history": result.history,
        "examples_per_sec": result.examples_per_sec,
        "resumed_from_epoch": result.resumed_from_epoch,
        "wall_s": time.perf_counter() - start,
    }
    if config.train.metrics_json and config.writes_results:
        try:
            run_summary.write_json(config.train.metrics_json, summary)
        except OSError as error:
            raise ResultNotSaved(f"metrics_json={config.train.metrics_json!r}: could not write "
                                 f"the summary ({error.strerror}); free the disk or pass "
                                 "another path (the summary line is above).", summary) from None
    return summary
