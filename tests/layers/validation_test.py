"""Bad input: each raises a ValueError naming the value and what was expected."""

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention


class ValidationTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(0, -4)
    def test_head_size_not_positive(self, bad):
        with self.assertRaisesRegex(
            ValueError, rf'`head_size` must be a positive int or "sequence_length"; got {bad}'
        ):
            FixedHeadAttention(num_heads=2, head_size=bad)

    def test_head_size_non_integer_string(self):
        with self.assertRaisesRegex(ValueError, r"got 'seq_len'"):
            FixedHeadAttention(num_heads=2, head_size="seq_len")
        with self.assertRaisesRegex(ValueError, r"got 2.5"):
            FixedHeadAttention(num_heads=2, head_size=2.5)

    def test_collaborative_head_size_not_positive(self):
        with self.assertRaisesRegex(ValueError, r"`head_size` must be a positive integer; got 0"):
            CollaborativeAttention(num_heads=2, shared_key_dim=4, head_size=0)

    @parameterized.parameters(0, -1)
    def test_shared_key_dim_not_positive(self, bad):
        with self.assertRaisesRegex(
            ValueError, rf"`shared_key_dim` must be a positive integer; got {bad}"
        ):
            CollaborativeAttention(num_heads=2, shared_key_dim=bad)

    def test_standard_width_not_divisible(self):
        layer = StandardAttention(num_heads=12)
        x = tf.zeros([1, 3, 64])
        with self.assertRaisesRegex(
            ValueError, r"width \(64\) is not a multiple of num_heads \(12\)"
        ):
            layer(x, x)

    def test_collaborative_default_head_size_needs_divisible_width(self):
        x = tf.zeros([1, 3, 10])
        with self.assertRaisesRegex(
            ValueError, r"width \(10\) is not a multiple of num_heads \(4\)"
        ):
            CollaborativeAttention(num_heads=4, shared_key_dim=8)(x, x)
        out = CollaborativeAttention(num_heads=4, shared_key_dim=8, head_size=3)(x, x)
        self.assertEqual(out.shape, (1, 3, 10))

    def test_unknown_mixing_initializer(self):
        with self.assertRaisesRegex(
            ValueError, r"Unknown `mixing_initializer` 'concat'; expected one of \['concatenate'"
        ):
            CollaborativeAttention(num_heads=2, shared_key_dim=4, mixing_initializer="concat")

    def test_concatenate_mixing_needs_divisible_shared_dim(self):
        layer = CollaborativeAttention(
            num_heads=4, shared_key_dim=10, mixing_initializer="concatenate"
        )
        x = tf.zeros([1, 3, 8])
        with self.assertRaisesRegex(
            ValueError, r"shared_key_dim \(10\) to be a multiple of num_heads \(4\)"
        ):
            layer(x, x)

    def test_keras_initializer_for_mixing(self):
        layer = CollaborativeAttention(num_heads=2, shared_key_dim=4, mixing_initializer="zeros")
        x = tf.ones([1, 3, 8])
        layer(x, x)
        self.assertAllEqual(layer.mixing, np.zeros((2, 4)))
        config = layer.get_config()
        self.assertEqual(config["mixing_initializer"], "zeros")
        layer2 = CollaborativeAttention(
            num_heads=2, shared_key_dim=4, mixing_initializer=tf_keras.initializers.Constant(0.5)
        )
        layer2(x, x)
        self.assertAllClose(layer2.mixing, np.full((2, 4), 0.5))
        clone = CollaborativeAttention.from_config(layer2.get_config())
        clone(x, x)
        self.assertAllClose(clone.mixing, np.full((2, 4), 0.5))

    def test_sequence_length_head_size(self):
        layer = FixedHeadAttention(num_heads=2, head_size="sequence_length")
        q = tf_keras.Input(shape=[4, 8])
        kv = tf_keras.Input(shape=[6, 8])
        layer(q, kv)
        self.assertEqual(layer.head_size, 6)  # the key length

    def test_sequence_length_unknown(self):
        layer = FixedHeadAttention(num_heads=2, head_size="sequence_length")
        x = tf_keras.Input(shape=[None, 8])
        with self.assertRaisesRegex(
            ValueError, r'head_size="sequence_length" needs a static key sequence length'
        ):
            layer(x, x)

    def test_dropout_out_of_range(self):
        with self.assertRaisesRegex(ValueError, r"`dropout` must be a float in \[0, 1\); got 1.5"):
            StandardAttention(num_heads=2, dropout=1.5)

    def test_collaborative_rejects_other_attention_axes(self):
        with self.assertRaisesRegex(ValueError, r"attention_axes=\(2,\)"):
            CollaborativeAttention(num_heads=2, shared_key_dim=4, attention_axes=(2,))

    def test_collaborative_rejects_rank_4(self):
        x = tf.zeros([1, 2, 3, 8])
        with self.assertRaisesRegex(ValueError, r"rank-3 query inputs"):
            CollaborativeAttention(num_heads=2, shared_key_dim=4)(x, x)

    def test_set_head_mask_before_build(self):
        with self.assertRaisesRegex(ValueError, r"not built yet"):
            StandardAttention(num_heads=2).set_head_mask([1, 1])

    def test_mask_of_wrong_rank(self):
        x = tf.zeros([2, 3, 8])
        # Per-head [batch, heads, query, key] masks are stock MHA's (per_head_mask_test.py).
        with self.assertRaisesRegex(ValueError, r"has shape \[2, 1, 1, 3, 3\]; expected"):
            StandardAttention(num_heads=2)(x, x, attention_mask=np.ones((2, 1, 1, 3, 3), bool))

    def test_broadcastable_mask_is_accepted(self):
        x = tf.random.normal([2, 3, 8])
        layer = StandardAttention(num_heads=2)
        mask = np.array([[True, True, False]])  # [1, S] -> broadcast over batch and queries
        full = np.broadcast_to(mask[None], (2, 3, 3))
        self.assertAllClose(
            layer(x, x, attention_mask=mask[None]), layer(x, x, attention_mask=full)
        )
