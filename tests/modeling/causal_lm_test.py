"""HeadsizeCausalLM: causality, cached greedy/beam decoding == uncached, counts, saving."""

import os
import tempfile

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from headsize_tf.core import AttentionSpec
from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.modeling.decoding import beam_search_decode, greedy_decode, greedy_decode_loop
from tests.modeling import checkpoint_util

# Width 64 with 4 heads: fixed head size 32 != 64 / 4.
TYPES = [
    ("standard", {"attention_type": "standard"}, StandardAttention),
    ("fixed_head", {"attention_type": "fixed_head", "head_size": 32}, FixedHeadAttention),
    (
        "collaborative",
        {"attention_type": "collaborative", "shared_key_dim": 24},
        CollaborativeAttention,
    ),
]


def _spec(attention_type="standard", heads=4, **sizes):
    return AttentionSpec(attention_type, heads, **sizes)


def _lm(**kwargs):
    tf_keras.utils.set_random_seed(1)
    return HeadsizeCausalLM(
        vocab_size=50,
        hidden_size=64,
        num_layers=2,
        attention=_spec(**kwargs),
        max_sequence_length=32,
        initializer_range=0.5,  # Peaked logits: no argmax ties between paths.
    )


PROMPT = np.array([[5, 7, 9], [11, 3, 2]], np.int32)


class CausalLMTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(*TYPES)
    def test_causal_and_layer_kind(self, kwargs, cls):
        model = _lm(**kwargs)
        ids = np.random.default_rng(0).integers(0, 50, size=(2, 10)).astype(np.int32)
        logits = model(ids).numpy()
        self.assertEqual(logits.shape, (2, 10, 50))
        changed = ids.copy()
        changed[:, 6:] = (changed[:, 6:] + 1) % 50
        self.assertAllClose(model(changed).numpy()[:, :6], logits[:, :6], atol=1e-5)
        for layer in model.attention_layers:
            self.assertIsInstance(layer, cls)

    @parameterized.named_parameters(*TYPES)
    def test_cached_greedy_equals_uncached(self, kwargs, cls):
        model = _lm(**kwargs)
        cached = greedy_decode(model, PROMPT, max_new_tokens=8, use_cache=True)
        uncached = greedy_decode(model, PROMPT, max_new_tokens=8, use_cache=False)
        self.assertAllEqual(cached, uncached)
        self.assertEqual(cached.shape, (2, 11))
        self.assertAllEqual(cached[:, :3], PROMPT)

    @parameterized.named_parameters(*TYPES)
    def test_while_loop_greedy_equals_uncached_until_eos(self, kwargs, cls):
        model = _lm(**kwargs)
        start = PROMPT[:, :1]
        uncached = greedy_decode(model, start, max_new_tokens=8, use_cache=False).numpy()[:, 1:]
        looped = tf.function(lambda s: greedy_decode_loop(model, s, 8))(start)
        self.assertAllEqual(looped, uncached)  # no end token: all 8 steps
        eos = int(uncached[0, 3])  # row 0 ends at step 4 (or earlier if repeated)
        ended = greedy_decode_loop(model, start, 8, eos_id=eos).numpy()
        for got, want in zip(ended, uncached, strict=True):
            n = list(want).index(eos) + 1 if eos in want else 8
            self.assertAllEqual(got[:n], want[:n])
            self.assertAllEqual(got[n:], np.zeros(8 - n))
        with self.assertRaisesRegex(ValueError, r"start_ids must be \[batch, 1\]"):
            greedy_decode_loop(model, PROMPT, 4)

    @parameterized.named_parameters(*TYPES)
    def test_cached_logits_equal_full_forward(self, kwargs, cls):
        model = _lm(**kwargs)
        ids = np.random.default_rng(1).integers(0, 50, size=(2, 7)).astype(np.int32)
        full = model(ids).numpy()
        cache = model.init_cache(2)
        logits, cache = model.decode_step(ids[:, :3], cache, position=0)
        steps = [logits.numpy()]
        for t in range(3, 7):
            logits, cache = model.decode_step(ids[:, t : t + 1], cache, position=t)
            steps.append(logits.numpy())
        self.assertAllClose(np.concatenate(steps, axis=1), full, atol=1e-4)

    @parameterized.named_parameters(*TYPES)
    def test_cached_beam_search_equals_uncached(self, kwargs, cls):
        model = _lm(**kwargs)
        seq_c, score_c = beam_search_decode(model, PROMPT, 6, beam_size=3, use_cache=True)
        seq_u, score_u = beam_search_decode(model, PROMPT, 6, beam_size=3, use_cache=False)
        self.assertAllEqual(seq_c, seq_u)
        self.assertAllClose(score_c, score_u, atol=1e-4)
        self.assertEqual(seq_c.shape, (2, 3, 7))
        self.assertAllEqual(seq_c[:, 0, 0], PROMPT[:, -1])
        # The best beam continues at least as well as greedy under the model.
        greedy = greedy_decode(model, PROMPT, 6)
        self.assertEqual(greedy.shape, (2, 9))

    def test_fixed_length_cache_matches(self):
        model = _lm(attention_type="fixed_head", head_size=32)
        ids = np.random.default_rng(2).integers(0, 50, size=(2, 6)).astype(np.int32)
        full = model(ids).numpy()
        cache = model.init_cache(2, length=6)
        self.assertEqual(cache["layer_0"]["key"].shape, (2, 6, 4, 32))
        step = tf.function(lambda i, c, t: model.decode_step(i, c, t, decode_loop_step=t))
        for t in range(6):
            logits, cache = step(ids[:, t : t + 1], cache, tf.constant(t))
            self.assertAllClose(logits.numpy()[:, 0], full[:, t], atol=1e-4)

    def test_sequence_length_head_size(self):
        model = _lm(attention_type="fixed_head", head_size="sequence_length")
        model(PROMPT)
        self.assertEqual(model.attention_layers[0].head_size, 32)

    def test_checkpoint_and_config_round_trip(self):
        model = _lm(attention_type="collaborative", shared_key_dim=24)
        expected = model(PROMPT).numpy()
        clone = HeadsizeCausalLM.from_config(model.get_config())
        clone(PROMPT)
        with tempfile.TemporaryDirectory() as tmp:
            path = tf.train.Checkpoint(model=model).write(os.path.join(tmp, "ckpt"))
            tf.train.Checkpoint(model=clone).read(path).assert_consumed()
        self.assertAllClose(clone(PROMPT), expected, atol=1e-6)

    @parameterized.named_parameters(*TYPES)
    def test_unmasked_checkpoint_restores_under_both_checks(self, kwargs, cls):
        # Written before any mask was set: no gates in the checkpoint, nothing left over.
        checkpoint_util.assert_unmasked_checkpoint_restores(
            self, lambda: _lm(**kwargs), lambda model: model(PROMPT)
        )

    @parameterized.named_parameters(*TYPES)
    def test_masked_checkpoint_keeps_its_mask(self, kwargs, cls):
        checkpoint_util.assert_masked_checkpoint_keeps_its_mask(
            self,
            lambda: _lm(**kwargs),
            lambda model: model(PROMPT),
            lambda model: model.attention_layers,
            {1: [0.0, 1.0, 1.0, 0.0]},
        )

    def test_bad_decode_input(self):
        model = _lm()
        with self.assertRaisesRegex(ValueError, r"max_new_tokens must be a positive int; got 0"):
            greedy_decode(model, PROMPT, 0)
        with self.assertRaisesRegex(ValueError, r"prompt_ids must be \[batch, length >= 1\]"):
            greedy_decode(model, np.array([1, 2, 3]), 2)

    @parameterized.named_parameters(*TYPES)
    def test_params_formula(self, kwargs, cls):
        from headsize_tf import params

        for layers, heads, inner in [(1, 2, None), (3, 4, 96)]:
            model = HeadsizeCausalLM(
                vocab_size=50,
                hidden_size=64,
                num_layers=layers,
                attention=_spec(heads=heads, **kwargs),
                max_sequence_length=32,
                intermediate_size=inner,
            )
            model(PROMPT)
            spec = params.EncoderSpec(
                vocab_size=50,
                width=64,
                num_layers=layers,
                attention=_spec(heads=heads, **kwargs),
                intermediate_size=inner,
                max_sequence_length=32,
            )
            self.assertEqual(model.count_params(), params.causal_lm_params(spec).total)
