"""`data.serving_export.language_model_outputs` against numpy, texts without tokens included."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from headsize_tf.data.serving_export import language_model_outputs

VOCAB = 5


def _lm(ids, training=False):
    """Logits that depend on the token and its position (any causal LM's shape)."""
    positions = tf.range(tf.shape(ids)[1], dtype=tf.float32)[None, :, None]
    return tf.one_hot(ids, VOCAB) * 2.0 + positions * tf.range(VOCAB, dtype=tf.float32) / 10


def _numpy(ids, mask):
    logits = _lm(tf.constant(ids)).numpy().astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    rows = []
    for row, length in enumerate(np.sum(mask, axis=1)):
        ll = sum(log_probs[row, t, ids[row][t + 1]] for t in range(length - 1))
        probs = np.exp(log_probs[row, length - 1]) if length else np.zeros(VOCAB)
        rows.append((ll, length, probs))
    return rows


def test_scores_follow_the_formula_and_a_text_without_tokens_has_none():
    ids = [[1, 2, 3, 0], [4, 0, 0, 0], [0, 0, 0, 0]]
    mask = [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]]
    out = language_model_outputs(_lm, {"input_word_ids": tf.constant(ids), "input_mask": mask})
    for row, (ll, length, probs) in enumerate(_numpy(ids, mask)):
        np.testing.assert_allclose(out["log_likelihood"][row], ll, rtol=1e-5)
        assert out["num_tokens"][row] == length
        np.testing.assert_allclose(out["next_token_probabilities"][row], probs, atol=1e-6)


def test_a_batch_of_texts_without_tokens_scores_as_in_any_batch():
    empty = {"input_word_ids": tf.zeros([2, 0], tf.int32), "input_mask": tf.zeros([2, 0], tf.int32)}
    out = language_model_outputs(_lm, empty)
    assert out["log_likelihood"].numpy().tolist() == [0.0, 0.0]
    assert out["num_tokens"].numpy().tolist() == [0.0, 0.0]
    assert out["next_token_probabilities"].shape == (2, VOCAB)
    assert not out["next_token_probabilities"].numpy().any()
