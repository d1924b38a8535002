"""A Keras 3 run's files under `--model_dir`: a backup of the model, optimizer, gradient path
(loss scale, accumulators), epochs done and the step within the next, at the end of every epoch
and at a preemption (`tfdist.training.preemption`), in `backup/` (other
workers write a temporary copy, since every worker must take part in saving), restored when a
run restarts and kept when it finishes (its final state: a rerun knows the run is done); and
each epoch's weights in `checkpoints/epoch-NNN`
for the evaluator (`tfdist.training.keras3.evaluator`)."""

import os

import tensorflow as tf

from tfdist.runtime.model_dir import storage
from tfdist.runtime.setup import Plan
from tfdist.training import preemption
from tfdist.training.keras3.step import Steps

_ONE_COPY = {
    "trainable": False,
    "synchronization": tf.VariableSynchronization.ON_WRITE,
    "aggregation": tf.VariableAggregation.ONLY_FIRST_REPLICA,
}


class Checkpoints:
    """The backup (restored on restart) and each epoch's weights, under `--model_dir`."""

    def __init__(self, plan: Plan, steps: Steps):
        self.plan = plan
        self.model_dir = plan.model_dir
        with plan.strategy.scope():
            self.epochs_done = tf.Variable(0, dtype=tf.int64, name="epochs_done", **_ONE_COPY)
            self.step_in_epoch = tf.Variable(0, dtype=tf.int64, name="step_in_epoch", **_ONE_COPY)
        self._backup = tf.train.Checkpoint(
            model=steps.model,
            optimizer=steps.optimizer,
            gradient_path=steps.path,
            epochs_done=self.epochs_done,
            step_in_epoch=self.step_in_epoch,
        )
        self._weights = tf.train.Checkpoint(model=steps.model)
        self.clock = preemption.SaveClock(plan)

    def _directory(self, path: str) -> str:
        """`path` under --model_dir for the task that writes results; a scratch copy for the
        other workers."""
        return path if self.plan.writes_results else self.model_dir.scratch(path, self.plan.task)

    def restore(self) -> tuple[int, int]:
        """Restores the backup an earlier run left, if any; returns where it resumes: (epochs
        done, steps done in the next)."""
        if self.model_dir is None:
            return 0, 0
        latest = tf.train.latest_checkpoint(self.model_dir.backup)
        if latest:
            self._backup.restore(latest).assert_existing_objects_matched()
        return int(self.epochs_done.numpy()), int(self.step_in_epoch.numpy())

    def save_in_epoch(self, epochs_done: int, steps_done: int) -> None:
        """Backs up `steps_done` steps into the epoch after `epochs_done` (a preemption's save;
        every worker calls it)."""
        backup = self._backup_at(epochs_done, steps_done)
        if not self.plan.writes_results:
            storage.remove_tree(backup.directory)

    def _backup_at(self, epochs_done: int, steps_done: int) -> tf.train.CheckpointManager:
        """Backs up, timed by `clock`: what a preemption's grace must cover."""
        self.epochs_done.assign(epochs_done)
        self.step_in_epoch.assign(steps_done)
        backup = tf.train.CheckpointManager(
            self._backup, self._directory(self.model_dir.backup), max_to_keep=1
        )
        number = epochs_done * self.plan.steps_per_epoch + steps_done
        self.clock.timed(lambda: backup.save(checkpoint_number=number))
        return backup

    def save(self, epochs_done: int) -> None:
        """Backs up after `epochs_done` epochs and keeps that epoch's weights (every worker
        calls it; only the results writer's copy stays)."""
        if self.model_dir is None:
            return
        backup = self._backup_at(epochs_done, 0)
        weights = self._directory(self.model_dir.checkpoints)
        self._weights.write(
            os.path.join(weights, os.path.basename(self.model_dir.checkpoint(epochs_done)))
        )
        if not self.plan.writes_results:
            storage.remove_tree(backup.directory)
            storage.remove_tree(weights)
