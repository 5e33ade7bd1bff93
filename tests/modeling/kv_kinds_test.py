"""Grouped-query and latent heads in HeadsizeCausalLM and HeadsizeSeq2Seq.

Decoder self-attention and encoder-decoder attention of each kind (per-layer
sizes too): cached greedy decoding equals uncached argmax decoding, beam search
runs on the small caches and with one beam equals greedy, the cache's measured
bytes are `core.kv_cache`'s formula x batch x length, and checkpoints, configs
and SavedModels round-trip.
"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from absl.testing import parameterized

from headsize_tf.core import AttentionSpec
from headsize_tf.core.kv_cache import kv_cache_bytes_per_token
from headsize_tf.layers import GroupedAttention, LatentAttention
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.modeling.decoding import (
    beam_search_decode,
    cache_bytes,
    greedy_decode,
    greedy_decode_loop,
)
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq
from tests.modeling import checkpoint_util

WIDTH = 32
SPECS = {
    "grouped": AttentionSpec("grouped", 4, num_kv_heads=2),
    "grouped_per_layer": AttentionSpec("grouped", (4, 2), num_kv_heads=(1, 2)),
    "latent": AttentionSpec("latent", 4, kv_latent_dim=12),
    "latent_per_layer": AttentionSpec("latent", 4, kv_latent_dim=(8, 24)),
}
CLASSES = {"grouped": GroupedAttention, "latent": LatentAttention}
PROMPT = np.array([[5, 7, 9], [11, 3, 2]], np.int32)
SOURCE = np.array([[5, 8, 9, 12, 0, 0], [7, 7, 3, 4, 6, 2]], np.int32)  # 0 = padding
START = np.array([[1], [1]], np.int32)


def _lm(name: str) -> HeadsizeCausalLM:
    tf_keras.utils.set_random_seed(1)
    return HeadsizeCausalLM(
        vocab_size=40,
        hidden_size=WIDTH,
        num_layers=2,
        attention=SPECS[name],
        max_sequence_length=24,
        initializer_range=0.5,  # Peaked logits: no argmax ties between paths.
    )


def _seq2seq(name: str) -> HeadsizeSeq2Seq:
    tf_keras.utils.set_random_seed(2)
    return HeadsizeSeq2Seq(
        vocab_size=40,
        hidden_size=WIDTH,
        num_encoder_layers=1,
        num_decoder_layers=2,
        attention=AttentionSpec("standard", 4),
        decoder_attention=SPECS[name],
        max_sequence_length=16,
        initializer_range=0.5,
    )


@pytest.mark.parametrize("name", sorted(SPECS))
def test_lm_cached_greedy_and_beam(name):
    model = _lm(name)
    cls = CLASSES[name.split("_")[0]]
    assert all(isinstance(layer, cls) for layer in model.attention_layers)
    cached = greedy_decode(model, PROMPT, 6).numpy()
    np.testing.assert_array_equal(cached, greedy_decode(model, PROMPT, 6, use_cache=False))
    sequences, scores = beam_search_decode(model, PROMPT, 6, beam_size=3)
    assert sequences.shape == (2, 3, 7) and scores.shape == (2, 3)
    np.testing.assert_array_equal(sequences[:, 0, 0], PROMPT[:, -1])
    one, _ = beam_search_decode(model, PROMPT, 6, beam_size=1)  # No end token: greedy.
    np.testing.assert_array_equal(one[:, 0], cached[:, 2:])
    looped = tf.function(lambda s: greedy_decode_loop(model, s, 6))(PROMPT[:, :1]).numpy()
    np.testing.assert_array_equal(looped, greedy_decode(model, PROMPT[:, :1], 6).numpy()[:, 1:])


@pytest.mark.parametrize("name", sorted(SPECS))
def test_seq2seq_self_and_cross_attention_decode(name):
    model = _seq2seq(name)
    cls = CLASSES[name.split("_")[0]]
    for block in model.decoder.blocks:
        assert isinstance(block.self_attention, cls) and isinstance(block.cross_attention, cls)
    cached = greedy_decode(model, START, 7, source_ids=SOURCE).numpy()
    uncached = greedy_decode(model, START, 7, use_cache=False, source_ids=SOURCE).numpy()
    np.testing.assert_array_equal(cached, uncached)
    sequences, _ = beam_search_decode(model, START, 5, beam_size=3, source_ids=SOURCE)
    assert sequences.shape == (2, 3, 6)
    one, _ = beam_search_decode(model, START, 7, beam_size=1, source_ids=SOURCE)
    np.testing.assert_array_equal(one[:, 0], cached)


def test_latent_cross_attention_caches_the_encoder_latent():
    model = _seq2seq("latent_per_layer")
    cache = model.init_cache(SOURCE)
    memory, _ = model.encode(SOURCE)
    for i, block in enumerate(model.decoder.blocks):
        entry = cache["memory"][f"layer_{i}"]
        assert list(entry) == ["latent"]
        assert entry["latent"].shape == (2, 6, (8, 24)[i])
        want = block.cross_attention._latent_dense(memory).numpy()
        np.testing.assert_allclose(entry["latent"].numpy(), want, atol=1e-6)
    # Absorbed (latent-space) and up-projected cross-attention agree.
    logits, _ = model.decode_step(START, cache, 0)
    full = model({"inputs": SOURCE, "targets": START})
    np.testing.assert_allclose(logits.numpy(), full.numpy(), atol=1e-4)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_measured_cache_bytes_are_the_formula(name):
    lm = _lm(name)
    lm(PROMPT)
    per_token = kv_cache_bytes_per_token(SPECS[name], WIDTH, num_layers=2)
    assert lm.kv_cache_bytes_per_token() == per_token
    assert cache_bytes(lm.init_cache(3, length=10)) == per_token * 3 * 10
    _, cache = lm.decode_step(PROMPT, lm.init_cache(2), 0)  # A growing cache, 3 tokens.
    assert cache_bytes(cache) == per_token * 2 * 3
    model = _seq2seq(name)
    cache = model.init_cache(SOURCE, length=5)
    assert cache_bytes(cache) == per_token * 2 * 5
    assert cache_bytes(cache, memory=True) == per_token * 2 * SOURCE.shape[1]
    assert model.memory_cache_bytes_per_token() == per_token
    full = kv_cache_bytes_per_token(AttentionSpec("standard", 4), WIDTH, num_layers=2)
    assert per_token < full == 512


def test_per_layer_numbers():
    assert kv_cache_bytes_per_token(SPECS["latent_per_layer"], WIDTH, 2) == (8 + 24) * 4
    assert kv_cache_bytes_per_token(SPECS["grouped_per_layer"], WIDTH, 2) == 4 * (16 + 64)


class CheckpointTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters("grouped_per_layer", "latent_per_layer")
    def test_checkpoint_and_config_round_trip(self, name):
        checkpoint_util.assert_unmasked_checkpoint_restores(
            self, lambda: _lm(name), lambda model: model(PROMPT)
        )
        model = _seq2seq(name)
        features = {"inputs": SOURCE, "targets": SOURCE[:, :4]}
        want = model(features).numpy()
        clone = HeadsizeSeq2Seq.from_config(model.get_config())
        self.assertNotAllClose(clone(features), want)
        path = checkpoint_util.write(model, self.get_temp_dir(), f"s2s_{name}")
        tf.train.Checkpoint(model=clone).read(path).assert_consumed()
        self.assertAllClose(clone(features), want, atol=1e-6)


def test_saved_model_decodes_as_the_model(tmp_path):
    """A grouped LM's greedy loop and a latent translator's beam search, exported."""
    lm = _lm("grouped_per_layer")
    want = greedy_decode(lm, PROMPT[:, :1], 5).numpy()[:, 1:]
    module = tf.Module()
    module.lm = lm
    module.decode = tf.function(
        lambda start: greedy_decode_loop(lm, start, 5),
        input_signature=[tf.TensorSpec([None, 1], tf.int32)],
    )
    tf.saved_model.save(module, str(tmp_path / "lm"))
    loaded = tf.saved_model.load(str(tmp_path / "lm"))  # Kept: its variables live with it.
    np.testing.assert_array_equal(loaded.decode(PROMPT[:, :1]), want)

    from headsize_tf.serving.translation import TranslationServingModule

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghij"]))
    model = _seq2seq("latent_per_layer")
    translator = TranslationServingModule(
        model, str(vocab), max_source_length=6, max_decode_length=4, beam_size=2
    )
    ids = translator.serve_ids(SOURCE % 15, tf.cast(SOURCE > 0, tf.int32))
    tf.saved_model.save(
        translator, str(tmp_path / "nmt"), signatures={"serve_ids": translator.serve_ids}
    )
    loaded = tf.saved_model.load(str(tmp_path / "nmt"))
    got = loaded.signatures["serve_ids"](
        input_word_ids=tf.constant(SOURCE % 15), input_mask=tf.cast(SOURCE > 0, tf.int32)
    )
    np.testing.assert_array_equal(got["output_ids"], ids["output_ids"])
