"""Rotary-aware KV conversion: exact limits, pair selection, calibration, per-layer budgets."""

from __future__ import annotations

import dataclasses
import itertools

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headsize_tf.core import kv_sharing, rope
from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.errors import SpecError
from headsize_tf.core.spec import AttentionSpec
from headsize_tf.keras3.layers.roles import numpy_weights
from headsize_tf.keras3.lm_training import windows_perplexity
from headsize_tf.keras3.modeling import DecoderLM
from headsize_tf.keras3.reparam import (
    KVPlan,
    allocate_by_sensitivity,
    calibration_stats,
    compress_kv,
    convert_model,
)
from tests.keras3 import util

BASE = 500.0


def _decoder(heads=6, groups=3, head_size=8, bias=False, seed=0):
    lm = DecoderLM(
        vocabulary_size=40,
        num_layers=2,
        hidden_dim=24,
        intermediate_dim=32,
        attention={
            "kind": "grouped",
            "num_heads": heads,
            "num_kv_heads": groups,
            "head_size": head_size,
            "rope_max_wavelength": BASE,
        },
        attention_bias=bias,
        max_sequence_length=32,
    )
    rng = np.random.default_rng(seed)
    lm.set_weights(
        [
            (
                rng.normal(0, 0.3, w.shape) + (1.0 if w.ndim == 1 and w.shape[0] == 24 else 0.0)
            ).astype("float32")
            for w in lm.get_weights()
        ]
    )
    return lm


IDS = np.random.default_rng(1).integers(0, 40, (3, 12)).astype("int32")


@settings(max_examples=8 if keras.backend.backend() == "tensorflow" else 3, deadline=None)
@given(
    shape=st.sampled_from([(4, 2, 8), (6, 3, 8), (4, 4, 4), (6, 2, 12)]),
    bias=st.booleans(),
    data=st.data(),
)
def test_every_pair_kept_at_full_rank_is_the_source_and_decodes_alike(shape, bias, data):
    heads, groups, head_size = shape
    lm = _decoder(heads, groups, head_size, bias, seed=data.draw(st.integers(0, 5)))
    pairs = head_size // 2
    # The exact limit: every pair on RoPE, in any order per key/value head; the latent holds
    # the values at their full rank (groups x head size).
    sets = [data.draw(st.permutations(range(pairs))) for _ in range(groups)]
    target = ConversionTarget("latent", groups * head_size, rope_frequencies=sets)
    latent, _ = convert_model(lm, target)
    assert latent.attention_spec.num_rope_heads == groups
    expected = util.np_(lm(IDS))
    np.testing.assert_allclose(util.np_(latent(IDS)), expected, atol=1e-4)
    prompt, _ = latent.prefill(IDS[:, :5], 12)
    np.testing.assert_allclose(util.np_(prompt), expected[:, :5], atol=1e-4)


def test_a_full_budget_with_every_pair_is_exact_calibrated_or_not():
    lm = _decoder(bias=True)
    stats = calibration_stats(lm, IDS, source="random ids")
    expected = util.np_(lm(IDS))
    for calibrated in (False, True):
        plan = KVPlan(1.0, "high", 4, calibrated=calibrated)
        model, report = compress_kv(lm, plan, stats)
        assert report["cache_fraction"] == pytest.approx(1.0)
        np.testing.assert_allclose(util.np_(model(IDS)), expected, atol=1e-4)


def test_calibration_statistics_are_the_attention_inputs_moments():
    lm = _decoder()
    stats = calibration_stats(lm, IDS)
    x = lm.token_embedding(IDS)
    normed = util.np_(lm.transformer_layers[0]._self_attention_layer_norm(x)).reshape(-1, 24)
    np.testing.assert_allclose(stats.covariances[0], normed.T @ normed / normed.shape[0], rtol=1e-5)
    assert stats.tokens == IDS.size
    assert stats.pair_scores[0].shape == (3, 4) and np.all(stats.pair_scores[0] > 0)


def test_a_calibrated_latent_keeps_the_activations_better_than_a_weight_svd():
    rng = np.random.default_rng(0)
    key, value = rng.normal(size=(16, 12)), rng.normal(size=(16, 8))
    x = rng.normal(size=(400, 16)) @ np.diag(np.linspace(0.1, 3.0, 16))
    covariance = x.T @ x / len(x)

    def error(cov):
        down, key_up, value_up, _ = kv_sharing.joint_basis(key, value, 6, covariance=cov)
        return np.linalg.norm(x @ down @ key_up - x @ key) + np.linalg.norm(
            x @ down @ value_up - x @ value
        )

    assert error(covariance) < 0.8 * error(None)


def test_pair_strategies_and_energy_allocation():
    assert rope.select_pairs("high", 8, 3, 2) == ((0, 1, 2), (0, 1, 2))
    assert rope.select_pairs("low", 8, 3, 1) == ((5, 6, 7),)
    assert rope.select_pairs("uniform", 8, 4, 1) == ((0, 2, 4, 6),)
    scores = np.array([[0.1, 5.0, 0.2, 3.0], [4.0, 0.0, 1.0, 2.0]])
    assert rope.select_pairs("2norm", 4, 2, 2, scores) == ((1, 3), (0, 3))
    with pytest.raises(SpecError, match="needs pair scores"):
        rope.select_pairs("2norm", 4, 2, 2)
    spectra = [np.array([10.0, 0.1, 0.1]), np.array([1.0, 1.0, 1.0])]
    ranks = kv_sharing.allocate_ranks(spectra, 4)
    assert sum(ranks) == 4 and ranks[1] > ranks[0]  # The flat spectrum gets more.
    with pytest.raises(SpecError, match="minimum must be a latent size >= 0, got -1"):
        kv_sharing.allocate_ranks(spectra, 4, minimum=-1)


def test_energy_allocation_keeps_the_total_and_budgets_are_checked():
    lm = _decoder()
    stats = calibration_stats(lm, IDS)
    _, uniform = compress_kv(lm, KVPlan(0.5, "2norm", 2), stats)
    _, energy = compress_kv(lm, KVPlan(0.5, "2norm", 2, allocation="energy"), stats)
    assert sum(uniform["latent_per_layer"]) == sum(energy["latent_per_layer"])
    assert energy["cache_fraction"] == pytest.approx(0.5)
    with pytest.raises(SpecError, match="no more than the rotary keys' own"):
        compress_kv(lm, KVPlan(0.2, "high", 2, calibrated=False))
    with pytest.raises(SpecError, match="needs calibration statistics"):
        compress_kv(lm, KVPlan(0.5, "2norm", 2))
    with pytest.raises(SpecError, match="4 frequency pairs"):
        compress_kv(lm, KVPlan(0.9, "high", 5, calibrated=False))


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_allocation_by_cost_is_the_brute_force_optimum(data):
    costs = []
    for _ in range(data.draw(st.integers(1, 3))):
        largest = data.draw(st.integers(1, 4))
        values = st.floats(-5, 5, allow_nan=False)
        cost = np.array(data.draw(st.lists(values, min_size=largest + 1, max_size=largest + 1)))
        cost[: data.draw(st.integers(0, largest))] = np.inf  # Sizes below a minimum.
        costs.append(cost)
    choices = [np.flatnonzero(np.isfinite(c)) for c in costs]
    total = data.draw(st.integers(sum(c[0] for c in choices), sum(c[-1] for c in choices)))
    sizes = kv_sharing.allocate_by_cost(costs, total)
    best = min(
        sum(c[r] for c, r in zip(costs, combo, strict=True))
        for combo in itertools.product(*choices)
        if sum(combo) == total
    )
    assert sum(sizes) == total
    assert sum(c[r] for c, r in zip(costs, sizes, strict=True)) == pytest.approx(best)
    with pytest.raises(SpecError, match="cannot be split"):
        kv_sharing.allocate_by_cost(costs, sum(c[-1] for c in choices) + 1)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_energy_allocation_keeps_the_most_energy(data):
    spectra = []
    for _ in range(data.draw(st.integers(1, 3))):
        values = data.draw(st.lists(st.floats(0, 10), min_size=1, max_size=4))
        spectra.append(np.sort(np.array(values))[::-1])
    minimum = data.draw(st.integers(0, 2))
    choices = [range(min(minimum, len(s)), len(s) + 1) for s in spectra]
    total = data.draw(st.integers(sum(c[0] for c in choices), sum(c[-1] for c in choices)))

    def kept(ranks):
        return sum(
            np.sum(s[:r] ** 2) / max(np.sum(s**2), 1e-300)
            for s, r in zip(spectra, ranks, strict=True)
        )

    ranks = kv_sharing.allocate_ranks(spectra, total, minimum)
    best = max(kept(combo) for combo in itertools.product(*choices) if sum(combo) == total)
    assert sum(ranks) == total and all(r in c for r, c in zip(ranks, choices, strict=True))
    assert kept(ranks) == pytest.approx(best)


def test_allocation_by_sensitivity_measures_what_the_conversion_gives():
    lm = _decoder(seed=3)
    windows = np.random.default_rng(2).integers(0, 40, (4, 13)).astype("int32")
    stats = calibration_stats(lm, windows)
    plan = KVPlan(0.5, "2norm", 2, allocation="sensitivity")
    lines = []
    sizes = allocate_by_sensitivity(lm, plan, stats, windows, rounds=3, progress=lines.append)
    uniform, uniform_report = compress_kv(
        lm, dataclasses.replace(plan, allocation="uniform"), stats
    )
    model, report = compress_kv(lm, plan, stats, sizes)
    assert report["latent_per_layer"] == sizes["latent_per_layer"]
    assert sum(sizes["latent_per_layer"]) == sum(uniform_report["latent_per_layer"])
    assert report["cache_fraction"] == pytest.approx(uniform_report["cache_fraction"])
    assert sizes["loss"] <= sizes["loss_uniform"]
    assert sizes["rounds"][0]["latent_per_layer"] == uniform_report["latent_per_layer"]
    assert report["sensitivity"]["tokens"] == 4 * 12 and lines[0].startswith("allocation round 1")
    # A cut of the full-rank conversion is the conversion at that size (the joint SVD is nested).
    for converted, loss in ((model, sizes["loss"]), (uniform, sizes["loss_uniform"])):
        assert np.log(windows_perplexity(converted, windows)) == pytest.approx(loss, abs=1e-4)
    with pytest.raises(SpecError, match="needs the sizes measured"):
        compress_kv(lm, plan, stats)
    with pytest.raises(SpecError, match="not of this conversion"):
        compress_kv(lm, plan, stats, {"latent_per_layer": [0, 4]})
    with pytest.raises(SpecError, match="needs the joint SVD"):
        KVPlan(0.5, "2norm", 2, allocation="sensitivity", split=True)
    with pytest.raises(SpecError, match="token windows"):
        allocate_by_sensitivity(lm, plan, stats, windows[0])


def test_rotary_grouped_by_mean_keeps_a_rotated_key_bias_and_is_exact_at_the_same_groups():
    lm = _decoder(bias=True)
    grouped, _ = convert_model(lm, ConversionTarget("grouped", 3, "mean"))
    np.testing.assert_allclose(util.np_(grouped(IDS)), util.np_(lm(IDS)), atol=1e-5)
    one, _ = convert_model(lm, ConversionTarget("grouped", 1, "mean"))
    assert tuple(one.attention_layers[0]._key_dense.bias.shape) == (1, 8)
    with pytest.raises(SpecError, match="re-bases key dimensions"):
        convert_model(lm, ConversionTarget("grouped", 1, "svd"))
    assert keras.ops.shape(one(IDS)) == (3, 12, 40)


# Qwen3's per-head query/key norms, and Gemma 3's (scaling by 1 + w) in local and global
# layers with their own RoPE bases.
NORMED = {
    "qwen3": dict(query_key_norm=True),
    "gemma3": dict(
        query_key_norm=True,
        norm_scale_offset=1.0,
        post_norms=True,
        sliding_window=5,
        sliding_window_layers=[True, False],
        local_rope_max_wavelength=50.0,
    ),
}


@pytest.mark.parametrize("case", list(NORMED))
def test_query_key_normed_layers_pool_by_mean_and_convert_to_a_partial_rope_latent(case):
    """Grouped: a group's key is the per-head norm of its heads' mean projection (Ainslie et
    al.'s mean pooling, then the layer's own norm); the oracle is the same model built with
    one key/value head whose kernels are the means. Latent: exact in its limit, decoding
    cached as it computes."""
    options = NORMED[case]
    attention = {"kind": "grouped", "num_heads": 6, "num_kv_heads": 3, "head_size": 8}
    attention["rope_max_wavelength"] = BASE
    args = dict(vocabulary_size=40, num_layers=2, hidden_dim=24, intermediate_dim=32)
    lm = DecoderLM(**args, attention=attention, max_sequence_length=32, **options)
    rng = np.random.default_rng(3)
    lm.set_weights(
        [
            (
                rng.normal(0, 0.3, w.shape)
                + (w.ndim == 1) * (1.0 - options.get("norm_scale_offset", 0))
            ).astype("float32")
            for w in lm.get_weights()
        ]
    )
    same, _ = convert_model(lm, ConversionTarget("grouped", 3, "mean"))
    np.testing.assert_allclose(util.np_(same(IDS)), util.np_(lm(IDS)), atol=1e-5)
    one, reports = convert_model(lm, ConversionTarget("grouped", 1, "mean"))
    oracle = DecoderLM(
        **args, attention={**attention, "num_kv_heads": 1}, max_sequence_length=32, **options
    )
    oracle.set_weights(
        [
            w.mean(axis=1, keepdims=True) if w.shape != tuple(o.shape) else w
            for w, o in zip(lm.get_weights(), oracle.weights, strict=True)
        ]
    )
    logits = util.np_(one(IDS))
    np.testing.assert_allclose(logits, util.np_(oracle(IDS)), atol=1e-5)
    assert np.abs(logits - util.np_(lm(IDS))).max() > 1e-2  # The pooling changes the model.
    assert [(r["kind"], r["size"]) for r in reports] == [("grouped", 1)] * 2
    # Cached greedy decoding equals greedy on the full forward pass.
    generated = np.asarray(one.generate(IDS[:, :4], max_new_tokens=3))
    tokens = IDS[:, :4]
    for _ in range(3):
        step = np.argmax(util.np_(one(tokens))[:, -1], axis=-1).astype("int32")
        tokens = np.concatenate([tokens, step[:, None]], axis=1)
    np.testing.assert_array_equal(generated, tokens)
    with pytest.raises(SpecError, match="re-base"):
        convert_model(lm, ConversionTarget("grouped", 1, "svd"))
    # A latent (MHA2MLA's partial RoPE): every pair kept at full rank is the source; at a
    # budget the cache holds each head's inverse key RMS too, and decodes as the model.
    full, _ = convert_model(lm, ConversionTarget("latent", 24, rope_frequencies=[0, 1, 2, 3]))
    np.testing.assert_allclose(util.np_(full(IDS)), util.np_(lm(IDS)), atol=1e-4)
    stats = calibration_stats(lm, IDS)
    cut, report = compress_kv(lm, KVPlan(0.5, rope_strategy="2norm", rope_pairs=1), stats)
    # Per layer: 3 x (8 + 8) = 48 values; half is 24 = 6 rotary + 6 key scales + a latent of 12.
    assert report["latent_per_layer"] == [12, 12] and report["cache_fraction"] == 0.5
    assert cut.attention_layers[0].cache_shapes(1, 1) == {"latent": [1, 1, 24]}
    generated = np.asarray(cut.generate(IDS[:, :4], max_new_tokens=3))
    tokens = IDS[:, :4]
    for _ in range(3):
        step = np.argmax(util.np_(cut(tokens))[:, -1], axis=-1).astype("int32")
        tokens = np.concatenate([tokens, step[:, None]], axis=1)
    np.testing.assert_array_equal(generated, tokens)
    with pytest.raises(SpecError, match="rotated RoPE would mix"):
        compress_kv(lm, KVPlan(0.5, rope_strategy="rotated", rope_pairs=1), stats)


def test_a_normed_partial_rope_source_converts_exactly_through_its_latent_part():
    """Qwen3-style norms on a source that already rotates only some pairs, a different set per
    key/value head: at full rank the latent part (key up-projection, permuted norm scales,
    each head's inverse key RMS) is exact. A key bias on the dimensions that join the latent
    is refused (under the norm it no longer cancels). A latent with several rotary keys
    loses whole groups of heads, each group's rotary key and norm scales with it: the cache
    shrinks, the logits stay the masked model's."""
    from headsize_tf.keras3.pruning import head_mask, remove_heads, set_head_mask

    sets = [[0, 2], [1, 3], [2, 3]]
    args = dict(vocabulary_size=40, num_layers=2, hidden_dim=24, intermediate_dim=32)
    attention = {"kind": "grouped", "num_heads": 6, "num_kv_heads": 3, "head_size": 8}
    attention.update(rope_max_wavelength=BASE, rope_frequencies=sets)
    lm = DecoderLM(**args, attention=attention, query_key_norm=True, attention_bias=True)
    rng = np.random.default_rng(8)
    lm.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in lm.get_weights()])
    for layer in lm.attention_layers:  # Scales far from one, a different one per dimension.
        layer.query_norm.assign(rng.normal(1, 1, layer.query_norm.shape).astype("float32"))
        layer.key_norm.assign(rng.normal(1, 1, layer.key_norm.shape).astype("float32"))
    with pytest.raises(SpecError, match="the bias no longer cancels"):
        convert_model(lm, ConversionTarget("latent", 24, rope_frequencies=sets))
    for layer in lm.attention_layers:
        layer._key_dense.bias.assign(np.zeros(layer._key_dense.bias.shape, "float32"))
    latent, _ = convert_model(lm, ConversionTarget("latent", 24, rope_frequencies=sets))
    assert latent.attention_layers[0].nope_dim == 4
    np.testing.assert_allclose(util.np_(latent(IDS)), util.np_(lm(IDS)), atol=1e-4)
    # Layer 0 loses its second rotary group; layer 1 keeps every group, one head masked.
    mask = np.array([[1, 1, 0, 0, 1, 1], [1, 0, 1, 1, 1, 1]], "float32")
    set_head_mask(latent, mask)
    masked = util.np_(latent(IDS))
    removed = remove_heads(latent, mask)
    first, second = removed.attention_layers
    assert (first.num_heads, first.num_rope_heads, second.num_rope_heads) == (4, 2, 3)
    assert first.rope_sets == tuple(tuple(s) for s in (sets[0], sets[2]))
    full, smaller = (
        m.attention_layers[0].cache_shapes(1, 4)["latent"][-1] for m in (latent, removed)
    )
    assert full - smaller == 4 + 2  # One rotary key (2 pairs) and two heads' inverse RMS.
    np.testing.assert_allclose(util.np_(removed(IDS)), masked, atol=1e-4)
    # Layer 1's masked head stays (its group does), its output rows zero: pruned, not live.
    assert np.nan_to_num(head_mask(removed)).tolist() == [[1] * 4 + [0] * 2, mask[1].tolist()]
    prompt, _ = removed.prefill(IDS[:, :5], 12)
    np.testing.assert_allclose(util.np_(prompt), masked[:, :5], atol=1e-4)
    # Key/value-group pruning (`--unit kv_group`) prunes these groups.
    from headsize_tf.keras3.pruning.lm_adapter import LMAdapter

    assert LMAdapter(latent, IDS, IDS).kv_groups() == [[0, 0, 1, 1, 2, 2]] * 2
    one_key = DecoderLM(
        **args,
        attention={
            "kind": "latent",
            "num_heads": 6,
            "kv_latent_dim": 16,
            "rope_max_wavelength": BASE,
        },
    )
    with pytest.raises(ValueError, match="Layer 0 has latent attention with one rotary key; whole"):
        LMAdapter(one_key, IDS, IDS).kv_groups()


def test_a_model_with_its_own_query_scale_keeps_it_in_grouped_and_latent_conversions():
    """Gemma 2 27B's softmax scale (query_pre_attn_scalar ** -0.5, not the head size's): grouped
    and partial-RoPE latent layers keep it, exact in their limits; rotated RoPE, which re-scales
    queries to wider heads, is refused."""
    args = dict(vocabulary_size=40, num_layers=2, hidden_dim=24, intermediate_dim=32)
    attention = {"kind": "grouped", "num_heads": 6, "num_kv_heads": 3, "head_size": 8}
    lm = DecoderLM(**args, attention={**attention, "rope_max_wavelength": BASE}, query_scale=0.2)
    rng = np.random.default_rng(5)
    lm.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in lm.get_weights()])
    logits = util.np_(lm(IDS))
    plain = DecoderLM.from_config({**lm.get_config(), "query_scale": None})
    plain.set_weights(lm.get_weights())
    assert np.abs(util.np_(plain(IDS)) - logits).max() > 1e-2  # The scale binds.
    for target in (
        ConversionTarget("grouped", 3, "mean"),
        ConversionTarget("latent", 24, rope_frequencies=[0, 1, 2, 3]),
    ):
        converted, _ = convert_model(lm, target)
        assert converted.query_scale == 0.2
        np.testing.assert_allclose(util.np_(converted(IDS)), logits, atol=1e-4)
    with pytest.raises(SpecError, match="softmax scale is its own"):
        convert_model(lm, ConversionTarget("latent", 24, rope_components=[(0, 0), (1, 0)]))


def _rotated_oracle(weights, components, x, positions, fold=1):
    """Scores `[h, T, T]` of TransMLA's rotated RoPE with FreqFold, from its equations (numpy).

    Per band b of `fold` neighbouring frequencies: channels c = (frequency f, key/value head
    g), `U_b` = eigenvectors of `sum_{re, im} W_b^T W_b` over them (descending). Component j's
    key is `k'_j = sum_c U_b[c, j] k_c`; query head i of group g has the rotary query
    `sum_(c: head g) U_b[c, j] q_(i, f_c)` and scores it against `R(k'_j)`, where R turns at
    frequency `b fold + j mod fold` if (b, j) is kept and not at all otherwise.
    """
    q = np.einsum("te,ehp->thp", x, weights["query_kernel"])
    k = np.einsum("te,egp->tgp", x, weights["key_kernel"])
    w = weights["key_kernel"]
    heads, groups, p = q.shape[1], k.shape[1], k.shape[2]
    half = p // 2
    inverse = rope.inverse_frequencies(p, BASE)
    delta = positions[:, None] - positions[None, :]  # query t - key s
    scores = np.zeros([heads, len(x), len(x)])
    for b in range(half // fold):
        channels = [(f, g) for f in range(b * fold, (b + 1) * fold) for g in range(groups)]
        w_re = np.stack([w[:, g, f] for f, g in channels], axis=1)
        w_im = np.stack([w[:, g, f + half] for f, g in channels], axis=1)
        values, vectors = np.linalg.eigh(w_re.T @ w_re + w_im.T @ w_im)
        u = vectors[:, np.argsort(-values)]
        for j in range(len(channels)):
            k_re = sum(u[c, j] * k[:, g, f] for c, (f, g) in enumerate(channels))
            k_im = sum(u[c, j] * k[:, g, f + half] for c, (f, g) in enumerate(channels))
            turns = inverse[b * fold + j % fold] if (b, j) in components else 0.0
            cos, sin = np.cos(delta * turns), np.sin(delta * turns)
            for i in range(heads):
                mine = [(c, f) for c, (f, g) in enumerate(channels) if g == i * groups // heads]
                q_re = sum(u[c, j] * q[:, i, f] for c, f in mine)
                q_im = sum(u[c, j] * q[:, i, f + half] for c, f in mine)
                # (R_t q) . (R_s k) = Re[q conj(k) e^(i (t - s) theta)], pairs as complex numbers.
                scores[i] += (q_re[:, None] * k_re[None] + q_im[:, None] * k_im[None]) * cos
                scores[i] -= (q_im[:, None] * k_re[None] - q_re[:, None] * k_im[None]) * sin
    return scores / np.sqrt(p)


def _latent_scores(out, x, positions, grid):
    """Scores `[h, T, T]` of the converted latent layer's weights (numpy)."""
    frequencies = out["frequencies"]
    inverse = rope.inverse_frequencies(grid, BASE)[frequencies]
    size = out["query_kernel"].shape[2]
    nope = size - 2 * len(frequencies)
    q = np.einsum("te,ehp->thp", x, out["query_kernel"])
    rope_key = rope.rotate_numpy((x @ out["rope_key_kernel"][:, 0])[:, None], positions, inverse)
    rope_query = rope.rotate_numpy(q[:, :, nope:], positions, inverse)
    scores = np.einsum("thc,sc->hts", rope_query, rope_key[:, 0])
    if nope:
        keys = np.einsum("se,er,rhn->shn", x, out["latent_kernel"], out["key_up_kernel"])
        scores += np.einsum("thn,shn->hts", q[:, :, :nope], keys)
    return scores / np.sqrt(size)


@settings(max_examples=12, deadline=None)
@given(shape=st.sampled_from([(6, 3, 8), (4, 2, 8), (4, 4, 4)]), data=st.data())
def test_rotated_rope_matches_transmla_s_equations_and_is_exact_with_every_component(shape, data):
    heads, groups, p = shape
    rng = np.random.default_rng(data.draw(st.integers(0, 100)))
    fold = data.draw(st.sampled_from([m for m in (1, 2, 4) if (p // 2) % m == 0]))
    e, t = 3 * heads * p // 2, 6
    weights = {
        "query_kernel": rng.normal(size=(e, heads, p)),
        "key_kernel": rng.normal(size=(e, groups, p)),
        "value_kernel": rng.normal(size=(e, groups, p)),
        "output_kernel": rng.normal(size=(heads, p, e)),
    }
    x = rng.normal(size=(t, e))
    positions = np.arange(t) * 3.0
    everything = [(b, j) for b in range(p // 2 // fold) for j in range(groups * fold)]
    count = data.draw(st.integers(1, len(everything)))
    components = data.draw(st.permutations(everything))[:count]
    full = len(kv_sharing.rotated_rope_spectrum(weights, components, fold=fold))
    out, report = kv_sharing.rotated_rope_latent_weights(weights, full, components, fold=fold)
    # The rotary key's columns, by the frequency each kept component turns at.
    order = sorted(components, key=lambda bj: (bj[0] * fold + bj[1] % fold, bj))
    out["frequencies"] = [b * fold + j % fold for b, j in order]
    assert out["frequencies"] == kv_sharing.rotated_layout(components, p // 2, groups, fold)[0]
    expected = _rotated_oracle(weights, set(components), x, positions, fold)
    got = _latent_scores(out, x, positions, p)
    np.testing.assert_allclose(got, expected, atol=2e-3 * np.abs(expected).max())
    if count == len(everything) and fold == 1:  # The exact limit: the source's own scores.
        source = _rotated_oracle(weights, set(everything), x, positions)
        np.testing.assert_allclose(got, source, atol=2e-3 * np.abs(source).max())
        assert "key_up_kernel" not in out and report.key_energy == pytest.approx(1.0)


def test_freqfold_bands_hold_at_least_the_energy_of_their_frequencies_leading_components():
    lm = _decoder(heads=6, groups=3, head_size=16)
    stats = calibration_stats(lm, IDS, source="random ids")
    for i, layer in enumerate(lm.attention_layers):
        weights = numpy_weights(layer)
        exact = kv_sharing.rotated_rope(weights, stats.covariances[i])
        total = exact.key_energy.sum()
        for fold in (2, 4, 8):
            folded = kv_sharing.rotated_rope(weights, stats.covariances[i], fold)
            assert folded.rotations.shape == (8 // fold, 3 * fold, 3 * fold)
            np.testing.assert_allclose(folded.key_energy.sum(), total, rtol=1e-9)
            # Ky Fan: a band's top-`fold` PCA energy >= the sum of its frequencies' top-1
            # (the frequencies' own leading components span one `fold`-dimensional subspace).
            top = folded.key_energy[:, :fold].sum(axis=1)
            per_frequency = exact.key_energy[:, 0].reshape(-1, fold).sum(axis=1)
            assert np.all(top >= per_frequency * (1 - 1e-9))
            last = 8 - fold  # The last band's first frequency.
            assert folded.frequencies[-1].tolist() == [last + j % fold for j in range(3 * fold)]


def test_rotated_rope_in_a_decoder_is_exact_at_full_budget_and_decodes_alike():
    lm = _decoder(bias=True)
    stats = calibration_stats(lm, IDS, source="random ids")
    expected = util.np_(lm(IDS))
    # Every component of every frequency (3 heads x 4 pairs) and the full latent.
    model, report = compress_kv(lm, KVPlan(1.0, "rotated", 4, calibrated=True), stats)
    layer = model.attention_layers[0]
    assert layer.num_rope_heads == 1 and layer.rope_pairs == 12 and layer.nope_dim == 0
    np.testing.assert_allclose(util.np_(model(IDS)), expected, atol=1e-4)
    prompt, _ = model.prefill(IDS[:, :5], 12)
    np.testing.assert_allclose(util.np_(prompt), expected[:, :5], atol=1e-4)
    # A cut cache: one rotary key of 2 x 3 x 1 pairs; the cache is what the plan says.
    cut, report = compress_kv(lm, KVPlan(0.5, "rotated", 1), stats)
    assert report["cache_fraction"] == pytest.approx(0.5)
    assert all(len(c) == 3 for c in report["rope_components_per_layer"])
    spec = cut.attention_spec
    assert spec.rope_grid_size == 8 and spec.num_rope_heads == 1
    rebuilt = DecoderLM.from_config(cut.get_config())
    rebuilt.set_weights(cut.get_weights())
    np.testing.assert_allclose(util.np_(rebuilt(IDS)), util.np_(cut(IDS)), atol=1e-5)
    prompt, cache = cut.prefill(IDS[:, :5], 12)
    np.testing.assert_allclose(util.np_(prompt), util.np_(cut(IDS))[:, :5], atol=1e-4)
    # One vector per token: the latent, then one rotary key of 3 pairs.
    assert cache[0]["latent"].shape[-1] == cut.attention_layers[0].kv_latent_dim + 6


def test_freqfold_in_a_decoder_cuts_to_the_budget_and_decodes_alike():
    lm = _decoder(bias=True)
    stats = calibration_stats(lm, IDS, source="random ids")
    # Bands of 2 frequencies: components are (band 0..1, component 0..5), 3 of them per layer.
    cut, report = compress_kv(lm, KVPlan(0.5, "rotated", 1, rope_fold=2), stats)
    assert report["cache_fraction"] == pytest.approx(0.5) and report["plan"]["rope_fold"] == 2
    for layer, chosen in zip(
        cut.attention_layers, report["rope_components_per_layer"], strict=True
    ):
        assert len(chosen) == 3 and all(0 <= b < 2 and 0 <= j < 6 for b, j in chosen)
        frequencies, _ = kv_sharing.rotated_layout(chosen, 4, 3, 2)
        assert list(layer.rope_sets[0]) == frequencies
    rebuilt = DecoderLM.from_config(cut.get_config())
    rebuilt.set_weights(cut.get_weights())
    logits = util.np_(cut(IDS))
    np.testing.assert_allclose(util.np_(rebuilt(IDS)), logits, atol=1e-5)
    prompt, cache = cut.prefill(IDS[:, :5], 12)
    np.testing.assert_allclose(util.np_(prompt), logits[:, :5], atol=1e-4)
    # One vector per token: the latent, then one rotary key of 3 pairs.
    assert cache[0]["latent"].shape[-1] == cut.attention_layers[0].kv_latent_dim + 6
    # Folding is FreqFold's approximation: every component kept is not the source (the band's
    # two frequencies share turns), unlike fold 1 (above).
    every, _ = compress_kv(lm, KVPlan(1.0, "rotated", 4, rope_fold=2), stats)
    assert np.abs(util.np_(every(IDS)) - util.np_(lm(IDS))).max() > 1e-3


def test_rotated_rope_specs_and_targets_refuse_bad_settings():
    with pytest.raises(SpecError, match="only for kind 'latent'"):
        AttentionSpec(
            "grouped", num_heads=4, num_kv_heads=2, rope_max_wavelength=BASE, rope_grid_size=8
        )
    with pytest.raises(SpecError, match="must be even"):
        AttentionSpec(
            "latent", num_heads=4, kv_latent_dim=8, rope_max_wavelength=BASE, rope_grid_size=7
        )
    with pytest.raises(SpecError, match="repeats a frequency"):
        AttentionSpec(
            "grouped",
            num_heads=4,
            num_kv_heads=2,
            rope_max_wavelength=BASE,
            rope_frequencies=[0, 0],
        )
    layer = AttentionSpec(
        "latent",
        num_heads=4,
        kv_latent_dim=8,
        head_size=4,
        rope_max_wavelength=BASE,
        rope_frequencies=[0, 0, 1],
        rope_grid_size=8,
    )
    with pytest.raises(SpecError, match="rotates 6 dimensions"):
        layer.resolve(16)
    source = AttentionSpec(
        "grouped", num_heads=6, num_kv_heads=3, head_size=8, rope_max_wavelength=BASE
    ).resolve(24)
    with pytest.raises(SpecError, match="frequencies 0..3 and components 0..2"):
        ConversionTarget("latent", 8, rope_components=[(4, 0)]).spec([source], 24)
    with pytest.raises(SpecError, match="instead of rope_frequencies"):
        ConversionTarget("latent", 8, rope_frequencies=[0], rope_components=[(0, 0)])
    with pytest.raises(SpecError, match="bands of 2 frequencies 0..1 and components 0..5"):
        ConversionTarget("latent", 8, rope_components=[(2, 0)], rope_fold=2).spec([source], 24)
    with pytest.raises(SpecError, match="give rope_components too"):
        ConversionTarget("latent", 8, rope_fold=2)
    with pytest.raises(SpecError, match="above 1 only with the rotated strategy"):
        KVPlan(0.5, "2norm", 1, rope_fold=2)
    with pytest.raises(SpecError, match="rope_fold=3: a fold must divide a head's 4 frequency"):
        compress_kv(_decoder(), KVPlan(0.5, "rotated", 1, calibrated=False, rope_fold=3))
    with pytest.raises(SpecError, match=r"rope_fold=3 must divide the head's 4 .*\[1, 2, 4\]"):
        kv_sharing.rotated_rope(numpy_weights(_decoder().attention_layers[0]), fold=3)
    with pytest.raises(SpecError, match="4 frequency pairs"):
        compress_kv(_decoder(), KVPlan(0.9, "rotated", 5, calibrated=False))
    basis = kv_sharing.rotated_rope(numpy_weights(_decoder().attention_layers[0]))
    assert basis.rotations.shape == (4, 3, 3) and len(basis.components(12)) == 12
    with pytest.raises(SpecError, match="has 12 rotated rotary pairs"):
        basis.components(13)


def test_rotation_weights_rank_pairs_by_what_dropping_their_rotation_costs():
    inverse = rope.inverse_frequencies(64, 1e5)
    weights = rope.rotation_weights(inverse, 256)
    # A pair turning by theta per token moves by 2 |sin(theta d / 2)| at distance d.
    brute = [np.mean([abs(np.exp(1j * t * d) - 1) for d in range(1, 257)]) for t in inverse]
    np.testing.assert_allclose(weights, brute, rtol=1e-12)
    assert weights[0] > 1.2 and weights[-1] < 0.01  # Fast pairs matter, slow ones barely.
    lm = _decoder()
    stats = calibration_stats(lm, IDS)
    # Weighted by a 1-token context, only the pairs that turn by a good angle per token count:
    # the highest frequencies win (base 500: theta = 1, 0.21, 0.045, 0.0095).
    _, report = compress_kv(lm, KVPlan(0.5, "rotated", 1, rope_context=1), stats)
    assert all({f for f, _ in c} == {0} for c in report["rope_components_per_layer"])
    _, report = compress_kv(lm, KVPlan(0.5, "2norm", 1, rope_context=1), stats)
    assert report["rope_sets_per_layer"] == [[[0]] * 3] * 2
    with pytest.raises(SpecError, match="rope_context must be None or an int"):
        KVPlan(0.5, "high", 1, rope_context=16)
    with pytest.raises(SpecError, match="rope_context must be None or an int"):
        KVPlan(0.5, "rotated", 1, rope_context=0)


def test_a_split_svd_latent_is_exact_at_its_limit_and_cuts_to_a_budget():
    lm = _decoder(bias=True)
    # 2 of 4 pairs per key/value head on RoPE: the latent holds 6 x 4 non-rotary key and
    # 6 x 8 value columns per layer; the split SVD is exact at min(24, 24) + min(24, 48),
    # the joint one at the width, 24: both then only drop RoPE from the other pairs.
    sets = [(0, 1)] * 3
    joint, _ = convert_model(lm, ConversionTarget("latent", 24, rope_frequencies=sets))
    target = ConversionTarget("latent", 48, "split_svd", rope_frequencies=sets)
    exact, reports = convert_model(lm, target)
    assert reports[0]["method"] == "rope_split_svd"
    np.testing.assert_allclose(util.np_(exact(IDS)), util.np_(joint(IDS)), atol=1e-4)
    with pytest.raises(SpecError, match="outside \\[1, 48\\]"):
        convert_model(lm, ConversionTarget("latent", 49, "split_svd", rope_frequencies=sets))
    stats = calibration_stats(lm, IDS, source="random ids")
    cut, report = compress_kv(lm, KVPlan(0.5, "high", 2, split=True, allocation="energy"), stats)
    assert report["cache_fraction"] == pytest.approx(0.5)
    layer = numpy_weights(cut.attention_layers[0])
    rank = report["latent_per_layer"][0]
    key_rank, _ = kv_sharing.split_ranks((24, 24), (24, 48), rank)
    # The key part of the latent serves no value column, and the other way round.
    assert np.abs(layer["value_up_kernel"][:key_rank]).max() == 0.0
    assert np.abs(layer["key_up_kernel"][key_rank:]).max() == 0.0


def test_grouped_heads_per_layer_meet_a_cache_budget_where_pooling_costs_most():
    from headsize_tf.keras3.reparam.kv_compress import grouped_budget

    lm = _decoder(heads=6, groups=3, head_size=8)
    stats = calibration_stats(lm, IDS)
    target, report = grouped_budget(lm, 1.0, stats)
    assert target.size == (3, 3) and report["cache_fraction"] == 1.0
    model, _ = convert_model(lm, target)
    np.testing.assert_allclose(util.np_(model(IDS)), util.np_(lm(IDS)), atol=1e-4)
    # Two layers of 1 or 3 heads: 2/3 of the cache affords 3 heads in one of them, the one
    # whose keys and values pooling moves most.
    target, report = grouped_budget(lm, 2 / 3, stats)
    errors = [layer["1"] for layer in report["pooling_error_per_layer"]]
    assert sorted(target.size) == [1, 3] and target.size[int(np.argmax(errors))] == 3
    assert report["cache_fraction"] == pytest.approx(2 / 3)
    assert report["kv_heads_per_layer"] == list(target.size)
    model, _ = convert_model(lm, target)
    assert [layer.num_kv_heads for layer in model.attention_layers] == list(target.size)
    with pytest.raises(SpecError, match="below grouped K/V's smallest"):
        grouped_budget(lm, 0.3, stats)
    # Values by the SVD of their activations, keys by mean: exact with every head kept; cut,
    # the keys are mean pooling's and the values' output error on the calibration inputs
    # is no larger than mean pooling's.
    target, _ = grouped_budget(lm, 1.0, stats, "svd_values")
    model, _ = convert_model(lm, target, covariances=stats.covariances)
    np.testing.assert_allclose(util.np_(model(IDS)), util.np_(lm(IDS)), atol=1e-4)
    target, _ = grouped_budget(lm, 2 / 3, stats, "svd_values")
    assert target.method == "svd_values"
    by_svd, _ = convert_model(lm, target, covariances=stats.covariances)
    by_mean, _ = convert_model(lm, dataclasses.replace(target, method="mean"))
    for i, source in enumerate(lm.attention_layers):
        layers = (by_svd.attention_layers[i], by_mean.attention_layers[i])
        np.testing.assert_allclose(*(util.np_(layer._key_dense.kernel) for layer in layers))
        original = numpy_weights(source)
        values, vectors = np.linalg.eigh(stats.covariances[i])
        root = (vectors * np.sqrt(np.maximum(values, 0))) @ vectors.T  # R R = C: ||R M||.

        def value_error(layer, original=original, root=root):
            w = numpy_weights(layer)
            size = w["query_kernel"].shape[1] // w["value_kernel"].shape[1]
            per_head = np.repeat(
                original["value_kernel"], 6 // original["value_kernel"].shape[1], 1
            )
            return sum(
                np.sum(
                    (
                        root
                        @ (
                            per_head[:, h] @ original["output_kernel"][h]
                            - w["value_kernel"][:, h // size] @ w["output_kernel"][h]
                        )
                    )
                    ** 2
                )
                for h in range(6)
            )

        assert value_error(layers[0]) <= value_error(layers[1]) * (1 + 1e-3) + 1e-9
    with pytest.raises(SpecError, match="pools by 'mean' or 'svd_values'"):
        grouped_budget(lm, 2 / 3, stats, "svd")


def _learned_positions_lm(seed=0):
    """A 2-layer `CausalLM` (learned positions, no RoPE) with random weights."""
    from headsize_tf.keras3.modeling import CausalLM

    keras.utils.set_random_seed(seed)
    return CausalLM(
        vocabulary_size=40,
        num_layers=2,
        hidden_dim=16,
        attention={"kind": "standard", "num_heads": 4},
        max_sequence_length=16,
    )


def test_a_model_without_rope_takes_a_latent_budget_calibrated_and_allocated():
    lm = _learned_positions_lm()
    stats = calibration_stats(lm, IDS, source="random ids")
    assert stats.pair_scores == [None, None]
    expected = util.np_(lm(IDS))
    for calibrated in (False, True):
        model, report = compress_kv(lm, KVPlan(1.0, None, calibrated=calibrated), stats)
        # The latent of 16-wide inputs is exact at 16 dimensions, half the 32 keys + values.
        assert report["latent_per_layer"] == [16, 16] and report["cache_fraction"] == 0.5
        assert "rope_sets_per_layer" not in report
        np.testing.assert_allclose(util.np_(model(IDS)), expected, atol=1e-4)
    # A quarter of the cache (2 x 16 values per token and layer -> an 8-wide latent): the
    # calibrated latent keeps the keys and values of the calibration inputs better in every
    # layer, as the whitened SVD's Eckart-Young optimum must.
    plan = KVPlan(0.25, None)
    assert plan.rope_pairs == 0
    calibrated, report = compress_kv(lm, plan, stats)
    weights_only, _ = compress_kv(lm, dataclasses.replace(plan, calibrated=False))
    assert report["latent_per_layer"] == [8, 8] and report["cache_fraction"] == 0.25
    inputs = [util.np_(h).reshape(-1, 16) for _, _, h in lm.attention_inputs(IDS)]
    for i, source in enumerate(lm.attention_layers):
        w = numpy_weights(source)
        key, value = (w[role].reshape(16, -1) for role in ("key_kernel", "value_kernel"))

        def error(model, i=i, key=key, value=value):
            c = numpy_weights(model.attention_layers[i])
            latent = inputs[i] @ c["latent_kernel"]
            return sum(
                np.sum((latent @ c[up].reshape(8, -1) - inputs[i] @ full) ** 2)
                / np.sum((inputs[i] @ full) ** 2)
                for up, full in (("key_up_kernel", key), ("value_up_kernel", value))
            )

        assert error(calibrated) < error(weights_only)
    _, energy = compress_kv(lm, dataclasses.replace(plan, allocation="energy"), stats)
    assert sum(energy["latent_per_layer"]) == 16
    sizes = allocate_by_sensitivity(lm, plan, stats, IDS, rounds=2)
    assert sizes["loss"] <= sizes["loss_uniform"] and sum(sizes["latent_per_layer"]) == 16
    with pytest.raises(SpecError, match="has no rotary positions: rope_strategy='2norm'"):
        compress_kv(lm, KVPlan(0.5), stats)
    with pytest.raises(SpecError, match="a RoPE model needs a rope_strategy"):
        compress_kv(_decoder(), KVPlan(0.5, None), stats)
    with pytest.raises(SpecError, match="keeps no latent dimension"):
        compress_kv(lm, KVPlan(0.01, None), stats)


def test_grouped_heads_of_a_model_without_rope_may_be_re_based_by_svd():
    from headsize_tf.keras3.reparam.kv_compress import grouped_budget

    lm = _learned_positions_lm()
    stats = calibration_stats(lm, IDS)
    target, report = grouped_budget(lm, 1.0, stats, "svd")
    assert target.size == (4, 4) and target.method == "svd"
    model, _ = convert_model(lm, target, covariances=stats.covariances)
    np.testing.assert_allclose(util.np_(model(IDS)), util.np_(lm(IDS)), atol=1e-4)
    target, report = grouped_budget(lm, 0.375, stats, "svd")  # 12 of 32 heads' values.
    assert sum(target.size) == 3 and report["cache_fraction"] == pytest.approx(0.375)
    with pytest.raises(SpecError, match="pools by 'mean', 'svd_values' or 'svd'; got"):
        grouped_budget(lm, 0.5, stats, "joint_svd")
    for method in ("mean", "svd_values"):  # Every method is exact with every head kept.
        target, _ = grouped_budget(lm, 1.0, stats, method)
        model, _ = convert_model(lm, target, covariances=stats.covariances)
        np.testing.assert_allclose(util.np_(model(IDS)), util.np_(lm(IDS)), atol=1e-4)
