"""The one TensorFlow test base of the suite: `tf.test.TestCase` without its ghost test.

Every test class in tests/ that wants TensorFlow's assertions derives from `TfTestCase`, never
from `tf.test.TestCase` itself (tests/test_suite_shape.py fails when one does).
"""

import tensorflow as tf


class TfTestCase(tf.test.TestCase):
    """`tf.test.TestCase` (its assertions, temp dirs, eager evaluation), minus `test_session`."""

    # `tf.test.TestCase.test_session` is TF 1's graph-mode session helper, named like a test:
    # pytest and unittest collect it in every class that inherits it, and TensorFlow skips it at
    # run time, so each such class reports a skipped test that tests nothing. The suite runs
    # eagerly and never opens a session; a name that is not callable is collected by neither.
    test_session = None
