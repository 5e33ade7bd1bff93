"""The core's importance normalisation and head-slicing plans (numpy only)."""

import numpy as np
import pytest

from headsize_tf.core.pruning_plan import HEAD_AXES, normalize_importance, slice_heads


def test_normalize_importance_is_per_layer_l2_of_the_token_mean():
    totals = [np.array([3.0, 4.0]), np.array([1.0, 0.0, 0.0])]
    raw = normalize_importance(totals, tokens=10, normalize=False)
    np.testing.assert_allclose(raw[0, :2], [0.3, 0.4])
    assert np.isnan(raw[0, 2])  # Layer 0 has 2 heads: padded.
    scores = normalize_importance(totals, tokens=10)
    np.testing.assert_allclose(scores[0, :2], [0.6, 0.8])
    np.testing.assert_allclose(scores[1], [1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="no examples"):
        normalize_importance(totals, tokens=0)


def test_slice_heads_standard_layout():
    rng = np.random.default_rng(0)
    width, heads, size, value = 5, 4, 3, 2
    weights = {
        "query_kernel": rng.normal(size=(width, heads, size)),
        "query_bias": rng.normal(size=(heads, size)),
        "key_kernel": rng.normal(size=(width, heads, size)),
        "key_bias": None,
        "value_kernel": rng.normal(size=(width, heads, value)),
        "value_bias": rng.normal(size=(heads, value)),
        "output_kernel": rng.normal(size=(heads, value, width)),
        "output_bias": rng.normal(size=(width,)),
    }
    out = slice_heads("fixed_head", weights, [3, 1])
    np.testing.assert_array_equal(out["query_kernel"][:, 0], weights["query_kernel"][:, 3])
    np.testing.assert_array_equal(out["output_kernel"][1], weights["output_kernel"][1])
    assert out["key_bias"] is None
    np.testing.assert_array_equal(out["output_bias"], weights["output_bias"])
    # The attention output of the kept heads is unchanged by slicing: sum over heads.
    x = rng.normal(size=(width,))
    full_v = np.einsum("c,chv->hv", x, weights["value_kernel"])
    kept = np.einsum("hv,hvw->w", full_v[[3, 1]], weights["output_kernel"][[3, 1]])
    sliced_v = np.einsum("c,chv->hv", x, out["value_kernel"])
    np.testing.assert_allclose(np.einsum("hv,hvw->w", sliced_v, out["output_kernel"]), kept)


def test_slice_heads_collaborative_keeps_shared_projections():
    rng = np.random.default_rng(1)
    weights = {
        "query_kernel": rng.normal(size=(6, 8)),
        "key_kernel": rng.normal(size=(6, 8)),
        "mixing": rng.normal(size=(4, 8)),
        "content_bias": rng.normal(size=(6, 4)),
        "value_kernel": rng.normal(size=(6, 4, 2)),
    }
    out = slice_heads("collaborative", weights, [0, 2])
    np.testing.assert_array_equal(out["query_kernel"], weights["query_kernel"])
    np.testing.assert_array_equal(out["mixing"], weights["mixing"][[0, 2]])
    np.testing.assert_array_equal(out["content_bias"], weights["content_bias"][:, [0, 2]])
    assert set(HEAD_AXES["collaborative"]) >= set(out)


def test_slice_heads_errors():
    with pytest.raises(ValueError, match="Unknown attention kind 'talking'"):
        slice_heads("talking", {}, [0])
    with pytest.raises(ValueError, match=r"Unknown weight roles \['mixing'\]"):
        slice_heads("standard", {"mixing": np.zeros((2, 2))}, [0])
    with pytest.raises(ValueError, match=r"head positions \[5\] out of range \[0, 2\)"):
        slice_heads("standard", {"value_bias": np.zeros((2, 3))}, [5])


def test_an_error_mid_schedule_ends_the_progress_line(capsys):
    from headsize_tf.core.pruning_plan import iterative_pruning

    calls = []

    def metric(mask):
        calls.append(mask.copy())
        if len(calls) == 2:
            raise RuntimeError("evaluation failed")
        return 1.0

    with pytest.raises(RuntimeError, match="evaluation failed"):
        iterative_pruning(
            (2, 4), lambda m: np.arange(8.0).reshape(2, 4), metric, target_fraction=0.5, step=0.25
        )
    err = capsys.readouterr().err
    # The bar's last state ends its line: an error printed next starts a line of its own.
    assert "pruning" in err and err.endswith("\n")


def test_a_latent_with_several_rotary_keys_keeps_whole_groups_and_their_keys():
    rng = np.random.default_rng(0)
    heads, keys, e, p, r = 6, 3, 5, 4, 7
    weights = {
        "query_kernel": rng.normal(size=(e, heads, p)),
        "query_bias": None,
        "latent_kernel": rng.normal(size=(e, r)),
        "key_up_kernel": rng.normal(size=(r, heads, 2)),
        "value_up_kernel": rng.normal(size=(r, heads, p)),
        "value_bias": None,
        "output_kernel": rng.normal(size=(heads, p, e)),
        "output_bias": None,
        "rope_key_kernel": rng.normal(size=(e, keys, 2)),
        "rope_key_bias": rng.normal(size=(keys, 2)),
        "query_norm": rng.normal(size=(keys, p)),
        "key_norm": rng.normal(size=(keys, p)),
    }
    out = slice_heads("latent", weights, [0, 1, 4, 5])  # Groups 0 and 2.
    np.testing.assert_array_equal(out["query_kernel"], weights["query_kernel"][:, [0, 1, 4, 5]])
    np.testing.assert_array_equal(out["rope_key_kernel"], weights["rope_key_kernel"][:, [0, 2]])
    for role in ("rope_key_bias", "query_norm", "key_norm"):
        np.testing.assert_array_equal(out[role], weights[role][[0, 2]])
    np.testing.assert_array_equal(out["latent_kernel"], weights["latent_kernel"])
    # No head kept: group 0, masked.
    assert slice_heads("latent", weights, [])["rope_key_kernel"].shape == (e, 1, 2)
    with pytest.raises(ValueError, match=r"split a group of 2 query heads; a latent layer with 3"):
        slice_heads("latent", weights, [0, 2, 3])
