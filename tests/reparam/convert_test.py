"""Converting trained attention layers into collaborative heads."""

import warnings

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from headsize_tf.modeling import HeadsizeBertEncoder
from headsize_tf.reparam import compress_encoder, convert_layer_weights, to_collaborative
from tests.layers import reference, util


def _layer(kind, heads=4, width=16, head_size=8, seed=0):
    kwargs = {"num_heads": heads, "bias_initializer": "random_normal", "name": "attn"}
    if kind == "fixed_head":
        layer = FixedHeadAttention(head_size=head_size, **kwargs)
    elif kind == "keras":
        layer = tf_keras.layers.MultiHeadAttention(key_dim=width // heads, **kwargs)
    else:
        layer = StandardAttention(**kwargs)
    x = np.random.default_rng(seed).normal(size=(2, 7, width)).astype(np.float32)
    y = layer(x, x)
    return layer, x, y


class ConvertTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters("standard", "fixed_head", "keras")
    def test_full_rank_is_exact(self, kind):
        layer, x, y = _layer(kind)
        full = layer._query_dense.kernel.shape[1] * layer._query_dense.kernel.shape[2]
        new, report = to_collaborative(layer, full)
        self.assertIsInstance(new, CollaborativeAttention)
        self.assertEqual(report.method, "exact")
        self.assertAllClose(new(x, x), y, atol=1e-5)
        # Scores equal too: the key bias only shifts logits by a per-query constant.
        _, scores = layer(x, x, return_attention_scores=True)
        _, new_scores = new(x, x, return_attention_scores=True)
        self.assertAllClose(new_scores, scores, atol=1e-6)

    def test_compressed_keeps_the_original_softmax_scale(self):
        layer, x, _ = _layer("standard", heads=4, width=16)  # head size 4
        new, report = to_collaborative(layer, 6)  # D/h = 1.5 != 4
        _, scores = new(x, x, return_attention_scores=True)
        w = util.read_weights(new)
        _, expected = reference.collaborative(x, x, w, head_size=4)
        _, wrong = reference.collaborative(x, x, w, head_size=6 / 4)
        self.assertAllClose(scores, expected, atol=1e-5)
        self.assertGreater(np.abs(scores.numpy() - wrong).max(), 1e-2)
        self.assertGreater(report.relative_error, 0.0)

    def test_content_bias_is_key_kernel_times_query_bias(self):
        layer, _, _ = _layer("standard")
        weights, _ = convert_layer_weights(layer, 16)
        wk = layer._key_dense.kernel.numpy()
        bq = layer._query_dense.bias.numpy()
        for h in range(4):
            self.assertAllClose(weights["content_bias"][:, h], wk[:, h, :] @ bq[h], atol=1e-6)

    def test_gates_are_copied(self):
        layer, x, _ = _layer("standard")
        layer.set_head_mask([1.0, 0.0, 1.0, 1.0])
        new, _ = to_collaborative(layer, 16)
        self.assertAllEqual(new.head_gates.numpy(), [1.0, 0.0, 1.0, 1.0])
        self.assertAllClose(new(x, x), layer(x, x), atol=1e-5)

    def test_tolerance_warns_with_the_achieved_error(self):
        layer, _, _ = _layer("standard")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, report = convert_layer_weights(layer, 2, tolerance=1e-6)
        self.assertLen(caught, 1)
        self.assertIn(f"{report.relative_error:.4g}", str(caught[0].message))

    def test_bad_inputs(self):
        layer, _, _ = _layer("standard")
        for bad in (0, -1):
            with self.assertRaisesRegex(
                ValueError, f"shared_key_dim must be a positive integer; got {bad}"
            ):
                to_collaborative(layer, bad)
        with self.assertRaisesRegex(ValueError, "'dense'.*not a standard multi-head attention"):
            to_collaborative(tf_keras.layers.Dense(3, name="dense"), 4)
        collab = CollaborativeAttention(num_heads=2, shared_key_dim=4, name="c")
        with self.assertRaisesRegex(ValueError, "not a standard multi-head attention"):
            to_collaborative(collab, 4)
        with self.assertRaisesRegex(ValueError, "not built"):
            to_collaborative(StandardAttention(num_heads=2, name="fresh"), 4)
        with self.assertRaisesRegex(ValueError, "Unknown CP method"):
            to_collaborative(layer, 4, method="svd")


class CompressEncoderTest(tf.test.TestCase):
    def test_encoder_full_rank_equal_and_source_unchanged(self):
        encoder = HeadsizeBertEncoder(
            vocab_size=50, hidden_size=32, num_layers=2, attention=dict(num_heads=4), inner_dim=64
        )
        ids = np.random.default_rng(0).integers(1, 50, size=(2, 9)).astype(np.int32)
        mask = np.ones_like(ids)
        mask[1, 6:] = 0
        inputs = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": 0 * ids}
        before = encoder(inputs)["sequence_output"].numpy()
        new, reports = compress_encoder(encoder, 32, progress=False)
        self.assertEqual(new.attention_spec.kind, "collaborative")
        self.assertLen(reports, 2)
        self.assertAllClose(new(inputs)["sequence_output"], before, atol=1e-5)
        self.assertAllClose(encoder(inputs)["sequence_output"], before, atol=0)
        small, _ = compress_encoder(encoder, 8, progress=False)
        self.assertLess(small.count_params(), encoder.count_params())

    def test_already_collaborative_is_rejected(self):
        encoder = HeadsizeBertEncoder(
            vocab_size=10,
            hidden_size=8,
            num_layers=1,
            attention=dict(kind="collaborative", num_heads=2, shared_key_dim=4),
            inner_dim=8,
        )
        with self.assertRaisesRegex(ValueError, "already has collaborative attention"):
            compress_encoder(encoder, 4, progress=False)
