"""A task's address, "host:port": what makes one valid, and which spellings name one endpoint.

Pure Python, like `cluster`, which checks TF_CONFIG's addresses with it and words the error.
"""

import ipaddress
import re
import socket
from typing import Any

from .messages import shown_json

_HOST_RE = re.compile(r"[A-Za-z0-9_.-]+")
_PORT_RE = re.compile(r"[0-9]+")
_ADDRESS_FIX = 'write addresses as "host:port", e.g. "localhost:2222"'
_THIS_MACHINE = "this machine"
_LOOPBACK_WHY = "both name this machine, and TensorFlow's servers listen on all its addresses"
_RESPELLED_WHY = "the same host and port spelled differently"


def address_problem(address: Any) -> tuple[str, str] | None:
    """What keeps `address` from being "host:port" with a valid host and a port in 1..65535,
    and the fix, for a one-line message; None when it is such an address."""
    if not isinstance(address, str):
        return f"{shown_json(address)} is not a string", _ADDRESS_FIX
    host, colon, port = address.rpartition(":")
    if not colon:
        return f"{shown_json(address)} is not host:port", _ADDRESS_FIX
    if not host:
        return f"{shown_json(address)} has an empty host", _ADDRESS_FIX
    if host.startswith("[") and host.endswith("]"):
        valid_host = is_ipv6(host[1:-1])
    elif is_ipv6(host):
        return (
            f"{shown_json(address)} has an IPv6 host without brackets",
            f'put IPv6 addresses in brackets, e.g. "[{host}]:{port}"',
        )
    else:
        valid_host = bool(_HOST_RE.fullmatch(host))
    if not valid_host:
        return (
            f"{shown_json(address)} has an invalid host {shown_json(host)}",
            "use a host name, an IPv4 address or a bracketed IPv6 address, e.g. "
            '"localhost:2222" or "[::1]:2222"',
        )
    if not _PORT_RE.fullmatch(port) or not 1 <= int(port) <= 65535:
        return (
            f"{shown_json(address)} has port {shown_json(port)}",
            'use an integer port from 1 to 65535, e.g. "localhost:2222"',
        )
    return None


def endpoint(address: str) -> tuple[str, int]:
    """A key equal for two spellings of one endpoint: loopback hosts ("localhost", 127.0.0.0/8,
    [::1]) are one machine, IP addresses compare by value, host names ignore case and a final
    dot, and ports compare as numbers ("02222" is 2222)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]").lower().rstrip(".")
    ip = _ip_address(host)
    if (
        host == "localhost"
        or host.endswith(".localhost")
        or (
            ip is not None
            and (ip.is_loopback or getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)
        )
    ):
        return _THIS_MACHINE, int(port)
    return (str(ip) if ip is not None else host), int(port)


def why_the_same(key: tuple[str, int]) -> str:
    """Why two different spellings whose `endpoint` is `key` name one endpoint."""
    return _LOOPBACK_WHY if key[0] == _THIS_MACHINE else _RESPELLED_WHY


def is_ipv6(host: str) -> bool:
    """Whether `host` is a bare IPv6 address such as "::1"."""
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def _ip_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`host` as an IP address, including the short IPv4 forms resolvers accept ("127.1")."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not re.fullmatch(r"[0-9a-fx.]+", host) or not re.search(r"[0-9]", host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None
