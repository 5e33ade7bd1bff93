"""Property tests of the tf_keras layers against the numpy oracle of the papers' equations.

Hypothesis draws the layer kind (standard, fixed head size, collaborative heads), shapes,
head counts and sizes, value sizes, output widths, biases, separate keys, masks of every
form stock MHA takes (with fully masked rows), causal masks, head gates and the dtype
policy; examples are derandomized (the same on every run) and counted in the test names.
On tf_keras a fully masked row attends uniformly to every key, as stock
`tf_keras.layers.MultiHeadAttention` (checked here too) does.
"""

from __future__ import annotations

import numpy as np
import tf_keras
from hypothesis import given, settings

from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from tests.layers import util
from tests.layers.attention_cases import TOLERANCES, Case, cases

LAYERS = {
    "standard": StandardAttention,
    "fixed_head": FixedHeadAttention,
    "collaborative": CollaborativeAttention,
}
FULLY_MASKED = "uniform"  # tf_keras' MHA adds -1e9 to masked logits: equal weights.


def _as_float64(tensor) -> np.ndarray:
    return np.asarray(tensor.numpy(), dtype=np.float64)


def _check(layer, case: Case, gates=None):
    """Builds `layer`, gives it the case's weights (and gates), checks it against the oracle."""
    x, y, key = case.inputs()
    layer(x, y, key=key)
    util.set_weights(layer, case.random_weights(layer))
    if gates is not None:
        layer.set_head_mask(gates)
    got = layer(
        x,
        y,
        key=key,
        attention_mask=case.mask(),
        use_causal_mask=case.causal,
        return_attention_scores=case.return_scores,
    )
    out, probs = got if case.return_scores else (got, None)
    want_out, want_probs = case.oracle(x, y, key, util.read_weights(layer), FULLY_MASKED)
    tol = TOLERANCES[case.policy]
    np.testing.assert_allclose(_as_float64(out), want_out, rtol=tol["rtol"], atol=tol["atol"])
    if probs is not None:
        np.testing.assert_allclose(_as_float64(probs), want_probs, atol=tol["probs_atol"])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(case=cases())
def test_layers_match_the_oracle_60_examples(case):
    layer = LAYERS[case.kind](num_heads=case.num_heads, dtype=case.policy, **case.kwargs)
    _check(layer, case, gates=case.gates)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    case=cases(
        kinds=("standard", "fixed_head"),
        mask_forms=("batch", "per_head"),
        blank_rows=True,
        gates=False,
    )
)
def test_stock_mha_gives_fully_masked_rows_uniform_weights_20_examples(case):
    # The oracle's convention is stock MHA's: [B, T, S] and per-head [B, N, T, S] masks
    # that blank whole rows, on stock tf_keras.layers.MultiHeadAttention.
    layer = tf_keras.layers.MultiHeadAttention(
        num_heads=case.num_heads,
        key_dim=case.head_size,
        value_dim=case.kwargs.get("value_dim"),
        use_bias=case.kwargs.get("use_bias", True),
        output_shape=case.kwargs.get("output_shape"),
        dtype=case.policy,
    )
    _check(layer, case)
