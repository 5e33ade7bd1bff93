"""Property tests of the tf_keras layers against the numpy oracle of the papers' equations.

Hypothesis draws the layer kind (standard, fixed head size, collaborative heads), shapes,
head counts and sizes, value sizes, output widths, biases, separate keys, masks of every
form stock MHA takes (with fully masked rows), causal masks, head gates and the dtype
policy; examples are derandomized (the same on every run) and counted in the test names.
On tf_keras a fully masked row attends uniformly to every key, as stock
`tf_keras.layers.MultiHeadAttention` (checked here too) does.
"""

from __future__ import annotations

import pytest
import tf_keras
from hypothesis import given, settings
from hypothesis import strategies as st

from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from tests.layers.attention_cases import KINDS, POLICIES, cases, check

LAYERS = {
    "standard": StandardAttention,
    "fixed_head": FixedHeadAttention,
    "collaborative": CollaborativeAttention,
}
FULLY_MASKED = "uniform"  # tf_keras' MHA adds -1e9 to masked logits: equal weights.


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=8, deadline=None, derandomize=True)
@given(data=st.data())
def test_layers_match_the_oracle_8_examples_each(kind, policy, data):
    """8 examples for each kind and dtype policy (72): shapes, masks, gates... drawn."""
    case = data.draw(cases(kinds=(kind,), policies=(policy,)))
    layer = LAYERS[case.kind](num_heads=case.num_heads, dtype=case.policy, **case.kwargs)
    check(layer, case, FULLY_MASKED)


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
    """20 examples of stock MHA (every dtype policy) with rows that mask every key."""
    # The oracle's convention is stock MHA's: [B, T, S] and per-head [B, N, T, S] masks
    # that blank whole rows, on stock tf_keras.layers.MultiHeadAttention.
    layer = tf_keras.layers.MultiHeadAttention(**case.stock_kwargs())
    check(layer, case, FULLY_MASKED)
