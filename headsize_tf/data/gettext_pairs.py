"""English-German sentence pairs from Debian's gettext catalogues (real parallel text).

No translation corpus downloads here (TFDS's wmt14 needs the internet), but
Debian packages ship their programs' messages translated by people: each
`usr/share/locale/de/LC_MESSAGES/*.mo` maps an English message to its German
translation. `GETTEXT_PACKAGES` (about 20k pairs of short technical prose:
program messages, option help, error texts) are fetched with `apt-get
download`, their catalogues read, the pairs cleaned and split by a hash of the
English text into `train.tsv`, `dev.tsv` and `test.tsv` (source<TAB>target, the
layout the translation task reads with `input_path`), with a WordPiece
vocabulary learnt on both sides of the training pairs.
"""

from __future__ import annotations

import pathlib
import re
import struct
from collections.abc import Iterable, Sequence

from headsize_tf.data._debian import download_deb, extract_deb
from headsize_tf.data.cache import CorpusError
from headsize_tf.data.splits import split_of
from headsize_tf.data.vocab import build_wordpiece_vocab

GETTEXT_PACKAGES = (
    "git",
    "coreutils",
    "gnupg-l10n",
    "krb5-locales",
    "libc-l10n",
    "dpkg",
    "libglib2.0-data",
    "procps",
    "tar",
    "wget",
    "bash",
    "diffutils",
    "findutils",
    "grep",
    "sed",
    "gettext",
    "login",
)
MAX_CHARS = 200


def read_mo(data: bytes) -> list[tuple[str, str]]:
    """(message, translation) pairs of a GNU .mo catalogue (singular forms, no header).

    Raises:
      ValueError: not a .mo file.
    """
    if len(data) < 20:
        raise ValueError("not a .mo file (too short)")
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if order is None:
        raise ValueError("not a .mo file (bad magic number)")
    _, count, originals, translations = struct.unpack(order + "4I", data[4:20])
    pairs = []
    for i in range(count):
        length, offset = struct.unpack(
            order + "2I", data[originals + 8 * i : originals + 8 * i + 8]
        )
        source = data[offset : offset + length]
        length, offset = struct.unpack(
            order + "2I", data[translations + 8 * i : translations + 8 * i + 8]
        )
        target = data[offset : offset + length]
        if not source:  # The header.
            continue
        source = source.split(b"\x04")[-1].split(b"\x00")[0]  # Drop context, plural forms.
        target = target.split(b"\x00")[0]
        try:
            pairs.append((source.decode("utf-8"), target.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return pairs


_SPACE = re.compile(r"\s+")


def clean_pairs(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """One line each, untranslated and overlong messages dropped, unique English sides."""
    seen: set[str] = set()
    out = []
    for source, target in pairs:
        source = _SPACE.sub(" ", source).strip()
        target = _SPACE.sub(" ", target).strip()
        if len(source) < 2 or not target or source == target or len(source) > MAX_CHARS:
            continue
        if source in seen:
            continue
        seen.add(source)
        out.append((source, target))
    return out


def fetch_gettext_pairs(
    workdir: pathlib.Path, language: str = "de", packages: Sequence[str] = GETTEXT_PACKAGES
) -> list[tuple[str, str]]:
    """Downloads `packages` (apt-get download) and returns their (English, `language`) pairs."""
    pairs: list[tuple[str, str]] = []
    for package in packages:
        extract = extract_deb(download_deb(package, workdir), workdir / "extract" / package)
        for mo in sorted(extract.glob(f"usr/share/locale/{language}/LC_MESSAGES/*.mo")):
            pairs += read_mo(mo.read_bytes())
    return pairs


def prepare_gettext_from_pairs(
    pairs: Sequence[tuple[str, str]], out_dir: pathlib.Path, options
) -> dict:
    """Writes {train,dev,test}.tsv and vocab.txt; returns the corpus statistics."""
    cleaned = clean_pairs(pairs)
    if len(cleaned) < 100:
        raise CorpusError(f"Only {len(cleaned)} usable sentence pairs; expected thousands.")
    splits: dict[str, list[tuple[str, str]]] = {"train": [], "dev": [], "test": []}
    for source, target in cleaned:
        splits[split_of(source)].append((source, target))
    for name, rows in splits.items():
        text = "".join(f"{source}\t{target}\n" for source, target in rows)
        (out_dir / f"{name}.tsv").write_text(text, encoding="utf-8")
    sides = [text for pair in splits["train"] for text in pair]
    vocab = build_wordpiece_vocab(sides, options.vocab_size)
    (out_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return {
        "vocab_size": len(vocab),
        "pairs": len(cleaned),
        "splits": {
            name: {
                "pairs": len(rows),
                "source_words": sum(len(s.split()) for s, _ in rows),
                "target_words": sum(len(t.split()) for _, t in rows),
            }
            for name, rows in splits.items()
        },
    }
