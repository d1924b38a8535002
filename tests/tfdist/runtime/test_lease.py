"""`tfdist.runtime.model_dir.lease` and a model dir at a URL: its lock is a lease object beside
its files, and nothing is made at a local path spelt like the URL. Here through TensorFlow's `file://`
file system, which takes the same URL path as `gs://` (tests/test_cloud_storage.py: the
emulated Cloud Storage)."""

import json
import os
import tempfile
import threading
import time
import unittest
from unittest import mock

from tfdist.runtime.model_dir import lease
from tfdist.runtime import output_files
from tfdist.runtime.model_dir import storage
from tfdist.runtime.config import ConfigError
from tfdist.runtime.model_dir import ModelDir
from tfdist.runtime.model_dir import read_record

_FAST = {"STALE_S": 1.0, "SETTLE_S": 0.1}  # Renewed every third of a second.


class LeaseTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.enterContext(tempfile.TemporaryDirectory())
        self.url = f"file://{self.dir}/.tfdist.lock"
        self.enterContext(mock.patch.multiple(lease, **_FAST))

    def _planted(self, token: str) -> None:
        record = {"owner": "pid 1 on elsewhere", "token": token, "renewals": 0}
        storage.write_url(self.url, json.dumps(record).encode())

    def test_a_held_lease_is_renewed_refuses_a_second_run_and_is_removed_on_release(self):
        held = lease.Lease.take(self.url, "gs://b/run")
        self.addCleanup(held.release)
        first = json.loads(storage.read_url(self.url, 4096))
        self.assertIn(f"pid {os.getpid()} on ", first["owner"])
        start = time.monotonic()
        with self.assertRaisesRegex(
            ConfigError,
            rf"^model_dir='gs://b/run' is in use by another run \(pid {os.getpid()} on .*; its "
            rf"lease {self.url} was renewed within 1 s\); wait for it to end or stop it, or "
            r"pass another model_dir=DIR\.$",
        ):
            lease.Lease.take(self.url, "gs://b/run")
        self.assertLess(time.monotonic() - start, _FAST["STALE_S"])  # Seen renewed: refused.
        self.assertGreater(json.loads(storage.read_url(self.url, 4096))["renewals"], 0)
        held.release()
        self.assertIsNone(storage.read_url(self.url, 4096))

    def test_a_stale_lease_is_taken_over_after_it_stayed_unchanged(self):
        self._planted("dead")
        start = time.monotonic()
        held = lease.Lease.take(self.url, "gs://b/run")
        self.addCleanup(held.release)
        self.assertGreaterEqual(time.monotonic() - start, _FAST["STALE_S"])
        self.assertNotEqual(json.loads(storage.read_url(self.url, 4096))["token"], "dead")

    def test_garbage_where_the_lease_belongs_is_no_holder(self):
        storage.write_url(self.url, b"\x00not json")
        start = time.monotonic()
        lease.Lease.take(self.url, "gs://b/run").release()
        self.assertLess(time.monotonic() - start, _FAST["STALE_S"])

    def test_of_two_runs_that_wrote_at_once_the_earlier_write_is_refused(self):
        real_sleep = time.sleep

        def other_run_writes(seconds):
            self._planted("other")  # Lands after ours, within the settle.
            real_sleep(seconds)

        with mock.patch.object(lease.time, "sleep", side_effect=other_run_writes):
            with self.assertRaisesRegex(
                ConfigError,
                r"^model_dir='gs://b/run': another run \(pid 1 on elsewhere\) took it at the "
                r"same moment as this one; wait for it to end or stop it, or pass another "
                r"model_dir=DIR\.$",
            ):
                lease.Lease.take(self.url, "gs://b/run")

    def test_a_holder_that_finds_its_lease_taken_ends_without_writing_more(self):
        ended = threading.Event()

        with mock.patch.object(lease.os, "_exit", side_effect=lambda status: ended.set()) as end:
            held = lease.Lease.take(self.url, "gs://b/run")
            self.addCleanup(held.release)  # Leaves the taker's lease.
            self._planted("taker")
            self.assertTrue(ended.wait(3 * _FAST["STALE_S"]))
            end.assert_called_once_with(1)
            time.sleep(_FAST["STALE_S"])  # Nothing more is written.
        self.assertEqual(json.loads(storage.read_url(self.url, 4096))["token"], "taker")


class LeaseTimeTest(unittest.TestCase):
    def test_tfdist_lease_s_sets_it_and_what_is_not_seconds_is_one_line(self):
        with mock.patch.dict(os.environ, {lease.LEASE_ENV: "6"}):
            self.assertEqual(lease.stale_s(), 6.0)
        with mock.patch.dict(os.environ, clear=False) as env:
            env.pop(lease.LEASE_ENV, None)
            self.assertEqual(lease.stale_s(), 30.0)
        for value in ("2", "x", "nan", "inf", "-5"):
            with self.subTest(value=value), mock.patch.dict(os.environ, {lease.LEASE_ENV: value}):
                with self.assertRaisesRegex(
                    ConfigError,
                    rf"^TFDIST_LEASE_S='{value}' is not a number of seconds of at least 3; set "
                    r"it to how long a gs:// model dir's lease may go unrenewed before another "
                    r"run takes it over, or unset it \(30 s\)\.$",
                ):
                    lease.stale_s()


class UrlModelDirTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = self.enterContext(tempfile.TemporaryDirectory())
        self.cwd = self.enterContext(tempfile.TemporaryDirectory())
        self.enterContext(mock.patch.multiple(lease, **_FAST))
        previous = os.getcwd()
        os.chdir(self.cwd)
        self.addCleanup(os.chdir, previous)

    def test_the_lock_and_records_go_to_the_url_and_nothing_to_a_local_path(self):
        model_dir = ModelDir(f"file://{self.dir}/run")
        with model_dir.owned():
            self.assertTrue(os.path.isfile(os.path.join(self.dir, "run", ".tfdist.lock")))
            output_files.write_json("model_dir", model_dir.history_json, {"epochs": {}})
            self.assertEqual(read_record(model_dir.history_json), {"epochs": {}})
        self.assertFalse(model_dir.has_backup)
        self.assertEqual(sorted(os.listdir(os.path.join(self.dir, "run"))), ["history.json"])
        self.assertEqual(os.listdir(self.cwd), [])  # No ./file:/... made from the URL.

    def test_what_is_not_a_small_json_object_of_ours_reads_as_none(self):
        url = f"file://{self.dir}/record.json"
        for data in (b"{", b"x" * (2 << 20)):
            storage.write_url(url, data)
            self.assertIsNone(read_record(url))
        self.assertIsNone(read_record(f"file://{self.dir}"))  # A directory.
        os.mkfifo(os.path.join(self.dir, "fifo.json"))  # Reading it would wait for a writer.
        os.symlink(url, os.path.join(self.dir, "link.json"))
        for name in ("fifo.json", "link.json"):
            self.assertIsNone(read_record(f"file://{self.dir}/{name}"))
        self.assertIsNone(read_record(f"file://{self.dir}/missing.json"))


if __name__ == "__main__":
    unittest.main()
