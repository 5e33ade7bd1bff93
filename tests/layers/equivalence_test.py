"""Equivalences between the layers, and agreement with numpy oracles."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from tests.layers import reference, util

# (query length, key length, mask kind)
CASES = [
    ("self", 6, 6, None),
    ("self_padding_mask", 6, 6, "padding"),
    ("self_causal", 6, 6, "causal"),
    ("cross", 5, 9, None),
    ("cross_padding_mask", 5, 9, "padding"),
]


def _data(t, s, d=24, batch=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, t, d)).astype(np.float32)
    y = x if t == s else rng.normal(size=(batch, s, d)).astype(np.float32)
    return x, y


def _mask(kind, batch, t, s):
    if kind is None:
        return None
    if kind == "causal":
        return np.broadcast_to(np.tril(np.ones((t, s), bool)), (batch, t, s)).copy()
    mask = np.ones((batch, t, s), bool)
    mask[0, :, s - 2 :] = False
    mask[1, :, 0] = False
    return mask


class EquivalenceTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(*CASES)
    def test_fixed_head_equals_standard_at_width_over_heads(self, t, s, mask_kind):
        x, y = _data(t, s)
        mask = _mask(mask_kind, 2, t, s)
        standard = StandardAttention(num_heads=4)
        fixed = FixedHeadAttention(num_heads=4, head_size=6)
        standard(x, y)
        fixed(x, y)
        self.assertEqual(standard.head_size, 6)
        fixed.set_weights(standard.get_weights())
        self.assertAllClose(
            fixed(x, y, attention_mask=mask), standard(x, y, attention_mask=mask), atol=1e-5
        )

    @parameterized.named_parameters(*CASES)
    def test_collaborative_concatenate_equals_standard(self, t, s, mask_kind):
        x, y = _data(t, s)
        mask = _mask(mask_kind, 2, t, s)
        h, p, d = 4, 6, 24
        w = util.random_multihead_weights(np.random.default_rng(1), d, h, p)
        standard = StandardAttention(num_heads=h)
        standard(x, y)
        util.set_multihead_weights(standard, w)
        collab = CollaborativeAttention(
            num_heads=h, shared_key_dim=h * p, mixing_initializer="concatenate"
        )
        collab(x, y)
        # Concatenate mixing is the exact identity rewrite: set everything but
        # the mixing, which the initializer already made blocks of ones.
        cw = reference.standard_to_collaborative(w)
        self.assertAllClose(collab.mixing, cw["mixing"])
        collab._query_dense.kernel.assign(cw["wq"])
        collab._key_dense.kernel.assign(cw["wk"])
        collab.content_bias.assign(cw["content"])
        collab._value_dense.kernel.assign(w["wv"])
        collab._value_dense.bias.assign(w["bv"])
        collab._output_dense.kernel.assign(w["wo"])
        collab._output_dense.bias.assign(w["bo"])
        out_s, scores_s = standard(x, y, attention_mask=mask, return_attention_scores=True)
        out_c, scores_c = collab(x, y, attention_mask=mask, return_attention_scores=True)
        self.assertAllClose(out_c, out_s, atol=1e-5)
        self.assertAllClose(scores_c, scores_s, atol=1e-5)

    @parameterized.named_parameters(*CASES)
    def test_fixed_head_matches_numpy(self, t, s, mask_kind):
        x, y = _data(t, s)
        mask = _mask(mask_kind, 2, t, s)
        w = util.random_multihead_weights(np.random.default_rng(2), 24, 5, 16)
        layer = FixedHeadAttention(num_heads=5, head_size=16)  # 5 * 16 != 24
        layer(x, y)
        util.set_multihead_weights(layer, w)
        out, probs = layer(x, y, attention_mask=mask, return_attention_scores=True)
        ref_out, ref_probs = reference.multihead(x, y, w, mask)
        self.assertAllClose(out, ref_out, atol=1e-5)
        self.assertAllClose(probs, ref_probs, atol=1e-5)

    @parameterized.named_parameters(*CASES)
    def test_standard_matches_numpy(self, t, s, mask_kind):
        x, y = _data(t, s)
        mask = _mask(mask_kind, 2, t, s)
        w = util.random_multihead_weights(np.random.default_rng(3), 24, 3, 8)
        layer = StandardAttention(num_heads=3)
        layer(x, y)
        util.set_multihead_weights(layer, w)
        out, probs = layer(x, y, attention_mask=mask, return_attention_scores=True)
        ref_out, ref_probs = reference.multihead(x, y, w, mask)
        self.assertAllClose(out, ref_out, atol=1e-5)
        self.assertAllClose(probs, ref_probs, atol=1e-5)

    @parameterized.named_parameters(*CASES)
    def test_collaborative_matches_numpy(self, t, s, mask_kind):
        x, y = _data(t, s)
        mask = _mask(mask_kind, 2, t, s)
        h, p, shared = 4, 6, 10  # shared key dim unrelated to h * p
        w = util.random_collaborative_weights(np.random.default_rng(4), 24, h, p, shared)
        layer = CollaborativeAttention(num_heads=h, shared_key_dim=shared)
        layer(x, y)
        util.set_collaborative_weights(layer, w)
        out, probs = layer(x, y, attention_mask=mask, return_attention_scores=True)
        ref_out, ref_probs = reference.collaborative(x, y, w, head_size=p, mask=mask)
        self.assertAllClose(out, ref_out, atol=1e-5)
        self.assertAllClose(probs, ref_probs, atol=1e-5)

    def test_collaborative_scale_is_head_size_not_shared_over_heads(self):
        # head_size 6 (= 24 / 4) with D = 8: 1/sqrt(6), not 1/sqrt(8 / 4).
        x, y = _data(5, 5)
        h, p, shared = 4, 6, 8
        w = util.random_collaborative_weights(np.random.default_rng(5), 24, h, p, shared)
        layer = CollaborativeAttention(num_heads=h, shared_key_dim=shared)
        layer(x, y)
        util.set_collaborative_weights(layer, w)
        _, probs = layer(x, y, return_attention_scores=True)
        _, right = reference.collaborative(x, y, w, head_size=p)
        _, wrong = reference.collaborative(x, y, w, head_size=shared / h)
        self.assertAllClose(probs, right, atol=1e-5)
        self.assertGreater(float(np.abs(probs.numpy() - wrong).max()), 1e-2)

    def test_gates_match_numpy(self):
        x, y = _data(5, 7)
        w = util.random_multihead_weights(np.random.default_rng(6), 24, 4, 8)
        layer = FixedHeadAttention(num_heads=4, head_size=8)
        layer(x, y)
        util.set_multihead_weights(layer, w)
        gates = np.array([1.0, 0.0, 0.5, 1.0], np.float32)
        layer.set_head_mask(gates)
        ref_out, _ = reference.multihead(x, y, w, gates=gates)
        self.assertAllClose(layer(x, y), ref_out, atol=1e-5)
