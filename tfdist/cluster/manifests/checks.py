"""What every manifest checks and how it writes YAML: `ManifestError`, the argument checks, and
`to_yaml` through PyYAML's safe dumper."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from tfdist import strategies
from tfdist.cluster import ClusterError
from tfdist.cluster import kubernetes_rules

_PLAIN_RE = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")
_YAML_WORDS = frozenset(("y", "n", "yes", "no", "true", "false", "on", "off", "null"))
_MAX_SHOWN = 80


class ManifestError(ClusterError):
    """A manifest argument is invalid; the message is one line: argument, value, fix."""


def require(ok: bool, field: str, value: Any, fix: str, problem: str = "is invalid") -> None:
    """Raises the one-line `ManifestError` "<field>: <value> <problem>; <fix>." unless `ok`."""
    if not ok:
        shown = " ".join(repr(value).split())
        shown = shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 3] + "..."
        raise ManifestError(f"{field}: {shown} {problem}; {fix}.")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_layout(where: str, *, num_workers: int, num_ps: int, chief: bool) -> None:
    require(
        is_int(num_workers) and num_workers >= 1,
        f"{where} num_workers",
        num_workers,
        "pass at least 1 worker",
        problem="is not a count of 1 or more",
    )
    require(
        is_int(num_ps) and num_ps >= 0,
        f"{where} num_ps",
        num_ps,
        "pass 0 or more parameter servers",
        problem="is not a count of 0 or more",
    )
    require(
        isinstance(chief, bool),
        f"{where} chief",
        chief,
        "pass True or False",
        problem="is not a bool",
    )
    problem = strategies.ps_without_chief(num_ps, chief)
    require(not problem, f"{where} num_ps", num_ps, "add --chief", problem=f"means {problem}")


def follow(problem: str | None, field: str, value: Any, fix: str) -> None:
    """Raises the one-line `ManifestError` "<field>: <value> <problem>; <fix>." when a rule of
    `kubernetes_rules` found a `problem`."""
    require(problem is None, field, value, fix, problem=problem or "")


def check_k8s_name(field: str, name: Any) -> None:
    """A Kubernetes object name that is also a DNS label (RFC 1123)."""
    follow(
        kubernetes_rules.dns1123_label(name),
        field,
        name,
        f'use at most {kubernetes_rules.LABEL_MAX} lowercase letters, digits and "-", e.g. '
        '"tfdist-train"',
    )


def check_image(field: str, image: Any) -> None:
    follow(
        kubernetes_rules.image_reference(image),
        field,
        image,
        'pass a container image with tfdist installed, e.g. "registry.example.com/tfdist:0.1.0"',
    )


def check_choice(field: str, value: Any, choices: Sequence[str]) -> None:
    require(
        value in choices,
        field,
        value,
        f"use one of {', '.join(choices)}",
        problem="is not a choice",
    )


def check_port(field: str, port: Any) -> None:
    require(
        is_int(port) and 1 <= port <= 65535,
        field,
        port,
        "use an integer port from 1 to 65535",
        problem="is not a port",
    )


def check_args(where: str, train_args: Any, field: str = "train_args") -> list[str]:
    ok = (
        isinstance(train_args, Sequence)
        and not isinstance(train_args, str)
        and all(isinstance(arg, str) for arg in train_args)
    )
    require(
        ok,
        f"{where} {field}",
        train_args,
        'pass a list of strings, e.g. ["--strategy=multi_worker_mirrored"]',
        problem="is not a list of strings",
    )
    return list(train_args)


def flag_value(argv: Sequence[str], name: str) -> str | None:
    """The value argv gives the absl flag `name` (`--name=V` or `--name V`; the first), else
    None."""
    for index, word in enumerate(argv):
        flag, equals, value = word.lstrip("-").partition("=")
        if not word.startswith("-") or flag != name:
            continue
        if equals:
            return value
        return argv[index + 1] if index + 1 < len(argv) else None
    return None


# Nothing a manifest starts waits forever. A task waits this long for its peers to join and for
# each call of its step function (--collective_timeout_s), unless its command sets it: a peer's
# pod may still be pulling its image, or a peer's node still starting, when the first one starts.
COLLECTIVE_TIMEOUT_S = 600
COLLECTIVE_TIMEOUT_FLAG = "--collective_timeout_s"


def bounded(args: Sequence[str]) -> list[str]:
    """`args` with `--collective_timeout_s=COLLECTIVE_TIMEOUT_S` unless they set it."""
    if flag_value(args, COLLECTIVE_TIMEOUT_FLAG.lstrip("-")) is not None:
        return list(args)
    return [*args, f"{COLLECTIVE_TIMEOUT_FLAG}={COLLECTIVE_TIMEOUT_S}"]


def kubernetes_literal(word: str) -> str:
    """A command word that Kubernetes passes to the container as written: it expands `$(VAR)`
    in a container's command and args and turns `$$` into `$`, so every `$` is doubled."""
    return word.replace("$", "$$")


def describe_layout(*, num_workers: int, num_ps: int, chief: bool) -> str:
    parts = [("chief", int(chief)), ("ps", num_ps), ("worker", num_workers)]
    return ", ".join(f"{n} {job}" for job, n in parts if n)


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper with Kubernetes' layout: sequences indented under their key, and
    strings plain only when no YAML reader could take them for another type or for syntax."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)

    def ignore_aliases(self, data):
        return True  # Each pod's command and env written out, not as "*id001".


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    plain = bool(_PLAIN_RE.fullmatch(text)) and text.lower() not in _YAML_WORDS
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=None if plain else '"')


_Dumper.add_representer(str, _represent_str)


def to_yaml(value: Any) -> str:
    """`value` (dicts, lists, str, int, float, bool, None) as block-style YAML, keys in order,
    ASCII only (other characters escaped), one line per scalar."""
    return yaml.dump(
        value,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=False,
        width=float("inf"),
    )
