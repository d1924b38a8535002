"""`tfdist.runtime.tf_import`: quiet means TensorFlow's and Keras' own INFO lines are hidden, also
where a program imported TensorFlow itself (as this test process has), and a program's own absl
logging stays."""

import logging
import os
import unittest

from absl import logging as absl_logging

from tfdist.runtime import tf_import


def _record(path: str, level: int) -> logging.LogRecord:
    return logging.LogRecord("absl", level, path, 1, "message", None, None)


class QuietTest(unittest.TestCase):
    def test_tensorflows_info_lines_are_hidden_and_a_programs_own_kept(self):
        tf_import.import_tensorflow(show_logs=False)  # TensorFlow is imported already.
        absl = absl_logging.get_absl_logger()
        saver = os.path.join(
            "site-packages", "tensorflow", "python", "checkpoint", "functional_saver.py"
        )
        self.assertFalse(absl.filter(_record(saver, logging.INFO)))
        self.assertTrue(absl.filter(_record(saver, logging.WARNING)))
        self.assertTrue(absl.filter(_record(os.path.join("home", "me", "train.py"), logging.INFO)))
        self.assertEqual(logging.getLogger("tensorflow").level, logging.ERROR)
        tf_import.import_tensorflow(show_logs=False)
        self.assertEqual(absl.filters.count(absl.filters[-1]), 1)  # Added once.


if __name__ == "__main__":
    unittest.main()
