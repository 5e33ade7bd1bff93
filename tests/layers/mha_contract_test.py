"""Our layers keep `tf_keras.layers.MultiHeadAttention`'s contract.

Weights port both ways with `set_weights`, `count_params()` is the paper's
trainable formula (the head gates are not Keras weights), high-dimensional
masks are accepted where stock MHA accepts them, `value_dim` works, and a
SavedModel of a subclassed model holding our layers reloads.
"""

import os

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from headsize_tf.core import params as hs_params
from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention

WIDTH, HEADS, LENGTH = 16, 4, 6
EXACT = {"rtol": 0, "atol": 1e-7}  # float32: the same operations in the same order as stock.


def _inputs(seed=0, shape=(2, LENGTH, WIDTH)):
    return tf.constant(np.random.default_rng(seed).normal(size=shape), tf.float32)


class SetWeightsTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(
        ("standard", lambda: StandardAttention(HEADS), WIDTH // HEADS),
        ("fixed_head", lambda: FixedHeadAttention(HEADS, head_size=8), 8),
        ("fixed_head_d_over_h", lambda: FixedHeadAttention(HEADS, head_size=4), 4),
    )
    def test_weights_port_both_ways(self, make, key_dim):
        x = _inputs()
        ours = make()
        stock = tf_keras.layers.MultiHeadAttention(HEADS, key_dim=key_dim)
        ours(x, x)
        stock(x, x)
        self.assertEqual(len(ours.weights), len(stock.weights))
        self.assertEqual(
            [w.shape.as_list() for w in ours.weights], [w.shape.as_list() for w in stock.weights]
        )
        ours.set_weights(stock.get_weights())
        # Stock MHA's operations in stock's order: equal to the last bit (float32).
        self.assertAllClose(ours(x, x), stock(x, x), **EXACT)

        back = tf_keras.layers.MultiHeadAttention(HEADS, key_dim=key_dim)
        back(x, x)
        back.set_weights(make_and_get(make, x))
        fresh = make()
        fresh(x, x)
        fresh.set_weights(back.get_weights())
        self.assertAllClose(fresh(x, x), back(x, x), **EXACT)

    @parameterized.named_parameters(
        ("standard", lambda: StandardAttention(HEADS), WIDTH // HEADS),
        ("fixed_head", lambda: FixedHeadAttention(HEADS, head_size=8), 8),
    )
    def test_equals_stock_with_and_without_mask(self, make, key_dim):
        x, y = _inputs(3), _inputs(4, (2, 5, WIDTH))
        mask = np.random.default_rng(5).integers(2, size=(2, LENGTH, 5)).astype(bool)
        mask[:, 0] = False  # A row that masks every key.
        ours = make()
        ours(x, y)
        stock = tf_keras.layers.MultiHeadAttention(HEADS, key_dim=key_dim)
        stock(x, y)
        stock.set_weights(ours.get_weights())
        for attention_mask in (None, mask):
            for call in (lambda f, *a, **k: f(*a, **k), _traced):
                got, got_scores = call(
                    ours, x, y, attention_mask=attention_mask, return_attention_scores=True
                )
                want, want_scores = call(
                    stock, x, y, attention_mask=attention_mask, return_attention_scores=True
                )
                self.assertAllClose(got, want, **EXACT)
                self.assertAllClose(got_scores, want_scores, **EXACT)
        # Unit gates change nothing; a masked head is a zeroed context of that head.
        ours.set_head_mask([1.0, 0.0, 1.0, 1.0])
        context = tf.einsum(
            stock._combine_equation,
            stock(x, y, attention_mask=mask, return_attention_scores=True)[1],
            stock._value_dense(y),
        )
        context *= tf.constant([1.0, 0.0, 1.0, 1.0])[:, None]
        self.assertAllClose(
            ours(x, y, attention_mask=mask), stock._output_dense(context), rtol=0, atol=1e-6
        )

    @parameterized.named_parameters(
        ("standard", "standard", None, None),
        ("fixed_head", "fixed_head", 8, None),
        ("fixed_head_value_dim", "fixed_head", 8, 3),
        ("collaborative", "collaborative", None, None),
    )
    def test_count_params_is_the_trainable_formula(self, kind, head_size, value_dim):
        x = _inputs()
        kwargs = {} if value_dim is None else {"value_dim": value_dim}
        if kind == "standard":
            layer = StandardAttention(HEADS, **kwargs)
        elif kind == "fixed_head":
            layer = FixedHeadAttention(HEADS, head_size=head_size, **kwargs)
        else:
            layer = CollaborativeAttention(HEADS, shared_key_dim=12, **kwargs)
        layer(x, x)
        formula = hs_params.attention_params(
            kind,
            WIDTH,
            num_heads=HEADS,
            head_size=head_size,
            shared_key_dim=12 if kind == "collaborative" else None,
            value_dim=value_dim,
        )
        self.assertEqual(layer.count_params(), formula.total)
        # The gates exist (importance needs them) but are not weights.
        self.assertAllEqual(layer.head_gates.numpy(), np.ones(HEADS))
        self.assertNotIn(id(layer.head_gates), [id(w) for w in layer.weights])


def _traced(layer, *args, **kwargs):
    return tf.function(lambda: layer(*args, **kwargs))()


def make_and_get(make, x):
    layer = make()
    layer(x, x)
    return layer.get_weights()


class ValueDimTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(("standard", None), ("fixed_head", 6))
    def test_value_dim_matches_stock_mha(self, head_size):
        x, y = _inputs(1), _inputs(2, (2, 5, WIDTH))
        ours = (
            StandardAttention(HEADS, value_dim=3)
            if head_size is None
            else FixedHeadAttention(HEADS, head_size=head_size, value_dim=3)
        )
        stock = tf_keras.layers.MultiHeadAttention(
            HEADS, key_dim=head_size or WIDTH // HEADS, value_dim=3
        )
        ours(x, y)
        stock(x, y)
        self.assertEqual(ours.head_size, head_size or WIDTH // HEADS)
        self.assertEqual(ours.value_dim, 3)
        self.assertEqual(ours._value_dense.kernel.shape.as_list(), [WIDTH, HEADS, 3])
        ours.set_weights(stock.get_weights())
        self.assertAllClose(ours(x, y), stock(x, y), **EXACT)
        clone = type(ours).from_config(ours.get_config())
        self.assertEqual(clone.get_config()["value_dim"], 3)

    def test_collaborative_value_dim(self):
        x = _inputs()
        layer = CollaborativeAttention(HEADS, shared_key_dim=8, value_dim=5)
        self.assertEqual(layer(x, x).shape, x.shape)
        self.assertEqual(layer._value_dense.kernel.shape.as_list(), [WIDTH, HEADS, 5])
        self.assertEqual(layer.head_size, WIDTH // HEADS)  # The softmax scale is unchanged.

    def test_bad_value_dim(self):
        with self.assertRaisesRegex(ValueError, r"`value_dim` must be a positive integer; got 0"):
            FixedHeadAttention(HEADS, head_size=4, value_dim=0)
        with self.assertRaisesRegex(ValueError, r"`key_dim=3` is not an argument"):
            FixedHeadAttention(HEADS, head_size=4, key_dim=3)


class HighDimMaskTest(tf.test.TestCase, parameterized.TestCase):
    # The cases of tf_keras' own `test_high_dim_attention`.
    @parameterized.named_parameters(
        ("4d_inputs_1freebatch_mask2", [3, 4], [3, 2], [4, 2], (2,)),
        ("4d_inputs_1freebatch_mask3", [3, 4], [3, 2], [3, 4, 2], (2,)),
        ("4d_inputs_1freebatch_mask4", [3, 4], [3, 2], [3, 2, 4, 2], (2,)),
        ("4D_inputs_2D_attention", [3, 4], [3, 2], [3, 4, 3, 2], (1, 2)),
        ("5D_inputs_2D_attention", [5, 3, 4], [5, 3, 2], [3, 4, 3, 2], (2, 3)),
        ("5D_inputs_2D_attention_fullmask", [5, 3, 4], [5, 3, 2], [5, 3, 4, 3, 2], (2, 3)),
    )
    def test_accepted_where_stock_accepts(self, q_dims, v_dims, mask_dims, attention_axes):
        batch, width = 3, 8
        rng = np.random.default_rng(0)
        query = rng.normal(size=[batch] + q_dims + [width]).astype(np.float32)
        value = rng.normal(size=[batch] + v_dims + [width]).astype(np.float32)
        mask = rng.integers(2, size=[batch] + mask_dims).astype(bool)
        for make in (
            lambda: StandardAttention(2, attention_axes=attention_axes),
            lambda: FixedHeadAttention(2, head_size=3, attention_axes=attention_axes),
        ):
            ours = make()
            ours(query, value)
            stock = tf_keras.layers.MultiHeadAttention(
                2, key_dim=ours.head_size, attention_axes=attention_axes
            )
            stock(query, value)
            stock.set_weights(ours.get_weights())
            self.assertAllClose(
                ours(query, value, attention_mask=mask),
                stock(query, value, attention_mask=mask),
                **EXACT,
            )


@tf_keras.utils.register_keras_serializable(package="headsize_tf_tests")
class _Holder(tf_keras.Model):
    def __init__(self, attention, **kwargs):
        super().__init__(**kwargs)
        self.attention = attention
        self.head = tf_keras.layers.Dense(2)

    def call(self, x):
        return self.head(self.attention(x, x))


class SavedModelTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(
        ("standard", lambda: StandardAttention(HEADS)),
        ("fixed_head", lambda: FixedHeadAttention(HEADS, head_size=8, value_dim=3)),
        ("collaborative", lambda: CollaborativeAttention(HEADS, shared_key_dim=8)),
    )
    def test_subclassed_model_round_trip(self, make):
        x = _inputs()
        model = _Holder(make())
        model(x)
        model.attention.set_head_mask([1.0, 0.0, 1.0, 1.0])
        expected = model(x)
        path = os.path.join(self.get_temp_dir(), "saved")
        model.save(path, save_format="tf")
        loaded = tf_keras.models.load_model(path)
        self.assertAllClose(loaded(x), expected, atol=1e-5)
        # The head mask is part of the saved state.
        restored = _Holder(make())
        restored(x)
        restored.load_weights(os.path.join(path, "variables", "variables"))
        self.assertAllClose(restored.attention.head_gates.numpy(), [1.0, 0.0, 1.0, 1.0])
