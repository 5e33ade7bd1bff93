"""Plain-text corpora: caching, atomic writes, errors, token windows (no network)."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from headsize_tf.data import plain_text as pt
from headsize_tf.data.cache import CorpusError

AUSTEN = {
    "train": ["It is a truth universally acknowledged,", "", "that a single man"],
    "valid": ["CHAPTER 1", "   ", "No one who had ever seen Catherine Morland"],
    "test": ["Sir Walter Elliot, of Kellynch Hall,", "", "never took up any book"],
}


@pytest.fixture
def counting_fetch(monkeypatch):
    """Replaces austen's fetch by one that returns AUSTEN and counts its calls."""
    calls = []

    def fetch(workdir):
        calls.append(workdir)
        assert workdir.is_dir()
        return AUSTEN

    entry = dataclasses.replace(pt.PLAIN_TEXTS["austen"], fetch=fetch)
    monkeypatch.setitem(pt.PLAIN_TEXTS, "austen", entry)
    return calls


def test_fetches_once_then_reads_the_cache(tmp_path, counting_fetch):
    lines = pt.plain_text("austen", "test", tmp_path)
    assert lines == ["Sir Walter Elliot, of Kellynch Hall,", "never took up any book"]
    assert pt.plain_text("austen", "valid", tmp_path) == [
        "CHAPTER 1",
        "No one who had ever seen Catherine Morland",
    ]
    assert pt.plain_text("austen", "test", tmp_path) == lines
    assert len(counting_fetch) == 1
    root = tmp_path / "plain" / "austen"
    assert sorted(p.name for p in root.iterdir()) == [
        "MANIFEST.json",
        "test.txt",
        "train.txt",
        "valid.txt",
    ]
    assert [p.name for p in (tmp_path / "plain").iterdir()] == ["austen"]  # No temporaries.
    manifest = json.loads((root / "MANIFEST.json").read_text())
    assert manifest["files"]["train.txt"]["lines"] == 2
    assert manifest["files"]["train.txt"]["words"] == 10
    assert manifest["license"] == "public domain"
    assert (root / "test.txt").read_text() == "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "damage",
    [
        lambda root: (root / "test.txt").write_text("Sir Walter Elliot\n"),
        lambda root: (root / "test.txt").unlink(),
        lambda root: (root / "MANIFEST.json").write_text("{not json"),
    ],
    ids=["corrupt", "missing", "bad-manifest"],
)
def test_a_broken_cache_is_fetched_again(tmp_path, counting_fetch, damage):
    lines = pt.plain_text("austen", "test", tmp_path)
    damage(tmp_path / "plain" / "austen")
    assert pt.plain_text("austen", "test", tmp_path) == lines
    assert len(counting_fetch) == 2


def test_raw_text_is_cached_as_given(tmp_path):
    raw = {"all": ["Call me Ishmael. ", "", "Some years ago\u2028never mind how long"]}
    lines = pt.plain_text("moby_dick", "all", tmp_path, raw=raw)
    assert lines == ["Call me Ishmael. ", "Some years ago", "never mind how long"]
    # Intact: read back without fetching, whatever raw says.
    assert pt.plain_text("moby_dick", "all", tmp_path, raw={"all": ["other"]}) == lines


def test_a_failed_fetch_leaves_the_old_cache(tmp_path, monkeypatch):
    pt.plain_text("moby_dick", "all", tmp_path, raw={"all": ["Call me Ishmael."]})
    root = tmp_path / "plain" / "moby_dick"
    (root / "all.txt").write_text("damaged\n")

    def fail(workdir):
        (workdir / "partial.deb").write_text("half")
        raise CorpusError("Could not download the Debian package r-cran-tokenizers.")

    entry = dataclasses.replace(pt.PLAIN_TEXTS["moby_dick"], fetch=fail)
    monkeypatch.setitem(pt.PLAIN_TEXTS, "moby_dick", entry)
    with pytest.raises(CorpusError, match="r-cran-tokenizers"):
        pt.plain_text("moby_dick", "all", tmp_path)
    assert [p.name for p in (tmp_path / "plain").iterdir()] == ["moby_dick"]
    assert (root / "all.txt").read_text() == "damaged\n"


def test_wrong_or_empty_parts_write_nothing(tmp_path):
    with pytest.raises(CorpusError, match=r"gave the parts \['test'\], not \['train', 'valid'"):
        pt.plain_text("austen", "test", tmp_path, raw={"test": ["x"]})
    with pytest.raises(CorpusError, match="gave no text for part 'valid'"):
        pt.plain_text("austen", "test", tmp_path, raw={**AUSTEN, "valid": ["", " "]})
    assert list((tmp_path / "plain").iterdir()) == []


def test_unknown_name_or_part(tmp_path):
    with pytest.raises(CorpusError, match=r"Unknown plain text 'wiki'; expected one of \['austen'"):
        pt.plain_text("wiki", "test", tmp_path)
    with pytest.raises(
        CorpusError,
        match=r"'austen' has no part 'dev'; expected one of \['train', 'valid', 'test'\]",
    ):
        pt.plain_text("austen", "dev", tmp_path)
    assert not (tmp_path / "plain").exists()


def _words(text):
    """A fake tokenizer: one id a whitespace-separated word (its number)."""
    return [int(word) for word in text.split()]


LINES = ["0 1 2 3", "4 5 6", "7 8 9 10"]  # 11 tokens.


def test_token_windows_with_a_start_token():
    ids = pt.token_windows(LINES, _words, 4, start_token_id=99)
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, [[99, 0, 1, 2], [99, 3, 4, 5], [99, 6, 7, 8]])
    np.testing.assert_array_equal(
        pt.token_windows(LINES, _words, 4, start_token_id=99, max_windows=2), ids[:2]
    )


def test_token_windows_without_a_start_token_and_with_a_stride():
    np.testing.assert_array_equal(
        pt.token_windows(LINES, _words, 5), [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    )
    np.testing.assert_array_equal(
        pt.token_windows(LINES, _words, 4, stride=3, max_windows=3),
        [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]],
    )
    np.testing.assert_array_equal(pt.token_windows(LINES, _words, 11), [list(range(11))])


def test_token_windows_tokenizes_the_joined_text_once():
    texts = []

    def tokenize(text):
        texts.append(text)
        return np.arange(len(text.split()), dtype=np.int64)

    pt.token_windows(LINES, tokenize, 3)
    assert texts == ["0 1 2 3\n4 5 6\n7 8 9 10"]


def test_token_windows_errors():
    with pytest.raises(CorpusError, match="has 11 tokens; one window of 13 ids needs 12"):
        pt.token_windows(LINES, _words, 13, start_token_id=0)
    with pytest.raises(CorpusError, match="has 0 tokens"):
        pt.token_windows([], _words, 2)
    with pytest.raises(CorpusError, match=r"window=1 must be an integer >= 2"):
        pt.token_windows(LINES, _words, 1, start_token_id=0)
    with pytest.raises(CorpusError, match=r"stride=0 must be"):
        pt.token_windows(LINES, _words, 4, stride=0)
    with pytest.raises(CorpusError, match=r"max_windows=0 must be"):
        pt.token_windows(LINES, _words, 4, max_windows=0)
    with pytest.raises(CorpusError, match="tokenize returned float64 ids"):
        pt.token_windows(LINES, lambda text: [0.5, 1.5], 1)


def test_gutenberg_body():
    text = (
        "\ufeffThe Project Gutenberg EBook of Moby Dick\r\n\r\n*** START OF THIS EBOOK ***\r\n"
        "\r\nProduced by Someone\r\n\r\nCall me Ishmael.\r\n\r\nEnd of Project Gutenberg's "
        "Moby Dick\r\n*** END OF THIS EBOOK ***\r\nlicence\r\n"
    )
    body = pt.gutenberg_body(text)
    assert [line for line in body if line] == ["Call me Ishmael."]
    with pytest.raises(CorpusError, match="no '\\*\\*\\* START OF'"):
        pt.gutenberg_body("no markers")


def test_rst_paragraphs():
    source = """\
.. _tut-if:

:tocdepth: 2

*************
Control Flow
*************

Perhaps the most well-known
statement is :keyword:`if`.  For example::

   >>> x = 1

   >>> x
   1

.. index::
   statement: for

.. note:: Notes are
   prose.

   A second paragraph.

.. function:: len(s)
   :noindex:

   Return the length.

>>> 1 + 1
2

+------+------+
| a    | b    |
+------+------+

.. code-block:: python

   print("hi")

::

   literal

Last paragraph.
"""
    assert pt.rst_paragraphs(source) == [
        "Control Flow",
        "Perhaps the most well-known statement is :keyword:`if`.  For example:",
        "Notes are prose.",
        "A second paragraph.",
        "Return the length.",
        "Last paragraph.",
    ]


def test_no_tensorflow_import():
    code = (
        "import sys, headsize_tf.data.plain_text; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_austen_parts_follow_the_corpus_split(tmp_path, monkeypatch):
    from headsize_tf.data import corpora

    books = {b: [f"{b} line", ""] for names in corpora.AUSTEN_BOOKS.values() for b in names}
    monkeypatch.setattr(corpora, "fetch_austen_books", lambda workdir: books)
    parts = pt.fetch_austen(tmp_path)
    assert parts["test"] == ["persuasion line", ""]
    assert parts["valid"] == ["northangerabbey line", ""]
    assert [line for line in parts["train"] if line] == [
        "sensesensibility line",
        "prideprejudice line",
        "mansfieldpark line",
        "emma line",
    ]
    del books["emma"]
    with pytest.raises(CorpusError, match=r"lacks the books \['emma'\]"):
        pt.fetch_austen(tmp_path)
