"""The real all-MiniLM-L6-v2 on Keras 3: the same sentence embeddings as the tf_keras import."""

import numpy as np
import pytest

from headsize_tf.keras3.pretrained import SentenceEncoder, load_sentence_encoder

# Punctuation, casing, accents, numbers, CJK, emoji, control characters, Greek
# final sigma, empty and whitespace-only, long words, over-long texts, prose.
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome, I loved every minute of it!",
    "Hello, World!",
    "Café déjà vu — naïve résumé",
    "12,345.67 dollars, $5 and 100%!",
    "",
    "   ",
    "tab\there\nnewline\r\nCRLF",
    "ＡＢＣ full-width letters",
    "中文字符 mixed with English",
    "emoji 😀 ok",
    "zero\u200bwidth and control\x07char",
    "don't can't won't y'all",
    "über" * 30,
    "İstanbul ΣΊΣΥΦΟΣ ὁδός",
    "<html> &amp; {json: [1,2]} e.g. i.e. A.B.C.",
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "word " * 300,
]


@pytest.fixture(scope="module")
def keras3_minilm(minilm_dir):
    return load_sentence_encoder(checkpoint=minilm_dir)


def test_embeddings_equal_the_tf_keras_import(keras3_minilm, minilm):
    assert isinstance(keras3_minilm, SentenceEncoder)
    assert (keras3_minilm.pooling, keras3_minilm.max_seq_length) == ("mean", 256)
    backbone = keras3_minilm.backbone
    assert [(a.num_heads, a.head_size) for a in backbone.attention_layers] == [(12, 32)] * 6
    assert backbone.count_params() == minilm.encoder.count_params()
    assert keras3_minilm.token_ids(SENTENCES) == minilm.token_ids(SENTENCES)
    ours = keras3_minilm.embed(SENTENCES, batch_size=8)
    reference = minilm.embed(SENTENCES, batch_size=8)
    assert ours.shape == (20, 384) and ours.dtype == np.float32
    cosines = np.sum(ours * reference, axis=1)  # Both L2-normalised.
    print("cosine per sentence:", np.array2string(cosines, precision=7))
    assert cosines.min() >= 0.9999, cosines
    np.testing.assert_allclose(ours, reference, atol=1e-4)


def test_reference_cosine(keras3_minilm):
    e = keras3_minilm.embed(SENTENCES[:2])
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), [1.0, 1.0], atol=1e-6)
    assert float(e[0] @ e[1]) == pytest.approx(0.755, abs=0.001)


def test_registry_name_uses_the_shared_cache(minilm_dir):
    # The cache of tests/conftest.py: nothing is downloaded again.
    encoder = load_sentence_encoder(model="minilm-l6", cache_dir=minilm_dir.parent)
    assert encoder.source == "minilm-l6"
    assert encoder.token_ids(["A man is eating food."]) == [
        [101, 1037, 2158, 2003, 5983, 2833, 1012, 102]
    ]
