"""The README's and docs/*.md's code blocks run, or are marked and checked.

Rules (docs/index.md, "Code blocks in these pages"):

* every fence names its language: python, bash, yaml or text;
* a python block runs as written (offline, in seconds, in a temporary
  directory) unless the line before its fence is `<!-- not run: REASON -->`
  with REASON one of install, network, long, gpu; a marked block is compiled;
* a bash block without that mark must hold only `headsize-tf` commands, which
  run in-process; a marked one passes `bash -n`, and its `headsize-tf`
  commands parse with `headsize_tf.cli.build_parser()`;
* `headsize-tf` commands in inline code name a subcommand and flags that exist;
* a yaml block parses, and its `attention:` block is a valid `AttentionSpec`;
* every relative link (and its #anchor) points to something that exists.

The README's own python blocks run in `tests/readme_test.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import pathlib
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
LANGUAGES = {"python", "bash", "yaml", "text"}
REASONS = ("install", "network", "long", "gpu")
_MARK = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->$")
_FENCE = re.compile(r"^```(.*)$")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_INLINE_COMMAND = re.compile(r"`([^`]*\bheadsize-tf\s[^`]*)`")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown page."""

    page: pathlib.Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    mark: str | None  # The reason of a `<!-- not run: ... -->` comment, if any.

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def code_blocks(page: pathlib.Path) -> list[Block]:
    """The fenced blocks of `page`, in order, with their `not run` marks."""
    lines = page.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            i += 1
        assert i < len(lines), f"{page.name}:{start + 1}: the code block is never closed"
        before = [line for line in lines[:start] if line.strip()]
        mark = _MARK.match(before[-1].strip()) if before else None
        blocks.append(
            Block(
                page=page,
                line=start + 1,
                language=fence.group(1).strip(),
                code="\n".join(lines[start + 1 : i]) + "\n",
                mark=mark.group(1) if mark else None,
            )
        )
        i += 1
    return blocks


def _all_blocks() -> list[Block]:
    return [block for page in PAGES for block in code_blocks(page)]


BLOCKS = _all_blocks()


def _select(language: str, marked: bool, pages=None) -> list:
    chosen = [
        b
        for b in BLOCKS
        if b.language == language and (b.mark is not None) == marked and b.page in (pages or PAGES)
    ]
    return [pytest.param(b, id=b.name) for b in chosen]


# --- `headsize-tf` command lines --------------------------------------------------------


def shell_commands(code: str) -> list[list[str]]:
    """The words of each simple command in a shell snippet (continuations joined)."""
    text = code.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in words:
            if word in ("&&", "||", ";", "|"):
                commands.append(current)
                current = []
            else:
                current.append(word)
        commands.append(current)
    return [c for c in commands if c]


def headsize_argv(words: list[str]) -> list[str] | None:
    """The arguments after `headsize-tf` (any path to it), or None for another program."""
    for i, word in enumerate(words):
        if pathlib.PurePosixPath(word).name == "headsize-tf":
            return words[i + 1 :]
        if "=" not in word:  # Not an environment assignment: another program.
            return None
    return None


def _parser() -> argparse.ArgumentParser:
    from headsize_tf.cli import build_parser

    return build_parser()


def _subcommands(parser: argparse.ArgumentParser) -> dict | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return None


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {name: a for a in parser._actions for name in a.option_strings}


def check_flags(argv: list[str], inline: bool = False) -> list[str]:
    """Problems of `headsize-tf ARGV`: unknown subcommands and flags (walks the parser).

    `inline` (a fragment in running text): a subcommand written in capitals
    (`COMMAND`) stops the walk, and no subcommand is needed (`headsize-tf --help`).
    """
    parser, path, problems = _parser(), ["headsize-tf"], []
    subcommands, chosen, i = _subcommands(parser), False, 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            action = _options(parser).get(name)
            if action is None:
                problems.append(f"`{' '.join(path)}` has no option {name}")
                continue
            if "=" in word or action.nargs == 0:
                continue
            if action.nargs in ("+", "*"):
                while i < len(argv) and not argv[i].startswith("-"):
                    i += 1
            else:
                i += action.nargs if isinstance(action.nargs, int) else 1
        elif subcommands is not None:
            if inline and word.isupper():
                return problems
            if word not in subcommands:
                problems.append(f"`{' '.join(path)}` has no subcommand {word!r}")
                return problems
            parser, chosen = subcommands[word], True
            path.append(word)
            subcommands = _subcommands(parser)
    if not chosen and not inline:
        problems.append("no subcommand")
    return problems


def parse_error(argv: list[str]) -> str | None:
    """argparse's complaint about `headsize-tf ARGV` (choices, values, required), or None."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            _parser().parse_args(argv)
    except SystemExit as err:
        if err.code:
            return stderr.getvalue().strip() or f"exit {err.code}"
    return None


def test_check_flags_finds_unknown_names():
    assert check_flags(["train", "--experiment", "x", "--model_dir", "d"]) == []
    assert check_flags(["data", "vocab", "--features", "en", "de", "--output", "v"]) == []
    assert check_flags(["train", "--no-such-flag"]) == [
        "`headsize-tf train` has no option --no-such-flag"
    ]
    assert check_flags(["trian"]) == ["`headsize-tf` has no subcommand 'trian'"]
    assert check_flags(["data", "prepar", "austen"]) == [
        "`headsize-tf data` has no subcommand 'prepar'"
    ]
    assert check_flags(["COMMAND", "--help"], inline=True) == []
    assert check_flags(["--help"], inline=True) == []
    assert check_flags(["--verbose"]) == ["no subcommand"]
    assert headsize_argv(["KERAS_BACKEND=jax", ".venv/bin/headsize-tf", "embed"]) == ["embed"]
    assert headsize_argv(["saved_model_cli", "show"]) is None
    assert parse_error(["train", "--experiment", "x", "--model_dir", "d", "--strategy", "gpu"])


# --- Every block is a known language and marked where it does not run ------------------


def test_pages_and_blocks_found():
    assert README in PAGES and len(PAGES) > 5, PAGES
    assert any(b.language == "python" and b.mark is None and b.page != README for b in BLOCKS)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.name) for b in BLOCKS])
def test_fence_language_and_mark(block: Block):
    assert block.language in LANGUAGES, f"{block.name}: fence language {block.language!r}"
    if block.mark is not None:
        assert block.mark.startswith(REASONS), (
            f"{block.name}: `not run: {block.mark}` must start with one of {REASONS}"
        )
        assert block.language in ("python", "bash"), f"{block.name}: only code is marked"


@pytest.mark.parametrize("block", _select("python", marked=True) + _select("python", marked=False))
def test_python_block_compiles(block: Block):
    compile(block.code, block.name, "exec")


# --- Python blocks run ------------------------------------------------------------------


@pytest.mark.parametrize("block", _select("python", marked=False, pages=PAGES[1:]))
def test_python_block_runs(block: Block, tmp_path, monkeypatch):
    import tensorflow as tf

    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(block.code, block.name, "exec"), namespace)  # noqa: S102
    finally:
        tf.random.set_seed(None)  # A block's global seed must not hide a later test's missing one.


# --- Shell blocks -----------------------------------------------------------------------


@pytest.mark.parametrize("block", _select("bash", marked=True) + _select("bash", marked=False))
def test_bash_block_syntax_and_flags(block: Block):
    bash = shutil.which("bash")
    if bash:
        result = subprocess.run([bash, "-n"], input=block.code, capture_output=True, text=True)
        assert result.returncode == 0, f"{block.name}: {result.stderr}"
    for words in shell_commands(block.code):
        argv = headsize_argv(words)
        if argv is None:
            continue
        assert check_flags(argv) == [], f"{block.name}: {' '.join(words)}"
        assert parse_error(argv) is None, f"{block.name}: {parse_error(argv)}"


@pytest.mark.parametrize("block", _select("bash", marked=False))
def test_unmarked_bash_block_runs(block: Block, tmp_path, monkeypatch):
    from headsize_tf.cli import main

    monkeypatch.chdir(tmp_path)
    for words in shell_commands(block.code):
        argv = headsize_argv(words)
        assert argv is not None, f"{block.name}: {words[0]} runs only when marked `not run`"
        assert main(argv) == 0, f"{block.name}: {' '.join(words)}"


@pytest.mark.parametrize("page", [pytest.param(p, id=p.name) for p in PAGES])
def test_inline_commands_name_real_flags(page: pathlib.Path):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    spans = [" ".join(m.group(1).split()) for m in _INLINE_COMMAND.finditer(text)]
    problems = []
    for span in spans:
        argv = headsize_argv(shlex.split(span.split(":", 1)[0]))
        if argv is not None:
            problems += [f"`{span}`: {p}" for p in check_flags(argv, inline=True)]
    assert problems == []


# --- YAML -------------------------------------------------------------------------------


@pytest.mark.parametrize("block", _select("yaml", marked=False))
def test_yaml_block_parses(block: Block):
    from headsize_tf.core import AttentionSpec

    data = yaml.safe_load(block.code)
    if isinstance(data, dict) and "attention" in data:
        AttentionSpec.coerce(data["attention"])


# --- Links ------------------------------------------------------------------------------


def _anchors(page: pathlib.Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    anchors = set()
    for heading in re.findall(r"^#+\s+(.*)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("page", [pytest.param(p, id=p.name) for p in PAGES])
def test_relative_links_exist(page: pathlib.Path):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(target)
    assert broken == []


def test_every_docs_page_is_linked_from_the_index_and_the_readme():
    index, readme = (DOCS / "index.md").read_text(), README.read_text()
    for page in DOCS.glob("*.md"):
        if page.name != "index.md":
            assert f"]({page.name}" in index, f"docs/index.md does not link {page.name}"
            assert f"](docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"


# --- The docs describe the project, not its history -------------------------------------

# Words of a development diary (work rounds, how a machine was obtained, sessions) in the
# README, docs/ and results/, and work-round numbers in code comments.
_HISTORY = re.compile(r"\bstop [0-9]+\b|\blent\b|\blease\b|\bsessions? (of|so far)", re.I)
_HISTORY_COMMENT = re.compile(r"#.*\bstop [0-9]+")
# The project's own issue numbers (its tracker is not shipped with it).
_ISSUE_NUMBER = re.compile(r"\bissues? #?[0-9]+\b", re.I)
TESTING_PAGE_MAX_LINES = 110


def _text_lines(*roots: pathlib.Path):
    """(path, line number, line) of every text file under `roots` (binary files skipped)."""
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in paths:
            data = path.read_bytes()
            if b"\0" in data:
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                yield path, number, line


def _history_hits(pattern: re.Pattern, *roots: pathlib.Path, skip=()) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path, number, line in _text_lines(*roots)
        if path not in skip and pattern.search(line)
    ]


def test_history_patterns():
    assert _HISTORY.search("measured at Stop " + "43 on two cores")
    assert _HISTORY.search("the one GPU " + "lent so far")
    assert _HISTORY.search("no GPU in this project's " + "sessions so far")
    assert not _HISTORY.search("standard heads stop at 83.2%; a lenticular lens; release")
    assert _HISTORY_COMMENT.search("x = 1  " + "# (CI, stop " + "27)")
    assert not _HISTORY_COMMENT.search("stop" + " 27 outside a comment")
    assert _ISSUE_NUMBER.search("per-layer heads (" + "issue 14, item 4)")
    assert not _ISSUE_NUMBER.search("see the issue tracker")


def test_docs_and_results_describe_the_project_not_its_history():
    hits = _history_hits(_HISTORY, README, DOCS, ROOT / "results")
    assert hits == [], "\n".join(hits)


def test_code_comments_name_no_work_rounds():
    hits = _history_hits(
        _HISTORY_COMMENT,
        ROOT / "headsize_tf",
        ROOT / "tests",
        skip={pathlib.Path(__file__).resolve()},
    )
    assert hits == [], "\n".join(hits)


def test_code_docs_and_results_cite_no_issue_numbers():
    roots = [ROOT / n for n in ("headsize_tf", "tests", "docs", "benchmarks", "colab")]
    hits = _history_hits(_ISSUE_NUMBER, README, *roots, skip={pathlib.Path(__file__).resolve()})
    assert hits == [], "\n".join(hits)


def test_testing_page_is_a_reference():
    lines = (DOCS / "testing.md").read_text().splitlines()
    assert len(lines) <= TESTING_PAGE_MAX_LINES, f"docs/testing.md: {len(lines)} lines"
