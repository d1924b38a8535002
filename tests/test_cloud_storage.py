"""Tests for tests.cloud_storage: TensorFlow's own GCS file system (tf.io.gfile, checkpoints) works
on gs:// paths against the emulated Cloud Storage, from an emulated host, as against the real one.

Needs root, network namespaces, openssl and gcp-storage-emulator; skipped where missing."""

import json
import os
import subprocess
import sys
import textwrap
import unittest

import pytest

from tests import cloud_storage
from tfdist.cluster.rehearsal import hosts as hosts_lib

_PROGRAM = textwrap.dedent(
    """
    import json
    import tensorflow as tf

    g, root, out = tf.io.gfile, "gs://bkt/run", {}
    g.makedirs(f"{root}/data/empty")  # Directory markers: empty objects named "dir/".
    with g.GFile(f"{root}/data/a.txt", "w") as f:
        f.write("first")
    with g.GFile(f"{root}/data/a.txt", "w") as f:  # GCS has no append: a whole new object.
        f.write("second")
    out["read"] = g.GFile(f"{root}/data/a.txt").read()
    out["exists"] = [g.exists(f"{root}/data/a.txt"), g.exists(f"{root}/data/none")]
    out["isdir"] = [g.isdir(f"{root}/data"), g.isdir(f"{root}/data/a.txt")]
    out["size"] = g.stat(f"{root}/data/a.txt").length
    blob = bytes(range(256)) * 4096
    with g.GFile(f"{root}/data/blob.bin", "wb") as f:
        f.write(blob)
    out["blob_intact"] = g.GFile(f"{root}/data/blob.bin", "rb").read() == blob
    g.rename(f"{root}/data/a.txt", f"{root}/data/b.txt")  # Copy, then delete.
    out["listdir"] = sorted(g.listdir(f"{root}/data"))
    out["glob"] = g.glob(f"{root}/data/*.txt")
    g.remove(f"{root}/data/blob.bin")
    g.makedirs(f"{root}/scratch/deep")
    with g.GFile(f"{root}/scratch/deep/x", "w") as f:
        f.write("x")
    g.rmtree(f"{root}/scratch")
    out["scratch_gone"] = not g.exists(f"{root}/scratch")

    v, step = tf.Variable([1.0, 2.0]), tf.Variable(0)
    checkpoint = tf.train.Checkpoint(v=v, step=step)
    manager = tf.train.CheckpointManager(checkpoint, f"{root}/ckpt", max_to_keep=2)
    for _ in range(3):
        step.assign_add(1)
        v.assign_add([1.0, 1.0])
        manager.save()
    out["latest"] = tf.train.latest_checkpoint(f"{root}/ckpt")
    v.assign([0.0, 0.0])
    step.assign(0)
    checkpoint.restore(out["latest"]).assert_consumed()
    out["restored"] = [v.numpy().tolist(), int(step)]
    print(json.dumps(out))
    """
)


@pytest.mark.multiprocess
@cloud_storage.skip_unless_available
class EmulatedCloudStorageTest(unittest.TestCase):
    def test_tensorflow_reaches_it_at_googles_names(self):
        try:
            gcs = cloud_storage.EmulatedCloudStorage(["worker-0"])
        except hosts_lib.NoHosts as refused:
            self.skipTest(f"this machine cannot emulate hosts: {refused}")
        self.addCleanup(gcs.close)
        program = gcs.run(
            "worker-0",
            [sys.executable, "-c", _PROGRAM],
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = program.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            program.kill()
            stdout, stderr = program.communicate()
        self.assertEqual(program.returncode, 0, f"{stderr[-4000:]}\n{gcs.log()[-4000:]}")
        self.assertEqual(
            json.loads(stdout.splitlines()[-1]),
            {
                "read": "second",
                "exists": [True, False],
                "isdir": [True, False],
                "size": 6,
                "blob_intact": True,
                "listdir": ["b.txt", "blob.bin", "empty/"],
                "glob": ["gs://bkt/run/data/b.txt"],
                "scratch_gone": True,
                "latest": "gs://bkt/run/ckpt/ckpt-3",
                "restored": [[4.0, 5.0], 3],
            },
        )
        self.assertEqual(
            gcs.objects("bkt", "run/"),
            [
                "run/",
                "run/ckpt/",
                "run/ckpt/checkpoint",
                "run/ckpt/ckpt-2.data-00000-of-00001",
                "run/ckpt/ckpt-2.index",
                "run/ckpt/ckpt-3.data-00000-of-00001",
                "run/ckpt/ckpt-3.index",
                "run/data/",
                "run/data/b.txt",
                "run/data/empty/",
            ],
        )
        self.assertNotIn("the emulator failed", gcs.log())
