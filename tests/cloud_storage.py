"""The emulated Cloud Storage (`tfdist.cluster.rehearsal.cloud_storage`) on hosts of its own for
tests: client hosts that reach it at Google's names, as `tfdist rehearse`'s pods do, and the
objects it holds, listed live or from the data a rehearsal kept."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from tfdist.cluster import PYTHON
from tfdist.cluster import RehearsalError
from tfdist.cluster.rehearsal import cloud_storage
from tfdist.cluster.rehearsal import hosts as hosts_lib


def unavailable() -> str | None:
    """Why this machine cannot run an `EmulatedCloudStorage` (one line), or None if it can as
    far as can be told without making hosts (the namespaces may still be refused: `NoHosts`)."""
    try:
        cloud_storage.require()
        hosts_lib.require_tools()
    except (RehearsalError, hosts_lib.NoHosts) as refused:
        return str(refused)
    return None


def skip_unless_available(test):
    """Skips a test (function or class) on a machine that cannot emulate Cloud Storage."""
    reason = unavailable()
    return unittest.skipIf(reason is not None, f"no emulated Cloud Storage: {reason}")(test)


class EmulatedCloudStorage:
    """Cloud Storage on an emulated host, and client hosts that reach it at Google's names.

    A context manager; leaving it (also on failure) stops the emulator and removes the hosts and
    the temporary folder that holds the certificates and the emulator's data.

    Attributes:
      hosts: the client hosts by hostname.
      storage_host: the host that serves Cloud Storage.
      directory: the temporary folder (certificates, `data/`, `emulator.log`).
    """

    def __init__(self, client_hosts: list[str], buckets: tuple[str, ...] = ("bkt",)):
        """Makes `client_hosts` and the storage host with `buckets`, and starts the emulator.

        Raises:
          NoHosts: this machine cannot emulate hosts.
          RehearsalError: the emulator did not start.
        """
        self.directory = tempfile.mkdtemp(prefix="tfdist-gcs-")
        self._made: hosts_lib.Hosts | None = None
        self._storage: cloud_storage.CloudStorage | None = None
        try:
            self._made = hosts_lib.Hosts([cloud_storage.NAMES, *((name,) for name in client_hosts)])
            self.storage_host, *clients = self._made.hosts
            self.hosts = {host.hostname: host for host in clients}
            self._storage = cloud_storage.CloudStorage(self.storage_host, self.directory, buckets)
        except BaseException:
            self.close()
            raise

    def env(self) -> dict[str, str]:
        """What a TensorFlow program needs in its environment to use this Cloud Storage."""
        return self._storage.env()

    def run(self, host: str, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        """Starts `argv` on client host `host` with `env()` over its environment (`env=` of
        `popen_kwargs`, else this process's)."""
        env = {**popen_kwargs.pop("env", os.environ), **self.env()}
        return subprocess.Popen(  # pylint: disable=consider-using-with
            [*self.hosts[host].enter(), *argv], env=env, **popen_kwargs
        )

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        """The names of the objects in `bucket` under `prefix`, sorted, listed through the
        JSON API from inside the storage host."""
        result = subprocess.run(
            [
                *self.storage_host.enter(),
                *PYTHON,
                "-c",
                _LIST,
                self.env()["CURL_CA_BUNDLE"],
                bucket,
                prefix,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode:
            raise RuntimeError(f"listing gs://{bucket}/{prefix} failed: {result.stderr}")
        return json.loads(result.stdout)

    def log(self) -> str:
        """The emulator's log: a line per request, and its errors ("the emulator failed")."""
        return self._storage.log()

    def close(self) -> None:
        """Stops the emulator, removes the hosts and the folder; later calls do nothing."""
        storage, self._storage = self._storage, None
        made, self._made = self._made, None
        try:
            if storage is not None:
                storage.close()
        finally:
            if made is not None:
                made.close()  # Also kills what is left in the hosts.
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EmulatedCloudStorage:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def kept_objects(directory: str, bucket: str, prefix: str = "") -> list[str]:
    """The names of the objects in `bucket` under `prefix`, sorted, as a stopped
    `CloudStorage`'s `directory` keeps them (the emulator's own index of its data)."""
    from gcp_storage_emulator import settings  # pylint: disable=import-outside-toplevel

    with open(os.path.join(directory, "data", settings.STORAGE_DIR, ".meta"), "rb") as meta:
        names = json.load(meta)["objects"].get(bucket, {})
    return sorted(name for name in names if name.startswith(prefix))


_LIST = """
import json, ssl, sys, urllib.parse, urllib.request
ca_file, bucket, prefix = sys.argv[1:]
context = ssl.create_default_context(cafile=ca_file)
names, token = [], ""
while True:
    query = urllib.parse.urlencode({"prefix": prefix, "pageToken": token})
    url = f"https://www.googleapis.com/storage/v1/b/{bucket}/o?{query}"
    with urllib.request.urlopen(url, context=context, timeout=30) as answer:
        listing = json.load(answer)
    names += [item["name"] for item in listing.get("items", [])]
    token = listing.get("nextPageToken")
    if not token:
        break
print(json.dumps(sorted(names)))
"""
