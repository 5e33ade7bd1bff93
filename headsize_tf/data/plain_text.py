"""Held-out English plain text (raw lines, untokenised) from Debian packages, cached.

Text for measuring a pretrained decoder's perplexity with its own tokenizer
(a Llama-family `DecoderLM`'s byte-level BPE): framework-neutral (numpy and
the standard library; no TensorFlow), so the Keras 3 front can use it on a
JAX-only install. The texts (`PLAIN_TEXTS`):

* `austen`: Jane Austen's six novels from Debian's `r-cran-janeaustenr`
  (public domain), parts by `corpora.AUSTEN_BOOKS`: `train` (Sense and
  Sensibility, Pride and Prejudice, Mansfield Park, Emma), `valid`
  (Northanger Abbey; 6,659 lines, 77,141 words), `test` (Persuasion; 7,210
  lines, 83,283 words; 114,827 tokens of SmolLM2's BPE).
* `moby_dick`: Herman Melville's Moby Dick from Debian's `r-cran-tokenizers`
  (dataset `mobydick`, Project Gutenberg etext #2701; the novel is public
  domain; Gutenberg's header, licence and footer are cut off): one part, `all`
  (18,563 lines, 212,103 words; 314,338 tokens of SmolLM2's BPE).
* `python_docs`: Python 3.11's documentation sources (reStructuredText) from
  Debian's `python3.11-doc` (PSF License): the `*.rst.txt` files of four
  directories of `_sources/`, each a part: `faq`, `howto`, `reference`,
  `tutorial` (26,911 words; the four 162,294). Files in sorted order, one
  paragraph a line (its lines stripped and joined by spaces). Directive lines,
  comments, code, doctest and literal blocks, index entries, tables, titles'
  adornments and files' metadata fields (":author:") are dropped; inline
  markup (``:func:`len```) is kept. The package's version is not pinned
  (Debian ships security revisions), so the text can change a little with it.

Each text is fetched once, all its parts together, into
`DATA_DIR/plain/<name>/<part>.txt` (one line of text a line, blank lines
dropped, lines otherwise as they are: no lower-casing) with a `MANIFEST.json`
(SHA-256, line and word counts of every file, the source, the licence and the
.deb files read), written to a temporary directory renamed into place. A part
whose file is missing or differs from the manifest is fetched again.

`token_windows` cuts lines into `[n, window]` token ids with any tokenizer
function.

Example:

>>> import tokenizers
>>> tok = tokenizers.Tokenizer.from_file("tokenizer.json")
>>> lines = plain_text("austen", "test")
>>> ids = token_windows(
...     lines, lambda t: tok.encode(t, add_special_tokens=False).ids, 1025, start_token_id=1
... )
>>> ids.shape  # (windows, 1025): the start token, then 1024 text tokens.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import pathlib
import re
import tempfile
import warnings
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from headsize_tf.core.io import atomic_directory, write_json
from headsize_tf.data._debian import download_deb, extract_deb
from headsize_tf.data.cache import CorpusError, default_data_dir

MANIFEST_FORMAT = 1  # Raise when the files' layout changes: older caches are fetched again.


@dataclasses.dataclass(frozen=True)
class PlainText:
    """One registered text.

    Attributes:
      source: Where it comes from (for manifests and reports).
      license: The text's licence.
      parts: The names of its parts (`plain_text`'s `part`).
      fetch: `fetch(workdir) -> {part: lines}`; downloads into `workdir`.
    """

    source: str
    license: str
    parts: tuple[str, ...]
    fetch: Callable[[pathlib.Path], Mapping[str, Sequence[str]]]


# ------------------------------------------------------------------ fetching
def _read_rdata(rdx: pathlib.Path) -> dict[str, object]:
    """The objects of an R lazy-load database (`Rdata.rdx` and `Rdata.rdb`), by name."""
    import rdata

    with warnings.catch_warnings():  # rdata: "Unknown file type: assumed RDS".
        warnings.simplefilter("ignore", UserWarning)
        index = rdata.conversion.convert(rdata.parser.parse_data(gzip.decompress(rdx.read_bytes())))
        blob = rdx.with_suffix(".rdb").read_bytes()
        objects = {}
        for name, (offset, length) in index["variables"].items():
            chunk = blob[int(offset) : int(offset) + int(length)]
            parsed = rdata.parser.parse_data(zlib.decompress(chunk[4:]))
            objects[str(name)] = rdata.conversion.convert(parsed)
    return objects


def fetch_austen(workdir: pathlib.Path) -> dict[str, list[str]]:
    """Jane Austen's novels by `corpora.AUSTEN_BOOKS`' split: `{split: lines}`.

    Args:
      workdir: Where `r-cran-janeaustenr` is downloaded and unpacked.
    """
    from headsize_tf.data.corpora import AUSTEN_BOOKS, fetch_austen_books

    books = fetch_austen_books(workdir)
    missing = [b for names in AUSTEN_BOOKS.values() for b in names if b not in books]
    if missing:
        raise CorpusError(f"The janeaustenr data lacks the books {missing}.")
    return {
        split: [line for book in names for line in books[book]]
        for split, names in AUSTEN_BOOKS.items()
    }


def gutenberg_body(text: str) -> list[str]:
    """The lines of a Project Gutenberg etext between its START and END markers.

    The producers' credit ("Produced by ...") first and the "End of Project
    Gutenberg's ..." line last are dropped too.

    Args:
      text: The whole etext.

    Returns:
      Its lines (blank ones included).
    """
    lines = text.lstrip("\ufeff").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("*** START OF")), None)
    end = next((i for i, line in enumerate(lines) if line.startswith("*** END OF")), None)
    if start is None or end is None or end < start:
        raise CorpusError("The etext has no '*** START OF' and '*** END OF' Gutenberg markers.")
    body = lines[start + 1 : end]
    filled = [i for i, line in enumerate(body) if line.strip()]
    if filled and body[filled[0]].startswith("Produced by"):
        body[filled[0]] = ""
    if filled and re.match(r"End of (the )?Project Gutenberg", body[filled[-1]]):
        body[filled[-1]] = ""
    return body


def fetch_moby_dick(workdir: pathlib.Path) -> dict[str, list[str]]:
    """Moby Dick (dataset `mobydick` of `r-cran-tokenizers`): `{"all": lines}`.

    Args:
      workdir: Where `r-cran-tokenizers` is downloaded and unpacked.
    """
    deb = download_deb("r-cran-tokenizers", workdir)
    extract = extract_deb(deb, workdir / "extract")
    rdx = next(extract.rglob("tokenizers/data/Rdata.rdx"), None)
    if rdx is None:
        raise CorpusError(f"{deb} has no tokenizers/data/Rdata.rdx.")
    objects = _read_rdata(rdx)
    if "mobydick" not in objects:
        raise CorpusError(f"{deb} has no dataset 'mobydick'; it has {sorted(objects)}.")
    text = "\n".join(str(s) for s in np.ravel(objects["mobydick"]))
    return {"all": gutenberg_body(text)}


# Directives whose whole body is dropped (code, grammar, indexes, tables, tables of contents).
_SKIPPED_DIRECTIVES = frozenset(
    """code code-block sourcecode literalinclude doctest testcode testsetup testcleanup
    testoutput productionlist index toctree highlight csv-table list-table table image figure
    raw only include tabularcolumns contents sectionauthor moduleauthor module currentmodule
    highlightlang audit-event opcode2 grammar-snippet""".split()
)
# Directives whose argument is text (".. note:: Text"): it starts the body's first paragraph.
_ADMONITIONS = frozenset(
    "note warning seealso tip important caution attention hint danger error impl-detail".split()
)
_DIRECTIVE = re.compile(r"\.\.\s+([\w:-]+)::(.*)$")
_RULE = re.compile(r"[=\-~^\"'`#*+_:.<>| ]+")
_DOCINFO = re.compile(
    r":(tocdepth|orphan|nosearch|author|contact|release|date|version|copyright|status):",
    re.IGNORECASE,
)


def rst_paragraphs(text: str) -> list[str]:
    """The prose paragraphs of a reStructuredText source, one string each.

    Each paragraph's lines are stripped and joined by spaces. Comments,
    targets and the bodies of `_SKIPPED_DIRECTIVES` (code, index, toctree...)
    are dropped; other directives (note, function, versionchanged...) lose
    their own line and options and keep their body. Literal blocks (after
    "::"), doctest blocks, titles' adornments and tables' rules are dropped;
    a paragraph's closing "::" becomes ":". Grid tables' rows and the file's
    metadata fields (":author:", ":tocdepth:"...) are dropped too.

    Args:
      text: The source.

    Returns:
      The paragraphs, in order.
    """
    paragraphs: list[str] = []
    block: list[str] = []
    block_indent = 0
    skip_deeper: int | None = None  # Lines indented deeper than this are skipped.
    in_options = False  # Directly after a kept directive's own line: ":option:" lines.

    def flush() -> None:
        nonlocal block, skip_deeper
        if block:
            paragraph = " ".join(block)
            if paragraph.endswith("::"):
                skip_deeper = block_indent  # A literal block follows.
                paragraph = paragraph[:-2].rstrip()
                paragraph = paragraph + ":" if paragraph else ""
            if paragraph and not paragraph.startswith(">>>"):
                paragraphs.append(paragraph)
        block = []

    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            flush()
            in_options = False
            continue
        indent = len(line) - len(line.lstrip())
        if skip_deeper is not None:
            if indent > skip_deeper:
                continue
            skip_deeper = None
        if in_options and re.match(r":[\w-]+:", stripped):
            continue
        in_options = False
        if stripped.startswith(".."):
            flush()
            directive = _DIRECTIVE.match(stripped)
            if directive is None or directive.group(1) in _SKIPPED_DIRECTIVES:
                skip_deeper = indent  # A comment, target, substitution or skipped directive.
                continue
            in_options = True
            if directive.group(1) in _ADMONITIONS and directive.group(2).strip():
                block, block_indent = [directive.group(2).strip()], indent
            continue
        if len(stripped.replace(" ", "")) >= 3 and _RULE.fullmatch(stripped):
            flush()  # A title's adornment or a table's rule.
            continue
        if _DOCINFO.match(stripped) or (stripped[0] == stripped[-1] == "|" and len(stripped) > 1):
            continue  # The file's metadata (":author: ...") or a grid table's row.
        if not block:
            block_indent = indent
        block.append(stripped)
    flush()
    return paragraphs


PYTHON_DOCS_PARTS = ("faq", "howto", "reference", "tutorial")


def fetch_python_docs(workdir: pathlib.Path) -> dict[str, list[str]]:
    """Python 3.11's reST documentation (`python3.11-doc`): `{directory: paragraphs}`.

    Args:
      workdir: Where `python3.11-doc` is downloaded and unpacked.
    """
    deb = download_deb("python3.11-doc", workdir)
    extract = extract_deb(deb, workdir / "extract")
    sources = extract / "usr/share/doc/python3.11/html/_sources"
    parts = {}
    for part in PYTHON_DOCS_PARTS:
        files = sorted((sources / part).rglob("*.rst.txt"), key=lambda p: p.as_posix())
        if not files:
            raise CorpusError(f"{deb} has no {sources.relative_to(extract)}/{part}/*.rst.txt.")
        parts[part] = [
            paragraph
            for path in files
            for paragraph in rst_paragraphs(path.read_text(encoding="utf-8"))
        ]
    return parts


PLAIN_TEXTS: dict[str, PlainText] = {
    "austen": PlainText(
        "Debian package r-cran-janeaustenr: Jane Austen's six novels, split by "
        "corpora.AUSTEN_BOOKS",
        "public domain",
        ("train", "valid", "test"),
        fetch_austen,
    ),
    "moby_dick": PlainText(
        "Debian package r-cran-tokenizers: dataset mobydick, Herman Melville's Moby Dick "
        "(Project Gutenberg etext #2701 without Gutenberg's header and licence)",
        "public domain",
        ("all",),
        fetch_moby_dick,
    ),
    "python_docs": PlainText(
        "Debian package python3.11-doc: _sources/{faq,howto,reference,tutorial}/**/*.rst.txt, "
        "sorted, one prose paragraph a line",
        "PSF License",
        PYTHON_DOCS_PARTS,
        fetch_python_docs,
    ),
}


# ------------------------------------------------------------------- caching
def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _clean_lines(lines: Iterable[str]) -> list[str]:
    """Non-blank lines, each split at any line break it holds."""
    return [line for text in lines for line in str(text).splitlines() if line.strip()]


def _text_entry(name: str) -> PlainText:
    if name not in PLAIN_TEXTS:
        raise CorpusError(f"Unknown plain text {name!r}; expected one of {sorted(PLAIN_TEXTS)}.")
    return PLAIN_TEXTS[name]


def _read_cached(root: pathlib.Path, name: str, part: str) -> list[str] | None:
    """The lines of `part` if the cache under `root` holds it intact, else None."""
    try:
        manifest = json.loads((root / "MANIFEST.json").read_text())
        info = manifest["files"][f"{part}.txt"]
        if manifest.get("format") != MANIFEST_FORMAT or manifest.get("name") != name:
            return None
        path = root / f"{part}.txt"
        if path.stat().st_size != info["bytes"] or _sha256(path) != info["sha256"]:
            return None
        return path.read_text(encoding="utf-8").split("\n")[:-1]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(
    root: pathlib.Path,
    name: str,
    parts: Mapping[str, Sequence[str]],
    downloads: Sequence[str],
) -> None:
    entry = PLAIN_TEXTS[name]
    if sorted(parts) != sorted(entry.parts):
        raise CorpusError(
            f"Fetching plain text {name!r} gave the parts {sorted(parts)}, not {list(entry.parts)}."
        )
    files = {}
    with atomic_directory(root) as tmp:
        for part in entry.parts:
            lines = _clean_lines(parts[part])
            if not lines:
                raise CorpusError(f"Fetching plain text {name!r} gave no text for part {part!r}.")
            path = tmp / f"{part}.txt"
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write("\n".join(lines) + "\n")
            files[path.name] = {
                "bytes": path.stat().st_size,
                "sha256": _sha256(path),
                "lines": len(lines),
                "words": sum(len(line.split()) for line in lines),
            }
        write_json(
            tmp / "MANIFEST.json",
            {
                "format": MANIFEST_FORMAT,
                "name": name,
                "source": entry.source,
                "license": entry.license,
                "downloads": list(downloads),
                "files": files,
            },
        )


def plain_text(
    name: str,
    part: str,
    data_dir: str | os.PathLike | None = None,
    *,
    raw: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """The lines of one part of a registered text, fetched and cached on first use.

    All parts of `name` are fetched together into `DATA_DIR/plain/<name>/`
    (atomically, with a `MANIFEST.json`); a later call reads the cache, and a
    part whose file is missing or corrupt is fetched again.

    Args:
      name: A text of `PLAIN_TEXTS` ("austen", "moby_dick", "python_docs").
      part: One of its parts (`PLAIN_TEXTS[name].parts`, e.g. "test", "all").
      data_dir: The cache root (default: `data.cache.default_data_dir()`).
      raw: `{part: lines}` to cache instead of downloading (tests, or text
        fetched elsewhere); ignored when the cache is intact already.

    Returns:
      The part's non-blank lines, as they are (no lower-casing).

    Raises:
      CorpusError: Unknown `name` or `part`, or the fetch failed.

    Example:

    >>> lines = plain_text("moby_dick", "all")
    >>> lines[0]
    """
    entry = _text_entry(name)
    if part not in entry.parts:
        raise CorpusError(
            f"Plain text {name!r} has no part {part!r}; expected one of {list(entry.parts)}."
        )
    root = pathlib.Path(data_dir or default_data_dir()) / "plain" / name
    lines = _read_cached(root, name, part)
    if lines is not None:
        return lines
    downloads: list[str] = []
    if raw is None:
        root.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{name}.download-", dir=root.parent) as work:
            workdir = pathlib.Path(work)
            raw = entry.fetch(workdir)
            downloads = sorted(p.name for p in workdir.glob("*.deb"))
    try:
        _write_cache(root, name, raw, downloads)
    except OSError:  # Another process wrote the cache meanwhile: use its copy if intact.
        lines = _read_cached(root, name, part)
        if lines is None:
            raise
        return lines
    lines = _read_cached(root, name, part)
    if lines is None:
        raise CorpusError(f"The cache {root} of plain text {name!r} did not read back intact.")
    return lines


# ------------------------------------------------------------------- windows
def _positive(name: str, value: int | None, minimum: int) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum
    ):
        raise CorpusError(f"{name}={value!r} must be an integer >= {minimum}.")


def token_windows(
    lines: Sequence[str],
    tokenize: Callable[[str], Sequence[int]],
    window: int,
    start_token_id: int | None = None,
    max_windows: int | None = None,
    stride: int | None = None,
) -> np.ndarray:
    """`lines` tokenised as one text and cut into windows of `window` ids.

    The lines are joined with "\\n" and tokenised once. With `start_token_id`
    each window is that id followed by the next `window - 1` text tokens
    (a decoder's BOS, as it saw text in training); without, `window` text
    tokens. Windows start every `stride` text tokens (default: one window's
    text tokens, so they neither overlap nor skip); the last partial window
    is dropped.

    Args:
      lines: Text lines (e.g. `plain_text(...)`).
      tokenize: `tokenize(text) -> ids` (ints), without special tokens, e.g.
        `lambda t: tokenizer.encode(t, add_special_tokens=False).ids`.
      window: Ids per window (an LM scoring n positions: n + 1).
      start_token_id: An id put before each window's text tokens, or None.
      max_windows: Keep the first `max_windows` windows (default: all).
      stride: Text tokens from one window's start to the next's (default: the
        text tokens per window).

    Returns:
      int32 `[windows, window]`.

    Raises:
      CorpusError: A bad argument, or a text too short for one window.

    Example:

    >>> words = lambda text: [ord(w) for w in text.split()]
    >>> token_windows(["a b c", "d e f g"], words, 4, start_token_id=0).tolist()
    [[0, 97, 98, 99], [0, 100, 101, 102]]
    """
    _positive("window", window, 2 if start_token_id is not None else 1)
    _positive("max_windows", max_windows, 1)
    _positive("stride", stride, 1)
    text_tokens = window - 1 if start_token_id is not None else window
    stride = stride or text_tokens
    ids = np.asarray(tokenize("\n".join(lines)))
    if ids.size == 0:
        ids = ids.astype(np.int64)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise CorpusError(
            f"tokenize returned {ids.dtype} ids of shape {ids.shape}; "
            "expected a 1-D integer sequence."
        )
    if ids.size and (ids.min() < np.iinfo(np.int32).min or ids.max() > np.iinfo(np.int32).max):
        raise CorpusError(f"tokenize returned ids up to {ids.max()}, beyond int32.")
    if len(ids) < text_tokens:
        raise CorpusError(
            f"The text has {len(ids)} tokens; one window of {window} ids needs {text_tokens} "
            "(expected a longer text, or a shorter sequence length)."
        )
    rows = np.lib.stride_tricks.sliding_window_view(ids, text_tokens)[::stride][:max_windows]
    rows = rows.astype(np.int32)
    if start_token_id is not None:
        rows = np.concatenate([np.full([len(rows), 1], start_token_id, np.int32), rows], axis=1)
    return np.ascontiguousarray(rows)


__all__ = [
    "PLAIN_TEXTS",
    "PYTHON_DOCS_PARTS",
    "PlainText",
    "fetch_austen",
    "fetch_moby_dick",
    "fetch_python_docs",
    "gutenberg_body",
    "plain_text",
    "rst_paragraphs",
    "token_windows",
]
