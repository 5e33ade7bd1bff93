"""Keras 3 CausalLM conversion to grouped / latent K/V: exactness, decoding, the cache, saving."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from headsize_tf.core import kv_cache
from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.spec import SpecError
from headsize_tf.keras3.modeling import CausalLM
from headsize_tf.keras3.reparam import convert_model
from tests.keras3 import util


def _lm(attention=None, seed=0) -> CausalLM:
    keras.utils.set_random_seed(seed)
    lm = CausalLM(
        vocabulary_size=40,
        num_layers=2,
        hidden_dim=16,
        attention=attention or {"kind": "standard", "num_heads": 4},
        max_sequence_length=24,
    )
    ids = np.arange(8, dtype="int32")[None] % 40
    lm(ids)
    rng = np.random.default_rng(seed)
    for layer in lm.attention_layers:  # Biases a trained model would have.
        for weight in layer.weights:
            if len(weight.shape) <= 2 and "bias" in weight.path:
                weight.assign(rng.normal(0, 0.2, weight.shape).astype("float32"))
    return lm


TOKENS = np.random.default_rng(1).integers(0, 40, (3, 10)).astype("int32")


@pytest.mark.parametrize(
    "target",
    [
        ConversionTarget("grouped", 4, "mean"),
        ConversionTarget("grouped", 4, "svd"),
        ConversionTarget("latent", 16),
        ConversionTarget("latent", 16, "joint_svd_unbalanced"),
    ],
    ids=["grouped_mean", "grouped_svd", "latent", "latent_unbalanced"],
)
def test_equal_heads_and_full_rank_reproduce_the_logits(target):
    lm = _lm()
    converted, reports = convert_model(lm, target)
    assert converted.attention_spec.kind == target.kind
    assert len(reports) == 2 and all(r["key_energy"] > 1 - 1e-6 for r in reports)
    np.testing.assert_allclose(
        util.np_(converted(TOKENS)), util.np_(lm(TOKENS)), rtol=1e-5, atol=1e-5
    )


def test_per_layer_sizes_give_a_per_layer_spec_and_cached_greedy_equals_uncached():
    lm = _lm({"kind": "fixed_head", "num_heads": [4, 2], "head_size": 6})
    grouped, _ = convert_model(lm, ConversionTarget("grouped", [2, 1]))
    spec = grouped.attention_spec
    assert spec.num_kv_heads == (2, 1) and spec.num_heads == (4, 2) and spec.head_size == 6
    prompt = TOKENS[:, :4]
    generated = grouped.generate(prompt, max_new_tokens=5)
    # Greedy without a cache: argmax of the full forward pass, one token at a time.
    ids = prompt
    for _ in range(5):
        next_ids = np.argmax(util.np_(grouped(ids))[:, -1], axis=-1).astype("int32")
        ids = np.concatenate([ids, next_ids[:, None]], axis=1)
    np.testing.assert_array_equal(np.asarray(generated), ids)


@pytest.mark.parametrize(
    "target", [ConversionTarget("grouped", 1), ConversionTarget("latent", 6)], ids=str
)
def test_the_models_cache_holds_the_formulas_bytes(target):
    converted, _ = convert_model(_lm(), target)
    _, caches = converted.prefill(TOKENS, 20)
    measured = sum(keras.ops.convert_to_numpy(t).nbytes for c in caches for t in c.values())
    per_token = kv_cache.kv_cache_bytes_per_token(converted.attention_spec, 16, num_layers=2)
    assert measured == 3 * 20 * per_token
    standard = kv_cache.kv_cache_bytes_per_token(_lm().attention_spec, 16, num_layers=2)
    assert per_token < standard / 2


def test_approximate_conversions_stay_close_and_svd_beats_mean(tmp_path):
    lm = _lm(seed=2)
    reference = util.np_(lm(TOKENS))

    def error(target):
        converted, _ = convert_model(lm, target)
        return float(np.mean(np.abs(util.np_(converted(TOKENS)) - reference)))

    assert error(ConversionTarget("grouped", 2, "svd")) < error(
        ConversionTarget("grouped", 2, "mean")
    )
    assert error(ConversionTarget("latent", 12)) < error(ConversionTarget("latent", 4))


def test_converted_model_saves_reloads_and_decodes(tmp_path):
    converted, _ = convert_model(_lm(), ConversionTarget("latent", 8))
    path = tmp_path / "lm.keras"
    converted.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(util.np_(loaded(TOKENS)), util.np_(converted(TOKENS)), atol=1e-6)
    np.testing.assert_array_equal(
        np.asarray(loaded.generate(TOKENS[:, :3], max_new_tokens=3)),
        np.asarray(converted.generate(TOKENS[:, :3], max_new_tokens=3)),
    )


def test_bad_targets_name_the_value():
    lm = _lm()
    with pytest.raises(SpecError, match="num_kv_heads=3 does not divide num_heads=4"):
        convert_model(lm, ConversionTarget("grouped", 3))
    with pytest.raises(SpecError, match=r"kv_latent_dim=17 is outside \[1, 16\]"):
        convert_model(lm, ConversionTarget("latent", 17))
    grouped, _ = convert_model(lm, ConversionTarget("grouped", 2))
    with pytest.raises(SpecError, match="has grouped attention"):
        convert_model(grouped, ConversionTarget("collaborative", 4))


def test_pruning_a_grouped_model_removes_whole_groups_and_equals_the_masked_model():
    from headsize_tf.keras3.pruning import remove_heads, set_head_mask

    grouped, _ = convert_model(_lm(), ConversionTarget("grouped", 2))  # Groups {0, 1}, {2, 3}.
    mask = np.array([[0, 0, 1, 1], [1, 0, 1, 1]], np.float32)
    set_head_mask(grouped, mask)
    masked = util.np_(grouped(TOKENS))
    smaller = remove_heads(grouped, mask)
    spec = smaller.attention_spec
    assert spec.num_heads == (2, 4) and spec.num_kv_heads == (1, 2)
    np.testing.assert_allclose(util.np_(smaller(TOKENS)), masked, rtol=1e-5, atol=1e-5)
    _, caches = smaller.prefill(TOKENS, 12)
    assert caches[0]["key"].shape[2] == 1  # Layer 0 caches one key/value head now.


def test_pruning_a_latent_model_slices_its_up_projections():
    from headsize_tf.keras3.pruning import remove_heads, set_head_mask

    latent, _ = convert_model(_lm(), ConversionTarget("latent", 10))
    mask = np.array([[1, 0, 1, 0], [0, 0, 0, 0]], np.float32)  # Layer 1 loses every head.
    set_head_mask(latent, mask)
    masked = util.np_(latent(TOKENS))
    smaller = remove_heads(latent, mask)
    assert smaller.attention_spec.num_heads == (2, 1)
    assert smaller.attention_spec.kv_latent_dim == 10
    np.testing.assert_allclose(util.np_(smaller(TOKENS)), masked, rtol=1e-5, atol=1e-5)
