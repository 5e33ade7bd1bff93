"""LatentAttention: numpy oracle, exact full-rank conversion, absorbed decoding, arguments.

The contract every attention layer meets is checked in layer_contract_test.py.
"""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from headsize_tf.core.kv_sharing import latent_full_rank, latent_weights
from headsize_tf.core.spec import AttentionSpec, SpecError
from headsize_tf.layers import FixedHeadAttention, LatentAttention
from headsize_tf.layers.factory import make_attention
from headsize_tf.layers.roles import assign_weights, numpy_weights
from headsize_tf.reparam.convert import attention_weights
from tests import kv_oracle
from tests.layers import layer_check as util
from tests.layers.layer_check import HEADS, WIDTH

GATES = np.array([1.0, 0.5, 0.0, 1.0], np.float32)
RANK = 6


def make(**kwargs):
    return LatentAttention(num_heads=HEADS, kv_latent_dim=RANK, **kwargs)


SPEC = AttentionSpec("latent", num_heads=HEADS, kv_latent_dim=RANK)


class LatentOracleTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters("none", "keys", "per_head")
    def test_equals_numpy_oracle(self, mask):
        layer = make(value_dim=3, head_size=5)
        x, y = util.inputs()
        layer(x, y)
        weights = util.randomize(layer, gates=GATES)
        attention_mask = util.masks()[mask]
        out, scores = layer(x, y, attention_mask=attention_mask, return_attention_scores=True)
        expected = kv_oracle.latent(weights, x, y, attention_mask, masked_rows="uniform")
        self.assertAllClose(out, expected, atol=1e-5)
        self.assertEqual(scores.shape, (util.BATCH, HEADS, util.T, util.S))

    def test_gate_equals_zeroing_the_heads_output_rows(self):
        layer = make()
        x, y = util.inputs()
        layer(x, y)
        weights = util.randomize(layer)
        layer.set_head_mask([0.0, 1.0, 1.0, 1.0])
        gated = layer(x, y).numpy()
        zeroed = dict(weights, head_gates=np.ones(HEADS, np.float32))
        zeroed["output_kernel"] = weights["output_kernel"].copy()
        zeroed["output_kernel"][0] = 0.0
        assign_weights(layer, zeroed)
        self.assertAllClose(layer(x, y), gated, atol=1e-6)

    @parameterized.parameters("keys", "per_head")
    def test_converted_layer_at_full_rank_is_exact(self, mask):
        source = FixedHeadAttention(num_heads=HEADS, head_size=3)
        x, y = util.inputs()
        source(x, y)
        util.randomize(source, seed=5, gates=GATES)  # Key and value biases included.
        weights = attention_weights(source)
        rank = latent_full_rank(weights)  # min(16, 4 * (3 + 3)) = 16
        converted, report = latent_weights(weights, rank)
        self.assertAlmostEqual(report.key_energy, 1.0, places=5)
        layer = LatentAttention(num_heads=HEADS, kv_latent_dim=rank, head_size=3)
        layer(x, y)
        assign_weights(layer, converted)
        attention_mask = util.masks()[mask]
        expected, expected_scores = source(
            x, y, attention_mask=attention_mask, return_attention_scores=True
        )
        out, scores = layer(x, y, attention_mask=attention_mask, return_attention_scores=True)
        self.assertAllClose(out, expected, atol=1e-5)
        self.assertAllClose(scores, expected_scores, atol=1e-5)


class LatentCacheTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(True, False)
    def test_cached_decoding_equals_causal_call(self, absorb):
        layer = make(absorb=absorb, value_dim=3)
        x, _ = util.inputs()
        layer(x, x)
        util.randomize(layer, gates=GATES)
        util.check_cached_decoding(self, layer)
        self.assertEqual(layer.cache_shapes(2, 6), {"latent": [2, 6, RANK]})

    def test_absorbed_and_up_projected_decoding_agree(self):
        x, _ = util.inputs(t=6)
        absorbed, expanded = make(absorb=True), make(absorb=False)
        absorbed(x, x)
        expanded(x, x)
        assign_weights(expanded, util.randomize(absorbed, gates=GATES))
        mask = util.masks()["keys"][:, :, :6].copy()  # Row [1, 2] is fully masked.
        _, cache = absorbed.call_cached(x[:, :1], absorbed.init_cache(util.BATCH))
        a, a_cache = absorbed.call_cached(x[:, 1:], cache, attention_mask=mask)
        b, b_cache = expanded.call_cached(x[:, 1:], cache, attention_mask=mask)
        self.assertAllClose(a, b, atol=1e-5)
        self.assertAllClose(a_cache["latent"], b_cache["latent"])

    def test_cache_bytes_match_core_kv_cache(self):
        util.check_cache_bytes(self, make, SPEC)


class LatentApiTest(tf.test.TestCase, parameterized.TestCase):
    def test_absorb_round_trips_through_the_config(self):
        self.assertFalse(LatentAttention.from_config(make(absorb=False).get_config()).absorb)

    def test_compute_attention_override_gets_up_projected_heads(self):
        calls = []

        class Recording(LatentAttention):
            def _compute_attention(self, query, key, value, attention_mask=None, training=None):
                calls.append((query.shape.as_list(), key.shape.as_list(), value.shape.as_list()))
                return super()._compute_attention(query, key, value, attention_mask, training)

        x, y = util.inputs()
        plain, recording = make(), Recording(num_heads=HEADS, kv_latent_dim=RANK)
        plain(x, y)
        recording(x, y)
        assign_weights(recording, util.randomize(plain))
        calls.clear()
        mask = util.masks()["per_head"]
        self.assertAllClose(
            recording(x, y, attention_mask=mask), plain(x, y, attention_mask=mask), atol=1e-6
        )
        self.assertEqual(calls, [([2, 5, 4, 4], [2, 7, 4, 4], [2, 7, 4, 5])])

    def test_key_must_be_the_value(self):
        layer = make()
        x, y = util.inputs()
        self.assertEqual(layer(x, y, key=y).shape, (2, 5, WIDTH))
        with self.assertRaisesRegex(ValueError, r"one latent of the value input.*key=None"):
            layer(x, y, key=x[:, :1] + y)
        with self.assertRaisesRegex(ValueError, r"the key must be the value"):
            make()._build_from_signature(x, y, key=tf.zeros([2, 7, 8]))

    def test_arguments_are_checked(self):
        with self.assertRaisesRegex(SpecError, r"`kv_latent_dim` must be a positive integer"):
            LatentAttention(num_heads=4, kv_latent_dim=0)
        with self.assertRaisesRegex(SpecError, r"`head_size` must be a positive integer"):
            LatentAttention(num_heads=4, kv_latent_dim=8, head_size=-1)
        with self.assertRaisesRegex(ValueError, r"attention over axis 1 of rank-3 inputs only"):
            LatentAttention(num_heads=4, kv_latent_dim=8, attention_axes=(1, 2))
        x = tf.zeros([1, 3, 18])
        with self.assertRaisesRegex(ValueError, r"query width \(18\) is not a multiple.*\(4\)"):
            make()(x, x)

    def test_factory_and_roles(self):
        layer = make_attention(SPEC, name="attn")
        self.assertIsInstance(layer, LatentAttention)
        x, _ = util.inputs()
        layer(x, x)
        roles = numpy_weights(layer)
        self.assertEqual(
            [k for k in roles if k != "head_gates"],
            [
                "query_kernel",
                "query_bias",
                "latent_kernel",
                "key_up_kernel",
                "value_up_kernel",
                "value_bias",
                "output_kernel",
                "output_bias",
            ],
        )
        self.assertEqual(roles["latent_kernel"].shape, (WIDTH, RANK))
