"""The two WordPiece tokenizers give the same ids: tensorflow-text's (in the TF graph) and the
TensorFlow-free one on Hugging Face `tokenizers` (the base install's, e.g. on a Colab TPU).

Both against Hugging Face's own `BertWordPieceTokenizer`; then against each other where
tensorflow-text is installed: on the Austen novels and Moby Dick with the corpus's and
MiniLM's vocabularies, on varied text (punctuation, digits, accents, CJK, unknown words),
on every character of the Basic Multilingual Plane, and on generated text (hypothesis).
The same for the prepared corpora's tokenization (`data.vocab.tokenize_lines`,
tensorflow-text's own NFKC case folding) and its TensorFlow-free twin
(`wordpiece_hf.tokenize_lines`), which `load_lm_text` uses without tensorflow-text.
"""

from __future__ import annotations

import importlib.util
import unicodedata

import numpy as np
import pytest

from headsize_tf.core.errors import CheckpointError
from headsize_tf.data import wordpiece, wordpiece_hf
from headsize_tf.data.wordpiece_hf import HFWordPieceTokenizer

HAS_TF_TEXT = importlib.util.find_spec("tensorflow_text") is not None
needs_tf_text = pytest.mark.skipif(not HAS_TF_TEXT, reason="no tensorflow-text")

VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "a", "mat",
    ".", ",", "!", "##s", "dog", "cafe", "σ", "##σ", "ο", "##ς", "##ο", "uber", "tab",
    "here", "new", "line", "zero", "##width", "control", "中", "文", "don", "'", "t", "$",
    "5", "##0", "ü", "play", "##ing", "Cat", "The",
]  # fmt: skip
TEXTS = [
    "The cat sat on a mat.",
    "dogs!",
    "",
    "   ",
    "Café, CAFE",
    "ΣΟΣ σος",
    "tab\there\nnew\r\nline",
    "zero\u200bwidth\x07 control",
    "Über ÜBER über",
    "中文 ＡＢＣ",
    "don't $500",
    "playing the cat",
]
# A few paragraphs of varied English: punctuation, digits, accents, quotes and dashes,
# abbreviations, URLs, unknown and over-long words, other scripts and emoji.
VARIED = [
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife.",
    "On 3 March 1811, at 10:45 a.m., Mr. D'Arcy paid £1,250.50 (roughly $6,000) — "
    "“an absurd sum!” — for 2½ acres near St. Mary's; see https://example.org/a_b?c=1&d=2.",
    "Naïve café owners in Zürich, São Paulo and Kraków served crème brûlée, jalapeño "
    "piñatas and smörgåsbord; the façade's rôle was déjà vu. ŒUVRE, Ærø, İstanbul, ǅemal.",
    "Tokenizers meet words like antidisestablishmentarianism, pneumonoultramicroscopic"
    "silicovolcanoconiosis and qwxzjkvbpq, hyphen-ated compounds, e-mail, e.g., i.e., "
    "U.S.A., #hashtags, @mentions, 50%/kg, 3.14159e-10, x² + y² = z², 1st/2nd/3rd.",
    "Mixed scripts: Ελληνικά ΣΟΦΙΑ, русский текст, עברית, العربية, हिन्दी, ไทยภาษาไทย, "
    "日本語のテキスト, 中文文本, 한국어 텍스트 — and emoji 🙂👍🏽 too…",
    "Tabs\tand\nnewlines\r\nand\u00a0non-breaking\u2003spaces, zero\u200bwidth, soft\u00adhyphen, "
    "a\u2028line separator, ＦＵＬＬＷＩＤＴＨ letters, ligatures ﬁ ﬂ, and ß.",
    # Words near tensorflow-text's limit of 100 bytes: over it (one [UNK]) with fewer than
    # 100 characters ("ж" and "α" are 2 bytes), at it, and over it in ASCII.
    "ж" * 51 + " " + "α" * 50 + " " + "ไทย" * 20 + " " + "ß" * 50 + " " + "a" * 101 + " d" * 3,
    "",
]


def backends() -> list:
    out = [pytest.param(HFWordPieceTokenizer, id="tokenizers")]
    if HAS_TF_TEXT:
        from headsize_tf.data.wordpiece_tf import TFWordPieceTokenizer

        out.append(pytest.param(TFWordPieceTokenizer, id="tensorflow_text"))
    return out


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return path


def as_lists(inputs) -> dict[str, list]:
    return {name: np.asarray(value).tolist() for name, value in inputs.items()}


def texts_of(strings) -> list[str]:
    return [s.decode() if isinstance(s, bytes) else s for s in np.asarray(strings).tolist()]


# ----------------------------------------------------------- both tokenizers
@pytest.mark.parametrize("tokenizer_class", backends())
def test_ids_equal_hugging_face_tokenizers(tokenizer_class, vocab_file):
    from tokenizers import BertWordPieceTokenizer

    for lower_case in (True, False):
        reference = BertWordPieceTokenizer(str(vocab_file), lowercase=lower_case)
        tokenizer = tokenizer_class(vocab_file, lower_case=lower_case, max_seq_length=64)
        for text, ids in zip(TEXTS, tokenizer.token_ids(TEXTS), strict=True):
            assert ids == reference.encode(text).ids, (lower_case, text)
    # Separators of lines and paragraphs are whitespace there, the replacement character
    # is dropped.
    separated = ["the\u2028cat", "the\u2029cat sat", "the\ufffdcat", "\ufffd"]
    for lower_case in (True, False):
        reference = BertWordPieceTokenizer(str(vocab_file), lowercase=lower_case)
        tokenizer = tokenizer_class(vocab_file, lower_case=lower_case, max_seq_length=64)
        got = tokenizer.token_ids(separated)
        assert got == [reference.encode(text).ids for text in separated], lower_case
    tokenizer = tokenizer_class(vocab_file)
    assert tokenizer.token_ids(["The cat sat on a mat.", ""]) == [
        [2, 5, 6, 7, 8, 9, 10, 11, 3],
        [2, 3],
    ]
    assert tokenizer_class(vocab_file, lower_case=False).token_ids(["The cat"]) == [[2, 42, 6, 3]]


@pytest.mark.parametrize("tokenizer_class", backends())
def test_padding_mask_truncation_and_detokenize(tokenizer_class, vocab_file):
    tokenizer = tokenizer_class(vocab_file, max_seq_length=5)
    assert (tokenizer.vocab_size, tokenizer.pad_id, tokenizer.unk_id) == (len(VOCAB), 0, 1)
    inputs = tokenizer.tokenize(["the cat sat on a mat", "dog"])
    assert set(inputs) == {"input_word_ids", "input_mask", "input_type_ids"}
    for value in inputs.values():
        assert value.numpy().dtype == np.int32
    assert as_lists(inputs) == {
        "input_word_ids": [[2, 5, 6, 7, 3], [2, 15, 3, 0, 0]],
        "input_mask": [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]],
        "input_type_ids": [[0] * 5, [0] * 5],
    }
    longer = tokenizer.tokenize(["the cat sat on a mat"], max_seq_length=7)
    assert longer["input_word_ids"].numpy().tolist() == [[2, 5, 6, 7, 8, 9, 3]]
    bare = tokenizer.tokenize(["the cat sat on a mat"], add_special_tokens=False)
    assert bare["input_word_ids"].numpy().tolist() == [[5, 6, 7, 8, 9]]
    assert tokenizer.tokenize([""], add_special_tokens=False)["input_word_ids"].shape == (1, 0)
    assert tokenizer.token_ids([]) == []
    ids = np.array([[2, 39, 40, 6, 1, 3, 0], [40, 14, 0, 0, 0, 0, 0]], np.int32)
    assert texts_of(tokenizer.detokenize(ids)) == [
        "[CLS] playing cat [UNK] [SEP] [PAD]",
        "##ings [PAD] [PAD] [PAD] [PAD] [PAD]",
    ]


@pytest.mark.parametrize("tokenizer_class", backends())
def test_bad_input(tokenizer_class, vocab_file, tmp_path):
    (tmp_path / "small.txt").write_text("[PAD]\n[UNK]\n[CLS]\n")
    with pytest.raises(CheckpointError, match=r"has no \[SEP\] token"):
        tokenizer_class(tmp_path / "small.txt")
    (tmp_path / "twice.txt").write_text("\n".join([*VOCAB, "cat"]) + "\n")
    with pytest.raises(CheckpointError, match="holds the token 'cat' twice"):
        tokenizer_class(tmp_path / "twice.txt")
    for bad in (1, True, "8", 2.0):
        with pytest.raises(ValueError, match="max_seq_length must be an int >= 2"):
            tokenizer_class(vocab_file, max_seq_length=bad)
    tokenizer = tokenizer_class(vocab_file, max_seq_length=8)
    for bad in (1, 0, np.int64(1), True):  # A call's own length: room for [CLS] and [SEP].
        with pytest.raises(ValueError, match="max_seq_length must be an int >= 2"):
            tokenizer.tokenize(["the cat sat"], bad)
    ids = tokenizer.tokenize(["the cat sat"], 2)["input_word_ids"]
    assert np.asarray(ids).shape == (1, 2)


# ------------------------------------------------------- the TF-free tokenizer
def test_tokenizers_backend_takes_numpy_and_bytes_and_refuses_one_string(vocab_file):
    tokenizer = HFWordPieceTokenizer(vocab_file)
    expected = [[2, 6, 7, 3], [2, 15, 3]]
    assert tokenizer.token_ids(np.array(["cat sat", "dog"])) == expected
    assert tokenizer.token_ids([b"cat sat", "dog"]) == expected
    assert tokenizer.token_ids(np.array([b"cat sat", b"dog"], dtype=object)) == expected
    with pytest.raises(ValueError, match="a batch"):
        tokenizer.tokenize("cat sat")
    with pytest.raises(ValueError, match=r"in \[0, 43\)"):
        tokenizer.detokenize([[2, 43]])
    with pytest.raises(ValueError, match=r"\[batch, length\]"):
        tokenizer.detokenize([2, 3])


def test_the_module_picks_tensorflow_text_where_it_is_installed():
    expected = "tensorflow_text" if HAS_TF_TEXT else "tokenizers"
    assert wordpiece.wordpiece_backend() == expected
    name = "TFWordPieceTokenizer" if HAS_TF_TEXT else "HFWordPieceTokenizer"
    assert wordpiece.WordPieceTokenizer.__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        wordpiece.Nothing  # noqa: B018


# --------------------------------------------------- the two against each other
def assert_same_ids(vocab_path, lines, lower_case=True, batch=4096) -> int:
    """Both tokenizers' ids of `lines` (no length limit) are equal; returns the token count.

    `lower_case` True or False: the sentence encoders' tokenizers; "fold": the prepared
    corpora's (`data.vocab.tokenize_lines`: tensorflow-text's own lower-casing, NFKC case
    folding) and `wordpiece_hf.tokenize_lines`.
    """
    from headsize_tf.data import vocab
    from headsize_tf.data.wordpiece_tf import TFWordPieceTokenizer

    if lower_case == "fold":
        assert wordpiece.wordpiece_backend() == "tensorflow_text"  # vocab's TF path.

        def tf_ids(texts):
            return [row.tolist() for row in vocab.tokenize_lines(texts, str(vocab_path))]

        def hf_ids(texts):
            return [row.tolist() for row in wordpiece_hf.tokenize_lines(texts, vocab_path)]
    else:
        limit = 1 << 30
        tf_ids = TFWordPieceTokenizer(vocab_path, lower_case, limit).token_ids
        hf_ids = HFWordPieceTokenizer(vocab_path, lower_case, limit).token_ids
    tokens = 0
    for start in range(0, len(lines), batch):
        chunk = lines[start : start + batch]
        expected, got = tf_ids(chunk), hf_ids(chunk)
        for text, a, b in zip(chunk, expected, got, strict=True):
            assert b == a, (lower_case, text)
        tokens += sum(map(len, expected))
    return tokens


@needs_tf_text
# A second corpus-wide comparison (the generated and varied texts, and every character of
# the plane, run in the default run): in the full run.
@pytest.mark.slow
def test_same_ids_on_the_austen_novels(austen_data_dir, minilm_dir):
    corpus = austen_data_dir / "austen"
    lines = [
        line
        for split in ("train", "valid", "test")
        for line in (corpus / f"{split}.txt").read_text(encoding="utf-8").splitlines()
    ]
    assert len(lines) > 50_000
    # The corpus's own (lower-cased) vocabulary, and MiniLM's (BERT's uncased) both ways;
    # the corpus's token ids as `headsize-tf data prepare` and `load_lm_text` tokenize. Every
    # 5th line of the five novels (and every 15th, cased): over 100,000 tokens each.
    sample = lines[::5]
    assert assert_same_ids(corpus / "vocab.txt", sample) > 100_000
    assert assert_same_ids(minilm_dir / "vocab.txt", sample) > 100_000
    assert assert_same_ids(minilm_dir / "vocab.txt", lines[::15], lower_case=False) > 30_000
    assert assert_same_ids(corpus / "vocab.txt", sample, lower_case="fold") > 100_000


@needs_tf_text
@pytest.mark.parametrize("lower_case", [True, False, "fold"])
def test_same_ids_on_varied_text(minilm_dir, lower_case):
    lines = [*VARIED, *(s for p in VARIED for s in p.split(", ")), *TEXTS]
    assert assert_same_ids(minilm_dir / "vocab.txt", lines, lower_case) > 300


@needs_tf_text
# BERT's uncased mode in the default run; the cased and accent-folding modes (their
# normalisers differ in a few code paths; the varied texts run in every mode there) in the
# full run.
@pytest.mark.parametrize(
    "lower_case",
    [
        True,
        pytest.param(False, marks=pytest.mark.slow),
        pytest.param("fold", marks=pytest.mark.slow),
    ],
)
def test_same_ids_on_every_character_of_the_basic_multilingual_plane(tmp_path, lower_case):
    """Each character alone, inside a word and at its ends, with a vocabulary of every
    character (alone and as a "##" piece); whether a character is a word, punctuation,
    space, dropped, lower-cased or stripped shows in the ids.

    Unicode grows: a character newer than Python's `unicodedata` or than TensorFlow's case
    tables can differ. Those (Python's unassigned, and capitals TensorFlow does not
    lower-case) are left out: a few dozen of the 63,000.
    """
    import tensorflow as tf

    chars = [chr(c) for c in range(0x20, 0x10000) if not 0xD800 <= c < 0xE000]
    newer = {c for c in chars if unicodedata.category(c) == "Cn"}
    if lower_case is True:
        lowered = tf.strings.lower(tf.constant(chars), encoding="utf-8").numpy()
        newer |= {
            c
            for c, low in zip(chars, lowered, strict=True)
            if c != "Σ" and low.decode() != c.lower() and len(c.lower()) == 1
        }
    assert len(newer) < 2_500, len(newer)  # Cn: 1,900 or so in Python 3.11's BMP.
    chars = [c for c in chars if c not in newer]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "##a", "##b"]
    vocab += [t for c in chars if c.strip() and c == c.split("\n")[0] for t in (c, "##" + c)]
    vocab = [t for t in dict.fromkeys(vocab) if "\r" not in t and "\n" not in t]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    groups = [chars[i : i + 64] for i in range(0, len(chars), 64)]
    lines = [" ".join(f"a{c}b a{c} {c}b {c}" for c in group) for group in groups]
    lines += [f"a{c}b a{c} {c}b" for c in chars if unicodedata.category(c)[0] in "MPZC"]
    assert assert_same_ids(path, lines, lower_case, batch=512) > 100_000


@needs_tf_text
def test_same_ids_on_generated_text(minilm_dir):
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    from headsize_tf.data.vocab import tokenize_lines
    from headsize_tf.data.wordpiece_tf import TFWordPieceTokenizer

    alphabet = st.sampled_from(
        list("abcdeABCDE xyz.,;:!?'\"-()[]$%&#@/\\0123456789\t\n\r")
        + list("éèêëÉÈçÇñÑüÜößØæÆœŒıİσςΣΟΛ中文日本한국ไทยअआ")
        + ["\u0301", "\u0308", "\u200b", "\u00a0", "\u2003", "\u00ad", "\x07", "\ufeff", "🙂", "…"]
    )
    vocab = minilm_dir / "vocab.txt"
    tf_tokenizer = TFWordPieceTokenizer(vocab, max_seq_length=1 << 30)
    hf_tokenizer = HFWordPieceTokenizer(vocab, max_seq_length=1 << 30)

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(st.lists(st.text(alphabet, max_size=40), min_size=1, max_size=8))
    def check(texts):
        assert hf_tokenizer.token_ids(texts) == tf_tokenizer.token_ids(texts), texts
        folded = [row.tolist() for row in wordpiece_hf.tokenize_lines(texts, vocab)]
        assert folded == [row.tolist() for row in tokenize_lines(texts, str(vocab))], texts

    check()


FOLDING_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "strasse", "find", "the", "a", "b"]
FOLDING_TEXTS = ["Straße", "ﬁnd", "Ｔｈｅ", "a\x07b", "a\u00adb", "The", ""]


@pytest.mark.parametrize("tokenizer_class", backends())
def test_case_folding_reads_text_as_the_prepared_corpora_are_tokenized(tokenizer_class, tmp_path):
    """`lower_case="fold"` (what the language models' exports read text with) gives
    `data.vocab.tokenize_lines`'s ids, where Hugging Face's BERT lower-casing differs."""
    from headsize_tf.data import vocab
    from headsize_tf.data.wordpiece import FOLD

    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(FOLDING_VOCAB) + "\n")
    folding = tokenizer_class(path, lower_case=FOLD, max_seq_length=16)
    out = folding.tokenize(FOLDING_TEXTS, add_special_tokens=False)
    ids, mask = np.asarray(out["input_word_ids"]), np.asarray(out["input_mask"])
    served = [row[: int(m.sum())].tolist() for row, m in zip(ids, mask, strict=True)]
    assert served == [row.tolist() for row in vocab.tokenize_lines(FOLDING_TEXTS, str(path))]
    assert served[:4] == [[5], [6], [7], [8, 9]]  # Hugging Face's: [UNK], [UNK], [UNK], [UNK].
    with pytest.raises(ValueError, match="lower_case must be True, False or 'fold'"):
        tokenizer_class(path, lower_case="yes")
