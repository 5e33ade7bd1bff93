"""Parameter formulas agree with built layers and encoders; matching protocol."""

import dataclasses
import itertools

import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from official.nlp.modeling import networks

from headsize_tf import params
from headsize_tf.core import AttentionSpec
from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention


def _built(layer, width, kv_width=None, t=3, s=4):
    layer(tf.zeros([1, t, width]), tf.zeros([1, s, kv_width or width]))
    return layer


def _trainable(layer):
    return int(sum(np.prod(w.shape) for w in layer.trainable_weights))


class AttentionParamsTest(tf.test.TestCase, parameterized.TestCase):
    def test_standard_grid(self):
        for width, heads, use_bias in itertools.product([8, 12, 24, 48], [1, 2, 4], [True, False]):
            layer = _built(StandardAttention(heads, use_bias=use_bias), width)
            count = params.attention_params("standard", width, heads, use_bias=use_bias)
            self.assertEqual(layer.count_params(), count.total, (width, heads, use_bias))
            self.assertEqual(_trainable(layer), count.trainable)
            self.assertEqual(count.non_trainable, 0)  # The head gates are not weights.

    def test_fixed_head_grid(self):
        for width, heads, p, kv in itertools.product([8, 20], [1, 3, 7], [1, 5, 32], [None, 6]):
            layer = _built(FixedHeadAttention(heads, p), width, kv)
            count = params.attention_params("fixed_head", width, heads, head_size=p, value_width=kv)
            self.assertEqual(layer.count_params(), count.total, (width, heads, p, kv))
            self.assertEqual(_trainable(layer), count.trainable)

    def test_fixed_head_formula_is_papers(self):
        # 4 d h p + 3 h p + d trainable (Bhojanapalli et al.; Keras MHA).
        d, h, p = 256, 70, 32
        count = params.attention_params("fixed_head", d, h, head_size=p)
        self.assertEqual(count.trainable, 4 * d * h * p + 3 * h * p + d)

    def test_collaborative_grid(self):
        grid = itertools.product([8, 24], [2, 4], [3, 8, 30], [None, 5], [True, False], [None, 10])
        for width, heads, shared, p, use_bias, kv in grid:
            layer = _built(
                CollaborativeAttention(heads, shared, head_size=p, use_bias=use_bias), width, kv
            )
            count = params.attention_params(
                "collaborative",
                width,
                heads,
                head_size=p,
                shared_key_dim=shared,
                use_bias=use_bias,
                value_width=kv,
            )
            self.assertEqual(layer.count_params(), count.total, (width, heads, shared, p, use_bias))
            self.assertEqual(_trainable(layer), count.trainable)

    def test_output_width(self):
        layer = _built(FixedHeadAttention(3, 4, output_shape=5), 8)
        count = params.attention_params("fixed_head", 8, 3, head_size=4, output_width=5)
        self.assertEqual(layer.count_params(), count.total)

    def test_sequence_length_head_size(self):
        count = params.attention_params(
            "fixed_head", 16, 2, head_size="sequence_length", sequence_length=4
        )
        self.assertEqual(count, params.attention_params("fixed_head", 16, 2, head_size=4))
        with self.assertRaisesRegex(ValueError, "needs a sequence length"):
            params.attention_params("fixed_head", 16, 2, head_size="sequence_length")

    def test_bad_values(self):
        with self.assertRaisesRegex(ValueError, r"Unknown attention kind 'fixed'"):
            params.attention_params("fixed", 16, 2)
        with self.assertRaisesRegex(
            ValueError, r"width \(10\) is not a multiple of num_heads \(4\)"
        ):
            params.attention_params("standard", 10, 4)
        with self.assertRaisesRegex(
            ValueError, r"`shared_key_dim` must be a positive integer; got 0"
        ):
            params.attention_params("collaborative", 16, 2, shared_key_dim=0)


class EncoderParamsTest(tf.test.TestCase):
    def test_standard_encoder_equals_model_garden_bert_encoder_v2(self):
        for width, layers, heads, emb in [(32, 2, 4, None), (48, 1, 3, 16)]:
            spec = params.EncoderSpec(
                vocab_size=100,
                width=width,
                num_layers=layers,
                attention=AttentionSpec("standard", num_heads=heads),
                intermediate_size=64,
                max_sequence_length=20,
                type_vocab_size=3,
                embedding_width=emb,
            )
            encoder = networks.BertEncoderV2(
                vocab_size=100,
                hidden_size=width,
                num_layers=layers,
                num_attention_heads=heads,
                inner_dim=64,
                max_sequence_length=20,
                type_vocab_size=3,
                embedding_width=emb,
            )
            ids = tf.zeros([1, 5], tf.int32)
            encoder(dict(input_word_ids=ids, input_mask=ids + 1, input_type_ids=ids))
            trainable = int(sum(np.prod(w.shape) for w in encoder.trainable_weights))
            self.assertEqual(params.encoder_params(spec).trainable, trainable)

    def test_match_fixed_head_width_256_to_baseline_512(self):
        baseline = params.EncoderSpec(
            vocab_size=32000,
            width=512,
            num_layers=6,
            attention=AttentionSpec("standard", num_heads=8),
            max_sequence_length=256,
        )
        candidate = dataclasses.replace(
            baseline, width=256, attention=AttentionSpec("fixed_head", num_heads=8, head_size=32)
        )
        heads = params.match_encoder_heads(baseline, candidate)
        target = params.encoder_params(baseline).trainable

        def gap(h):
            spec = candidate.with_heads(h)
            return abs(params.encoder_params(spec).trainable - target)

        self.assertLess(gap(heads), gap(heads - 1))
        self.assertLess(gap(heads), gap(heads + 1))
        # One more head of 32 at width 256 costs 4 * 256 * 32 + 3 * 32 per layer.
        self.assertLessEqual(gap(heads), 6 * (4 * 256 * 32 + 3 * 32) / 2)

    def test_match_skips_invalid_head_counts(self):
        spec = params.EncoderSpec(
            vocab_size=10, width=24, num_layers=1, attention=AttentionSpec("standard", 1)
        )
        target = params.encoder_params(dataclasses.replace(spec.with_heads(5), width=25)).trainable
        heads = params.match_encoder_heads(
            dataclasses.replace(spec.with_heads(5), width=25), spec, candidates=range(1, 30)
        )
        self.assertEqual(24 % heads, 0)  # only divisors of 24 are valid for standard heads
        self.assertGreater(target, 0)
        with self.assertRaisesRegex(ValueError, "No valid head count"):
            params.match_num_heads(
                100, lambda h: params.resolve_head_size("standard", 7, h), [2, 3]
            )


class PerLayerAndValueDimTest(tf.test.TestCase):
    def test_value_dim_formula(self):
        d, h, p, v = 32, 4, 8, 12
        count = params.attention_params("fixed_head", d, h, head_size=p, value_dim=v)
        self.assertEqual(
            count.trainable, 2 * (d * h * p + h * p) + d * h * v + h * v + h * v * d + d
        )

    def test_per_layer_encoder_equals_model(self):
        from headsize_tf.modeling import HeadsizeBertEncoder

        spec = AttentionSpec(
            "fixed_head", num_heads=[2, 5, 3], head_size=[16, 8, "sequence_length"]
        )
        counted = params.encoder_params(
            params.EncoderSpec(
                vocab_size=50,
                width=24,
                num_layers=3,
                attention=spec,
                intermediate_size=40,
                max_sequence_length=12,
                type_vocab_size=2,
            )
        )
        encoder = HeadsizeBertEncoder(
            vocab_size=50,
            hidden_size=24,
            num_layers=3,
            attention=spec,
            inner_dim=40,
            max_sequence_length=12,
            type_vocab_size=2,
        ).build_weights()
        self.assertEqual([layer.num_heads for layer in encoder.attention_layers], [2, 5, 3])
        self.assertEqual([layer.head_size for layer in encoder.attention_layers], [16, 8, 12])
        self.assertEqual(_trainable(encoder), counted.trainable)

    def test_per_layer_length_must_match_layers(self):
        with self.assertRaisesRegex(
            ValueError, "per-layer lists of 2 entries, but the model has 3"
        ):
            params.EncoderSpec(
                vocab_size=5, width=8, num_layers=3, attention=AttentionSpec("standard", [2, 4])
            )
