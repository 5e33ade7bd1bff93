"""English-German pairs from Debian's gettext catalogues (headsize_tf.data.gettext_pairs)."""

import struct

import pytest

from headsize_tf.data import corpora
from headsize_tf.data.gettext_pairs import clean_pairs, fetch_gettext_pairs, read_mo
from headsize_tf.data.splits import split_of


def write_mo(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A little-endian GNU .mo file (the format msgfmt writes), entries sorted by key."""
    entries = sorted(entries)
    n = len(entries)
    originals, translations = 28, 28 + 8 * n
    data_start = 28 + 16 * n
    blob, table_o, table_t = b"", [], []
    for key, _ in entries:
        table_o.append((len(key), data_start + len(blob)))
        blob += key + b"\x00"
    for _, value in entries:
        table_t.append((len(value), data_start + len(blob)))
        blob += value + b"\x00"
    header = struct.pack("<7I", 0x950412DE, 0, n, originals, translations, 0, 0)
    tables = b"".join(struct.pack("<2I", *t) for t in table_o + table_t)
    return header + tables + blob


def test_read_mo_skips_the_header_and_keeps_singular_forms_without_context():
    mo = write_mo(
        [
            (b"", b"Content-Type: text/plain; charset=UTF-8\n"),
            (b"File not found", b"Datei nicht gefunden"),
            (b"menu\x04Open", b"\xc3\x96ffnen"),
            (b"%d file\x00%d files", b"%d Datei\x00%d Dateien"),
        ]
    )
    assert sorted(read_mo(mo)) == sorted(
        [("File not found", "Datei nicht gefunden"), ("Open", "Öffnen"), ("%d file", "%d Datei")]
    )
    with pytest.raises(ValueError, match="not a .mo file"):
        read_mo(b"\x00" * 40)


def test_clean_pairs():
    pairs = [
        ("Usage:\n  tar [OPTION]", "Aufruf:\n  tar [OPTION]"),
        ("OK", "OK"),
        ("x", "y"),
        ("Usage:  tar [OPTION]", "again"),
        ("Quit", ""),
        ("a" * 201, "b"),
    ]
    assert clean_pairs(pairs) == [("Usage: tar [OPTION]", "Aufruf: tar [OPTION]")]


def test_prepare_writes_tab_separated_splits_and_a_vocabulary(tmp_path):
    pairs = [
        (f"cannot open file number {i}", f"Datei Nummer {i} kann nicht geöffnet werden")
        for i in range(400)
    ]
    out = corpora.prepare("gettext_de", tmp_path, raw=pairs)
    stats = corpora.load_manifest("gettext_de", tmp_path)["stats"]
    assert stats["pairs"] == 400
    assert sum(s["pairs"] for s in stats["splits"].values()) == 400
    rows = {}
    for split in ("train", "dev", "test"):
        lines = (out / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
        assert len(lines) == stats["splits"][split]["pairs"]
        rows.update(dict(line.split("\t") for line in lines))
        for line in lines:
            assert split_of(line.split("\t")[0]) == split
    assert rows == dict(pairs)
    # One vocabulary for both sides (lower-cased, accents folded as BERT's tokenizer does).
    vocab = set((out / "vocab.txt").read_text(encoding="utf-8").split())
    assert {"cannot", "datei", "nummer"} <= vocab
    with pytest.raises(corpora.CorpusError, match="Only 1 usable sentence pairs"):
        corpora.prepare("gettext_de", tmp_path / "small", raw=[("Quit", "Beenden")])


def test_a_real_debian_catalogue(tmp_path):
    pairs = fetch_gettext_pairs(tmp_path, packages=("krb5-locales",))
    cleaned = clean_pairs(pairs)
    assert len(cleaned) > 500
    assert all(source and target and source != target for source, target in cleaned)
