"""Is a tf.data service dispatcher there? Pure Python, so a job can ask before TensorFlow starts.

TensorFlow's client waits for a dispatcher without a deadline, so a wrong address would hang
training silently; `check_dispatcher` bounds that wait.
"""

import socket
import time

from .choices import parse_service_address
from .messages import InputConfigError

DISPATCHER_WAIT_S = 20.0  # How long a dispatcher may take to accept a connection.
_RETRY_S = 1.0


def check_dispatcher(address: str, *, wait_s: float = DISPATCHER_WAIT_S) -> None:
    """Returns once something accepts TCP connections at the dispatcher `address`, trying every
    second for `wait_s` (a dispatcher may still be starting). The host lookup is not bounded.

    Raises:
      InputConfigError: `address` is malformed, or nothing answered within `wait_s`.
    """
    _, host_port = parse_service_address(address)
    host, _, port = host_port.rpartition(":")
    deadline = time.monotonic() + wait_s
    while True:
        reason = _connect_error(host.strip("[]"), int(port), deadline)
        remaining = deadline - time.monotonic()
        if reason is None:
            return
        if remaining <= 0:
            break
        time.sleep(min(_RETRY_S, remaining))
    raise InputConfigError(
        f"tf_data_service={address!r}: no dispatcher answered there within "
        f"{wait_s:g} s (last try: {reason}); start one with `tfdist data serve "
        f"--port={port}`, or fix the address."
    )


def _connect_error(host: str, port: int, deadline: float) -> str | None:
    """None when a TCP connection to host:port opens before `deadline`; else why not."""
    try:
        with socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.1)):
            return None
    except socket.gaierror:
        return f"host {host!r} does not resolve"
    except TimeoutError:
        return "timed out"
    except OSError as error:
        return (error.strerror or type(error).__name__).lower()
