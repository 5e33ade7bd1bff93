"""Pruning models with grouped-query or latent heads (converted models prune again).

Latent layers lose single query heads (the latent is shared); grouped layers
lose whole groups only, a kept group's pruned heads staying masked. The pruned
model computes what the masked one computes and rebuilds from its config.
"""

import numpy as np
import pytest
import tf_keras

from headsize_tf.core import AttentionSpec
from headsize_tf.core.pruning_plan import slice_heads, whole_groups
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.modeling.decoding import greedy_decode
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq
from headsize_tf.pruning.language_model import remove_lm_heads
from headsize_tf.pruning.remove import head_mask, set_head_mask
from headsize_tf.pruning.translation import remove_seq2seq_heads

IDS = np.random.default_rng(0).integers(1, 50, (2, 9)).astype(np.int32)
SPECS = {
    "grouped": AttentionSpec("grouped", 4, num_kv_heads=2),
    "latent": AttentionSpec("latent", 4, kv_latent_dim=(8, 12)),
}


def test_whole_groups_and_the_slicing_plan():
    assert whole_groups([1, 4], num_heads=8, num_kv_heads=4) == [0, 1, 4, 5]
    weights = {
        "query_kernel": np.arange(2 * 4 * 3).reshape(2, 4, 3),
        "query_bias": None,
        "key_kernel": np.arange(2 * 2 * 3).reshape(2, 2, 3),
        "value_kernel": np.arange(2 * 2 * 3).reshape(2, 2, 3) + 100,
        "value_bias": None,
        "output_kernel": np.arange(4 * 3 * 2).reshape(4, 3, 2),
        "output_bias": np.zeros(2),
    }
    out = slice_heads("grouped", weights, [2, 3])
    np.testing.assert_array_equal(out["key_kernel"], weights["key_kernel"][:, 1:])
    np.testing.assert_array_equal(out["value_kernel"], weights["value_kernel"][:, 1:])
    np.testing.assert_array_equal(out["query_kernel"], weights["query_kernel"][:, 2:])
    with pytest.raises(ValueError, match=r"split a group of 2 query heads"):
        slice_heads("grouped", weights, [1, 2])


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_lm_removal_equals_the_mask(kind):
    tf_keras.utils.set_random_seed(1)
    lm = HeadsizeCausalLM(50, 32, 2, SPECS[kind], max_sequence_length=16)
    lm(IDS)
    mask = np.ones([2, 4], np.float32)
    mask[0, 1] = 0  # grouped: group {0, 1} stays, head 1 masked
    mask[1, 2:] = 0  # a whole group
    set_head_mask(lm, mask)
    want = lm(IDS).numpy()
    pruned = remove_lm_heads(lm, mask)
    spec = pruned.attention_spec
    if kind == "grouped":
        assert spec.num_heads == (4, 2) and spec.num_kv_heads == (2, 1)
        np.testing.assert_array_equal(pruned.attention_layers[0].head_gates.numpy(), [1, 0, 1, 1])
    else:
        assert spec.num_heads == (3, 2) and spec.kv_latent_dim == (8, 12)
    assert np.abs(pruned(IDS).numpy() - want).max() < 1e-5
    assert pruned.count_params() < lm.count_params()
    clone = HeadsizeCausalLM.from_config(pruned.get_config())
    clone(IDS)
    assert clone.attention_spec == spec
    prompt = IDS[:, :2]
    cached = greedy_decode(pruned, prompt, 4).numpy()
    np.testing.assert_array_equal(cached, greedy_decode(pruned, prompt, 4, use_cache=False))


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_seq2seq_removal_equals_the_mask(kind):
    tf_keras.utils.set_random_seed(2)
    model = HeadsizeSeq2Seq(
        vocab_size=50,
        hidden_size=32,
        num_encoder_layers=1,
        num_decoder_layers=2,
        attention=AttentionSpec("standard", 4),
        decoder_attention=SPECS[kind],
        max_sequence_length=16,
    )
    features = {"inputs": IDS, "targets": IDS[:, :5]}
    model(features)
    mask = head_mask(model)  # rows: encoder 0, decoder self 0, cross 0, self 1, cross 1
    mask[0, 0] = mask[1, 1] = 0
    mask[4, 2:] = 0
    set_head_mask(model, mask)
    want = model(features).numpy()
    pruned = remove_seq2seq_heads(model, mask)
    decoder = pruned.get_config()["pruned_heads"]["decoder"]
    assert decoder[1]["cross_attention"] == [2, 3]
    assert decoder[0]["self_attention"] == ([] if kind == "grouped" else [1])
    assert np.abs(pruned(features).numpy() - want).max() < 1e-5
    clone = HeadsizeSeq2Seq.from_config(pruned.get_config())
    clone(features)
    assert clone.count_params() == pruned.count_params() < model.count_params()
