"""Where a resumed run's training data starts (`tfdist.training.data.from_start`): after the
batches of the steps done, for the user's own dataset function (read from its start and
dropped, per input pipeline, as hand-built `tf.distribute.InputContext`s ask) and for tfdist's
own pipelines (`tfdist.Records`); several parameter-server workers start over."""

import contextlib
import dataclasses
import io
import os

import tensorflow as tf

import tfdist
from tests.tfdist.training.tabular import PolicyReset
from tests.tfdist.training.tabular import run_config
from tfdist.strategies import StrategyKind
from tfdist.training import data as training_data

_GLOBAL_BATCH_SIZE = 8
_STEPS_PER_EPOCH = 3
# Worker 1 of 2, each with 2 replicas: its pipeline feeds 2 batches of 2 a step.
_SECOND_OF_TWO_WORKERS = tf.distribute.InputContext(
    num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4
)
# One process of 2 replicas: its pipeline feeds 2 batches of 4 a step.
_ONE_OF_TWO_REPLICAS = tf.distribute.InputContext(num_replicas_in_sync=2)


def _numbers(context: tf.distribute.InputContext) -> tf.data.Dataset:
    """The numbers from 0, sharded over the input pipelines, in per-replica batches."""
    return (
        tf.data.Dataset.range(1000)
        .shard(context.num_input_pipelines, context.input_pipeline_id)
        .batch(context.get_per_replica_batch_size(_GLOBAL_BATCH_SIZE))
    )


class FromStartTest(PolicyReset):
    def setUp(self):
        super().setUp()
        self.plan = tfdist.setup(
            run_config(global_batch_size=_GLOBAL_BATCH_SIZE, steps_per_epoch=_STEPS_PER_EPOCH)
        )

    def _first_batch(self, plan, start, context) -> tuple[list[int], str]:
        """The first batch `context`'s pipeline reads from `start`, and what stderr said."""
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            read = training_data.from_start(plan, _numbers, start)
        return next(iter(read(context))).numpy().tolist(), stderr.getvalue()

    def test_a_users_dataset_function_drops_the_batches_of_the_steps_done(self):
        # (1, 2): epoch 2 step 3, after 1 x 3 + 2 = 5 steps, 2 of each pipeline's batches each.
        for context, expected in (
            (_SECOND_OF_TWO_WORKERS, [41, 43]),  # Its 11th batch of odd numbers.
            (_ONE_OF_TWO_REPLICAS, [40, 41, 42, 43]),  # Its 11th batch.
        ):
            with self.subTest(num_input_pipelines=context.num_input_pipelines):
                batch, said = self._first_batch(self.plan, (1, 2), context)
                self.assertEqual(batch, expected)
                self.assertEqual(
                    said,
                    "tfdist: your dataset function tests.tfdist.training.test_data:_numbers "
                    "reads on after the batches of the 5 step(s) trained (they are read and "
                    "dropped): the batches the run would have read if it reads in a fixed order "
                    "(seeded shuffles, deterministic maps)\n",
                )

    def test_a_run_from_the_beginning_drops_nothing(self):
        for start in (None, (0, 0)):
            with self.subTest(start=start):
                self.assertEqual(
                    self._first_batch(self.plan, start, _SECOND_OF_TWO_WORKERS), ([1, 3], "")
                )

    def test_several_parameter_server_workers_start_over_one_reads_on(self):
        def first_batch(num_workers: int) -> tuple[list[int], str]:
            plan = dataclasses.replace(
                self.plan, kind=StrategyKind.PARAMETER_SERVER, num_workers=num_workers
            )
            return self._first_batch(plan, (1, 2), _SECOND_OF_TWO_WORKERS)

        self.assertEqual(first_batch(2), ([1, 3], ""))  # In orders of their own: from the start.
        self.assertEqual(first_batch(1)[0], [41, 43])

    def test_tfdists_records_start_at_the_step(self):
        directory = self.get_temp_dir()
        with tf.io.TFRecordWriter(os.path.join(directory, "train-0.tfrecord")) as writer:
            for number in range(64):
                feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[number]))
                writer.write(
                    tf.train.Example(
                        features=tf.train.Features(feature={"n": feature})
                    ).SerializeToString()
                )

        def parse(serialized):
            numbers = tf.io.parse_example(serialized, {"n": tf.io.FixedLenFeature([], tf.int64)})
            return numbers["n"], numbers["n"]

        records = tfdist.Records(os.path.join(directory, "{split}-*.tfrecord"), parse)

        def batches(start, count: int) -> list[list[int]]:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                read = training_data.from_start(self.plan, records, start)
                numbers = iter(read(tf.distribute.InputContext()))
                return [next(numbers)[0].numpy().tolist() for _ in range(count)]

        whole = batches(None, 6)  # Seeded: the same shuffled order each time.
        self.assertEqual(batches((1, 1), 2), whole[4:])  # After 1 x 3 + 1 steps.
