"""Dropout, XLA, head gates, argument checks and cached decoding of the three attention layers.

The contract every layer meets (build, config, parameter count, saving, masks, dtype
policies, fit) is checked in layer_contract_test.py.
"""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention

KINDS = {
    "standard": lambda **kw: StandardAttention(num_heads=4, **kw),
    "fixed_head": lambda **kw: FixedHeadAttention(num_heads=3, head_size=8, **kw),
    "collaborative": lambda **kw: CollaborativeAttention(num_heads=4, shared_key_dim=12, **kw),
}
KIND_PARAMS = [(k,) for k in KINDS]


def _inputs(batch=2, t=5, s=7, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return (
        tf.constant(rng.normal(size=(batch, t, d)), tf.float32),
        tf.constant(rng.normal(size=(batch, s, d)), tf.float32),
    )


class CommonAttentionTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(*KIND_PARAMS)
    def test_dropout_only_in_training(self, kind):
        layer = KINDS[kind](dropout=0.5, seed=3)
        x, y = _inputs()
        infer_a = layer(x, y, training=False)
        infer_b = layer(x, y, training=False)
        train = layer(x, y, training=True)
        self.assertAllClose(infer_a, infer_b)
        self.assertGreater(float(tf.reduce_max(tf.abs(train - infer_a))), 1e-3)

    @parameterized.parameters(*KIND_PARAMS)
    def test_xla_matches_eager(self, kind):
        layer = KINDS[kind]()
        x, y = _inputs()
        eager = layer(x, y, use_causal_mask=False)
        compiled = tf.function(lambda a, b: layer(a, b), jit_compile=True)(x, y)
        self.assertTrue(np.all(np.isfinite(compiled.numpy())))
        self.assertAllClose(eager, compiled, atol=1e-5)

    @parameterized.parameters(*KIND_PARAMS)
    def test_head_gate_equals_zeroed_context(self, kind):
        layer = KINDS[kind]()
        x, y = _inputs()
        layer(x, y)
        base = layer(x, y).numpy()
        gates = np.ones(layer.num_heads, np.float32)
        gates[1] = 0.0
        layer.set_head_mask(gates)
        masked = layer(x, y).numpy()
        # Zero head 1's context by hand: subtract its contribution to the output.
        layer.set_head_mask(np.ones(layer.num_heads))
        context, _ = layer._attend(x, y, y, None, False)
        contribution = tf.einsum(
            "bth,ho->bto",
            context[:, :, 1, :],
            layer._output_dense.kernel[1],
        ).numpy()
        self.assertAllClose(masked, base - contribution, atol=1e-5)
        self.assertAllClose(layer(x, y), base, atol=1e-6)

    @parameterized.parameters(*KIND_PARAMS)
    def test_head_mask_of_wrong_shape(self, kind):
        layer = KINDS[kind]()
        x, y = _inputs()
        layer(x, y)
        with self.assertRaisesRegex(ValueError, r"shape \[2\]; expected \[\d+\]"):
            layer.set_head_mask([1.0, 0.0])

    @parameterized.parameters(*KIND_PARAMS)
    def test_mask_of_wrong_shape(self, kind):
        layer = KINDS[kind]()
        x, y = _inputs()
        with self.assertRaisesRegex(
            ValueError, r"attention_mask.*\[2, 5, 6\].*expected.*\[2, 5, 7\]"
        ):
            layer(x, y, attention_mask=np.ones((2, 5, 6), bool))

    @parameterized.parameters(*KIND_PARAMS)
    def test_num_heads_must_be_positive(self, kind):
        cls = type(KINDS[kind]())
        kwargs = {"fixed_head": {"head_size": 8}, "collaborative": {"shared_key_dim": 8}}.get(
            kind, {}
        )
        with self.assertRaisesRegex(ValueError, r"`num_heads` must be a positive integer; got 0"):
            cls(num_heads=0, **kwargs)
        with self.assertRaisesRegex(ValueError, r"`num_heads` must be a positive integer; got -2"):
            cls(num_heads=-2, **kwargs)

    @parameterized.parameters(*KIND_PARAMS)
    def test_key_dim_is_rejected(self, kind):
        with self.assertRaisesRegex(ValueError, r"key_dim=16.*not an argument"):
            KINDS[kind](key_dim=16)


class CachedDecodingTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(*KIND_PARAMS)
    def test_incremental_equals_causal_full(self, kind):
        layer = KINDS[kind]()
        x, _ = _inputs(t=6)
        full = layer(x, x, use_causal_mask=True).numpy()
        cache = layer.init_cache(batch_size=2)
        steps = []
        for t in range(6):
            out, cache = layer.call_cached(x[:, t : t + 1], cache)
            steps.append(out.numpy())
        self.assertAllClose(np.concatenate(steps, axis=1), full, atol=1e-5)
        self.assertEqual(cache["value"].shape[:2], (2, 6))

    @parameterized.parameters(*KIND_PARAMS)
    def test_fixed_length_cache_with_decode_loop_step(self, kind):
        layer = KINDS[kind]()
        x, _ = _inputs(t=5)
        full = layer(x, x, use_causal_mask=True).numpy()
        cache = layer.init_cache(batch_size=2, length=5)
        for name, shape in layer.cache_shapes(2, 5).items():
            self.assertEqual(cache[name].shape, tuple(shape))
        step = tf.function(
            lambda q, c, m, i: layer.call_cached(q, c, attention_mask=m, decode_loop_step=i)
        )
        for t in range(5):
            mask = np.zeros((2, 1, 5), bool)
            mask[:, :, : t + 1] = True
            out, cache = step(x[:, t : t + 1], cache, mask, tf.constant(t))
            self.assertAllClose(out.numpy()[:, 0], full[:, t], atol=1e-5)

    @parameterized.parameters(*KIND_PARAMS)
    def test_cached_calls_are_causal_without_a_mask(self, kind):
        """A prompt prefilled in one call, and a fixed-length cache without a mask: each
        position sees the cache up to itself (its unwritten positions never)."""
        layer = KINDS[kind]()
        x, _ = _inputs(t=5)
        full = layer(x, x, use_causal_mask=True).numpy()
        prefill, cache = layer.call_cached(x[:, :3])
        self.assertAllClose(prefill.numpy(), full[:, :3], atol=1e-5)
        rest, _ = layer.call_cached(x[:, 3:], cache)
        self.assertAllClose(rest.numpy(), full[:, 3:], atol=1e-5)
        fixed = layer.init_cache(batch_size=2, length=5)
        for t in range(5):
            out, fixed = layer.call_cached(x[:, t : t + 1], fixed, decode_loop_step=t)
            self.assertAllClose(out.numpy()[:, 0], full[:, t], atol=1e-5)

    def test_fixed_head_cache_has_head_size_not_width_over_heads(self):
        layer = FixedHeadAttention(num_heads=8, head_size=32)  # width 16: 16 / 8 = 2
        x, _ = _inputs(t=3)
        layer(x, x)
        self.assertEqual(layer.cache_shapes(2, 3)["key"], [2, 3, 8, 32])
