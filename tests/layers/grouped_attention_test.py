"""GroupedAttention: numpy oracle, exact conversion, Model Garden's layer, cache, arguments.

The contract every attention layer meets is checked in layer_contract_test.py.
"""

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized
from official.nlp.modeling.layers import multi_query_attention

from headsize_tf.core.kv_sharing import grouped_weights
from headsize_tf.core.spec import AttentionSpec, SpecError
from headsize_tf.layers import GroupedAttention, StandardAttention
from headsize_tf.layers.factory import make_attention
from headsize_tf.layers.roles import assign_weights, numpy_weights
from headsize_tf.reparam.convert import attention_weights
from tests import kv_oracle
from tests.layers import layer_check as util
from tests.layers.layer_check import HEADS, WIDTH

GATES = np.array([1.0, 0.5, 0.0, 1.0], np.float32)


def make(groups=2, **kwargs):
    return GroupedAttention(num_heads=HEADS, num_kv_heads=groups, **kwargs)


SPEC = AttentionSpec("grouped", num_heads=HEADS, num_kv_heads=2)


class GroupedOracleTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.product(groups=[1, 2, 4], mask=["none", "keys", "per_head"])
    def test_equals_numpy_oracle(self, groups, mask):
        layer = make(groups, value_dim=3)
        x, y = util.inputs()
        layer(x, y)
        weights = util.randomize(layer, seed=groups, gates=GATES)
        attention_mask = util.masks()[mask]
        out, scores = layer(x, y, attention_mask=attention_mask, return_attention_scores=True)
        expected = kv_oracle.grouped(weights, x, y, attention_mask, masked_rows="uniform")
        self.assertAllClose(out, expected, atol=1e-5)
        self.assertEqual(scores.shape, (util.BATCH, HEADS, util.T, util.S))

    def test_value_bias_scales_with_dropped_out_row_sums(self):
        # A fixed "dropout" (zeros and twos): the value bias follows each head's row sum.
        layer = make(2)
        x, y = util.inputs()
        layer(x, y)
        weights = util.randomize(layer, gates=GATES)
        keep = np.random.default_rng(3).random((util.BATCH, HEADS, util.T, util.S)) > 0.5
        layer._dropout_layer = lambda a, training=None: a * tf.cast(2.0 * keep, a.dtype)
        out = layer(x, y, training=True).numpy()
        x64, y64 = (np.asarray(t, np.float64) for t in (x, y))
        logits = kv_oracle.grouped_logits(weights, x64, y64)
        a = np.exp(logits - logits.max(-1, keepdims=True))
        a = a / a.sum(-1, keepdims=True) * 2.0 * keep
        v = np.einsum("bse,egv->bsgv", y64, weights["value_kernel"]).repeat(2, axis=2)
        context = np.einsum("bhts,bshv->bthv", a, v)
        context += np.einsum("bht,hv->bthv", a.sum(-1), weights["value_bias"])
        expected = np.einsum("bthv,h,hvo->bto", context, GATES, weights["output_kernel"])
        self.assertAllClose(out, expected + weights["output_bias"], atol=1e-5)

    def test_gate_equals_zeroing_the_heads_output_rows(self):
        layer = make(2)
        x, y = util.inputs()
        layer(x, y)
        weights = util.randomize(layer)
        layer.set_head_mask([1.0, 1.0, 0.0, 1.0])
        gated = layer(x, y).numpy()
        zeroed = dict(weights, head_gates=np.ones(HEADS, np.float32))
        zeroed["output_kernel"] = weights["output_kernel"].copy()
        zeroed["output_kernel"][2] = 0.0
        assign_weights(layer, zeroed)
        self.assertAllClose(layer(x, y), gated, atol=1e-6)


class GroupedConversionTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.product(method=["mean", "svd"], mask=["keys", "per_head"])
    def test_converted_standard_layer_is_exact_with_one_head_per_group(self, method, mask):
        source = StandardAttention(num_heads=HEADS)
        x, y = util.inputs()
        source(x, y)
        util.randomize(source, seed=5, gates=GATES)  # Key and value biases included.
        converted, _ = grouped_weights(attention_weights(source), HEADS, method=method)
        layer = make(HEADS)
        layer(x, y)
        assign_weights(layer, converted)
        self.assertAllClose(layer.head_gates, GATES)
        attention_mask = util.masks()[mask]
        expected, expected_scores = source(
            x, y, attention_mask=attention_mask, return_attention_scores=True
        )
        out, scores = layer(x, y, attention_mask=attention_mask, return_attention_scores=True)
        self.assertAllClose(out, expected, atol=1e-5)
        self.assertAllClose(scores, expected_scores, atol=1e-6)

    @parameterized.parameters(1, 2)
    def test_equals_model_garden_multi_query_attention(self, groups):
        x, y = util.inputs()
        garden = multi_query_attention.MultiHeadAttention(
            num_heads=HEADS, key_dim=WIDTH // HEADS, num_kv_heads=groups
        )
        garden(x, y)
        rng = np.random.default_rng(7)
        for variable in garden.weights:  # Key and value biases included.
            variable.assign(rng.normal(0.0, 0.5, variable.shape))
        if groups > 1:
            # Model Garden 2.20 normalises its [B, n, K, T, S] scores over axis 3 (the
            # queries) when num_kv_heads > 1; normalise over the keys, as attention does.
            garden._softmax = tf_keras.layers.Softmax(axis=-1)
        mask = util.masks()["keys"]
        expected, expected_scores = garden(x, y, attention_mask=mask, return_attention_scores=True)
        # Query head i is in group i // n; Model Garden's context and scores come back in
        # the order j * K + k (j = i % n, k = i // n): permute its output kernel rows.
        size = HEADS // groups
        heads = np.arange(HEADS)
        order = (heads % size) * groups + heads // size if groups > 1 else heads
        p = WIDTH // HEADS
        weights = {
            "query_kernel": garden._query_dense.kernel.numpy(),
            "query_bias": garden._query_dense.bias.numpy(),
            "key_kernel": garden._key_dense.kernel.numpy().reshape(WIDTH, groups, p),
            "value_kernel": garden._value_dense.kernel.numpy().reshape(WIDTH, groups, p),
            # The key bias is dropped; the value bias of group g goes to its query heads.
            "value_bias": garden._value_dense.bias.numpy().reshape(groups, p)[heads // size],
            "output_kernel": garden._output_dense.kernel.numpy()[order],
            "output_bias": garden._output_dense.bias.numpy(),
        }
        layer = make(groups)
        layer(x, y)
        assign_weights(layer, weights)
        out, scores = layer(x, y, attention_mask=mask, return_attention_scores=True)
        self.assertAllClose(out, expected, atol=1e-5)
        self.assertAllClose(scores, tf.gather(expected_scores, order, axis=1), atol=1e-6)


class GroupedCacheTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(1, 2, 4)
    def test_cached_decoding_equals_causal_call(self, groups):
        layer = make(groups, value_dim=3)
        x, _ = util.inputs()
        layer(x, x)
        util.randomize(layer, gates=GATES)
        util.check_cached_decoding(self, layer)
        self.assertEqual(
            layer.cache_shapes(2, 6), {"key": [2, 6, groups, 4], "value": [2, 6, groups, 3]}
        )

    def test_cache_bytes_match_core_kv_cache(self):
        util.check_cache_bytes(self, make, SPEC)


class GroupedApiTest(tf.test.TestCase, parameterized.TestCase):
    def test_compute_attention_override_gets_grouped_projections(self):
        calls = []

        class Recording(GroupedAttention):
            def _compute_attention(self, query, key, value, attention_mask=None, training=None):
                calls.append((query.shape.as_list(), key.shape.as_list(), value.shape.as_list()))
                return super()._compute_attention(query, key, value, attention_mask, training)

        x, y = util.inputs()
        plain, recording = make(2), Recording(num_heads=HEADS, num_kv_heads=2)
        plain(x, y)
        recording(x, y)
        weights = util.randomize(plain)
        assign_weights(recording, weights)
        calls.clear()
        mask = util.masks()["keys"]
        self.assertAllClose(
            recording(x, y, attention_mask=mask), plain(x, y, attention_mask=mask), atol=1e-6
        )
        # The values carry a ones channel (the row sums that scale the value bias).
        self.assertEqual(calls, [([2, 5, 4, 4], [2, 7, 2, 4], [2, 7, 2, 5])])

    def test_arguments_are_checked(self):
        with self.assertRaisesRegex(SpecError, r"num_kv_heads=3 does not divide num_heads=8"):
            GroupedAttention(num_heads=8, num_kv_heads=3)
        with self.assertRaisesRegex(SpecError, r"`num_kv_heads` must be a positive integer"):
            GroupedAttention(num_heads=8, num_kv_heads=0)
        with self.assertRaisesRegex(ValueError, r"attention over axis 1 of rank-3 inputs only"):
            GroupedAttention(num_heads=8, num_kv_heads=2, attention_axes=2)
        with self.assertRaisesRegex(ValueError, r"key_dim=4.*not an argument"):
            GroupedAttention(num_heads=8, num_kv_heads=2, key_dim=4)
        x = tf.zeros([1, 3, 18])
        with self.assertRaisesRegex(ValueError, r"query width \(18\) is not a multiple.*\(4\)"):
            make()(x, x)

    def test_factory_and_roles(self):
        layer = make_attention(SPEC, name="attn")
        self.assertIsInstance(layer, GroupedAttention)
        x, _ = util.inputs()
        layer(x, x)
        self.assertEqual(layer.group_of_head, [0, 0, 1, 1])
        roles = numpy_weights(layer)
        self.assertEqual(roles["key_kernel"].shape, (WIDTH, 2, 4))
        self.assertNotIn("key_bias", roles)
        self.assertEqual(roles["value_bias"].shape, (HEADS, 4))
        with self.assertRaisesRegex(ValueError, r"has no weights \['mixing'\]"):
            assign_weights(layer, dict(roles, mixing=np.zeros(3)))
