"""`CustomLoop`: what a hand-written `strategy.run` training loop needs from tfdist, in the
spirit of Orbit's StandardTrainer: the model and tfdist's optimizer built in the strategy's
scope, distributed input from a dataset function, a loss scaled by the global batch, the
gradient path of `tfdist.optim.gradient_path` (loss scaling, all-reduce dtype, clipping, noise,
accumulation) in `minimize`, as `fit` trains, and checkpoints that resume.

Runs tf-keras models under every strategy. Under parameter server the loop runs on the chief
(the coordinator), as in TensorFlow's parameter-server tutorial: `distribute` makes per-worker
datasets, `run` schedules the steps on the workers (`steps_per_execution` per closure) and
joins, and checkpoints are the coordinator's; the worker and ps tasks call `tfdist.serve`.
Keras 3 models (`--keras=3`) train through `tfdist.fit`.

A preemption notice (SIGTERM, `--preemption_signal`) in a training `run` ends the run at a step
boundary, `steps_per_execution` steps per call, with the step saved and `errors.Preempted`
raised (`tfdist.training.preemption`); one that comes between training runs (an evaluation, a
`save`, code of yours) ends the next training `run` at its first step. `restore` then resumes at
the saved step and `distribute` reads on from there. Before the first training `run` a notice
ends the process at once (exit 75: nothing trained to save), and after the `save` of the last
epoch too (exit 0: the run is complete); `tfdist.runtime.notice` says how.
"""

import collections.abc
import weakref
from typing import Callable

import tensorflow as tf
import tf_keras

from tfdist.runtime.model_dir import storage
from tfdist.runtime.config import ConfigError
from tfdist.fields import MAX_COUNT
from tfdist.runtime.model_dir import Lock
from tfdist.runtime.model_dir import ModelDir
from tfdist.runtime.setup import Plan
from tfdist.runtime.setup import Role
from tfdist.runtime.setup import require_plan
from tfdist.strategies import StrategyKind
from tfdist.strategies.config import check_int
from tfdist.training import guards as fit_guards
from tfdist.training import input_checks
from tfdist.training import preemption
from tfdist.training.resume import counters_position
from tfdist.training.resume import say_finished
from tfdist.training.resume import say_resuming
from tfdist.training.resume import unrestorable
from tfdist.training.data import dataset_fn
from tfdist.training.data import from_start
from tfdist.training.data import is_dataset_function
from tfdist.training.keras2 import step
from tfdist.training.keras2.fit import log_sharding
from tfdist.training.keras2.fit import tfdist_optimizer
from tfdist.training.model import checked_model


_OPTIMIZERS = (tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer)
# The loop's epoch counter in its checkpoint, as TensorFlow names it.
_EPOCH = "epoch/.ATTRIBUTES/VARIABLE_VALUE"
_LOCKS: dict[str, Lock] = {}  # A loop's model-dir lock, by model dir, to the process's end.


def _hold_for_this_loop(model_dir: ModelDir) -> None:
    """Takes `model_dir`'s lock for the newest loop on it (a later loop on the same dir in this
    process, a notebook's cell run again, takes it over); held until the process ends."""
    previous = _LOCKS.pop(model_dir.root, None)
    if previous is not None:
        previous.release()
    _LOCKS[model_dir.root] = model_dir.hold()


class CustomLoop:
    """Builds `model` (a function of no arguments, called in the strategy's scope; or a model
    built in that scope) and tfdist's optimizer (`--optimizer` and the large-batch recipe)
    unless `optimizer` is given.

    Example:
      >>> loop = tfdist.CustomLoop(plan, build_model)
      >>> batches = loop.distribute(train_dataset_fn)
      >>> def step(features, labels):
      ...     with tf.GradientTape() as tape:
      ...         per_example = loss_fn(labels, loop.model(features, training=True))
      ...         loss = loop.scale_loss(per_example)
      ...     loop.minimize(loss, tape)
      ...     return loss
      >>> for epoch in range(loop.restore(), plan.config.train.epochs):
      ...     mean_loss = loop.run(step, batches, plan.steps_per_epoch)
      ...     loop.save(epoch + 1)
    """

    def __init__(
        self,
        plan: Plan,
        model: Callable[[], tf_keras.Model],
        optimizer: tf_keras.optimizers.Optimizer | None = None,
    ):
        require_plan(plan)
        if plan.config.train.keras == 3:
            raise ConfigError(
                "keras=3: CustomLoop trains tf-keras models with tf-keras' "
                "optimizer; train a Keras 3 model through tfdist.fit, or write "
                "the loop with keras=2."
            )
        if plan.role is not Role.TRAIN:
            raise ConfigError(
                f"{plan.task} has role {plan.role.value}: CustomLoop trains, on "
                "the training tasks; a parameter-server worker or ps task calls "
                "tfdist.serve(plan) instead, and a custom loop has no evaluator "
                "task (launch without an evaluator task; evaluate in your loop)."
            )
        if optimizer is not None and not isinstance(optimizer, _OPTIMIZERS):
            raise ConfigError(
                f"optimizer={optimizer!r} is a {type(optimizer).__name__}, not a "
                "tf_keras optimizer; pass one built in plan.strategy.scope() "
                "(e.g. tf_keras.optimizers.Adam()), or none for tfdist's own "
                "(optimizer=NAME in the config)."
            )
        self.plan = plan
        self.strategy = plan.strategy
        self.coordinator = (
            tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
            if plan.kind is StrategyKind.PARAMETER_SERVER
            else None
        )
        if plan.model_dir and plan.writes_results:
            _hold_for_this_loop(plan.model_dir)
        with self.strategy.scope():
            self.model = checked_model(plan, model)
            log_sharding(plan, self.model)
            self.optimizer = optimizer or tfdist_optimizer(plan)
            self._epoch = tf.Variable(0, trainable=False, dtype=tf.int64)
            # Steps done into the epoch after `_epoch`, when a preemption saved.
            self._step = tf.Variable(0, trainable=False, dtype=tf.int64)
        self._checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, epoch=self._epoch, step_in_epoch=self._step
        )
        self._manager = None
        self._iterators = weakref.WeakKeyDictionary()  # Dataset -> its iterator.
        self._loops: dict[tuple[Callable, bool], Callable] = {}
        self._watch = preemption.watch(plan)
        self._clock = preemption.SaveClock(plan)
        self._training_sets = weakref.WeakSet()  # What `distribute` made of training data.
        self._steps_done = 0  # Training steps into the current epoch.
        self._to_skip = 0  # Steps of the resumed epoch that the restored state has done.

    def distribute(
        self, data, split: str = "train", *, training: bool = True, check_input: bool = True
    ):
        """The distributed dataset of `data` (a dataset function, `tfdist.Records` or an
        `InputConfig`): each worker reads its share, batched per replica (under parameter
        server, a per-worker dataset, made on each worker). A training dataset function of
        yours is checked as `fit` checks it (`check_input`: `tfdist.training.input_checks`)."""
        fit_guards.check_flag("check_input", check_input)
        read = dataset_fn(self.plan, data, split, training=training)
        if check_input and training and is_dataset_function(data):
            input_checks.check(self.plan, read, f"{split} data")
        if training:  # Read on where the saved state stopped.
            read = from_start(self.plan, data, self._saved_position(), split)
        if self.coordinator is None:
            dataset = self.strategy.distribute_datasets_from_function(read)
        else:
            strategy = self.strategy
            dataset = self.coordinator.create_per_worker_dataset(
                tf.function(lambda: strategy.distribute_datasets_from_function(read))
            )
        if training:
            self._training_sets.add(dataset)
        return dataset

    def scale_loss(self, per_example_loss: tf.Tensor) -> tf.Tensor:
        """The replica's share of the global mean loss: summed over the replicas it is the
        mean over the global batch (call in the step, on each replica)."""
        return tf.nn.compute_average_loss(
            per_example_loss, global_batch_size=self.plan.global_batch_size
        )

    def minimize(self, loss: tf.Tensor, tape: tf.GradientTape) -> None:
        """Gradients of `loss` (recorded on `tape`) applied to the model's trainable variables:
        through tfdist's gradient path (loss scaling, all-reduce, clipping, noise, accumulation;
        `tfdist.optim.gradient_path`), as `fit` trains, or by your own optimizer's `minimize`."""
        if getattr(self.optimizer, "gradient_path", None) is None:
            self.optimizer.minimize(loss, self.model.trainable_variables, tape=tape)
            return
        step.minimize(self.optimizer, loss, tape, self.model.trainable_variables)

    def run(self, step_fn: Callable, dataset, steps: int) -> float:
        """Runs `step_fn(*batch)` on every replica for `steps` batches of `dataset` in one
        `tf.function` (under parameter server,
        scheduled on the workers `steps_per_execution` steps at a time, and joined); returns
        the mean over the steps of the replicas' summed return values (the global loss, with
        `scale_loss`; 0.0 for a step that returns nothing).

        `dataset` is one `distribute` made, read by one iterator kept across calls (the next
        call goes on where this one stopped), or an iterator of one, read as it is:
        `iter(evaluation)` gives an evaluation a fresh pass.

        On training data, `steps_per_execution` steps per call, a preemption notice ends it at
        a call's end with the state saved there (errors.Preempted); after `restore` resumed
        one, the first calls leave out the steps it had done.

        Raises:
          tfdist.errors.Preempted: a preemption notice came; the step is saved (with
            --model_dir) and the loop resumes there when the program starts again.
        """
        if not callable(step_fn):
            raise ConfigError(
                f"step_fn={step_fn!r} is a {type(step_fn).__name__}, not a "
                "function; pass the function each replica runs on a batch."
            )
        check_int("steps", steps, 1, MAX_COUNT, "pass e.g. plan.steps_per_epoch", error=ConfigError)
        iterator = self._iterator(dataset)
        training = isinstance(dataset, collections.abc.Hashable) and dataset in self._training_sets
        loop = self._loop(step_fn, training)
        try:
            if training:
                return self._train(loop, iterator, steps)
            if self.coordinator is None:
                with self.plan.bounded_step(loop):
                    total = float(loop(iterator, tf.constant(steps, tf.int64)))
            else:
                total = self._scheduled(loop, iterator, steps)
        except tf.errors.OutOfRangeError:
            raise fit_guards.ran_out("dataset") from None
        return total / steps

    def _loop(self, step_fn: Callable, training: bool) -> Callable:
        """The compiled loop of `step_fn` over a number of batches (made on first use); on
        training data each step takes part in the workers' agreement on a notice."""
        if (step_fn, training) not in self._loops:
            replica_step = self._watch.around(step_fn) if training else step_fn

            @tf.function
            def loop(iterator, steps):
                total = tf.constant(0.0)
                for _ in tf.range(steps):
                    values = self.strategy.run(replica_step, args=next(iterator))
                    if values is not None:  # A step that returns nothing (evaluation) adds 0.
                        total += tf.cast(
                            self.strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None),
                            tf.float32,
                        )
                return total

            self._loops[(step_fn, training)] = loop
        return self._loops[(step_fn, training)]

    def _train(self, loop: Callable, iterator, steps: int) -> float:
        """`steps` training steps of `loop`, less those a resumed state had done,
        `steps_per_execution` per call, acting on a preemption notice between calls."""
        skipped = min(self._to_skip, steps)
        self._to_skip -= skipped
        todo, chunk = steps - skipped, self.plan.config.train.steps_per_execution
        results = []
        self._watch.notice.training()
        for start in range(0, todo, chunk):
            count = tf.constant(min(chunk, todo - start), tf.int64)
            self._watch.before_step()
            if self.coordinator is None:
                with self.plan.bounded_step(loop):
                    results.append(loop(iterator, count))
            else:
                results.append(self.coordinator.schedule(loop, args=(iterator, count)))
                self._watch.scheduled(self.coordinator)
            self._steps_done += int(count)
            if self._watch.stop_agreed():
                raise self._preempted()
        if self.coordinator is not None:
            self.coordinator.join()
            results = [result.fetch() for result in results]
        return sum(float(result) for result in results) / max(todo, 1)

    def _preempted(self) -> Exception:
        """Saves the step a notice stopped at (with --model_dir) and returns its one line."""
        if self.coordinator is not None:
            self.coordinator.join()
        epochs_done, steps = int(self._epoch.numpy()), self._steps_done
        save = None
        if self._manager_or_none() is not None:
            save = lambda: self._save_at(epochs_done, steps)  # noqa: E731
        model_dir = self.plan.model_dir
        return preemption.stopped(epochs_done, steps - 1, save, model_dir and model_dir.root)

    def _saved_position(self) -> tuple[int, int] | None:
        """(epochs done, steps into the next) of the latest checkpoint, read without the model."""
        model_dir = self.plan.model_dir
        latest = model_dir and tf.train.latest_checkpoint(model_dir.loop_checkpoints)
        if not latest:
            return None
        return counters_position(latest, dict(tf.train.list_variables(latest)), _EPOCH)

    def _iterator(self, dataset):
        """`dataset`'s kept iterator (made on first use), or `dataset` if it is an iterator."""
        if isinstance(
            dataset,
            (collections.abc.Iterator, tf.distribute.experimental.coordinator.PerWorkerValues),
        ):
            return dataset
        if dataset not in self._iterators:
            self._iterators[dataset] = iter(dataset)
        return self._iterators[dataset]

    def _scheduled(self, loop: Callable, iterator, steps: int) -> float:
        """`loop` over `steps` batches, scheduled on the parameter-server workers in chunks of
        `steps_per_execution`; the sum of its results, once every chunk has run."""
        chunk = self.plan.config.train.steps_per_execution
        results = [
            self.coordinator.schedule(
                loop, args=(iterator, tf.constant(min(chunk, steps - start), tf.int64))
            )
            for start in range(0, steps, chunk)
        ]
        self.coordinator.join()
        return sum(float(result.fetch()) for result in results)

    def _checkpoint_dir(self) -> str | None:
        """Under `--model_dir` for the chief; a scratch copy for the other workers, since
        every worker must take part in saving (TensorFlow's multi-worker guide)."""
        model_dir = self.plan.model_dir
        if model_dir is None:
            return None
        if self.plan.writes_results:
            return model_dir.loop_checkpoints
        return model_dir.scratch(model_dir.loop_checkpoints, self.plan.task)

    def _manager_or_none(self) -> tf.train.CheckpointManager | None:
        directory = self._checkpoint_dir()
        if directory and self._manager is None:
            self._manager = tf.train.CheckpointManager(self._checkpoint, directory, max_to_keep=2)
        return self._manager

    def restore(self) -> int:
        """Restores the latest checkpoint under `--model_dir`, if any; returns the number of
        epochs it had completed (0 without one), where the loop resumes. A loop that had
        finished (`--epochs` done) says so in a line: nothing is left to train."""
        manager = self._manager_or_none()
        model_dir = self.plan.model_dir
        latest = model_dir and tf.train.latest_checkpoint(model_dir.loop_checkpoints)
        if manager is not None and latest:
            try:
                self._checkpoint.restore(latest)
            except (ValueError, tf.errors.OpError) as error:  # Another model's, or damaged.
                raise unrestorable(
                    model_dir.root, "the checkpoint a loop", manager.directory, error
                ) from None
            self._to_skip = self._steps_done = int(self._step.numpy())
            epoch, step = int(self._epoch.numpy()) + 1, self._to_skip + 1
            if step > self.plan.steps_per_epoch:  # Saved after an epoch's last step.
                epoch, step = epoch + 1, 1
            epochs = self.plan.config.train.epochs
            if (epoch, step) == (epochs + 1, 1):  # `--epochs` done.
                say_finished(epochs, model_dir.root)
                self._watch.notice.finished(f"at epoch {epochs}")
            else:
                say_resuming(epoch, "the checkpoint an earlier loop", step)
        return int(self._epoch.numpy())

    def save(self, epochs_done: int) -> None:
        """Checkpoints the model, optimizer and `epochs_done` (every worker must call it); only
        the chief's copy stays. Without `--model_dir`, only counts the epochs (a preemption's
        line names the epoch)."""
        check_int(
            "epochs_done", epochs_done, 0, MAX_COUNT, "pass the epochs completed", error=ConfigError
        )
        self._steps_done = 0
        # A notice now is noted, and the next `run` on training data stops at its first step.
        self._watch.notice.training()
        self._epoch.assign(epochs_done)
        if self._manager_or_none() is not None:
            self._save_at(epochs_done, 0)
        epochs = self.plan.config.train.epochs
        if epochs_done >= epochs:
            self._watch.notice.finished(f"at epoch {epochs_done} of {epochs}")

    def _save_at(self, epochs_done: int, steps: int) -> None:
        """Checkpoints `steps` steps into the epoch after `epochs_done` (every worker)."""
        manager = self._manager_or_none()
        self._epoch.assign(epochs_done)
        self._step.assign(steps)
        self._clock.timed(manager.save)
        if not self.plan.writes_results:
            storage.remove_tree(manager.directory)
            self._manager = None
