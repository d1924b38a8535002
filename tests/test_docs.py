"""README, docs/ and the READMEs of examples/ and scripts/ as a reader follows them: every
relative link leads to a file (and its #anchor to a heading there), every path of this
repository a page names exists, and every `tfdist` command line in a shell block names a command
tfdist has and only flags that command takes. Flags are read from the commands' registry, so
nothing here imports TensorFlow or starts a process."""

import itertools
import pathlib
import re
import shlex

import pytest

from tfdist.commands import cli
from tfdist.commands import flags as flags_lib

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_PAGES = [
    _ROOT / "README.md",
    *[
        page
        for folder in ("docs", "examples", "scripts")
        for page in sorted((_ROOT / folder).glob("**/*.md"))
    ],
]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_SHELL_BLOCK = re.compile(r"^```(?:sh|bash)\n(.*?)^```", re.M | re.S)
# A path in this repository, as pages write it in text and code: a file (`scripts/planning/x.py`,
# `docs/results/batch_scaling.{md,json,png}`, braces as the shell expands them) or a folder
# written with its final slash (`scripts/gpu_machine/`); not `examples/s` or `tfdist/naive`.
_REPO_PATH = re.compile(
    r"(?<![\w/:.$-])((?:scripts|examples|tests|docs|tfdist|strategies|"
    r"input_pipelines|\.ci)/[\w./{},-]*(?:\.(?:py|sh|md|json|png|log|toml|cfg|"
    r"yaml)(?![\w.])|\.\{[\w,]+\}|/))"
)
# Paths pages name that are not this repository's files: Horovod's benchmark page (cited in
# docs/PLANNING.md) and a room docs/ARCHITECTURE.md says must not exist.
_NOT_OURS = {"docs/benchmarks.md", "tfdist/train/"}
# Flags every command takes: absl's help and flag files.
_EVERY_COMMAND = {"help", "helpfull", "helpshort", "flagfile"}
# Commands that take another command after `--`: a tfdist command or a program of yours.
_TAKES_A_COMMAND = cli.TAKES_A_COMMAND


def _anchors(page: pathlib.Path) -> set[str]:
    """The anchors GitHub gives `page`'s headings: lower case, punctuation dropped, spaces as -."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def _page_id(page: pathlib.Path) -> str:
    return str(page.relative_to(_ROOT))


@pytest.mark.parametrize("page", _PAGES, ids=_page_id)
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


def _expand_braces(path: str) -> list[str]:
    """`a{1,2}b` as the shell expands it: ["a1b", "a2b"]."""
    parts = re.split(r"\{([^{}]*)\}", path)
    choices = [[part] if i % 2 == 0 else part.split(",") for i, part in enumerate(parts)]
    return ["".join(chosen) for chosen in itertools.product(*choices)]


@pytest.mark.parametrize("page", _PAGES, ids=_page_id)
def test_every_path_a_page_names_exists(page):
    missing = sorted(
        {
            named
            for path in _REPO_PATH.findall(page.read_text(encoding="utf-8"))
            for named in _expand_braces(path.rstrip("."))
            if named not in _NOT_OURS and not (_ROOT / named).exists()
        }
    )
    assert missing == []


def _command_lines(page: pathlib.Path) -> list[str]:
    """Each command line of `page`'s shell blocks, continuation lines joined."""
    lines = []
    for block in _SHELL_BLOCK.findall(page.read_text(encoding="utf-8")):
        lines.extend(
            line.strip().removeprefix("$ ") for line in re.sub(r"\\\n\s*", " ", block).splitlines()
        )
    return lines


def _tfdist_invocations(line: str) -> list[tuple[str, list[str]]]:
    """Each `tfdist COMMAND ARGS` (or `python -m tfdist ...`) on `line`: (COMMAND, ARGS)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # An unbalanced quote: the line is prose, not a command.
        return []
    invocations = []
    segments = [
        list(group)
        for is_separator, group in itertools.groupby(
            words, lambda word: word in ("&&", "||", ";", "|")
        )
        if not is_separator
    ]
    for segment in segments:
        for start, word in enumerate(segment):
            if word == "tfdist" and (start == 0 or segment[start - 1] in ("sudo", "-m")):
                invocations.extend(_invocation(segment[start + 1 :]))
                break
    return invocations


def _invocation(args: list[str]) -> list[tuple[str, list[str]]]:
    """`args` after `tfdist`: its command and flags, and the tfdist command after `--` that
    launch and manifest take (a program's own flags, after `-- python ...`, are its own)."""
    if not args:
        return []
    command = " ".join(args[:2]) if args[0] in cli.GROUPS and len(args) > 1 else args[0]
    rest = args[len(command.split()) :]
    if command in _TAKES_A_COMMAND and "--" in rest:
        split = rest.index("--")
        return [(command, rest[:split]), *_invocation(rest[split + 1 :])]
    return [(command, rest)]


def _unknown_flags(command: str, args: list[str]) -> list[str]:
    taken = set(flags_lib.COMMAND_FLAGS[command]) | _EVERY_COMMAND
    unknown = []
    for name in re.findall(r"(?<![\w-])--([a-z][a-z0-9_]*)", " ".join(args)):
        negated = name[2:] if name.startswith("no") else None
        if name in taken or (negated in taken and flags_lib.FLAGS[negated].boolean):
            continue
        unknown.append(f"--{name}")
    return unknown


def _command_problems(page: pathlib.Path) -> list[str]:
    problems = []
    for line in _command_lines(page):
        for command, args in _tfdist_invocations(line):
            if command in ("python", "python3"):
                continue  # A program of yours under launch or manifest.
            if command not in cli.COMMANDS:
                problems.append(f"`tfdist {command}` is no command: {line}")
            elif unknown := _unknown_flags(command, args):
                problems.append(f"`tfdist {command}` takes no {', '.join(unknown)}: {line}")
    return problems


@pytest.mark.parametrize("page", _PAGES, ids=_page_id)
def test_every_tfdist_command_in_a_shell_block_parses(page):
    assert _command_problems(page) == []


def test_the_pages_name_every_command():
    named = {
        command
        for page in _PAGES
        for line in _command_lines(page)
        for command, _ in _tfdist_invocations(line)
    }
    assert set(cli.COMMANDS) <= named


def test_a_bogus_command_or_flag_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\n"
        "tfdist train --epochs=2 --bogus_flag=1 \\\n    --nomeasure_noise_scale\n"
        "tfdist launch --num_workers=2 -- train --gpus_per_task=8\n"
        "tfdist launch --num_workers=2 -- python my_train.py --whatever=1\n"
        "sudo tfdist rehearse --volume_dir=/tmp/v job.yaml  # a comment --not_a_flag\n"
        "python -m tfdist trian\n```\n",
        encoding="utf-8",
    )
    problems = _command_problems(page)
    assert len(problems) == 3, problems
    assert "takes no --bogus_flag" in problems[0]
    assert "`tfdist train` takes no --gpus_per_task" in problems[1]
    assert "`tfdist trian` is no command" in problems[2]


def test_every_result_is_listed_with_its_command():
    index = _ROOT / "docs" / "results" / "README.md"
    listed = {
        (index.parent / target).resolve()
        for target in _LINK.findall(index.read_text(encoding="utf-8"))
    }
    results = {path for path in index.parent.glob("**/*") if path.is_file() and path != index}
    assert sorted(str(path.relative_to(_ROOT)) for path in results - listed) == []
