"""`setup`: a process's set-up for one run, done once and in order, and the frozen `Plan` it
returns. Everything downstream (fit, the evaluator, the summary) reads the plan and derives none
of it again.

Order of the process-wide work:
0. The preemption notice's handlers (`tfdist.runtime.notice`), taken back after the strategy's
   build (TensorFlow's multi-worker runtime sets a SIGTERM handler of its own).
1. Keras flavour (`--keras`): tf-keras, selected when tfdist is imported, or Keras 3 (checked
   here).
2. The mixed-precision policy of that Keras, before any model is built.
3. The strategy (its first act splits the CPU into logical devices, before any other op runs),
   with the collective-timeout watchdog while multi-worker peers join; then every peer's job
   checked against this task's, where the cluster names its job (a Slurm step).
4. Seeds (Python, NumPy, TensorFlow; under parameter server not TensorFlow's global seed
   unless `--deterministic`), and TensorFlow's op determinism as `--deterministic` says.
5. The dataset of `config.input`, prepared (the built-in one generated once) when the plan
   takes its steps per epoch from it.
"""

import contextlib
import dataclasses
import enum
import random
import sys
import time

import numpy as np
import tensorflow as tf

from tfdist import input_pipelines
from tfdist import strategies
from tfdist.cluster import join_deadline
from tfdist.input_pipelines import SourceKind
from tfdist.input_pipelines.config import MAX_GLOBAL_BATCH_SIZE
from tfdist.input_pipelines.config import MAX_NUM_EXAMPLES
from tfdist.runtime import keras_flavour
from tfdist.runtime import notice
from tfdist.runtime import paths
from tfdist.runtime.config import ConfigError
from tfdist.runtime.config import RunConfig
from tfdist.runtime.model_dir import ModelDir
from tfdist.runtime.optimizer_config import check_noise_scale_replicas
from tfdist.runtime.optimizer_config import check_noise_scale_strategy
from tfdist.strategies import StrategyKind
from tfdist.strategies import TaskType
from tfdist.strategies.config import check_int


class Role(str, enum.Enum):
    """What this process does in its cluster (`Plan.role`); `fit` acts on it, e.g.
    `plan.role is tfdist.Role.EVALUATE` on the evaluator task."""

    TRAIN = "train"  # The only process, a mirrored worker or chief, or the PS coordinator.
    SERVE = "serve"  # A parameter-server `worker` or `ps` task: runs a server until the end.
    EVALUATE = "evaluate"  # The `evaluator` task: evaluates each checkpoint the chief writes.


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one process of a run does, computed once by `setup`.

    Example:
      >>> plan = tfdist.setup(config, train_examples=50_000)
      >>> if plan.role is tfdist.Role.TRAIN and plan.writes_results:
      ...     print(plan.task, plan.num_replicas, plan.per_replica_batch_size)
      chief:0 8 32

    Attributes:
      config: the run's configuration, its batch given as the global one.
      role: this task's `Role`; `task` names it ("chief:0", "worker:1", or "local").
      kind: the strategy `--strategy` resolved to in this cluster.
      strategy: the built strategy (training tasks only; None when serving or evaluating).
      num_replicas: replicas that train in sync (1 for serving or evaluating tasks).
      num_gpu_replicas: those of them on a GPU (for the evaluator, the GPUs it would use).
      num_workers: processes that run training steps (under parameter server, the workers).
      per_replica_batch_size: examples per replica per step. It and `global_batch_size` are
        derived here once, from whichever of the two the run's config gave.
      steps_per_epoch: training steps per epoch; `steps_from` says where that number came from.
      placement: where image preprocessing runs (from the strategy's replica devices).
      dataset_info: `config.input`'s dataset when it was prepared, else None.
      started_s: `time.perf_counter()` when set-up began (the summary's `wall_s` counts from it).
      collective_deadline: bounds a multi-worker task's step calls (`bounded_step`), or None.
    """

    config: RunConfig
    role: Role
    task: str
    kind: StrategyKind
    strategy: tf.distribute.Strategy | None
    num_replicas: int
    num_gpu_replicas: int
    num_workers: int
    per_replica_batch_size: int
    steps_per_epoch: int
    steps_from: str
    placement: input_pipelines.Placement | None
    dataset_info: input_pipelines.DatasetInfo | None
    started_s: float
    collective_deadline: strategies.CollectiveDeadline | None = None

    def bounded_step(self, function) -> contextlib.AbstractContextManager:
        """A block for one call of step `function`: under multi_worker_mirrored with
        `--collective_timeout_s`, a call that outlives it fails its collectives."""
        deadline = self.collective_deadline
        return contextlib.nullcontext() if deadline is None else deadline.step(function)

    @property
    def global_batch_size(self) -> int:
        """Examples per step over all replicas (per replica x replicas, when the config gave
        the per-replica batch)."""
        return self.config.input.global_batch_size

    @property
    def update_batch_size(self) -> int:
        """Examples per optimizer update: the global batch times `--grad_accum_steps`."""
        return self.config.update_batch_size

    @property
    def updates_per_epoch(self) -> int:
        """Optimizer updates per epoch: steps over `--grad_accum_steps` micro-batches (at least
        1, the learning-rate schedule's unit)."""
        return max(self.steps_per_epoch // self.config.optimizer.grad_accum_steps, 1)

    @property
    def writes_results(self) -> bool:
        """Whether this task writes the run's results: the chief, or the only process."""
        return self.config.writes_results

    @property
    def model_dir(self) -> ModelDir | None:
        """The layout of `--model_dir`; None without one."""
        return ModelDir(self.config.train.model_dir) if self.config.train.model_dir else None


def _task(config: RunConfig) -> str:
    cluster = config.cluster
    return "local" if cluster is None else f"{cluster.task.type.value}:{cluster.task.index}"


def _role(config: RunConfig, kind: StrategyKind) -> Role:
    cluster = config.cluster
    if cluster is None:
        return Role.TRAIN
    if cluster.task.type is TaskType.EVALUATOR:
        return Role.EVALUATE
    if kind is StrategyKind.PARAMETER_SERVER and cluster.task.type in (
        TaskType.WORKER,
        TaskType.PS,
    ):
        return Role.SERVE
    return Role.TRAIN


def _num_workers(kind: StrategyKind, config: RunConfig) -> int:
    """Processes that run training steps: the cluster's workers (PS: not the coordinator)."""
    if config.cluster is None:
        return 1
    if kind is StrategyKind.PARAMETER_SERVER:
        return len(config.cluster.jobs.get("worker", ()))
    return config.cluster.num_workers


def _build_strategy(config: RunConfig, kind: StrategyKind) -> tf.distribute.Strategy:
    """The strategy; a multi-worker task that joins peers waits at most
    `--collective_timeout_s` for them (`tfdist.cluster.join_deadline` says why it takes a
    process)."""
    cluster = config.cluster
    if cluster is None or cluster.num_workers < 2 or kind is not StrategyKind.MULTI_WORKER_MIRRORED:
        return strategies.build(config.strategy, cluster)
    task = _task(config)
    timeout_s = config.strategy.collective_timeout_s
    if timeout_s is None:
        print(
            f"tfdist: {task} waiting for all {cluster.num_workers} workers to join, without a "
            "time limit (set --collective_timeout_s to bound it)",
            file=sys.stderr,
            flush=True,
        )
        return strategies.build(config.strategy, cluster)
    with join_deadline.joining(cluster, task, timeout_s):
        return strategies.build(config.strategy, cluster)


def _announce_ignored_options(config: RunConfig, kind: StrategyKind) -> None:
    """Says which strategy options the strategy `auto` picked does not use."""
    for ignored in config.strategy.ignored_by(kind):
        print(
            f"tfdist: --{ignored} (auto picked {kind.value}), so it has no effect",
            file=sys.stderr,
            flush=True,
        )


def _num_gpu_replicas(strategy: tf.distribute.Strategy | None, config: RunConfig) -> int:
    """GPUs among the replicas' devices; without a strategy (the evaluator), the GPUs this
    process would use."""
    if strategy is None:
        return strategies.num_gpus(config.strategy)
    return sum(map(strategies.is_gpu, strategies.replica_devices_of(strategy)))


def _steps(config: RunConfig, train_examples: int | None):
    """(steps_per_epoch, where it came from, the prepared dataset's info or None)."""
    global_batch = config.input.global_batch_size
    if train_examples is not None:
        check_int(
            "train_examples",
            train_examples,
            1,
            MAX_NUM_EXAMPLES,
            "pass the number of your training examples, or None",
            error=ConfigError,
        )
    if config.train.steps_per_epoch:
        return config.train.steps_per_epoch, "--steps_per_epoch", None
    if train_examples is not None:
        return (
            _whole_batches(train_examples, global_batch, "train_examples"),
            "train_examples",
            None,
        )
    if config.input.source_kind is SourceKind.PYTHON:
        raise ConfigError(
            f"dataset={config.input.dataset!r} does not say how many training "
            "examples it has; set steps_per_epoch=N."
        )
    info = input_pipelines.prepare(config.input)
    return (
        _whole_batches(info.num_examples["train"], global_batch, f"dataset {info.name}"),
        f"dataset={config.input.dataset}",
        info,
    )


def _whole_batches(examples: int, global_batch: int, source: str) -> int:
    steps = examples // global_batch
    if steps == 0:
        raise ConfigError(
            f"global_batch_size={global_batch} is larger than the {examples} "
            f"training examples of {source}; lower it or set steps_per_epoch=N."
        )
    return steps


def _batches(config: RunConfig, num_replicas: int) -> tuple[RunConfig, int]:
    """`config` with its global batch for `num_replicas` replicas in sync, and the per-replica
    batch: the one derivation of both, from whichever the config gives (`TrainConfig`'s
    per-replica batch, else `InputConfig`'s global one; a per-replica batch resuming a backup
    keeps the backup's global batch). The config returned gives the global one (and is checked
    again: the learning rate's scaling to it too), for the plan's readers.

    Raises:
      InputConfigError: a global batch that does not split evenly over the replicas.
      ConfigError: a per-replica batch whose global batch is past MAX_GLOBAL_BATCH_SIZE.
    """
    per_replica = config.train.per_replica_batch_size
    if per_replica is None:
        return config, input_pipelines.per_replica_batch_size(
            config.input.global_batch_size, num_replicas
        )
    global_batch = per_replica * num_replicas
    model_dir = config.train.model_dir
    resumed = ModelDir(model_dir).resumed_global_batch() if model_dir else None
    if resumed is not None and resumed != global_batch:
        per_replica, global_batch = _keep_global_batch(config, resumed, num_replicas), resumed
    if global_batch > MAX_GLOBAL_BATCH_SIZE:
        raise ConfigError(
            f"per_replica_batch_size={per_replica} over {num_replicas} replicas is a global batch "
            f"of {global_batch}, past the largest tfdist takes ({MAX_GLOBAL_BATCH_SIZE}); use "
            f"per_replica_batch_size={MAX_GLOBAL_BATCH_SIZE // num_replicas} or less."
        )
    return dataclasses.replace(
        config,
        input=dataclasses.replace(config.input, global_batch_size=global_batch),
        train=dataclasses.replace(config.train, per_replica_batch_size=None),
    ), per_replica


def _keep_global_batch(config: RunConfig, resumed: int, num_replicas: int) -> int:
    """The per-replica batch that keeps the resumed backup's global batch (and so its steps per
    epoch and learning-rate schedule) on `num_replicas` replicas, said in one line; ConfigError
    when they do not split it evenly (naming the batches that would)."""
    per_replica = config.train.per_replica_batch_size
    root = config.train.model_dir
    if resumed % num_replicas:
        lower = resumed // num_replicas * num_replicas
        raise ConfigError(
            f"per_replica_batch_size={per_replica}: the backup in model_dir={root!r} trained "
            f"with a global batch of {resumed}, which {num_replicas} replicas do not split "
            "evenly; resume on a number of replicas that divides it, or pass "
            f"global_batch_size={lower or num_replicas} or {lower + num_replicas} instead to "
            "resume with that batch (its steps and learning-rate schedule follow it), or "
            "another model_dir=DIR to start afresh."
        )
    print(
        f"tfdist: resuming with the backup's global batch of {resumed} "
        f"({resumed // num_replicas} per replica on {num_replicas}), not "
        f"per_replica_batch_size={per_replica}'s {per_replica * num_replicas}: a resume keeps "
        "the global batch, hence the steps per epoch and the learning-rate schedule",
        file=sys.stderr,
        flush=True,
    )
    return resumed // num_replicas


def _seed(config: RunConfig, kind: StrategyKind, keras) -> None:
    """Seeds Python, NumPy and TensorFlow with `--seed`; under parameter server, not
    TensorFlow's global seed unless the run is deterministic: each worker's dataset function is
    traced once, on the coordinator, and with a global seed every unseeded shuffle in it would
    shuffle alike on every worker (TensorFlow's parameter-server tutorial relies on them
    differing), but op determinism refuses random ops without one. tfdist's own pipelines
    seed their shuffles themselves."""
    if kind is StrategyKind.PARAMETER_SERVER and not config.input.deterministic:
        random.seed(config.train.seed)
        np.random.seed(config.train.seed)
    else:
        keras.utils.set_random_seed(config.train.seed)


def _op_determinism(config: RunConfig) -> None:
    """TensorFlow's op determinism under `--deterministic`, for the rest of the process (TF has
    no public way back): kernels whose float sums depend on thread timing (on GPUs: scatter,
    segment sums, some convolution algorithms) are swapped for deterministic ones, and an op
    that has none raises UnimplementedError. Input order is the pipelines' part
    (`InputConfig.deterministic`)."""
    if config.input.deterministic:
        tf.config.experimental.enable_op_determinism()


def require_plan(plan) -> None:
    """Raises ConfigError unless `plan` is a `Plan` (what `setup` returns)."""
    if not isinstance(plan, Plan):
        raise ConfigError(
            f"plan is a {type(plan).__name__}, not a Plan; pass what tfdist.setup(config) returned."
        )


def setup(config: RunConfig, *, train_examples: int | None = None) -> Plan:
    """Sets this process up for `config` and returns its frozen `Plan`.

    Call once per process, before TensorFlow runs any op (the CPU split needs that) and before
    building a model. `train_examples` is the size of your own training data, when you train
    on your own data without `--steps_per_epoch`; with neither, the steps per epoch come from
    `config.input`'s dataset, which is then prepared (the built-in one generated once).

    Example:
      >>> plan = tfdist.setup(tfdist.config_from_flags(), train_examples=60_000)
      >>> plan.kind, plan.num_replicas, plan.per_replica_batch_size
      (<StrategyKind.MIRRORED: 'mirrored'>, 2, 64)

    Raises:
      ConfigError (and the packages' config errors): input that does not fit this machine or
      cluster, in one line: a batch that does not split over the replicas, a strategy the
      cluster cannot run, unwritable output paths.
    """
    started_s = time.perf_counter()
    if not isinstance(config, RunConfig):
        raise ConfigError(
            f"config is a {type(config).__name__}, not a RunConfig; pass "
            "tfdist.config_from_flags() or a tfdist.RunConfig(...)."
        )
    config = paths.absolute(config)
    run_notice = notice.install(config.train.preemption_signal)
    paths.check(config)
    paths.check_urls(config)
    keras_flavour.require(config.train.keras)
    keras = keras_flavour.api(config.train.keras)
    keras_flavour.apply_policy(config.train.mixed_precision, keras)
    kind = strategies.kind_for(config.strategy, config.cluster)
    role = _role(config, kind)  # An evaluator has a model dir: `paths.check`.
    strategy = None
    if role is Role.TRAIN:
        input_pipelines.check_dispatcher(config.input)  # Before the job's first log line.
        check_noise_scale_strategy(config.optimizer, kind)
        strategy = _build_strategy(config, kind)
        if kind is StrategyKind.MULTI_WORKER_MIRRORED and config.cluster is not None:
            run_notice.reclaim()  # Its runtime took SIGTERM.
        strategies.check_job(config.cluster, kind, config.strategy.collective_timeout_s)
        _announce_ignored_options(config, kind)
    _seed(config, kind, keras)
    _op_determinism(config)
    num_replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    if role is Role.TRAIN:
        check_noise_scale_replicas(config.optimizer, kind, num_replicas)
    config, per_replica = _batches(config, num_replicas)
    steps, steps_from, info = (
        (0, "serving task", None) if role is Role.SERVE else _steps(config, train_examples)
    )
    num_gpu_replicas = 0 if role is Role.SERVE else _num_gpu_replicas(strategy, config)
    placement = (
        None
        if role is Role.SERVE
        else input_pipelines.resolve_placement(
            config.input,
            num_gpus=num_gpu_replicas,
            compute_dtype=keras.mixed_precision.global_policy().compute_dtype,
        )
    )
    return Plan(
        config=config,
        role=role,
        task=_task(config),
        kind=kind,
        strategy=strategy,
        num_replicas=num_replicas,
        num_gpu_replicas=num_gpu_replicas,
        num_workers=_num_workers(kind, config),
        per_replica_batch_size=per_replica,
        steps_per_epoch=steps,
        steps_from=steps_from,
        placement=placement,
        dataset_info=info,
        started_s=started_s,
        collective_deadline=strategies.collective_deadline(config.strategy, config.cluster, kind),
    )
