"""Behaviour shared by the three attention layers (parameterized over kinds)."""

import os
import tempfile

import numpy as np
import tensorflow as tf
import tf_keras
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
    def test_masked_keys_get_zero_weight(self, kind):
        layer = KINDS[kind]()
        x, y = _inputs()
        mask = np.ones((2, 5, 7), bool)
        mask[:, :, [1, 4]] = False
        mask[1, 2, 6] = False
        _, scores = layer(x, y, attention_mask=mask, return_attention_scores=True)
        scores = scores.numpy()
        self.assertAllClose(scores[:, :, :, [1, 4]], np.zeros((2, layer.num_heads, 5, 2)))
        self.assertAllClose(scores[1, :, 2, 6], np.zeros(layer.num_heads))
        self.assertAllClose(scores.sum(-1), np.ones((2, layer.num_heads, 5)), atol=1e-6)

    @parameterized.parameters(*KIND_PARAMS)
    def test_causal_mask_blocks_future(self, kind):
        layer = KINDS[kind]()
        x, _ = _inputs()
        _, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
        upper = np.triu(np.ones((5, 5), bool), k=1)
        self.assertAllClose(scores.numpy()[:, :, upper], np.zeros((2, layer.num_heads, 10)))

    @parameterized.parameters(*KIND_PARAMS)
    def test_scores_shape_and_output_shape(self, kind):
        layer = KINDS[kind]()
        x, y = _inputs()
        out, scores = layer(x, y, return_attention_scores=True)
        self.assertEqual(out.shape, (2, 5, 16))
        self.assertEqual(scores.shape, (2, layer.num_heads, 5, 7))
        out2 = KINDS[kind](output_shape=10)(x, y)
        self.assertEqual(out2.shape, (2, 5, 10))

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
    def test_finite_under_mixed_bfloat16(self, kind):
        layer = KINDS[kind](dtype="mixed_bfloat16")
        x, y = _inputs()
        mask = np.ones((2, 5, 7), bool)
        mask[:, :, 0] = False
        out = layer(x, y, attention_mask=mask)
        self.assertEqual(out.dtype, tf.bfloat16)
        self.assertTrue(np.all(np.isfinite(tf.cast(out, tf.float32).numpy())))
        self.assertEqual(layer.trainable_weights[0].dtype, tf.float32)

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
    def test_config_round_trip(self, kind):
        layer = KINDS[kind](dropout=0.1, seed=7, use_bias=True, kernel_initializer="he_normal")
        x, y = _inputs()
        layer(x, y)
        config = layer.get_config()
        for key in ("num_heads", "dropout", "seed", "use_bias", "kernel_initializer"):
            self.assertIn(key, config)
        self.assertNotIn("key_dim", config)
        clone = type(layer).from_config(config)
        self.assertEqual(clone.get_config(), config)
        clone.set_weights(layer.get_weights())
        self.assertAllClose(clone(x, y), layer(x, y))

    @parameterized.parameters(*KIND_PARAMS)
    def test_keras_and_savedmodel_round_trip(self, kind):
        t_in = tf_keras.Input(shape=[5, 16])
        s_in = tf_keras.Input(shape=[7, 16])
        m_in = tf_keras.Input(shape=[5, 7], dtype=tf.bool)
        out = KINDS[kind]()(t_in, s_in, attention_mask=m_in)
        model = tf_keras.Model([t_in, s_in, m_in], out)
        x, y = _inputs()
        mask = np.ones((2, 5, 7), bool)
        mask[0, :, 3] = False
        expected = model([x, y, mask]).numpy()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.keras")
            model.save(path)
            restored = tf_keras.models.load_model(path)
            self.assertAllClose(restored([x, y, mask]), expected, atol=1e-6)
            sm_dir = os.path.join(tmp, "saved_model")
            model.save(sm_dir, save_format="tf")
            restored_sm = tf_keras.models.load_model(sm_dir)
            self.assertAllClose(restored_sm([x, y, mask]), expected, atol=1e-6)
            raw = tf.saved_model.load(sm_dir)
            self.assertAllClose(raw([x, y, mask], training=False), expected, atol=1e-6)

    @parameterized.parameters(*KIND_PARAMS)
    def test_trains_with_fit(self, kind):
        inp = tf_keras.Input(shape=[6, 16])
        out = KINDS[kind]()(inp, inp)
        model = tf_keras.Model(inp, tf_keras.layers.GlobalAveragePooling1D()(out))
        model.compile(tf_keras.optimizers.Adam(1e-2), "mse")
        rng = np.random.default_rng(0)
        x = rng.normal(size=(64, 6, 16)).astype(np.float32)
        target = np.roll(x, 1, axis=1).mean(1)
        history = model.fit(x, target, epochs=15, batch_size=16, verbose=0)
        self.assertLess(history.history["loss"][-1], 0.5 * history.history["loss"][0])

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

    def test_fixed_head_cache_has_head_size_not_width_over_heads(self):
        layer = FixedHeadAttention(num_heads=8, head_size=32)  # width 16: 16 / 8 = 2
        x, _ = _inputs(t=3)
        layer(x, x)
        self.assertEqual(layer.cache_shapes(2, 3)["key"], [2, 3, 8, 32])
