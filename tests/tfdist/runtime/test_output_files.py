"""`tfdist.runtime.output_files`: regular files replaced whole, everything else written through
or refused, and a full disk that leaves what was there (on scratch nodes and a small tmpfs)."""

import json
import os
import socket
import stat
import tempfile
import unittest

from tests import scratch_files
from tfdist.runtime import output_files
from tfdist.runtime.output_files import OutputFileError


class OutputFilesTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.enterContext(tempfile.TemporaryDirectory())

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def test_a_new_file_is_whole_with_the_umask_mode_and_its_directories_made(self):
        path = self._path("sub/deeper/out.json")
        old_umask = os.umask(0o027)
        try:
            output_files.write_json("json", path, {"a": 1})
        finally:
            os.umask(old_umask)
        with open(path, encoding="utf-8") as written:
            self.assertEqual(json.load(written), {"a": 1})
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o640)
        self.assertEqual(os.listdir(os.path.dirname(path)), ["out.json"])

    def test_a_regular_file_is_replaced_by_a_new_inode_keeping_its_mode(self):
        path = self._path("out.json")
        output_files.write_json("json", path, {"before": 1})
        os.chmod(path, 0o604)
        inode = os.stat(path).st_ino
        output_files.write_json("json", path, {"after": 2})
        self.assertNotEqual(os.stat(path).st_ino, inode)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o604)

    def test_a_device_node_is_written_through_and_stays_a_device(self):
        null = scratch_files.device(self.dir, "null", scratch_files.NULL)
        output_files.write_json("json", null, {"a": 1})
        self.assertTrue(stat.S_ISCHR(os.stat(null).st_mode))
        full = scratch_files.device(self.dir, "full", scratch_files.FULL)
        with self.assertRaisesRegex(
            OutputFileError,
            r"^json='.*/full': could not write it "
            r"\(No space left on device\); free space",
        ):
            output_files.write_json("json", full, {"a": 1})
        self.assertTrue(stat.S_ISCHR(os.stat(full).st_mode))
        self.assertEqual(sorted(os.listdir(self.dir)), ["full", "null"])

    def test_a_symlink_is_written_through_to_what_it_points_at(self):
        target = self._path("target.json")
        output_files.write_json("json", target, {"before": 1})
        link = self._path("link.json")
        os.symlink(target, link)
        output_files.write_json("json", link, {"after": 2})
        self.assertTrue(os.path.islink(link))
        with open(target, encoding="utf-8") as written:
            self.assertEqual(json.load(written), {"after": 2})

    def test_stdout_through_its_symlink(self):
        read_end, write_end = os.pipe()
        link = self._path("stdout")
        os.symlink(f"/proc/self/fd/{write_end}", link)
        try:
            output_files.write_json("json", link, {"a": 1})
        finally:
            os.close(write_end)
        with os.fdopen(read_end, encoding="utf-8") as reader:
            self.assertEqual(json.load(reader), {"a": 1})

    def test_a_fifo_reaches_its_reader_and_without_one_is_one_line(self):
        fifo = self._path("fifo")
        os.mkfifo(fifo)
        with self.assertRaisesRegex(
            OutputFileError,
            r"\(it is a FIFO that no process reads\); "
            "start its reader first",
        ):
            output_files.write_json("json", fifo, {"a": 1})
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.addCleanup(os.close, reader)
        output_files.write_json("json", fifo, {"a": 1})
        self.assertEqual(json.loads(os.read(reader, 1 << 16)), {"a": 1})
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))

    def test_what_cannot_take_output_is_refused_untouched(self):
        disk = scratch_files.device(self.dir, "disk", scratch_files.LOOP0, block=True)
        dangling = self._path("dangling")
        os.symlink(self._path("nowhere/x.json"), dangling)
        sock = self._path("sock")
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(sock)
            for path, words in (
                (disk, "is a block device"),
                (sock, "is a socket"),
                (self.dir, "is a directory; pass the path of a file in it"),
                (dangling, "is a symlink to '.*nowhere/x.json', which does not exist"),
            ):
                with self.assertRaisesRegex(OutputFileError, f"^json='{path}' {words}"):
                    output_files.write_json("json", path, {"a": 1})
        self.assertTrue(stat.S_ISBLK(os.stat(disk).st_mode))
        self.assertFalse(os.path.exists(self._path("nowhere")))

    def test_a_record_in_a_model_dir_never_goes_through_a_planted_link_or_fifo(self):
        target = self._path("victim")
        with open(target, "w", encoding="utf-8") as victim:
            victim.write("kept")
        os.symlink(target, self._path("cluster.json"))
        os.mkfifo(self._path("history.json"))
        for name, what in (
            ("cluster.json", "a symbolic link"),
            ("history.json", "a FIFO"),
        ):
            with self.subTest(name=name):
                path = self._path(name)
                with self.assertRaisesRegex(
                    OutputFileError,
                    rf"^model_dir: {path} is {what}, which tfdist never writes through in a "
                    r"model dir; remove it, or pass another model_dir=DIR\.$",
                ):
                    output_files.write_record(path, {"workers": 2})
        with open(target, encoding="utf-8") as victim:
            self.assertEqual(victim.read(), "kept")
        output_files.write_record(self._path("save_time.json"), {"slowest_save_s": 1.0})
        with open(self._path("save_time.json"), encoding="utf-8") as record:
            self.assertEqual(json.load(record), {"slowest_save_s": 1.0})

    def test_a_full_disk_keeps_the_old_file_and_leaves_no_temp_file(self):
        with scratch_files.small_tmpfs(64) as disk:
            path = os.path.join(disk, "out.json")
            output_files.write_json("metrics_json", path, {"before": 1})
            scratch_files.fill(disk)
            with self.assertRaisesRegex(
                OutputFileError,
                r"^metrics_json='.*': could not write "
                r"it \(No space left on device\)",
            ):
                output_files.write_json("metrics_json", path, {"after": "x" * 100_000})
            self.assertEqual(sorted(os.listdir(disk)), ["filler", "out.json"])
            with open(path, encoding="utf-8") as written:
                self.assertEqual(json.load(written), {"before": 1})


if __name__ == "__main__":
    unittest.main()
