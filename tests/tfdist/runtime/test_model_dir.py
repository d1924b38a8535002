"""`tfdist.runtime.model_dir`: a model dir is trained into by one run at a time, nested model
dirs included, and its lock file is never followed through a symlink."""

import os
import stat
import tempfile
import unittest

from tests import scratch_files
from tfdist.runtime.config import ConfigError
from tfdist.runtime import model_dir
from tfdist.runtime.model_dir import EVALUATOR
from tfdist.runtime.model_dir import ModelDir


class OwnedModelDirTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.enterContext(tempfile.TemporaryDirectory())

    def test_second_owner_is_refused_in_one_line_naming_the_first(self):
        with ModelDir(self.dir).owned():
            with self.assertRaisesRegex(
                ConfigError,
                rf"^model_dir='{self.dir}' is in use by another run \(pid "
                rf"{os.getpid()} on .* since .*\); wait for it to end or "
                r"stop it, or pass another model_dir=DIR\.$",
            ):
                with ModelDir(self.dir).owned():
                    pass
        with ModelDir(self.dir).owned():  # Released when the owner is done.
            pass

    def test_nested_model_dirs_are_refused_both_ways(self):
        inner = os.path.join(self.dir, "a", "b")
        with ModelDir(self.dir).owned():
            with self.assertRaisesRegex(
                ConfigError,
                rf"^model_dir='{inner}' lies inside "
                rf"'{self.dir}', the model dir of another "
                rf"run \(pid {os.getpid()} ",
            ):
                ModelDir(inner).hold()
        self.assertEqual(os.listdir(self.dir), [".tfdist.lock"])  # The refused one made nothing.
        with ModelDir(inner).owned():
            with self.assertRaisesRegex(
                ConfigError,
                rf"^model_dir='{self.dir}' holds "
                rf"'{inner}', the model dir of another",
            ):
                ModelDir(self.dir).hold()
        # The refused ones took nothing: both are free again.
        ModelDir(self.dir).hold().release()
        ModelDir(inner).hold().release()

    def test_the_evaluator_holds_its_own_lock_beside_the_trainer(self):
        with ModelDir(self.dir).owned():
            with ModelDir(self.dir).owned(EVALUATOR):
                with self.assertRaisesRegex(ConfigError, "is in use by another run"):
                    ModelDir(self.dir).hold(EVALUATOR)

    def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(self):
        target = os.path.join(self.dir, "precious")
        with open(target, "w", encoding="utf-8") as precious:
            precious.write("keep me\n")
        model_dir = os.path.join(self.dir, "run")
        os.makedirs(model_dir)
        os.symlink(target, os.path.join(model_dir, ".tfdist.lock"))
        with self.assertRaisesRegex(
            ConfigError,
            r"its lock file .*\.tfdist\.lock is a symlink; "
            "tfdist never follows its lock file",
        ):
            ModelDir(model_dir).hold()
        with open(target, encoding="utf-8") as precious:
            self.assertEqual(precious.read(), "keep me\n")

    def test_a_lock_file_that_is_a_fifo_or_a_device_is_refused(self):
        os.mkfifo(os.path.join(self.dir, ".tfdist.lock"))
        with self.assertRaisesRegex(ConfigError, "is not a regular file; remove it"):
            ModelDir(self.dir).hold()
        os.remove(os.path.join(self.dir, ".tfdist.lock"))
        scratch_files.device(self.dir, ".tfdist.lock", scratch_files.NULL)
        with self.assertRaisesRegex(ConfigError, "is not a regular file; remove it"):
            ModelDir(self.dir).hold()
        self.assertTrue(stat.S_ISCHR(os.stat(os.path.join(self.dir, ".tfdist.lock")).st_mode))

    def test_a_link_fifo_or_wrong_kind_planted_where_tfdist_writes_is_refused_and_freed(self):
        target = os.path.join(self.dir, "precious")
        os.makedirs(target)
        run = ModelDir(os.path.join(self.dir, "run"))
        os.makedirs(run.root)
        for role, planted, plant, found, kind in (
            (
                None,
                run.history_json,
                lambda path: os.symlink(target, path),
                "a symbolic link",
                "a regular file",
            ),
            (None, run.cluster_json, os.mkfifo, "a FIFO", "a regular file"),
            (None, run.save_time_json, os.makedirs, "a directory", "a regular file"),
            (
                None,
                run.checkpoints,
                lambda path: os.symlink(target, path),
                "a symbolic link",
                "a directory",
            ),
            (
                None,
                run.backup,
                lambda path: open(path, "w").close(),
                "a regular file",
                "a directory",
            ),
            (
                None,
                os.path.join(run.backup, "chief", "ckpt-2.index"),
                lambda path: os.symlink(target, path),
                "a symbolic link",
                "a regular file or a directory",
            ),
            (
                None,
                os.path.join(run.checkpoints, "epoch-002.index"),
                os.mkfifo,
                "a FIFO",
                "a regular file or a directory",
            ),
            (
                None,
                run.logs(),  # "logs/": a trailing "/" would see through a link.
                lambda path: os.symlink(target, path),
                "a symbolic link",
                "a directory",
            ),
            (
                EVALUATOR,
                run.evaluations_json,
                lambda path: os.symlink(target, path),
                "a symbolic link",
                "a regular file",
            ),
            (
                EVALUATOR,
                run.logs(EVALUATOR),
                lambda path: os.symlink(target, path),
                "a symbolic link",
                "a directory",
            ),
        ):
            with self.subTest(planted=os.path.basename(planted.rstrip("/"))):
                os.makedirs(os.path.dirname(planted.rstrip("/")), exist_ok=True)
                plant(planted.rstrip("/"))
                with self.assertRaisesRegex(
                    ConfigError,
                    rf"^model_dir='{run.root}': {planted} is {found}, where tfdist makes "
                    rf"{kind} and never writes through anything else; remove it, or pass "
                    r"another model_dir=DIR\.$",
                ):
                    run.hold(*([role] if role else []))
                remove = os.rmdir if found == "a directory" else os.unlink
                remove(planted.rstrip("/"))
                run.hold(*([role] if role else [])).release()  # The refusal freed the lock.
        self.assertEqual(os.listdir(target), [])

    def test_object_storage_has_no_entries_to_check_here(self):
        os.symlink(self.dir, os.path.join(self.dir, "a-link-in-the-working-directory"))
        previous = os.getcwd()
        os.chdir(self.dir)
        self.addCleanup(os.chdir, previous)
        self.assertEqual(model_dir._entries("gs://bucket/run/backup"), [])  # pylint: disable=protected-access

    def test_a_full_disk_is_one_line(self):
        with scratch_files.small_tmpfs(64) as disk:
            scratch_files.fill(disk)
            with self.assertRaisesRegex(
                ConfigError,
                rf"^model_dir='{disk}/run'.*No space left "
                r"on device\); free space",
            ):
                ModelDir(os.path.join(disk, "run")).hold()


if __name__ == "__main__":
    unittest.main()


class ReadRecordTest(unittest.TestCase):
    """A record tfdist reads back from a model dir (the cluster's shape, the slowest save) is
    read without following a link, blocking on a FIFO or reading a huge file: None instead."""

    def test_what_is_not_a_small_json_file_of_ours_reads_as_none(self):
        with tempfile.TemporaryDirectory() as root:

            def at(name: str) -> str:
                return os.path.join(root, name)

            with open(at("good.json"), "w", encoding="utf-8") as good:
                good.write('{"slowest_save_s": 1.5}')
            with open(at("garbage.json"), "wb") as garbage:
                garbage.write(b"\xff\x00{not json")
            with open(at("huge.json"), "wb") as huge:
                huge.truncate(model_dir.MAX_RECORD_BYTES + 1)
            os.symlink(at("good.json"), at("link.json"))
            os.mkfifo(at("fifo.json"))
            os.mkdir(at("directory.json"))
            self.assertEqual(model_dir.read_record(at("good.json")), {"slowest_save_s": 1.5})
            for name in ("missing", "garbage", "huge", "link", "fifo", "directory"):
                self.assertIsNone(model_dir.read_record(at(f"{name}.json")), name)
