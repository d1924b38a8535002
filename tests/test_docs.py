"""README and docs/ as a reader follows them: every relative link leads to a file (and its
#anchor to a heading there), and every `tfdist` command in a shell block is one tfdist has."""

import pathlib
import re

import pytest

from tfdist.commands import cli

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_PAGES = [_ROOT / "README.md", *sorted((_ROOT / "docs").glob("**/*.md"))]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_SHELL_BLOCK = re.compile(r"^```(?:sh|bash)\n(.*?)^```", re.M | re.S)
_COMMAND = re.compile(r"(?:^|&&|\|\||;|sudo )\s*tfdist ((?:data )?[a-z]+)")


def _anchors(page: pathlib.Path) -> set[str]:
    """The anchors GitHub gives `page`'s headings: lower case, punctuation dropped, spaces as -."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", _PAGES, ids=lambda page: str(page.relative_to(_ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no {linked.relative_to(_ROOT)}")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(_ROOT)}")
    assert broken == []


def test_every_command_in_a_shell_block_is_tfdists():
    named = set()
    for page in _PAGES:
        for block in _SHELL_BLOCK.findall(page.read_text(encoding="utf-8")):
            for line in block.splitlines():
                named.update((page.name, command) for command in _COMMAND.findall(line))
    assert len(named) > 5
    assert [(page, command) for page, command in sorted(named)
            if command not in cli.COMMANDS] == []
