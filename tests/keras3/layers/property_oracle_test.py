"""Property tests of the Keras 3 layers against the numpy oracle of the papers' equations.

Hypothesis draws what `tests/layers/property_oracle_test.py` draws (layer kind, shapes,
heads, head and value sizes, output widths, biases, separate keys, masks of every form
with fully masked rows, causal masks, head gates, dtype policy) and whether the call
returns the scores, which on Keras 3 picks the path: `keras.ops.dot_product_attention`
without, einsums with. Examples are derandomized and counted in the test names; the file
also runs on the JAX backend (tests/keras3/jax_backend_test.py).
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from headsize_tf.keras3.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from tests.keras3.util import np_
from tests.layers.attention_cases import KINDS, POLICIES, Case, cases, check

LAYERS = {
    "standard": StandardAttention,
    "fixed_head": FixedHeadAttention,
    "collaborative": CollaborativeAttention,
}
FULLY_MASKED = "zero"  # Keras 3's MHA zeroes the weights of a fully masked row.
TENSORFLOW = keras.backend.backend() == "tensorflow"
# JAX compiles every op for every new shape: fewer examples there (tests/keras3/jax_backend_test.py).
JAX = keras.backend.backend() == "jax"
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis:UserWarning")


def _bias_add_misbroadcasts(case: Case) -> bool:
    """Whether Keras' TensorFlow `ops.add` adds a projection bias on the wrong axis here.

    Keras (3.15) turns `ops.add(x, bias)` into `tf.nn.bias_add` when the bias squeezes
    to one axis of size n and n is x's axis 1 or -1, taking axis 1 ("NCHW") when the
    last is not n. An EinsumDense bias [heads, 1] (head size or value size 1) added to a
    projection [B, length, heads, 1] with heads == length then lands on the positions,
    not the heads: stock MHA and these layers compute wrong projections there. The
    JAX backend and tf_keras are not affected. See
    `test_keras_tensorflow_add_broadcasts_a_bias_like_numpy`.
    """
    if not TENSORFLOW or not case.kwargs.get("use_bias", True) or case.num_heads == 1:
        return False
    value_dim = case.kwargs.get("value_dim") or case.head_size
    query_key = case.kind != "collaborative" and case.head_size == 1  # Shared q/k: no bias.
    return (query_key and case.num_heads in (case.query_length, case.key_length)) or (
        value_dim == 1 and case.num_heads == case.key_length
    )


@pytest.mark.parametrize("scores", [False, True], ids=["without_scores", "with_scores"])
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=1 if JAX else 4, deadline=None, derandomize=True)
@given(data=st.data())
def test_layers_match_the_oracle_4_examples_each(kind, policy, scores, data):
    """4 examples (1 on JAX) for each kind, dtype policy and path (72; 18 on JAX): shapes,
    masks, gates... drawn. Without scores the multihead kinds take dot_product_attention."""
    case = data.draw(cases(kinds=(kind,), policies=(policy,), return_scores=scores))
    assume(not _bias_add_misbroadcasts(case))
    layer = LAYERS[case.kind](num_heads=case.num_heads, dtype=case.policy, **case.kwargs)
    check(layer, case, FULLY_MASKED)


@settings(max_examples=5 if JAX else 20, deadline=None, derandomize=True)
@given(
    case=cases(
        kinds=("standard", "fixed_head"),
        mask_forms=("batch", "per_head"),
        blank_rows=True,
        gates=False,
    )
)
def test_stock_mha_gives_fully_masked_rows_zero_weights_20_examples(case):
    """20 examples (5 on JAX) of stock MHA (every dtype policy) with rows that mask every key."""
    # The oracle's convention is stock MHA's where it computes the scores, for [B, T, S]
    # and per-head [B, N, T, S] masks that blank whole rows. (Stock's fused
    # dot_product_attention path, taken without scores, gives such rows uniform weights;
    # these layers give zeros on every path.)
    assume(not _bias_add_misbroadcasts(case))
    layer = keras.layers.MultiHeadAttention(**case.stock_kwargs())
    check(layer, dataclasses.replace(case, return_scores=True), FULLY_MASKED)


@pytest.mark.skipif(not TENSORFLOW, reason="a bug of Keras' TensorFlow backend")
@pytest.mark.xfail(strict=True, reason="Keras' TensorFlow ops.add: bias_add on axis 1")
def test_keras_tensorflow_add_broadcasts_a_bias_like_numpy():
    # Fails while Keras has the bug `_bias_add_misbroadcasts` steps around; when it
    # passes (strict xfail: the suite fails), drop that function.
    bias = np.array([[1.0], [2.0]], np.float32)  # [heads, head size 1]
    projected = np.zeros((1, 2, 2, 1), np.float32)  # [batch, length 2, heads 2, 1]
    np.testing.assert_array_equal(np_(keras.ops.add(projected, bias)), projected + bias)
