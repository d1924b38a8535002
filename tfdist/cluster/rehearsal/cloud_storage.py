"""An emulated Google Cloud Storage that TensorFlow reaches exactly as it reaches the real one:
`tf.io.gfile` and everything built on it (checkpoints, Keras callbacks, TensorBoard) on
`gs://bucket/...` paths, from programs on emulated hosts, which have no route out.

TensorFlow's GCS file system has Google's endpoints compiled in (https://www.googleapis.com/...
for the JSON and upload APIs, https://storage.googleapis.com for downloads). So the storage is
an emulated host (`hosts`) known by those names (`NAMES`) in every host's hosts file, which
runs `gcp-storage-emulator` behind TLS on port 443 with a certificate for those names signed by
a certificate authority made for it (`openssl`). Clients trust that authority through
`CURL_CA_BUNDLE` and skip Google's auth and GCE checks with two more variables
(`CloudStorage.env`). `tfdist rehearse` serves the buckets its pods name so (`jobset_run`).

The emulator's server runs in `serve`, on the storage host, with its data on disk. Version
2026.7.19 needs mending before TensorFlow's client works with it (`_mend_emulator`):
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
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable

from tfdist.cluster import PYTHON
from tfdist.cluster import RehearsalError
from tfdist.cluster.rehearsal import hosts as hosts_lib

GOOGLE_NAMES = ("www.googleapis.com", "storage.googleapis.com")
# The storage host's names: a hostname no pod has (a pod's ends in -<job>-<pod index>), then
# Google's.
NAMES = ("gcs", *GOOGLE_NAMES)
TOKEN = "emulated-cloud-storage"  # Any token: TensorFlow sends it and skips Google's auth.
LOG = "emulator.log"
_BUCKET_RE = re.compile(r"gs://([a-z0-9][a-z0-9._-]*[a-z0-9])")
# Run as `python -P` (PYTHON): the working directory is not on the server's sys.path, so no
# module there shadows ours or the emulator's.
_SERVE = "import sys; from tfdist.cluster.rehearsal import cloud_storage; cloud_storage.serve()"
_READY = "ready"
_START_TIMEOUT_S = 60.0


def buckets_in(words: Iterable[str]) -> tuple[str, ...]:
    """The buckets that `gs://BUCKET/...` URLs in `words` name, sorted, each once."""
    return tuple(sorted({bucket for word in words for bucket in _BUCKET_RE.findall(word)}))


def require() -> None:
    """Raises RehearsalError, in one line, unless this machine can serve a `CloudStorage`
    (emulated hosts aside: `hosts.require_tools`)."""
    if importlib.util.find_spec("gcp_storage_emulator") is None:
        missing, fix = "gcp-storage-emulator (not installed)", "pip install -e '.[rehearse]'"
    elif shutil.which("openssl") is None:
        missing, fix = "openssl (not on PATH)", "apt install openssl"
    else:
        return
    raise RehearsalError(
        f"gs:// paths are served by an emulated Cloud Storage, which needs {missing}; install "
        f"it: {fix}."
    )


class CloudStorage:
    """Cloud Storage served on an emulated host known by `NAMES` in its peers' hosts files.

    A context manager; leaving it (also on failure) stops the emulator. What it made in
    `directory` stays: the certificates, `ca.pem` (the authority clients trust), `data/` (the
    buckets, in the emulator's layout; a later `CloudStorage` on it serves them as left) and
    `LOG`.
    """

    def __init__(
        self,
        host: hosts_lib.Host,
        directory: str,
        buckets: Iterable[str],
        *,
        checkpoint: Callable[[], None] | None = None,
    ):
        """Starts the emulator on `host` with `buckets` (made where missing), calling
        `checkpoint` while it waits, which may raise to stop (the emulator is stopped).

        Raises:
          RehearsalError: openssl failed, or the emulator did not start (its log's last line).
        """
        self.directory = directory
        self._server: subprocess.Popen | None = None
        os.makedirs(directory, exist_ok=True)
        try:
            self._ca_file = _make_certificates(directory)
            self._start(host, list(buckets), checkpoint or (lambda: None))
        except BaseException:
            self.close()
            raise

    def _start(self, host: hosts_lib.Host, buckets: list[str], checkpoint) -> None:
        config = {
            "data_dir": os.path.join(self.directory, "data"),
            "certificate": os.path.join(self.directory, "server.pem"),
            "key": os.path.join(self.directory, "server.key"),
            "buckets": buckets,
        }
        with open(os.path.join(self.directory, LOG), "ab") as log:
            self._server = subprocess.Popen(  # pylint: disable=consider-using-with
                [*host.enter(), *PYTHON, "-c", _SERVE, json.dumps(config)],
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
            checkpoint()
            if server.poll() is not None or time.monotonic() > deadline:
                last = (self.log().strip().splitlines() or ["nothing"])[-1]
                raise RehearsalError(
                    f"the emulated Cloud Storage did not start within {_START_TIMEOUT_S:g} s "
                    f"(its last line: {last}); see {os.path.join(self.directory, LOG)}."
                )

    def env(self) -> dict[str, str]:
        """What a TensorFlow program needs in its environment to use this Cloud Storage."""
        return {
            "CURL_CA_BUNDLE": self._ca_file,  # Trust the emulator's certificate authority.
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": TOKEN,  # No credentials looked for.
            "NO_GCE_CHECK": "true",  # No metadata server asked whether this is GCE.
        }

    def log(self) -> str:
        """The emulator's log: a line per request, and its errors ("the emulator failed")."""
        try:
            with open(os.path.join(self.directory, LOG), errors="replace") as log:
                return log.read()
        except OSError:
            return ""

    def close(self) -> None:
        """Stops the emulator; later calls do nothing."""
        server, self._server = self._server, None
        if server is None:
            return
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.wait(timeout=30)
        server.stdout.close()

    def __enter__(self) -> CloudStorage:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _make_certificates(directory: str) -> str:
    """Writes a certificate authority (ca.pem) and a server certificate for Google's storage
    names signed by it (server.pem, server.key) into `directory`; returns ca.pem's path."""

    def openssl(*args: str) -> None:
        result = subprocess.run(
            ["openssl", *args], cwd=directory, capture_output=True, text=True, check=False
        )
        if result.returncode:
            raise RehearsalError(
                f"openssl {args[0]} failed ({' '.join(result.stderr.split())}); an emulated "
                "Cloud Storage needs OpenSSL 3 or later."
            )

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


def serve() -> None:
    """The emulator's server, on the storage host: runs the mended emulator with TLS on port
    443 as the JSON of argv[1] says (`CloudStorage._start`), its data on disk in `data_dir`,
    `buckets` made where missing; prints a line once it serves. Logs a line per request."""
    # pylint: disable=import-outside-toplevel
    import functools
    import logging
    import ssl
    from http.server import ThreadingHTTPServer

    config = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)9.0f ms %(message)s")
    _mend_emulator()
    from gcp_storage_emulator import server
    from gcp_storage_emulator.handlers import buckets

    store = server.Storage(data_dir=config["data_dir"])
    for name in config["buckets"]:
        bucket = buckets.create_bucket(name, store) or store.get_bucket(name)
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
