"""Kubernetes' own validation rules for what tfdist writes into a manifest and what a rehearsal
turns into paths, namespaces and hostnames: names (k8s.io/apimachinery's IsDNS1123Label,
IsDNS1123Subdomain, IsDNS1035Label), label keys and values, resource quantities, container image
references (the OCI distribution grammar) and mount paths. Each rule returns None for a valid
value, else what is wrong with it, in words that end a one-line error."""

from __future__ import annotations

import decimal
import posixpath
import re
from typing import Any

LABEL_MAX = 63  # A DNS label, a label value, a label key's name.
SUBDOMAIN_MAX = 253
IMAGE_NAME_MAX = 255  # The repository name of an image reference (distribution/reference).

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL)
_DNS1123_SUBDOMAIN_RE = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1035_LABEL_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")

# A quantity: sign, digits, then a binary (Ki..Ei), decimal (n, u, m, k, M..E) or exponent suffix.
_QUANTITY_RE = re.compile(
    r"\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]{1,3})?"
)
_QUANTITY_MAX_CHARS = 32
_BINARY = {f"{unit}i": 1024**power for power, unit in enumerate("KMGTPE", 1)}
_DECIMAL = {
    "n": decimal.Decimal("1e-9"),
    "u": decimal.Decimal("1e-6"),
    "m": decimal.Decimal("1e-3"),
    "k": decimal.Decimal(10) ** 3,
    **{unit: decimal.Decimal(10) ** (3 * power) for power, unit in enumerate("MGTPE", 2)},
}

# An image reference: [domain[:port]/]path[:tag][@digest] (github.com/distribution/reference).
_ALPHANUMERIC = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(([_.]|__|-+){_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"({_DOMAIN_COMPONENT}(\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(:[0-9]+)?"
_IMAGE_RE = re.compile(
    rf"(?P<name>({_DOMAIN}/)?{_PATH_COMPONENT}(/{_PATH_COMPONENT})*)"
    r"(:(?P<tag>[\w][\w.-]{0,127}))?"
    r"(@(?P<algorithm>[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*):(?P<hex>[0-9a-fA-F]{32,}))?",
    re.ASCII,
)
_DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}

# Where a volume mounted would hide what the container itself needs.
_SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
)
_SYSTEM_DIRECTORIES = ("/", "/home", "/root", "/tmp", "/var")


def dns1123_label(value: Any) -> str | None:
    """A DNS label (RFC 1123): most names, e.g. a container's, a volume's."""
    return _matching(
        value,
        _DNS1123_LABEL_RE,
        LABEL_MAX,
        "a DNS label (lowercase letters, "
        'digits and "-", starting and ending with a letter or digit)',
    )


def dns1035_label(value: Any) -> str | None:
    """A DNS label that starts with a letter (RFC 1035): a Service's name, so a JobSet's
    subdomain, its Jobs' and its pods' names."""
    return _matching(
        value,
        _DNS1035_LABEL_RE,
        LABEL_MAX,
        "a DNS-1035 label (lowercase "
        'letters, digits and "-", starting with a letter and ending with a letter '
        "or digit)",
    )


def dns1123_subdomain(value: Any) -> str | None:
    """A DNS subdomain (RFC 1123): an object's name, e.g. a PersistentVolumeClaim's."""
    return _matching(
        value,
        _DNS1123_SUBDOMAIN_RE,
        SUBDOMAIN_MAX,
        "a DNS subdomain (lowercase "
        'letters, digits, "-" and ".", starting and ending with a letter or digit)',
    )


def label_value(value: Any) -> str | None:
    return _matching(
        value,
        _LABEL_VALUE_RE,
        LABEL_MAX,
        'a label value (letters, digits, "-", '
        '"_" and ".", starting and ending with a letter or digit)',
    )


def label_key(value: Any) -> str | None:
    """`[prefix/]name`: the prefix a DNS subdomain, the name like a label value but not empty."""
    if not isinstance(value, str):
        return "is not a label key"
    prefix, slash, name = value.rpartition("/")
    if not name or label_value(name) or (slash and dns1123_subdomain(prefix)):
        return 'is not a label key ([prefix/]name, e.g. "cloud.google.com/gke-accelerator")'
    return None


def quantity(value: Any, *, least: str, most: str) -> str | None:
    """A resource quantity ("500m", "4", "16Gi", "1e3") from `least` to `most` (quantities)."""
    amount = quantity_value(value)
    if amount is None:
        return 'is not a Kubernetes quantity (e.g. "4", "500m", "16Gi")'
    if not quantity_value(least) <= amount <= quantity_value(most):
        return f"is outside {least} to {most}"
    return None


def quantity_value(value: Any) -> decimal.Decimal | None:
    """The amount a quantity stands for, or None if `value` is not one (checked before any
    conversion, so no text is too large to read)."""
    if not isinstance(value, str) or len(value) > _QUANTITY_MAX_CHARS:
        return None
    match = _QUANTITY_RE.fullmatch(value)
    if match is None:
        return None
    suffix = match.group("suffix") or ""
    number = decimal.Decimal(value[: len(value) - len(suffix)].lstrip("+"))
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number * _BINARY.get(suffix, _DECIMAL.get(suffix, 1))


def image_reference(value: Any) -> str | None:
    """A container image reference, e.g. "registry.example.com:5000/team/tfdist:0.1@sha256:..."."""
    match = _IMAGE_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return (
            "is not an image reference ([registry/]path[:tag][@digest], lowercase path, "
            'e.g. "registry.example.com/tfdist:0.1.0")'
        )
    if len(match.group("name")) > IMAGE_NAME_MAX:
        return f"has a name of {len(match.group('name'))} characters, more than {IMAGE_NAME_MAX}"
    algorithm = match.group("algorithm")
    if (
        algorithm in _DIGEST_HEX_LENGTHS
        and len(match.group("hex")) != _DIGEST_HEX_LENGTHS[algorithm]
    ):
        return f"has a {algorithm} digest that is not {_DIGEST_HEX_LENGTHS[algorithm]} hex digits"
    return None


def absolute_path(value: Any) -> str | None:
    """A path in a container: absolute, normalised, printable (a container's workingDir)."""
    if not isinstance(value, str) or not value.startswith("/"):
        return "is not an absolute path"
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        return "has a control character"
    normal = posixpath.normpath(value)
    if value != normal or value.startswith("//"):
        return f"is not a normalised path (write {'/' + normal.lstrip('/')!r})"
    return None


def mount_path(value: Any) -> str | None:
    """A volume's mount path: an `absolute_path` not over the directories a container itself
    needs."""
    if problem := absolute_path(value):
        return problem
    if value in _SYSTEM_DIRECTORIES or any(
        value == tree or value.startswith(tree + "/") for tree in _SYSTEM_TREES
    ):
        return "would hide the container's own files"
    return None


def _matching(value: Any, pattern: re.Pattern, most: int, what: str) -> str | None:
    """None when `value` is a string that `pattern` matches whole, of at most `most`
    characters; else which it is not."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        return f"is not {what}"
    return f"has {len(value)} characters, more than {most}" if len(value) > most else None
