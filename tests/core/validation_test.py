"""core.validation: the attention layers' argument and mask checks, framework-neutral."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from headsize_tf.core.spec import MIXING_INITIALIZERS, SpecError
from headsize_tf.core.validation import (
    check_attention_args,
    check_attention_mask_shape,
    check_collaborative_args,
    check_dropout,
    check_head_mask_shape,
    check_mixing_initializer,
    check_no_key_dim,
    check_seed,
    collaborative_head_size,
    concatenate_mixing,
    expected_mask_shape,
    mixing_initializer_identifier,
)


def test_key_dim_is_refused_with_the_layer_name():
    check_no_key_dim("StandardAttention", {"name": "x"})
    with pytest.raises(ValueError, match=r"`key_dim=16` is not an argument of FixedHeadAttention"):
        check_no_key_dim("FixedHeadAttention", {"key_dim": 16})


@given(st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
def test_dropout_in_unit_interval_passes_as_float(rate):
    assert check_dropout(rate) == rate
    assert isinstance(check_dropout(rate), float)


@given(
    st.one_of(
        st.floats(max_value=0.0, exclude_max=True),
        st.floats(min_value=1.0),
        st.just(math.nan),
        st.booleans(),
        st.text(max_size=3),
        st.none(),
    )
)
def test_bad_dropout_is_named(rate):
    with pytest.raises(ValueError, match=r"`dropout` must be a float in \[0, 1\); got"):
        check_dropout(rate)


def test_numpy_scalars_are_accepted():
    assert check_dropout(np.float32(0.25)) == 0.25
    assert check_seed(np.int64(3)) == 3
    assert type(check_seed(np.int64(3))) is int


@given(st.one_of(st.none(), st.integers()))
def test_int_or_none_seed_passes(seed):
    assert check_seed(seed) == seed


@pytest.mark.parametrize("seed", [True, 1.0, "x", [1]])
def test_bad_seed_is_named(seed):
    with pytest.raises(ValueError, match=r"`seed` must be an int or None; got"):
        check_seed(seed)


def test_attention_args_check_in_order_and_convert():
    assert check_attention_args("L", np.int32(4), None, 0, None, {}) == (4, None, 0.0, None)
    assert check_attention_args("L", 2, 5, 0.5, 1, {}) == (2, 5, 0.5, 1)
    with pytest.raises(ValueError, match="key_dim"):  # Before any other argument.
        check_attention_args("L", 0, 0, 2.0, "x", {"key_dim": 3})
    with pytest.raises(SpecError, match="`num_heads` must be a positive integer; got 0"):
        check_attention_args("L", 0, None, 0.0, None, {})
    with pytest.raises(SpecError, match="`value_dim` must be a positive integer; got -1"):
        check_attention_args("L", 2, -1, 0.0, None, {})


# ------------------------------------------------------------------ masks
dims = st.integers(min_value=1, max_value=6)


@given(dims, dims, dims, dims, st.data())
def test_masks_broadcastable_to_the_scores_pass(batch, heads, query, key, data):
    """[batch, query, key] masks (rank 2 or 3) and per-head [batch, heads, query, key] ones."""
    rank = data.draw(st.integers(min_value=2, max_value=4))
    expected = [batch, heads, query, key] if rank == 4 else [batch, query, key]
    mask = [data.draw(st.sampled_from([d, 1, None])) for d in expected[-rank:]]
    # Whether a broadcastable mask is accepted agrees with numpy's broadcasting.
    concrete = [1 if d is None else d for d in mask]
    np.broadcast_to(np.zeros(concrete), expected)
    check_attention_mask_shape("attn", mask, [batch, query, 8], [batch, key, 8], (1,), heads)


@given(dims, dims, dims, dims, st.data())
def test_masks_that_do_not_broadcast_are_named(batch, heads, query, key, data):
    rank = data.draw(st.integers(min_value=3, max_value=4))
    expected = [batch, heads, query, key] if rank == 4 else [batch, query, key]
    axis = data.draw(st.integers(min_value=0, max_value=rank - 1))
    mask = list(expected)
    mask[axis] = expected[axis] + data.draw(st.integers(min_value=1, max_value=3))
    with pytest.raises(ValueError) as info:
        check_attention_mask_shape("attn", mask, [batch, query, 8], [batch, key, 8], (1,), heads)
    assert str(info.value) == (
        f"`attention_mask` of layer 'attn' has shape {mask}; expected "
        f"[batch, query_length, key_length] = {[batch, query, key]} or per head "
        f"[batch, num_heads, query_length, key_length] = {[batch, heads, query, key]} "
        "(or a shape broadcastable to one of them)."
    )


@pytest.mark.parametrize("mask", [[4], [1, 1, 2, 3, 4]])
def test_mask_rank_must_be_two_to_four(mask):
    with pytest.raises(ValueError, match="attention_mask"):
        check_attention_mask_shape("attn", mask, [1, 2, 8], [1, 3, 8], (1,), 2)


def test_masks_are_not_checked_where_shapes_are_unknown_or_high_dimensional():
    check_attention_mask_shape("a", None, [1, 2, 8], [1, 3, 8], (1,))
    check_attention_mask_shape("a", [9, 9, 9], None, [1, 3, 8], (1,))
    check_attention_mask_shape("a", [9, 9, 9], [1, 2, 3, 8], [1, 2, 3, 8], (1, 2))
    check_attention_mask_shape("a", [9, 9, 9], [1, 2, 8], [1, 3, 8], (2,))
    check_attention_mask_shape("a", [None, 2, 3], [None, None, 8], [None, None, 8], (1,))
    assert expected_mask_shape([1, 2, 8], None, (1,)) == [1, 2, None]
    assert expected_mask_shape([1, 2, 8], [1, 3, 8], None) is None


@pytest.mark.parametrize("shape", [[3], [4, 1], [], None])
def test_head_mask_is_one_value_per_head(shape):
    check_head_mask_shape("attn", [4], 4)
    with pytest.raises(
        ValueError, match=r"Head mask for layer 'attn' has shape .*; expected \[4\]"
    ):
        check_head_mask_shape("attn", shape, 4)


# ---------------------------------------------------------- collaborative
def _get(value):
    if value in ("glorot_uniform", "zeros") or isinstance(value, dict):
        return object()
    raise ValueError(value)


@pytest.mark.parametrize("name", MIXING_INITIALIZERS)
def test_named_mixing_initializers_need_no_lookup(name):
    assert check_mixing_initializer(name, lambda v: 1 / 0) == name


def test_other_mixing_initializers_go_through_the_fronts_lookup():
    assert check_mixing_initializer("zeros", _get) == "zeros"
    with pytest.raises(ValueError, match=r"Unknown `mixing_initializer` 'concat'; expected one of"):
        check_mixing_initializer("concat", _get)


def test_collaborative_args():
    assert check_collaborative_args(8, None, "ones", None, _get) == (8, None, "ones")
    assert check_collaborative_args(8, 4, "zeros", [1], _get) == (8, 4, "zeros")
    with pytest.raises(SpecError, match="`shared_key_dim` must be a positive integer; got None"):
        check_collaborative_args(None, None, "ones", None, _get)
    with pytest.raises(SpecError, match="`head_size` must be a positive integer; got 0"):
        check_collaborative_args(8, 0, "ones", None, _get)
    with pytest.raises(ValueError, match=r"axis 1 of rank-3 inputs only; got attention_axes=2"):
        check_collaborative_args(8, None, "ones", 2, _get)


@given(st.integers(1, 8), st.integers(1, 8), st.data())
def test_collaborative_head_size_defaults_to_width_over_heads(heads, size, data):
    width = heads * size
    batch = data.draw(st.sampled_from([None, 2]))
    assert collaborative_head_size("c", (batch, 5, width), (batch, 7, 3), heads, None) == size
    assert collaborative_head_size("c", (batch, 5, width + 1), (batch, 7, 3), heads, 3) == 3


def test_collaborative_head_size_errors():
    with pytest.raises(ValueError, match=r"rank-3 query inputs \[batch, length, width\]; got sh"):
        collaborative_head_size("c", (2, 8), (2, 3, 8), 2, None)
    with pytest.raises(ValueError, match=r"rank-3 key inputs .*got shape <unknown>"):
        collaborative_head_size("c", (2, 3, 8), None, 2, None)
    with pytest.raises(ValueError, match=r"query width \(7\) is not a multiple of num_heads \(2\)"):
        collaborative_head_size("c", (2, 3, 7), (2, 3, 7), 2, None)


@given(st.integers(1, 6), st.integers(1, 5))
def test_concatenate_mixing_is_blocks_of_ones(heads, block):
    mixing = concatenate_mixing(heads, heads * block)
    assert mixing.shape == (heads, heads * block) and mixing.dtype == np.float32
    np.testing.assert_array_equal(mixing.sum(axis=1), block)
    np.testing.assert_array_equal(mixing @ mixing.T, block * np.eye(heads))


def test_concatenate_mixing_needs_a_multiple():
    with pytest.raises(ValueError, match=r"shared_key_dim \(10\) to be a multiple of num_heads"):
        concatenate_mixing(4, 10)


@given(st.integers(1, 64), st.integers(1, 64))
def test_random_mixing_has_variance_head_size_over_shared(head_size, shared):
    normal = mixing_initializer_identifier("normal", head_size, shared, None)
    uniform = mixing_initializer_identifier("uniform", head_size, shared, None)
    variance = head_size / shared
    assert math.isclose(normal["config"]["stddev"] ** 2, variance)
    limit = uniform["config"]["maxval"]
    assert uniform["config"]["minval"] == -limit
    assert math.isclose(limit**2 / 3, variance)  # The variance of U(-a, a).


def test_mixing_identifier_of_other_values():
    assert mixing_initializer_identifier("ones", 2, 4, None) == "ones"
    assert mixing_initializer_identifier("concatenate", 2, 4, lambda: "made") == "made"
    custom = {"class_name": "Zeros", "config": {}}
    assert mixing_initializer_identifier(custom, 2, 4, None) is custom
    assert mixing_initializer_identifier("zeros", 2, 4, None) == "zeros"
