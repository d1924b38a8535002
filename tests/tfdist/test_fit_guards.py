"""`tfdist.fit_guards` on its own: TensorFlow's complaint in one line, and the batches a run
takes (`fit` under each guard: tests/tfdist/test_training.py, FitGuardsTest)."""

import tensorflow as tf

from tfdist import fit_guards
from tfdist.config import ConfigError

# The shape of the message `model.fit` raises when an op of the step fails.
_GRAPH_ERROR = """Graph execution error:

Detected at node sparse_categorical_crossentropy/Loss defined at (most recent call last):
  File "train.py", line 9, in <module>

  File "losses.py", line 2454, in sparse_categorical_crossentropy

Received a label value of 9 which is outside the valid range of [0, 4).  Label values: {labels}
\t [[{{{{node sparse_categorical_crossentropy/Loss}}}}]] [Op:__inference_train_function_557]"""


class ComplaintTest(tf.test.TestCase):

    def test_the_line_before_the_node_without_the_traceback(self):
        error = tf.errors.InvalidArgumentError(None, None, _GRAPH_ERROR.format(labels="9 9"))
        self.assertEqual(fit_guards.complaint(error),
                         "InvalidArgumentError: Received a label value of 9 which is outside the "
                         "valid range of [0, 4). Label values: 9 9")

    def test_a_long_complaint_is_cut(self):
        error = tf.errors.InvalidArgumentError(None, None,
                                               _GRAPH_ERROR.format(labels=" ".join(["9"] * 512)))
        complaint = fit_guards.complaint(error)
        self.assertLessEqual(len(complaint), 200)
        self.assertTrue(complaint.endswith("9 9 ..."), complaint)

    def test_the_step_that_failed_names_its_data(self):
        message = _GRAPH_ERROR.format(labels="9").replace("train_function", "test_function")
        failure = fit_guards.step_failure(tf.errors.InvalidArgumentError(None, None, message),
                                          "tabular")
        self.assertStartsWith(str(failure), "validation_data: model 'tabular' failed on one ")
        lost = fit_guards.step_failure(tf.errors.DataLossError(None, None, "corrupted record at 12"),
                                       "tabular")
        self.assertEqual(str(lost), "train_data: reading it failed (DataLossError: corrupted "
                                    "record at 12); check its files.")


class RequireEnoughTest(tf.test.TestCase):

    def _counts(self, batches: int, replicas: int = 1, pipelines: int = 1):
        counts = fit_guards.BatchCounts(
            lambda context: tf.data.Dataset.range(batches * 4).batch(4))
        for pipeline in range(pipelines):
            counts(tf.distribute.InputContext(pipelines, pipeline, replicas * pipelines))
        return counts

    def test_enough_for_every_epoch(self):
        fit_guards.require_enough(self._counts(6), steps_per_epoch=2, epochs=3,
                                  new_iterator_each_epoch=False)

    def test_one_epoch_is_enough_only_when_read_afresh(self):
        fit_guards.require_enough(self._counts(2), steps_per_epoch=2, epochs=3,
                                  new_iterator_each_epoch=True)
        with self.assertRaisesRegex(ConfigError, r"holds 2 batches but the run takes 2 steps x "
                                                 r"3 epochs = 6 of them"):
            fit_guards.require_enough(self._counts(2), steps_per_epoch=2, epochs=3,
                                      new_iterator_each_epoch=False)

    def test_a_pipeline_feeding_several_replicas(self):
        with self.assertRaisesRegex(ConfigError, r"holds 6 batches but the run takes 2 steps x 2 "
                                                 r"epochs x 2 replicas it feeds = 8 of them"):
            fit_guards.require_enough(self._counts(6, replicas=2), steps_per_epoch=2, epochs=2,
                                      new_iterator_each_epoch=False)

    def test_an_infinite_or_unknown_dataset_is_not_judged(self):
        for dataset in (tf.data.Dataset.range(4).repeat(),
                        tf.data.Dataset.range(4).filter(lambda x: x > 1)):
            counts = fit_guards.BatchCounts(lambda context, dataset=dataset: dataset)
            counts(tf.distribute.InputContext())
            self.assertEqual(counts.pipelines, [])
