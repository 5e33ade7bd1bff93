"""`headsize-tf data vocab`: WordPiece vocabularies from TFDS (mock data) or text files."""

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
import tensorflow_text as tf_text
from hypothesis import given, settings
from hypothesis import strategies as st

from headsize_tf import cli
from headsize_tf.data import corpora, vocab


def mock(num_examples: int = 64):
    return tfds.testing.mock_data(
        num_examples=num_examples, policy=tfds.testing.MockPolicy.USE_CODE
    )


class VocabTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path, capsys):
        self.tmp = tmp_path
        self.capsys = capsys

    def test_shared_vocab_of_both_languages_covers_the_text(self):
        out = self.tmp / "wmt14" / "vocab.txt"
        with mock(64):
            code = cli.main(
                [
                    "data",
                    "vocab",
                    "--tfds",
                    "wmt14_translate/de-en",
                    "--features",
                    "en",
                    "de",
                    "--vocab-size",
                    "200",
                    "--output",
                    str(out),
                ]
            )
            pairs = list(tfds.load("wmt14_translate/de-en", split="train").take(64))
        self.assertEqual(code, 0)
        tokens = out.read_text().split("\n")[:-1]
        self.assertEqual(tokens[:5], corpora.RESERVED_TOKENS)  # [PAD] at id 0
        self.assertLen(set(tokens), len(tokens))
        self.assertIn(f"wrote {len(tokens):,} tokens", self.capsys.readouterr().out)
        tokenizer = tf_text.BertTokenizer(str(out), lower_case=True, token_out_type=tf.int32)
        for ex in pairs[:8]:
            for lang in ("en", "de"):
                ids = tokenizer.tokenize(ex[lang]).merge_dims(0, -1).numpy()
                self.assertNotIn(1, ids, f"[UNK] in {ex[lang]!r}")  # every word is covered

    def test_text_files(self):
        text = self.tmp / "a.txt"
        # bert_vocab_from_dataset keeps words seen at least 10 times.
        text.write_text("Emma reads letters.\n\nHarriet writes letters to Emma.\n" * 12)
        out = self.tmp / "vocab.txt"
        self.assertEqual(
            cli.main(
                ["data", "vocab", "--text", str(text), "--vocab-size", "100", "--output", str(out)]
            ),
            0,
        )
        tokens = out.read_text().split()
        for word in ("emma", "letters", "harriet", "."):
            self.assertIn(word, tokens)

    def test_bad_input(self):
        with mock(8):
            with self.assertRaisesRegex(
                vocab.VocabError, r"no text feature\(s\) \['fr'\]; it has \['de', 'en'\]"
            ):
                list(vocab.tfds_lines("wmt14_translate/de-en", ["en", "fr"]))
        with self.assertRaisesRegex(
            vocab.VocabError, r"vocab_size must exceed the 5 reserved tokens; got 5"
        ):
            vocab.build_vocab(["a b"], 5, self.tmp / "v.txt")
        with self.assertRaisesRegex(vocab.VocabError, "every line is empty"):
            vocab.build_vocab(["", "  "], 100, self.tmp / "v.txt")
        self.assertFalse((self.tmp / "v.txt").exists())
        missing = self.tmp / "nowhere.txt"
        self.assertEqual(
            cli.main(
                ["data", "vocab", "--text", str(missing), "--output", str(self.tmp / "v.txt")]
            ),
            2,
        )
        self.assertIn(f"Text file {str(missing)!r} does not exist", self.capsys.readouterr().err)


_WORDS = st.one_of(st.text("abcde", min_size=1, max_size=9), st.sampled_from([".", ",", "#"]))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    word_counts=st.dictionaries(_WORDS, st.integers(1, 400), min_size=1, max_size=40),
    vocab_size=st.integers(6, 80),
)
def test_learn_wordpiece_is_tensorflow_text_s_learner_60_examples(word_counts, vocab_size):
    """The fast learner against tensorflow-text's own (`learn` at its defaults): the same
    tokens in the same order, on drawn word counts and sizes."""
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as lib

    expected = lib.learn(word_counts, vocab_size, corpora.RESERVED_TOKENS)
    assert vocab.learn_wordpiece(word_counts, vocab_size, corpora.RESERVED_TOKENS) == expected


def test_build_wordpiece_vocab_is_bert_vocab_from_dataset():
    """The whole path, tokenisation of the lines included, on text with punctuation,
    capitals and accents."""
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bert_vocab

    lines = [
        f"Émma wrote {n} letters, and Harriet's reply came back{'!' * (n % 3)} Quite so."
        for n in range(60)
    ] + ["Mr. Knightley walked; Mrs. Elton talked (endlessly) about Maple Grove."] * 25
    expected = bert_vocab.bert_vocab_from_dataset(
        tf.data.Dataset.from_tensor_slices(lines).batch(1000),
        vocab_size=120,
        reserved_tokens=corpora.RESERVED_TOKENS,
        bert_tokenizer_params={"lower_case": True},
        learn_params={},
    )
    assert vocab.build_wordpiece_vocab(lines, 120) == expected
