"""`convert_attention_model`: the tf_keras front of the one conversion driver.

Grouped heads with num_kv_heads == num_heads, a latent at full rank and
collaborative heads at full rank reproduce a causal LM's and a translation
model's logits (decoder self- and cross-attention converted); per-layer sizes
and pruned models give per-layer specs; bad sizes name themselves.
"""

import numpy as np
import pytest
import tf_keras

from headsize_tf.core import AttentionSpec
from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.kv_cache import kv_cache_bytes_per_token
from headsize_tf.core.spec import SpecError
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.modeling.decoding import greedy_decode
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq
from headsize_tf.pruning.language_model import remove_lm_heads
from headsize_tf.reparam.model_dir import compress_attention_model, convert_attention_model

WIDTH = 32
IDS = np.random.default_rng(0).integers(1, 50, (2, 9)).astype(np.int32)
FEATURES = {"inputs": IDS, "targets": IDS[:, :5]}


@pytest.fixture(scope="module")
def lm():
    tf_keras.utils.set_random_seed(1)
    model = HeadsizeCausalLM(
        vocab_size=50,
        hidden_size=WIDTH,
        num_layers=2,
        attention=AttentionSpec("fixed_head", 4, head_size=12),  # h p = 48 != width
        max_sequence_length=16,
        initializer_range=0.3,
    )
    model(IDS)
    return model


@pytest.fixture(scope="module")
def seq2seq():
    tf_keras.utils.set_random_seed(2)
    model = HeadsizeSeq2Seq(
        vocab_size=50,
        hidden_size=WIDTH,
        num_encoder_layers=1,
        num_decoder_layers=2,
        attention=AttentionSpec("standard", 4),
        max_sequence_length=16,
        initializer_range=0.3,
    )
    model(FEATURES)
    return model


EXACT = [("grouped", 4), ("latent", WIDTH), ("collaborative", 48)]


@pytest.mark.parametrize("kind, size", EXACT)
def test_lm_exact_targets_reproduce_the_logits(lm, kind, size):
    want = lm(IDS).numpy()
    new, reports = convert_attention_model(lm, ConversionTarget(kind, size), progress=False)
    assert np.abs(new(IDS).numpy() - want).max() < 1e-5
    assert new.attention_spec.kind == kind
    assert [r["layer"] for r in reports] == ["block_0/self_attention", "block_1/self_attention"]
    np.testing.assert_array_equal(lm(IDS).numpy(), want)  # The source is unchanged.
    prompt = IDS[:, :3]
    np.testing.assert_array_equal(greedy_decode(new, prompt, 5), greedy_decode(lm, prompt, 5))


@pytest.mark.parametrize("kind, size", EXACT[:2])
def test_seq2seq_exact_targets_convert_the_decoder_and_cross_attention(seq2seq, kind, size):
    want = seq2seq(FEATURES).numpy()
    new, reports = convert_attention_model(seq2seq, ConversionTarget(kind, size), progress=False)
    assert np.abs(new(FEATURES).numpy() - want).max() < 1e-5
    config = new.get_config()
    assert config["attention"]["kind"] == "standard"  # No cache in an encoder: unchanged.
    assert config["decoder_attention"]["kind"] == kind
    assert len(reports) == 4 and reports[1]["layer"] == "decoder/block_0/cross_attention"
    both, reports = convert_attention_model(
        seq2seq, ConversionTarget(kind, size), convert_encoder=True, progress=False
    )
    assert len(reports) == 5 and both.get_config()["attention"]["kind"] == kind
    assert np.abs(both(FEATURES).numpy() - want).max() < 1e-5


def test_per_layer_sizes_shrink_the_cache_by_the_formula(lm, seq2seq):
    new, _ = convert_attention_model(lm, ConversionTarget("latent", (8, 16)), progress=False)
    spec = new.attention_spec
    assert spec.kv_latent_dim == (8, 16)
    assert new.kv_cache_bytes_per_token() == kv_cache_bytes_per_token(spec, WIDTH, 2) == 96
    assert lm.kv_cache_bytes_per_token() == 2 * 2 * 48 * 4
    grouped, _ = convert_attention_model(
        seq2seq, ConversionTarget("grouped", (1, 2)), progress=False
    )
    assert grouped.get_config()["decoder_attention"]["num_kv_heads"] == [1, 2]
    assert grouped.kv_cache_bytes_per_token() == (8 + 8 + 16 + 16) * 4


def test_a_pruned_lm_converts_with_its_per_layer_heads(lm):
    mask = np.ones([2, 4], np.float32)
    mask[0, 1] = 0  # Layer 0 keeps 3 heads.
    pruned = remove_lm_heads(lm, mask)
    want = pruned(IDS).numpy()
    new, _ = convert_attention_model(pruned, ConversionTarget("grouped", (3, 4)), progress=False)
    assert new.attention_spec.num_heads == (3, 4) and new.attention_spec.num_kv_heads == (3, 4)
    assert np.abs(new(IDS).numpy() - want).max() < 1e-5
    with pytest.raises(SpecError, match=r"num_kv_heads=2 does not divide num_heads=3"):
        convert_attention_model(pruned, ConversionTarget("grouped", 2), progress=False)


def test_collaborative_wrapper_keeps_its_reports_and_config(seq2seq):
    want = seq2seq(FEATURES).numpy()
    new, reports = compress_attention_model(seq2seq, 32, progress=False)
    assert [r.name for r in reports] == [f"layer_{i}" for i in range(5)]
    assert max(r.relative_error for r in reports) < 1e-4
    config = new.get_config()
    assert config["attention"]["mixing_initializer"] == "concatenate"
    assert config["attention"]["shared_key_dim"] == 32 and config["decoder_attention"] is None
    assert np.abs(new(FEATURES).numpy() - want).max() < 1e-5


def test_bad_targets_name_the_value(lm):
    with pytest.raises(SpecError, match=r"num_kv_heads=3 does not divide num_heads=4"):
        convert_attention_model(lm, ConversionTarget("grouped", 3), progress=False)
    with pytest.raises(SpecError, match=r"kv_latent_dim=33 is outside \[1, 32\]"):
        convert_attention_model(lm, ConversionTarget("latent", 33), progress=False)
    with pytest.raises(SpecError, match=r"`kv_latent_dim` must be a positive integer; got 0"):
        ConversionTarget("latent", 0)
    with pytest.raises(SpecError, match=r"has 3 entries; the model has 2 attention layers"):
        convert_attention_model(lm, ConversionTarget("latent", (4, 4, 4)), progress=False)
    grouped, _ = convert_attention_model(lm, ConversionTarget("grouped", 2), progress=False)
    with pytest.raises(SpecError, match=r"Layer 0 has grouped attention"):
        convert_attention_model(grouped, ConversionTarget("collaborative", 8), progress=False)
