"""core.kv_sharing and core.kv_cache against the numpy oracles of the papers' equations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headsize_tf.core import kv_cache, kv_sharing
from headsize_tf.core.params import attention_params
from headsize_tf.core.spec import AttentionSpec, SpecError
from tests import kv_oracle


def _inputs(rng, batch=2, length=5, keys=7, width=16):
    return rng.normal(size=(batch, length, width)), rng.normal(size=(batch, keys, width))


def _relative(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


@pytest.mark.parametrize("method", kv_sharing.GROUPED_METHODS)
@pytest.mark.parametrize("masked_rows", ["zero", "uniform"])
def test_grouped_with_one_head_per_group_is_exact(method, masked_rows):
    rng = np.random.default_rng(0)
    w = kv_oracle.random_mha_weights(rng, width=16, heads=4, head_size=6, value_dim=5)
    w["head_gates"] = np.array([1.0, 0.0, 0.5, 1.0])
    x, y = _inputs(rng)
    mask = rng.random((2, 5, 7)) > 0.4
    mask[0, 1] = False  # A fully masked row.
    converted, report = kv_sharing.grouped_weights(w, 4, method=method)
    np.testing.assert_allclose(
        kv_oracle.grouped_logits(converted, x, y),
        # The key bias is dropped: logits differ by a per-query constant only.
        kv_oracle.mha_logits({**w, "key_bias": None}, x, y),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        kv_oracle.grouped(converted, x, y, mask, masked_rows),
        kv_oracle.mha(w, x, y, mask, masked_rows),
        rtol=1e-5,
        atol=1e-5,
    )
    assert converted["key_kernel"].shape == (16, 4, 6)
    assert "key_bias" not in converted and converted["value_bias"].shape == (4, 5)
    assert report.key_energy == pytest.approx(1.0, abs=1e-6)
    assert report.value_energy == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("masked_rows", ["zero", "uniform"])
@pytest.mark.parametrize("balance", [True, False])
def test_latent_at_full_rank_is_exact(masked_rows, balance):
    rng = np.random.default_rng(1)
    w = kv_oracle.random_mha_weights(rng, width=16, heads=4, head_size=3, value_dim=2)
    x, y = _inputs(rng)
    mask = rng.random((2, 4, 5, 7)) > 0.3  # Per-head mask [B, N, T, S].
    mask[1, 2, 0] = False
    full = kv_sharing.latent_full_rank(w)
    assert full == min(16, 4 * (3 + 2)) == 16
    converted, report = kv_sharing.latent_weights(w, full, balance=balance)
    np.testing.assert_allclose(
        kv_oracle.latent_logits(converted, x, y),
        kv_oracle.mha_logits({**w, "key_bias": None}, x, y),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        kv_oracle.latent(converted, x, y, mask, masked_rows),
        kv_oracle.mha(w, x, y, mask, masked_rows),
        rtol=1e-5,
        atol=1e-5,
    )
    assert report.key_energy == pytest.approx(1.0) and report.value_energy == pytest.approx(1.0)


def test_latent_is_exact_at_the_kernels_rank_below_the_width():
    # 2 heads of 3 + 3: rank([W_K, W_V]) = 12 < width 32, so r = 12 is exact.
    rng = np.random.default_rng(2)
    w = kv_oracle.random_mha_weights(rng, width=32, heads=2, head_size=3)
    x, y = _inputs(rng, width=32)
    converted, _ = kv_sharing.latent_weights(w, 12)
    assert converted["latent_kernel"].shape == (32, 12)
    np.testing.assert_allclose(
        kv_oracle.latent(converted, x, y), kv_oracle.mha(w, x, y), rtol=1e-5, atol=1e-5
    )


def test_latent_error_falls_with_rank():
    rng = np.random.default_rng(3)
    w = kv_oracle.random_mha_weights(rng, width=24, heads=4, head_size=6)
    x, y = _inputs(rng, width=24)
    reference = kv_oracle.mha(w, x, y)
    errors = [
        _relative(kv_oracle.latent(kv_sharing.latent_weights(w, r)[0], x, y), reference)
        for r in (2, 6, 12, 18, 24)
    ]
    assert errors == sorted(errors, reverse=True)
    assert errors[-1] < 1e-5 < errors[0]


def test_balancing_keeps_values_when_keys_are_large():
    # Keys 30x the values' norm: an unbalanced joint SVD spends the latent on keys.
    rng = np.random.default_rng(4)
    w = kv_oracle.random_mha_weights(rng, width=24, heads=4, head_size=6)
    w["key_kernel"] = w["key_kernel"] * 30.0
    balanced = kv_sharing.latent_weights(w, 12, balance=True)[1]
    plain = kv_sharing.latent_weights(w, 12, balance=False)[1]
    assert plain.key_energy > balanced.key_energy
    assert balanced.value_energy > plain.value_energy + 0.1
    # Both sides keep at least a third of their energy once balanced.
    assert min(balanced.key_energy, balanced.value_energy) > 1 / 3


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    heads_per_group=st.sampled_from([2, 3, 4]),
    groups=st.sampled_from([1, 2]),
    head_size=st.integers(2, 8),
    seed=st.integers(0, 2**16),
)
def test_svd_grouping_beats_mean_pooling_on_the_attention_operators_25_examples(
    heads_per_group, groups, head_size, seed
):
    """25 drawn layers: per-group SVD never approximates the logits and outputs worse."""
    rng = np.random.default_rng(seed)
    heads = heads_per_group * groups
    w = kv_oracle.random_mha_weights(rng, width=12, heads=heads, head_size=head_size)
    x, y = _inputs(rng, width=12, length=6, keys=6)
    reference = kv_oracle.mha_logits({**w, "key_bias": None}, x, y)
    svd = kv_sharing.grouped_weights(w, groups, method="svd")[0]
    mean = kv_sharing.grouped_weights(w, groups, method="mean")[0]

    def operator_error(converted):
        # || W_Q^i W_K^i^T - W'_Q^i W'_K^g^T ||, the quantity the SVD minimises.
        total = 0.0
        for i in range(heads):
            g = i // heads_per_group
            a = np.vstack([w["query_kernel"][:, i], w["query_bias"][i]]) @ w["key_kernel"][:, i].T
            b = np.vstack([converted["query_kernel"][:, i], converted["query_bias"][i]])
            total += np.sum((a - b @ converted["key_kernel"][:, g].T) ** 2)
        return total

    assert operator_error(svd) <= operator_error(mean) * (1 + 1e-6)
    assert np.all(np.isfinite(kv_oracle.grouped_logits(svd, x, y)))
    assert kv_oracle.grouped_logits(svd, x, y).shape == reference.shape


def test_mean_pooling_is_ainslies_recipe():
    rng = np.random.default_rng(5)
    w = kv_oracle.random_mha_weights(rng, width=8, heads=6, head_size=4)
    converted, report = kv_sharing.grouped_weights(w, 2, method="mean")
    np.testing.assert_allclose(converted["key_kernel"][:, 1], w["key_kernel"][:, 3:6].mean(1))
    np.testing.assert_allclose(converted["value_kernel"][:, 0], w["value_kernel"][:, 0:3].mean(1))
    np.testing.assert_array_equal(converted["query_kernel"], w["query_kernel"].astype(np.float32))
    np.testing.assert_allclose(converted["value_bias"], w["value_bias"], rtol=1e-6)
    assert 0.0 < report.key_energy < 1.0


def test_value_bias_fold_keeps_gates_exact():
    # Gating a head after the conversion removes exactly its share, folded bias included.
    rng = np.random.default_rng(6)
    w = kv_oracle.random_mha_weights(rng, width=16, heads=4, head_size=4)
    x, y = _inputs(rng)
    converted, _ = kv_sharing.latent_weights(w, 16)
    gates = np.array([0.0, 1.0, 0.25, 1.0])
    np.testing.assert_allclose(
        kv_oracle.latent({**converted, "head_gates": gates}, x, y),
        kv_oracle.mha({**w, "head_gates": gates}, x, y),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("groups", [0, 3, -1, 2.0, True])
def test_bad_group_counts_name_the_value(groups):
    w = kv_oracle.random_mha_weights(np.random.default_rng(0), 8, 4, 2)
    with pytest.raises(SpecError, match=f"num_kv_heads.*{groups!r}|num_kv_heads={groups}"):
        kv_sharing.grouped_weights(w, groups)


@pytest.mark.parametrize("rank", [0, 17, -2, 3.5])
def test_bad_latent_ranks_name_the_value_and_the_range(rank):
    w = kv_oracle.random_mha_weights(np.random.default_rng(0), 16, 4, 4)
    with pytest.raises(SpecError, match=rf"kv_latent_dim={rank!r} is outside \[1, 16\]"):
        kv_sharing.latent_weights(w, rank)


def test_unknown_method_and_unequal_widths():
    rng = np.random.default_rng(0)
    w = kv_oracle.random_mha_weights(rng, 8, 4, 2)
    with pytest.raises(ValueError, match="'median'"):
        kv_sharing.grouped_weights(w, 2, method="median")
    w["value_kernel"] = rng.normal(size=(6, 4, 2))
    with pytest.raises(ValueError, match="key width 8 and value width 6"):
        kv_sharing.latent_weights(w, 4)


# ---------------------------------------------------------------- cache formula
@pytest.mark.parametrize(
    "spec, per_token",
    [
        (AttentionSpec("standard", num_heads=8), 8 * (8 + 8)),
        (AttentionSpec("fixed_head", num_heads=4, head_size=32, value_dim=16), 4 * (32 + 16)),
        (AttentionSpec("collaborative", num_heads=8, shared_key_dim=24), 24 + 8 + 8 * 8),
        (AttentionSpec("grouped", num_heads=8, num_kv_heads=2), 2 * (8 + 8)),
        (AttentionSpec("grouped", num_heads=8, num_kv_heads=1, head_size=16), 16 + 16),
        (AttentionSpec("latent", num_heads=8, kv_latent_dim=40), 40),
    ],
)
def test_cache_bytes_per_token(spec, per_token):
    assert kv_cache.kv_cache_bytes_per_token(spec, 64) == 4 * per_token
    assert kv_cache.kv_cache_bytes_per_token(spec, 64, num_layers=3, dtype="bfloat16") == (
        3 * 2 * per_token
    )


def test_cache_of_a_pruned_model_counts_each_layers_heads():
    spec = AttentionSpec("standard", num_heads=[8, 4, 2])  # Heads of 64 // h.
    assert kv_cache.kv_cache_bytes_per_token(spec, 64, num_layers=3, dtype="float16") == 2 * (
        8 * 16 + 4 * 32 + 2 * 64
    )
    with pytest.raises(SpecError, match="per-layer lists of 3 entries"):
        kv_cache.kv_cache_bytes_per_token(spec, 64, num_layers=2)


def test_collaborative_cache_without_biases_has_no_content_term():
    resolved = AttentionSpec("collaborative", num_heads=4, shared_key_dim=8).resolve(16)
    assert kv_cache.cache_entries(resolved, use_bias=False) == {"key": 8, "value": 16}


@pytest.mark.parametrize("dtype", ["mixed_float16", "float16", "bfloat16", "mixed_bfloat16"])
def test_dtype_bytes_of_policies(dtype):
    assert kv_cache.dtype_bytes(dtype) == 2


def test_unknown_dtype_is_named():
    with pytest.raises(SpecError, match="'complex64'"):
        kv_cache.dtype_bytes("complex64")


# ------------------------------------------------------------------ parameters
def test_parameters_of_converted_weights_match_the_formulas():
    rng = np.random.default_rng(0)
    w = kv_oracle.random_mha_weights(rng, width=16, heads=4, head_size=6, value_dim=5)

    def count(weights):
        return sum(np.size(v) for k, v in weights.items() if v is not None and k != "head_gates")

    grouped = kv_sharing.grouped_weights(w, 2)[0]
    spec = AttentionSpec("grouped", num_heads=4, num_kv_heads=2, head_size=6, value_dim=5)
    assert count(grouped) == attention_params(spec, 16).trainable
    latent = kv_sharing.latent_weights(w, 10)[0]
    spec = AttentionSpec("latent", num_heads=4, kv_latent_dim=10, head_size=6, value_dim=5)
    assert count(latent) == attention_params(spec, 16).trainable


def test_grouped_head_removal_keeps_whole_groups():
    from headsize_tf.core.pruning_plan import slice_heads, whole_groups

    assert whole_groups([1, 5], num_heads=6, num_kv_heads=3) == [0, 1, 4, 5]
    rng = np.random.default_rng(0)
    w = kv_sharing.grouped_weights(kv_oracle.random_mha_weights(rng, 8, 6, 2), 3)[0]
    w.pop("head_gates")
    sliced = slice_heads("grouped", w, [0, 1, 4, 5])
    assert sliced["query_kernel"].shape == (8, 4, 2) and sliced["key_kernel"].shape == (8, 2, 2)
    np.testing.assert_array_equal(sliced["value_kernel"][:, 1], w["value_kernel"][:, 2])
    np.testing.assert_array_equal(sliced["value_bias"], w["value_bias"][[0, 1, 4, 5]])


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    width=st.sampled_from([8, 12, 16]),
    heads=st.integers(1, 4),
    head_size=st.integers(1, 5),
    value_dim=st.integers(1, 5),
    fraction=st.floats(0.1, 1.0),
    seed=st.integers(0, 2**16),
)
def test_split_svd_is_two_truncated_svds_and_exact_at_its_limit_20_examples(
    width, heads, head_size, value_dim, fraction, seed
):
    # MHA2MLA's split variant: the keys' and the values' own SVDs, each its part of the latent.
    rng = np.random.default_rng(seed)
    w = kv_oracle.random_mha_weights(rng, width, heads, head_size, value_dim)
    key = w["key_kernel"].reshape(width, -1)
    value = w["value_kernel"].reshape(width, -1)
    limit = kv_sharing.latent_full_rank(w, split=True)
    assert limit == min(width, key.shape[1]) + min(width, value.shape[1])
    rank = max(1, int(fraction * limit))
    converted, report = kv_sharing.latent_weights(w, rank, split=True)
    assert report.method == "split_svd"
    key_rank, value_rank = kv_sharing.split_ranks(key.shape, value.shape, rank)
    assert key_rank + value_rank == rank
    down = converted["latent_kernel"]
    key_up = converted["key_up_kernel"].reshape(rank, -1)
    value_up = converted["value_up_kernel"].reshape(rank, -1)
    # Each part of the latent serves one side only ...
    np.testing.assert_allclose(key_up[key_rank:], 0.0, atol=1e-7)
    np.testing.assert_allclose(value_up[:key_rank], 0.0, atol=1e-7)
    # ... with the Eckart-Young error of a rank-k truncation of that side's kernel.
    for kernel, up, kept in ((key, key_up, key_rank), (value, value_up, value_rank)):
        singular = np.linalg.svd(kernel, compute_uv=False)
        expected = np.sqrt(np.sum(singular[kept:] ** 2))
        assert np.linalg.norm(kernel - down @ up) == pytest.approx(expected, rel=1e-4, abs=1e-5)
    exact, _ = kv_sharing.latent_weights(w, limit, split=True)
    x, y = _inputs(rng, width=width)
    np.testing.assert_allclose(
        kv_oracle.latent(exact, x, y), kv_oracle.mha(w, x, y), rtol=1e-5, atol=1e-5
    )
    with pytest.raises(SpecError, match=f"outside \\[1, {limit}\\]"):
        kv_sharing.latent_weights(w, limit + 1, split=True)


def test_the_split_svd_s_calibrated_latent_serves_the_activations_better():
    rng = np.random.default_rng(5)
    key, value = rng.normal(size=(16, 12)), rng.normal(size=(16, 8))
    x = rng.normal(size=(400, 16)) @ np.diag(np.linspace(0.1, 3.0, 16))
    covariance = x.T @ x / len(x)

    def error(cov):
        down, key_up, value_up, _ = kv_sharing.joint_basis(
            key, value, 8, covariance=cov, split=True
        )
        return np.sum((x @ down @ key_up - x @ key) ** 2) + np.sum(
            (x @ down @ value_up - x @ value) ** 2
        )

    # Each side's whitened truncation is the least-squares best for its activations.
    assert error(covariance) < 0.8 * error(None)


def test_pooling_error_is_the_relative_error_of_the_pooled_activations():
    rng = np.random.default_rng(6)
    w = kv_oracle.random_mha_weights(rng, width=12, heads=6, head_size=4)
    assert kv_sharing.pooling_error(w, 6) == pytest.approx(0.0, abs=1e-12)
    x = rng.normal(size=(300, 12)) @ rng.normal(size=(12, 12))
    covariance = x.T @ x / len(x)
    pooled, _ = kv_sharing.grouped_weights(w, 2, method="mean")
    errors = []
    for role in ("key_kernel", "value_kernel"):
        kernel = w[role].reshape(12, -1)
        shared = np.repeat(pooled[role], 3, axis=1).reshape(12, -1)
        errors.append(np.sum((x @ (kernel - shared)) ** 2) / np.sum((x @ kernel) ** 2))
    assert kv_sharing.pooling_error(w, 2, covariance) == pytest.approx(np.mean(errors), rel=1e-4)
    # Of the weights: the same with isotropic inputs.
    assert kv_sharing.pooling_error(w, 2) == pytest.approx(
        kv_sharing.pooling_error(w, 2, 4.0 * np.eye(12)), rel=1e-4
    )
    assert kv_sharing.pooling_error(w, 1) > kv_sharing.pooling_error(w, 2) > 0


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    layers=st.lists(
        st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.sampled_from([4, 8])),
        min_size=1,
        max_size=5,
    ),
    extra=st.floats(0.0, 1.0),
)
def test_kv_heads_allocation_stays_in_budget_and_beats_uniform_choices_25_examples(layers, extra):
    # Choices of 1, 2 or 4 key/value heads per layer, errors falling with more heads.
    errors = [{1: a + b, 2: b, 4: 0.0} for a, b, _ in layers]
    values = [v for *_, v in layers]
    budget = sum(values) + int(extra * 3 * sum(values))
    heads = kv_sharing.allocate_kv_heads(errors, values, budget)
    assert sum(g * v for g, v in zip(heads, values, strict=True)) <= budget
    total = sum(e[g] for e, g in zip(errors, heads, strict=True))
    # No worse than any uniform choice that fits the budget.
    for g in (1, 2, 4):
        if g * sum(values) <= budget:
            assert total <= sum(e[g] for e in errors) + 1e-9
    with pytest.raises(SpecError, match="below the fewest key/value heads"):
        kv_sharing.allocate_kv_heads(errors, values, sum(values) - 1)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data())
def test_a_partial_rope_latent_at_any_rank_is_the_best_approximation_of_the_rest_25_examples(
    data,
):
    # MHA2MLA at a drawn rank: the kept pairs' key dimensions (j and j + p/2, half-split)
    # become the rotary keys as they are; the other key dimensions and the values of every
    # key/value head get the rank-r projection onto their top left singular vectors
    # (Eckart-Young), the same for every query head of a group.
    groups, size = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    heads, head_size = groups * size, data.draw(st.sampled_from([4, 6, 8]))
    width, value_dim = data.draw(st.sampled_from([8, 12, 16])), data.draw(st.integers(1, 5))
    half = head_size // 2
    kept = data.draw(st.integers(1, half))
    sets = [data.draw(st.permutations(range(half)))[:kept] for _ in range(groups)]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    w = kv_oracle.random_mha_weights(rng, width, heads, head_size, value_dim, biases=False)
    key = rng.normal(0, 0.25, (width, groups, head_size))
    value = rng.normal(0, 0.25, (width, groups, value_dim))
    w.update(key_kernel=key, value_kernel=value)
    rotary = [[*s, *(j + half for j in s)] for s in sets]
    rest = [[d for d in range(head_size) if d not in r] for r in rotary]
    operand = np.concatenate(
        [key[:, g, rest[g]] for g in range(groups)] + [value[:, g] for g in range(groups)], 1
    )
    full = min(width, operand.shape[1])
    rank = data.draw(st.integers(1, full))
    out, report = kv_sharing.rope_latent_weights(w, rank, sets, balance=False)
    assert report.method == "rope_joint_svd" and report.size == rank
    left = np.linalg.svd(operand, full_matrices=False)[0][:, :rank]
    best = left @ left.T @ operand
    nope = head_size - 2 * kept
    down = out["latent_kernel"].astype(np.float64)
    for g in range(groups):
        np.testing.assert_array_equal(
            out["rope_key_kernel"][:, g], key[:, g, rotary[g]].astype(np.float32)
        )
        for i in range(g * size, (g + 1) * size):
            np.testing.assert_allclose(
                out["query_kernel"][:, i], w["query_kernel"][:, i, rest[g] + rotary[g]], rtol=1e-6
            )
            if nope:
                got = down @ out["key_up_kernel"][:, i]
                want = best[:, g * nope : (g + 1) * nope]
                np.testing.assert_allclose(got, want, atol=1e-5)
            got = down @ out["value_up_kernel"][:, i]
            start = groups * nope + g * value_dim
            np.testing.assert_allclose(got, best[:, start : start + value_dim], atol=1e-5)
    assert ("key_up_kernel" in out) == (nope > 0)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    heads=st.sampled_from([2, 4, 6]),
    per_group=st.sampled_from([1, 2]),
    head_size=st.integers(1, 4),
    value_dim=st.integers(1, 4),
    gated=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_calibrated_grouping_keeps_the_best_subspaces_of_the_activations_20_examples(
    heads, per_group, head_size, value_dim, gated, seed
):
    # With the inputs' second moment C = X^T X / n, "svd" finds each group's shared key
    # subspace of the gated operators g_i X W_K W_Q^T and "svd" and "svd_values" its value
    # subspace of g_i X W_V W_O: the Eckart-Young optimum of the activations (below the
    # weight SVD's and mean pooling's error); "svd_values" keeps mean pooling's keys.
    groups, rng, width = heads // per_group, np.random.default_rng(seed), 10
    w = kv_oracle.random_mha_weights(rng, width, heads, head_size, value_dim, biases=False)
    if gated:  # Some heads off, some weighted; no group wholly off.
        w["head_gates"] = rng.choice([0.0, 0.5, 1.0], heads)
        w["head_gates"][::per_group] = 1.0
    gates = w["head_gates"]
    x = rng.normal(size=(400, width)) @ np.diag(np.geomspace(0.05, 3.0, width))
    covariance = x.T @ x / len(x)
    operators = {
        "key": [w["key_kernel"][:, i] @ w["query_kernel"][:, i].T for i in range(heads)],
        "value": [w["value_kernel"][:, i] @ w["output_kernel"][i] for i in range(heads)],
    }

    def errors(out):
        shared = {
            "key": [
                out["key_kernel"][:, i // per_group] @ out["query_kernel"][:, i].T
                for i in range(heads)
            ],
            "value": [
                out["value_kernel"][:, i // per_group] @ out["output_kernel"][i]
                for i in range(heads)
            ],
        }
        return {
            side: sum(
                gates[i] ** 2 * np.sum((x @ (operators[side][i] - shared[side][i])) ** 2)
                for i in range(heads)
            )
            for side in operators
        }

    def optimum(side, rank):
        total = 0.0
        for g in range(groups):
            members = range(g * per_group, (g + 1) * per_group)
            stacked = np.hstack([gates[i] * x @ operators[side][i] for i in members])
            total += np.sum(np.linalg.svd(stacked, compute_uv=False)[rank:] ** 2)
        return total

    mean = errors(kv_sharing.grouped_weights(w, groups, method="mean")[0])
    for method in ("svd", "svd_values"):
        calibrated = errors(
            kv_sharing.grouped_weights(w, groups, method=method, covariance=covariance)[0]
        )
        plain = errors(kv_sharing.grouped_weights(w, groups, method=method)[0])
        assert calibrated["value"] == pytest.approx(optimum("value", value_dim), rel=1e-3, abs=1e-6)
        assert calibrated["value"] <= min(plain["value"], mean["value"]) * (1 + 1e-6) + 1e-9
        if method == "svd":
            assert calibrated["key"] == pytest.approx(optimum("key", head_size), rel=1e-3, abs=1e-6)
            assert calibrated["key"] <= plain["key"] * (1 + 1e-6) + 1e-9
        else:
            assert calibrated["key"] == pytest.approx(mean["key"], rel=1e-6, abs=1e-9)
    with pytest.raises(SpecError, match="'mean' or 'svd_values' on a rotary model"):
        kv_sharing.grouped_weights(w, groups, method="svd", rope=True)
