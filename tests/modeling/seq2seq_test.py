"""HeadsizeSeq2Seq: padding, cached greedy/beam decoding == uncached, training."""

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from headsize_tf.core import AttentionSpec
from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from headsize_tf.modeling.decoding import beam_search_decode, greedy_decode
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq
from tests.modeling import checkpoint_util

TYPES = [
    ("standard", {"attention_type": "standard"}, StandardAttention),
    ("fixed_head", {"attention_type": "fixed_head", "head_size": 32}, FixedHeadAttention),
    (
        "collaborative",
        {"attention_type": "collaborative", "shared_key_dim": 24},
        CollaborativeAttention,
    ),
]
SOURCE = np.array([[5, 8, 9, 12, 0, 0], [7, 7, 3, 4, 6, 2]], np.int32)  # 0 = padding
START = np.array([[1], [1]], np.int32)


def _model(attention_type="standard", layers=2, **sizes):
    tf_keras.utils.set_random_seed(2)
    return HeadsizeSeq2Seq(
        vocab_size=40,
        hidden_size=64,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        attention=AttentionSpec(attention_type, 4, **sizes),
        max_sequence_length=16,
        initializer_range=0.5,
    )


def _logits(model):
    return model({"inputs": SOURCE, "targets": SOURCE})


class Seq2SeqTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(*TYPES)
    def test_padding_is_ignored_and_layers(self, kwargs, cls):
        model = _model(**kwargs)
        targets = np.array([[1, 4, 5], [1, 2, 3]], np.int32)
        logits = model({"inputs": SOURCE, "targets": targets}).numpy()
        self.assertEqual(logits.shape, (2, 3, 40))
        longer = np.concatenate([SOURCE, np.zeros((2, 3), np.int32)], axis=1)
        longer[1, 6:] = 0
        # Extra padding changes nothing for either example.
        self.assertAllClose(
            model({"inputs": longer, "targets": targets}).numpy(), logits, atol=1e-4
        )
        self.assertLen(model.attention_layers, 2 + 2 * 2)
        self.assertTrue(all(isinstance(layer, cls) for layer in model.attention_layers))

    @parameterized.named_parameters(*TYPES)
    def test_cached_greedy_and_beam_equal_uncached(self, kwargs, cls):
        model = _model(**kwargs)
        cached = greedy_decode(model, START, 7, use_cache=True, source_ids=SOURCE)
        uncached = greedy_decode(model, START, 7, use_cache=False, source_ids=SOURCE)
        self.assertAllEqual(cached, uncached)
        seq_c, score_c = beam_search_decode(
            model, START, 5, beam_size=3, use_cache=True, source_ids=SOURCE
        )
        seq_u, score_u = beam_search_decode(
            model, START, 5, beam_size=3, use_cache=False, source_ids=SOURCE
        )
        self.assertAllEqual(seq_c, seq_u)
        self.assertAllClose(score_c, score_u, atol=1e-4)

    def test_learns_to_copy(self):
        # One encoder and one decoder layer: half the graph to trace and run of 2 + 2 (the
        # tests above check the stacks), and it copies as well (0.68-0.71 of the tokens
        # over three seeds, 0.68 with 2 + 2).
        model = _model(attention_type="fixed_head", head_size=32, layers=1)
        rng = np.random.default_rng(0)
        source = rng.integers(3, 40, size=(256, 5)).astype(np.int32)
        decoder_in = np.concatenate([np.ones((256, 1), np.int32), source[:, :-1]], axis=1)

        def copy_accuracy():  # Greedy decoding of 32 sources (160 tokens).
            start = np.ones((32, 1), np.int32)
            decoded = greedy_decode(model, start, 5, source_ids=source[:32])
            return float(np.mean(decoded.numpy()[:, 1:] == source[:32]))

        untrained = copy_accuracy()
        model.compile(
            tf_keras.optimizers.Adam(3e-3),
            tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        history = model.fit(
            {"inputs": source, "targets": decoder_in}, source, epochs=30, batch_size=32, verbose=0
        )
        self.assertLess(history.history["loss"][-1], 0.3 * history.history["loss"][0])
        # Chance is 1/37; a copying model gets most tokens right on any CPU.
        self.assertLess(untrained, 0.15)
        trained = copy_accuracy()
        print(f"copy accuracy: untrained {untrained:.3f}, trained {trained:.3f}")
        self.assertGreater(trained, untrained + 0.45)

    @parameterized.named_parameters(*TYPES)
    def test_unmasked_checkpoint_restores_under_both_checks(self, kwargs, cls):
        # Written before any mask was set: no gates in the checkpoint, nothing left over.
        checkpoint_util.assert_unmasked_checkpoint_restores(self, lambda: _model(**kwargs), _logits)

    @parameterized.named_parameters(*TYPES)
    def test_masked_checkpoint_keeps_its_mask(self, kwargs, cls):
        # Layers: encoder self-attention x2, then per decoder block self- and cross-attention.
        checkpoint_util.assert_masked_checkpoint_keeps_its_mask(
            self,
            lambda: _model(**kwargs),
            _logits,
            lambda model: model.attention_layers,
            {0: [1.0, 0.0, 1.0, 1.0], 3: [0.0, 1.0, 1.0, 0.0]},
        )

    def test_init_cache_needs_memory_for_cross_attention(self):
        model = _model()
        with self.assertRaisesRegex(ValueError, r"init_cache needs `memory`"):
            model.decoder.init_cache(2)
