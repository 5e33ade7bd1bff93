"""WordPieceTokenizer: Hugging Face's ids, padding, truncation and bad input."""

import pytest
import tensorflow as tf

from headsize_tf.core.errors import CheckpointError
from headsize_tf.data.wordpiece import WordPieceTokenizer

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    ".",
    ",",
    "!",
    "##s",
    "dog",
    "cafe",
    "σ",
    "##σ",
    "ο",
    "##ς",
    "##ο",
    "uber",
    "tab",
    "here",
    "new",
    "line",
    "zero",
    "##width",
    "control",
    "中",
    "文",
    "don",
    "'",
    "t",
    "$",
    "5",
    "##0",
    "ü",
]
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
]


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return path


def test_ids_equal_hugging_face_tokenizers(vocab_file):
    from tokenizers import BertWordPieceTokenizer

    reference = BertWordPieceTokenizer(str(vocab_file), lowercase=True, strip_accents=None)
    tokenizer = WordPieceTokenizer(vocab_file, lower_case=True, max_seq_length=64)
    ours = tokenizer.token_ids(TEXTS)
    for text, ids in zip(TEXTS, ours, strict=True):
        assert ids == reference.encode(text).ids, text
    assert ours[0] == [2, 5, 6, 7, 8, 9, 10, 11, 3]
    assert ours[2] == [2, 3]


def test_cased_vocabulary_keeps_case(vocab_file):
    tokenizer = WordPieceTokenizer(vocab_file, lower_case=False)
    assert tokenizer.token_ids(["The cat"]) == [[2, 1, 6, 3]]


def test_padding_mask_and_truncation(vocab_file):
    tokenizer = WordPieceTokenizer(vocab_file, max_seq_length=5)
    inputs = tokenizer.tokenize(tf.constant(["the cat sat on a mat", "dog"]))
    assert set(inputs) == {"input_word_ids", "input_mask", "input_type_ids"}
    for value in inputs.values():
        assert value.dtype == tf.int32
    assert inputs["input_word_ids"].numpy().tolist() == [[2, 5, 6, 7, 3], [2, 15, 3, 0, 0]]
    assert inputs["input_mask"].numpy().tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert inputs["input_type_ids"].numpy().sum() == 0
    longer = tokenizer.tokenize(["the cat sat on a mat"], max_seq_length=7)
    assert longer["input_word_ids"].numpy().tolist() == [[2, 5, 6, 7, 8, 9, 3]]
    bare = tokenizer.tokenize(["the cat sat on a mat"], add_special_tokens=False)
    assert bare["input_word_ids"].numpy().tolist() == [[5, 6, 7, 8, 9]]


def test_tokenize_traces_in_a_tf_function(vocab_file):
    tokenizer = WordPieceTokenizer(vocab_file, max_seq_length=8)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def ids(texts):
        return tokenizer.tokenize(texts)["input_word_ids"]

    assert ids(tf.constant(["a cat", "the"])).numpy().tolist() == [[2, 9, 6, 3], [2, 5, 3, 0]]


def test_bad_input(vocab_file, tmp_path):
    (tmp_path / "small.txt").write_text("[PAD]\n[UNK]\n[CLS]\n")
    with pytest.raises(CheckpointError, match=r"has no \[SEP\] token"):
        WordPieceTokenizer(tmp_path / "small.txt")
    for bad in (1, True, "8", 2.0):
        with pytest.raises(ValueError, match="max_seq_length must be an int >= 2"):
            WordPieceTokenizer(vocab_file, max_seq_length=bad)
    assert WordPieceTokenizer(vocab_file).token_ids([]) == []
