"""`evaluation.perplexity`: every token, padding left out, per-token weights, dict outputs."""

import numpy as np
import pytest
import tf_keras

from headsize_tf.training.evaluation import perplexity

VOCAB = 11


class _Logits(tf_keras.Model):
    """Embedded ids as logits (`[B, T, V]`), or a dict of them under "mlm_logits"."""

    def __init__(self, as_dict: bool = False):
        super().__init__()
        self.embed = tf_keras.layers.Embedding(VOCAB, VOCAB)
        self.as_dict = as_dict

    def call(self, ids, training=False):
        logits = self.embed(ids)
        return {"mlm_logits": logits, "other": ids} if self.as_dict else logits


def _reference(model, data, pad_id=None):
    """float64 numpy: exp of the weighted token mean of -log softmax(logits)[target]."""
    total, count = 0.0, 0.0
    for ids, targets, *weights in data:
        logits = np.asarray(model.embed(ids), np.float64)
        log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        nll = -np.take_along_axis(log_p, targets[..., None], -1)[..., 0]
        w = np.asarray(weights[0], np.float64) if weights else np.ones_like(nll)
        w = w * (targets != pad_id) if pad_id is not None else w
        total, count = total + float((nll * w).sum()), count + float(w.sum())
    return float(np.exp(total / count))


@pytest.fixture(scope="module")
def batches():
    rng = np.random.default_rng(0)
    out = []
    for rows in (3, 2):  # The last batch smaller: a token mean, not a batch mean.
        targets = rng.integers(1, VOCAB, [rows, 6]).astype(np.int32)
        targets[0, 4:] = 0  # Padding.
        weights = (rng.random([rows, 6]) > 0.4).astype(np.float32)
        out.append((rng.integers(0, VOCAB, [rows, 6]).astype(np.int32), targets, weights))
    return out


def test_every_token_counts_without_pad_id_or_weights(batches):
    model = _Logits()
    data = [(ids, targets) for ids, targets, _ in batches]
    assert perplexity(model, data) == pytest.approx(_reference(model, data), rel=1e-5)
    # The mean is over tokens: the whole list is not the mean of its batches' perplexities.
    assert perplexity(model, data) != pytest.approx(
        np.exp(np.mean([np.log(perplexity(model, [b])) for b in data])), rel=1e-5
    )


def test_padding_is_left_out(batches):
    model = _Logits()
    pairs = [(ids, targets) for ids, targets, _ in batches]
    padded = perplexity(model, pairs, pad_id=0)
    assert padded == pytest.approx(_reference(model, pairs, pad_id=0), rel=1e-5)
    assert padded != pytest.approx(perplexity(model, pairs), rel=1e-5)


def test_dict_outputs_by_key_and_weights(batches):
    model = _Logits(as_dict=True)
    assert perplexity(model, batches, logits_key="mlm_logits") == pytest.approx(
        _reference(model, batches), rel=1e-5
    )
    assert perplexity(model, batches, pad_id=0, logits_key="mlm_logits") == pytest.approx(
        _reference(model, batches, pad_id=0), rel=1e-5
    )
    assert perplexity(model, [], logits_key="mlm_logits") == 1.0  # No token counts.
