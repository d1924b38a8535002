"""Ports for tests that need nothing to answer, or something to listen, at an address: held by
the test for as long as it needs them. A port that is merely free when picked (portpicker) may be
taken before the code under test connects, by another test's server or Ray's workers, which bind
ports of the same ranges on a busy machine."""

import socket


def refusing_port(test, host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that refuses connections until `test` ends: bound, never listening,
    so no other process can take it (the kernel answers a connection with a reset)."""
    held = test.enterContext(socket.socket())
    held.bind((host, 0))
    return held.getsockname()[1]


def listening_port(test, host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that accepts connections until `test` ends."""
    return test.enterContext(socket.create_server((host, 0))).getsockname()[1]
