"""Runs a Keras 3 model's `Steps` (`tfdist.training.keras3.step`) over distributed data,
`steps_per_execution` steps per call: in this process under the mirrored strategies, or
scheduled on the workers by a ClusterCoordinator under parameter server."""

import tensorflow as tf

from tfdist.runtime.setup import Plan
from tfdist.strategies import StrategyKind
from tfdist.training import preemption
from tfdist.training.data import DatasetFn
from tfdist.training.keras3.step import Steps


class Runner:
    """Runs `Steps` over distributed data: in this process (mirrored strategies), or
    scheduled on the workers by a ClusterCoordinator (parameter server)."""

    def __init__(self, plan: Plan, options: tf.distribute.InputOptions):
        self.plan, self.options = plan, options
        self.strategy = plan.strategy
        self.coordinator = (
            tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
            if plan.kind is StrategyKind.PARAMETER_SERVER
            else None
        )
        self.element_spec = None  # Of the first dataset `dataset` made.
        self._train = self._evaluate = None

    def bind(self, steps: Steps, watch: preemption.Watch) -> None:
        """Compiles the loops over `steps`' training and evaluation steps; a training step
        takes part in `watch`'s agreement."""
        strategy = self.strategy
        train_replica = watch.around(steps.train_replica, steps.path)

        @tf.function
        def train(iterator, count):
            for _ in tf.range(count):
                strategy.run(train_replica, args=(next(iterator),))

        @tf.function
        def evaluate(iterator, count):
            for _ in tf.range(count):
                batch = iterator.get_next_as_optional()
                if not batch.has_value():
                    break
                strategy.run(steps.evaluate_replica, args=(batch.get_value(),))

        self._train, self._evaluate = train, evaluate

    def dataset(self, dataset_fn: DatasetFn):
        """The distributed dataset of `dataset_fn`: per worker under parameter server."""

        def noting_spec(context: tf.distribute.InputContext) -> tf.data.Dataset:
            dataset = dataset_fn(context)
            self.element_spec = self.element_spec or dataset.element_spec
            return dataset

        if self.coordinator is None:
            return self.strategy.distribute_datasets_from_function(
                noting_spec, options=self.options
            )
        return self.coordinator.create_per_worker_dataset(
            lambda: self.strategy.distribute_datasets_from_function(noting_spec)
        )

    def run(
        self, function, iterator, count: int, callbacks=None, *, first: int = 0, watch=None
    ) -> int | None:
        """Steps `first` to `count` - 1 of `function` (train or evaluate), `steps_per_execution`
        per call, each call between `callbacks`' `on_train_batch_begin` and `_end` (under
        parameter server: when it is scheduled). Stops early after a call once `watch` (a
        `preemption.Watch`) agrees to; returns the last step done then, else None."""
        chunk = self.plan.config.train.steps_per_execution
        for start in range(first, count, chunk):
            steps = min(chunk, count - start)
            if callbacks is not None:
                callbacks.on_train_batch_begin(start)
            if watch is not None:
                watch.before_step()
            args = (iterator, tf.constant(steps, tf.int64))
            if self.coordinator is None:
                with self.plan.bounded_step(function):
                    function(*args)
            else:
                self.coordinator.schedule(function, args=args)
                if watch is not None:
                    watch.scheduled(self.coordinator)
            if callbacks is not None:
                callbacks.on_train_batch_end(start + steps - 1)
            if watch is not None and watch.stop_agreed():
                self._join()
                return start + steps - 1
        self._join()
        return None

    def _join(self) -> None:
        if self.coordinator is not None:
            self.coordinator.join()

    def train(self, iterator, count: int, callbacks, *, first: int, watch) -> int | None:
        """Training steps `first` to `count` - 1; the last step done if `watch` stopped them."""
        return self.run(self._train, iterator, count, callbacks, first=first, watch=watch)

    def evaluate(self, dataset, count: int) -> None:
        self.run(self._evaluate, iter(dataset), count)
