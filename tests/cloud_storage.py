"""An emulated Google Cloud Storage that TensorFlow reaches exactly as it reaches the real one:
`tf.io.gfile` and everything built on it (checkpoints, Keras callbacks, TensorBoard) on
`gs://bucket/...` paths, from programs run inside emulated hosts.

TensorFlow's GCS file system has Google's endpoints compiled in (https://www.googleapis.com/...
for the JSON and upload APIs, https://storage.googleapis.com for downloads). So the fixture makes
emulated hosts (`tfdist.cluster.rehearsal.hosts`) whose hosts files map those names to a host of
their own, "gcs", which runs `gcp-storage-emulator` behind TLS on port 443 with a certificate for
those names signed by a certificate authority made for the fixture (`openssl`). Clients trust
that authority through `CURL_CA_BUNDLE` and skip Google's auth and GCE checks with two more
variables (`EmulatedCloudStorage.env`).

The emulator's server runs in this module's `_serve`, in the storage host, with its data on disk
in the fixture's folder. gcp-storage-emulator 2026.7.19 needs mending before TensorFlow's client
works with it (`_mend_emulator`):
  - a body sent both chunked and with Content-Length (TensorFlow's upload PUTs) is read chunked,
    as HTTP/1.1 says: read by length, the object got the chunk header and lost its tail
    ("abcdef" was stored as "6", CRLF, "abc"), and TensorFlow, its upload cut short, retried
    for minutes;
  - an empty media upload (TensorFlow's directory markers, `dir/`) stores an empty object: it
    raised TypeError, and TensorFlow retried for minutes;
  - objects are kept on disk under a digest of their names: kept under their names, `dir/`
    (a file) and `dir/file` (under a folder) could not both exist, which also failed uploads;
  - `Expect: 100-continue` is answered (an HTTP/1.1 server; one request per connection still):
    TensorFlow's curl waited 1 s for it before every upload's body;
  - the URLs it hands out (a resumable upload's `Location`, `mediaLink`) are https, as GCS's are:
    they were http to the same name, port 80;
  - `ifGenerationMatch=0` on a media upload (TensorFlow's directory markers) answers 412 when
    the object exists, as GCS does: it was ignored;
  - requests are handled one at a time (its storage is not thread-safe) on a threaded server,
    so that a slow TLS handshake holds up no one else;
  - buckets hard-delete (no soft delete), so that deleted objects leave nothing behind;
  - an error in a handler answers 400 with the error, which TensorFlow raises at once (it
    retried a dropped connection for minutes), and is logged as "the emulator failed".
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from tfdist.cluster import PYTHON  # -P: tests/ is not put on sys.path, where tests/tfdist is.
from tfdist.cluster.rehearsal import hosts as hosts_lib

GOOGLE_NAMES = ("www.googleapis.com", "storage.googleapis.com")
STORAGE_HOST = "gcs"
TOKEN = "emulated-cloud-storage"  # Any token: TensorFlow sends it and skips Google's auth.
_READY = "ready"
_START_TIMEOUT_S = 60.0


def unavailable() -> str | None:
    """Why this machine cannot run an `EmulatedCloudStorage` (one line), or None if it can as
    far as can be told without making hosts (the namespaces may still be refused: `NoHosts`)."""
    if importlib.util.find_spec("gcp_storage_emulator") is None:
        return "gcp-storage-emulator is not installed (pip install -e .[test])"
    if shutil.which("openssl") is None:
        return "openssl is not on PATH"
    try:
        hosts_lib.require_tools()
    except hosts_lib.NoHosts as refused:
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
          RuntimeError: the emulator did not start (with its log's tail).
        """
        self.directory = tempfile.mkdtemp(prefix="tfdist-gcs-")
        self._made: hosts_lib.Hosts | None = None
        self._server: subprocess.Popen | None = None
        try:
            self._ca_file = _make_certificates(self.directory)
            self._made = hosts_lib.Hosts(
                [(STORAGE_HOST, *GOOGLE_NAMES), *((name,) for name in client_hosts)]
            )
            self.storage_host, *clients = self._made.hosts
            self.hosts = {host.hostname: host for host in clients}
            self._start(list(buckets))
        except BaseException:
            self.close()
            raise

    def _start(self, buckets: list[str]) -> None:
        config = {
            "data_dir": os.path.join(self.directory, "data"),
            "certificate": os.path.join(self.directory, "server.pem"),
            "key": os.path.join(self.directory, "server.key"),
            "buckets": buckets,
        }
        log_path = os.path.join(self.directory, "emulator.log")
        with open(log_path, "wb") as log:
            self._server = subprocess.Popen(  # pylint: disable=consider-using-with
                [*self.storage_host.enter(), *PYTHON, __file__, json.dumps(config)],
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Its own process group, killed as one.
            )
        server, ready = self._server, threading.Event()
        threading.Thread(
            target=lambda: ready.set() if server.stdout.readline() else None, daemon=True
        ).start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not ready.wait(0.05):
            if server.poll() is not None or time.monotonic() > deadline:
                log = self.log()[-4000:]
                raise RuntimeError(f"the Cloud Storage emulator did not start:\n{log}")

    def env(self) -> dict[str, str]:
        """What a TensorFlow program needs in its environment to use this Cloud Storage."""
        return {
            "CURL_CA_BUNDLE": self._ca_file,  # Trust the fixture's certificate authority.
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": TOKEN,  # No credentials looked for.
            "NO_GCE_CHECK": "true",  # No metadata server asked whether this is GCE.
        }

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
                self._ca_file,
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
        try:
            with open(os.path.join(self.directory, "emulator.log"), errors="replace") as log:
                return log.read()
        except OSError:
            return ""

    def close(self) -> None:
        """Stops the emulator, removes the hosts and the folder; later calls do nothing."""
        server, self._server = self._server, None
        made, self._made = self._made, None
        try:
            if server is not None:
                try:
                    os.killpg(server.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                server.wait(timeout=30)
                server.stdout.close()
        finally:
            if made is not None:
                made.close()  # Also kills what is left in the hosts.
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EmulatedCloudStorage:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


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


def _make_certificates(directory: str) -> str:
    """Writes a certificate authority (ca.pem) and a server certificate for Google's storage
    names signed by it (server.pem, server.key) into `directory`; returns ca.pem's path."""

    def openssl(*args: str) -> None:
        result = subprocess.run(
            ["openssl", *args], cwd=directory, capture_output=True, text=True, check=False
        )
        if result.returncode:
            raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")

    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl(
        "req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=tfdist emulated Cloud Storage CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    openssl(
        "req", "-x509", *key, "-keyout", "server.key", "-out", "server.pem", "-days", "2",
        "-CA", "ca.pem", "-CAkey", "ca.key", "-subj", f"/CN={GOOGLE_NAMES[0]}",
        "-addext", "subjectAltName=" + ",".join(f"DNS:{name}" for name in GOOGLE_NAMES),
        "-addext", "basicConstraints=critical,CA:FALSE",
        "-addext", "extendedKeyUsage=serverAuth",
    )  # fmt: skip
    return os.path.join(directory, "ca.pem")


# --- The emulator's server process, in the storage host. ---


def _mend_emulator() -> None:
    """Mends gcp-storage-emulator's faults that TensorFlow's client runs into (module doc)."""
    # pylint: disable=import-outside-toplevel,protected-access
    import hashlib
    import logging
    from http import HTTPStatus

    from gcp_storage_emulator import server
    from gcp_storage_emulator import storage
    from gcp_storage_emulator.handlers import objects

    read_raw_data = server._read_raw_data

    def read_chunked_first(handler):  # TensorFlow's PUTs carry both headers.
        if handler.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return read_raw_data(handler)
        body = bytearray()
        while size := int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16):
            body += handler.rfile.read(size)
            handler.rfile.readline()  # The CRLF after the chunk.
        while handler.rfile.readline().strip():  # Trailers, up to the empty line.
            pass
        return bytes(body)

    server._read_raw_data = read_chunked_first

    media_upload = objects._media_upload

    def media_upload_mended(request, response, store):
        if request.data is None:  # An empty body (read before answering, always).
            request._data = b""
        existing = store.objects.get(request.params["bucket_name"], {})
        if request.query.get("ifGenerationMatch") == ["0"] and request.query["name"][0] in existing:
            response.status = HTTPStatus.PRECONDITION_FAILED
            response.json({"error": {"code": 412, "message": "Precondition Failed"}})
            return None
        return media_upload(request, response, store)

    objects._media_upload = media_upload_mended

    def object_path(self, bucket_name, file_name):
        del self
        return f"{bucket_name}/{hashlib.sha256(file_name.encode()).hexdigest()}"

    storage.Storage._object_path = object_path

    request_init = server.Request.__init__

    def https_urls(self, handler, method):  # It serves TLS only.
        request_init(self, handler, method)
        self._base_url = self._base_url.replace("http://", "https://", 1)
        self._full_url = self._base_url + self._path

    server.Request.__init__ = https_urls

    handle = server.Router.handle
    one_at_a_time = threading.Lock()

    def handle_one_at_a_time(self, method):
        with one_at_a_time:
            try:
                handle(self, method)
            except Exception as error:  # pylint: disable=broad-except
                logging.exception("the emulator failed on %s", self._request_handler.path)
                self._request_handler.send_error(
                    HTTPStatus.BAD_REQUEST, f"the emulator failed: {error!r} (emulator.log)"
                )

    server.Router.handle = handle_one_at_a_time


def _serve(config: dict) -> None:
    """Runs the mended emulator with TLS on port 443, its data on disk in `config["data_dir"]`,
    `config["buckets"]` made; prints a line once it serves. Logs a line per request."""
    # pylint: disable=import-outside-toplevel
    import functools
    import logging
    import ssl
    from http.server import ThreadingHTTPServer

    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)9.0f ms %(message)s")
    _mend_emulator()
    from gcp_storage_emulator import server
    from gcp_storage_emulator.handlers import buckets

    store = server.Storage(data_dir=config["data_dir"])
    for name in config["buckets"]:
        bucket = buckets.create_bucket(name, store)
        bucket["softDeletePolicy"] = {"retentionDurationSeconds": "0"}  # Deletes hard-delete.
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config["certificate"], config["key"])

    class Handler(server.RequestHandler):
        protocol_version = "HTTP/1.1"  # Answers Expect: 100-continue, which HTTP/1.0 does not.

        def end_headers(self):
            self.send_header("Connection", "close")  # One request per connection, as before.
            super().end_headers()

    class TlsServer(ThreadingHTTPServer):
        daemon_threads = True

        def finish_request(self, request, client_address):
            try:  # The handshake, in the request's own thread.
                request = context.wrap_socket(request, server_side=True)
            except OSError:
                return
            try:
                super().finish_request(request, client_address)
            finally:
                request.close()

    https = TlsServer(("", 443), functools.partial(Handler, store))
    print(_READY, flush=True)
    https.serve_forever()


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
