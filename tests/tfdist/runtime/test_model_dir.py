"""`tfdist.runtime.model_dir`: a model dir is owned by one run at a time."""

import os
import tempfile
import unittest

from tfdist.runtime.model_dir import ModelDir
from tfdist.runtime.config import ConfigError


class OwnedModelDirTest(unittest.TestCase):

    def test_second_owner_is_refused_in_one_line_naming_the_first(self):
        with tempfile.TemporaryDirectory() as model_dir:
            with ModelDir(model_dir).owned():
                with self.assertRaisesRegex(
                        ConfigError, rf"^model_dir='{model_dir}' is in use by another run \(pid "
                                     rf"{os.getpid()} on .* since .*\); wait for it to end or "
                                     r"stop it, or pass another --model_dir\.$"):
                    with ModelDir(model_dir).owned():
                        pass
            with ModelDir(model_dir).owned():  # Released when the owner is done.
                pass


if __name__ == "__main__":
    unittest.main()
