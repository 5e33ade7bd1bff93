"""Keras 3 layers: numpy oracles, equivalences, stock-MHA weights, paths, gates, cache, options.

The contract every layer meets (build, config, parameter count, saving, masks, dtype
policies, fit) is checked in layer_contract_test.py.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from headsize_tf.core.spec import AttentionSpec, SpecError
from headsize_tf.keras3.layers import (
    CollaborativeAttention,
    ConcatenateMixing,
    FixedHeadAttention,
    StandardAttention,
)
from headsize_tf.keras3.layers.factory import make_attention
from tests.keras3 import util
from tests.keras3.util import WIDTH, np_
from tests.layers import reference
from tests.layers import util as weights_util

# name -> (query length, key length, key width, mask kind)
CASES = {
    "self": (6, 6, None, None),
    "self_padding": (6, 6, None, "padding"),
    "self_causal": (6, 6, None, "causal"),
    "cross": (5, 7, 12, None),
    "cross_padding": (5, 7, 12, "padding"),
    "gates": (5, 7, None, "gates"),
}
GATES = np.array([1.0, 0.0, 0.5, 1.0], np.float32)


def _call(layer, x, y, mask_kind, **kwargs):
    t, s = x.shape[1], y.shape[1]
    if mask_kind == "causal":
        return layer(x, y, use_causal_mask=True, **kwargs), util.causal_mask(len(x), t, s)
    mask = util.padding_mask(len(x), t, s) if mask_kind == "padding" else None
    return layer(x, y, attention_mask=mask, **kwargs), mask


@pytest.fixture
def count_dot_product_attention(monkeypatch):
    """Counts calls of `keras.ops.dot_product_attention`."""
    calls = []
    original = keras.ops.dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", counted)
    return calls


# ------------------------------------------------------------------ oracles
@pytest.mark.parametrize("path", ["dot_product_attention", "einsum"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kind", ["standard", "fixed_head"])
def test_multihead_matches_numpy(kind, case, path, count_dot_product_attention):
    t, s, d_kv, mask_kind = CASES[case]
    x, y = util.data(t, s, d_kv=d_kv)
    h, p = (4, WIDTH // 4) if kind == "standard" else (4, 6)  # fixed: 4 * 6 != 16
    w = weights_util.random_multihead_weights(np.random.default_rng(1), WIDTH, h, p, d_kv=d_kv)
    layer = StandardAttention(h) if kind == "standard" else FixedHeadAttention(h, head_size=p)
    layer(x, y)
    weights_util.set_multihead_weights(layer, w)
    gates = None
    if mask_kind == "gates":
        gates, mask_kind = GATES, None
        layer.set_head_mask(gates)
    layer._force_einsum = path == "einsum"
    count_dot_product_attention.clear()
    out, mask = _call(layer, x, y, mask_kind)
    assert len(count_dot_product_attention) == (path == "dot_product_attention")
    ref_out, ref_probs = reference.multihead(x, y, w, mask, gates=gates)
    np.testing.assert_allclose(np_(out), ref_out, atol=1e-5)
    (_, probs), _ = _call(layer, x, y, mask_kind, return_attention_scores=True)
    np.testing.assert_allclose(np_(probs), ref_probs, atol=1e-5)


@pytest.mark.parametrize("kind", ["standard", "fixed_head"])
def test_soft_capped_logits_match_numpy_on_the_einsum_path(kind, count_dot_product_attention):
    """Gemma 2's cap c * tanh(logits / c) before the causal mask; never the fused op."""
    x, _ = util.data(6, 6)
    h, p = (4, WIDTH // 4) if kind == "standard" else (4, 6)
    w = weights_util.random_multihead_weights(np.random.default_rng(2), WIDTH, h, p)
    for v in ("wq", "wk"):  # Logits of several units, so that the cap of 2 binds.
        w[v] = w[v] * 4
    cls = StandardAttention if kind == "standard" else FixedHeadAttention
    options = {} if kind == "standard" else {"head_size": p}
    layer = cls(h, logit_soft_cap=2.0, **options)
    layer(x, x)
    weights_util.set_multihead_weights(layer, w)
    out, mask = _call(layer, x, x, "causal")
    assert not count_dot_product_attention
    ref_out, ref_probs = reference.multihead(x, x, w, mask, soft_cap=2.0)
    np.testing.assert_allclose(np_(out), ref_out, atol=1e-5)
    uncapped, _ = reference.multihead(x, x, w, mask)
    assert np.abs(uncapped - ref_out).max() > 1e-2  # The cap binds.
    assert layer.get_config()["logit_soft_cap"] == 2.0
    with pytest.raises(SpecError, match="logit_soft_cap"):
        cls(h, logit_soft_cap=0.0, **options)


@pytest.mark.parametrize("case", list(CASES))
def test_collaborative_matches_numpy(case, count_dot_product_attention):
    t, s, d_kv, mask_kind = CASES[case]
    x, y = util.data(t, s, d_kv=d_kv)
    h, p, shared = 4, 4, 12  # shared key dim unrelated to h * p
    w = weights_util.random_collaborative_weights(
        np.random.default_rng(4), WIDTH, h, p, shared, d_kv=d_kv
    )
    layer = CollaborativeAttention(num_heads=h, shared_key_dim=shared)
    layer(x, y)
    weights_util.set_collaborative_weights(layer, w)
    gates = None
    if mask_kind == "gates":
        gates, mask_kind = GATES, None
        layer.set_head_mask(gates)
    (out, probs), mask = _call(layer, x, y, mask_kind, return_attention_scores=True)
    ref_out, ref_probs = reference.collaborative(x, y, w, head_size=p, mask=mask, gates=gates)
    np.testing.assert_allclose(np_(out), ref_out, atol=1e-5)
    np.testing.assert_allclose(np_(probs), ref_probs, atol=1e-5)
    out, _ = _call(layer, x, y, mask_kind)
    np.testing.assert_allclose(np_(out), ref_out, atol=1e-5)
    assert not count_dot_product_attention  # Collaborative scores are never dot products.


def test_collaborative_scale_is_head_size_not_shared_over_heads():
    x, y = util.data(5, 5)
    h, p, shared = 4, 4, 8  # 1/sqrt(4), not 1/sqrt(8 / 4)
    w = weights_util.random_collaborative_weights(np.random.default_rng(5), WIDTH, h, p, shared)
    layer = CollaborativeAttention(num_heads=h, shared_key_dim=shared)
    layer(x, y)
    weights_util.set_collaborative_weights(layer, w)
    _, probs = layer(x, y, return_attention_scores=True)
    _, right = reference.collaborative(x, y, w, head_size=p)
    _, wrong = reference.collaborative(x, y, w, head_size=shared / h)
    np.testing.assert_allclose(np_(probs), right, atol=1e-5)
    assert np.abs(np_(probs) - wrong).max() > 1e-2


@pytest.mark.parametrize("kind", ["standard", "fixed_head"])
def test_dot_product_attention_and_einsum_paths_agree(kind, count_dot_product_attention):
    x, y = util.data(6, 6)
    layer = util.make(kind, dropout=0.3, seed=1)
    layer(x, y)
    layer.set_head_mask([1.0, 0.0, 1.0, 1.0][: layer.num_heads])
    for mask_kind in (None, "padding", "causal"):
        count_dot_product_attention.clear()
        fast, _ = _call(layer, x, y, mask_kind, training=False)
        assert len(count_dot_product_attention) == 1  # Inference: dropout does not block it.
        layer._force_einsum = True
        slow, _ = _call(layer, x, y, mask_kind, training=False)
        layer._force_einsum = False
        np.testing.assert_allclose(np_(fast), np_(slow), atol=1e-5)
    count_dot_product_attention.clear()
    layer(x, y, training=True)
    assert not count_dot_product_attention  # Attention dropout needs the probabilities.


@pytest.mark.parametrize("kind", ["standard", "fixed_head"])
def test_fully_masked_rows_get_zero_weights_on_both_paths(kind, count_dot_product_attention):
    # Stock Keras 3 MHA gives such a row uniform weights through dot_product_attention
    # and zeros where it computes the scores; here both paths give zeros.
    x, y = util.data(5, 7)
    layer = util.make(kind, bias_initializer="random_normal")
    every_head = util.padding_mask(2, 5, 7)
    every_head[0, 1] = False  # Query 1 of batch entry 0 masks every key...
    per_head = np.repeat(every_head[:, None], 4, axis=1)
    per_head[1, 2, 3] = False  # ...and query 3 of entry 1 in head 2 only.
    for mask in (every_head, per_head):
        count_dot_product_attention.clear()
        fast = np_(layer(x, y, attention_mask=mask))
        assert len(count_dot_product_attention) == 1
        einsum, scores = layer(x, y, attention_mask=mask, return_attention_scores=True)
        np.testing.assert_allclose(fast, np_(einsum), atol=1e-5)
    np.testing.assert_array_equal(np_(scores)[0, :, 1], 0.0)
    np.testing.assert_array_equal(np_(scores)[1, 2, 3], 0.0)
    np.testing.assert_allclose(fast[0, 1], np_(layer._output_dense.bias), atol=1e-6)


# ------------------------------------------------------------- equivalences
@pytest.mark.parametrize("mask_kind", [None, "padding", "causal"])
def test_fixed_head_equals_standard_at_width_over_heads(mask_kind):
    x, y = util.data(6, 6)
    standard, fixed = StandardAttention(4), FixedHeadAttention(4, head_size=WIDTH // 4)
    standard(x, y)
    fixed(x, y)
    fixed.set_weights(standard.get_weights())
    out_f, _ = _call(fixed, x, y, mask_kind)
    out_s, _ = _call(standard, x, y, mask_kind)
    np.testing.assert_allclose(np_(out_f), np_(out_s), atol=1e-5)


@pytest.mark.parametrize("case", ["self_padding", "self_causal", "cross_padding"])
def test_collaborative_concatenate_equals_standard(case):
    t, s, d_kv, mask_kind = CASES[case]
    x, y = util.data(t, s, d_kv=d_kv)
    h, p = 4, WIDTH // 4
    w = weights_util.random_multihead_weights(np.random.default_rng(1), WIDTH, h, p, d_kv=d_kv)
    standard = StandardAttention(num_heads=h)
    standard(x, y)
    weights_util.set_multihead_weights(standard, w)
    collab = CollaborativeAttention(
        num_heads=h, shared_key_dim=h * p, mixing_initializer="concatenate"
    )
    collab(x, y)
    cw = reference.standard_to_collaborative(w)
    # Concatenate mixing is the exact rewrite: the initializer made the blocks of ones.
    np.testing.assert_allclose(np_(collab.mixing), cw["mixing"])
    collab.query_dense.kernel.assign(cw["wq"])
    collab.key_dense.kernel.assign(cw["wk"])
    collab.content_bias.assign(cw["content"])
    collab.value_dense.kernel.assign(w["wv"])
    collab.value_dense.bias.assign(w["bv"])
    collab.output_dense.kernel.assign(w["wo"])
    collab.output_dense.bias.assign(w["bo"])
    (out_s, scores_s), _ = _call(standard, x, y, mask_kind, return_attention_scores=True)
    (out_c, scores_c), _ = _call(collab, x, y, mask_kind, return_attention_scores=True)
    np.testing.assert_allclose(np_(out_c), np_(out_s), atol=1e-5)
    np.testing.assert_allclose(np_(scores_c), np_(scores_s), atol=1e-5)
    out_fast, _ = _call(standard, x, y, mask_kind)
    np.testing.assert_allclose(np_(out_c), np_(out_fast), atol=1e-5)


# ------------------------------------------------------- stock MHA contract
@pytest.mark.parametrize(
    "make, key_dim, value_dim",
    [
        (lambda: StandardAttention(4), 4, None),
        (lambda: FixedHeadAttention(4, head_size=6), 6, None),
        (lambda: FixedHeadAttention(4, head_size=6, value_dim=3), 6, 3),
        (lambda: StandardAttention(4, value_dim=3), 4, 3),
    ],
    ids=["standard", "fixed_head", "fixed_head_value_dim", "standard_value_dim"],
)
def test_weights_port_both_ways_with_stock_mha(make, key_dim, value_dim):
    x, y = util.data(5, 7)
    ours, stock = make(), keras.layers.MultiHeadAttention(4, key_dim=key_dim, value_dim=value_dim)

    def stock_call(layer):
        # Stock MHA's einsum path: its dot_product_attention path fails on JAX
        # when value_dim != key_dim (ours falls back to einsums there).
        return layer(x, y, return_attention_scores=True)[0]

    ours(x, y)
    stock_call(stock)
    assert ours.head_size == key_dim
    assert ours.value_dim == (value_dim or key_dim)
    assert len(ours.weights) == len(stock.weights)
    assert [tuple(w.shape) for w in ours.weights] == [tuple(w.shape) for w in stock.weights]
    assert ours.count_params() == stock.count_params()
    ours.set_weights(stock.get_weights())
    np.testing.assert_allclose(np_(ours(x, y)), np_(stock_call(stock)), atol=1e-5)
    back = keras.layers.MultiHeadAttention(4, key_dim=key_dim, value_dim=value_dim)
    stock_call(back)
    fresh = make()
    fresh(x, y)
    back.set_weights(fresh.get_weights())
    np.testing.assert_allclose(np_(stock_call(back)), np_(fresh(x, y)), atol=1e-5)


# -------------------------------------------------------------------- gates
@pytest.mark.parametrize("kind", list(util.KINDS))
def test_head_gate_equals_zeroed_context(kind):
    layer = util.make(kind)
    x, y = util.data()
    base = np_(layer(x, y))
    gates = np.ones(layer.num_heads, np.float32)
    gates[1] = 0.0
    layer.set_head_mask(gates)
    masked = np_(layer(x, y))
    layer.set_head_mask(np.ones(layer.num_heads))
    layer._force_einsum = True
    projected = layer._project_key_value(y, y)
    context, _ = layer._attend_projected(x, projected, None, False)
    kernel = np_(layer.output_dense.kernel)
    contribution = np.einsum("bth,ho->bto", np_(context)[:, :, 1, :], kernel[1])
    np.testing.assert_allclose(masked, base - contribution, atol=1e-5)
    np.testing.assert_allclose(np_(layer(x, y)), base, atol=1e-6)


@pytest.mark.parametrize("kind", list(util.KINDS))
def test_head_mask_reaches_compiled_predict(kind):
    # The gates are state outside `weights`: a compiled predict function (JAX:
    # stateless) must still read their current value.
    inp = keras.Input((6, WIDTH))
    layer = util.make(kind)
    model = keras.Model(inp, layer(inp, inp))
    x, _ = util.data(6, 6)
    before = model.predict(x, verbose=0)
    layer.set_head_mask(np.eye(layer.num_heads)[0])
    after = model.predict(x, verbose=0)
    assert np.abs(after - before).max() > 1e-3
    np.testing.assert_allclose(after, np_(layer(x, x)), atol=1e-5)


# -------------------------------------------------------------------- cache
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis")
@pytest.mark.parametrize("kind", list(util.KINDS))
def test_incremental_decoding_equals_causal_full(kind):
    layer = util.make(kind)
    x, _ = util.data(4, 4)
    full = np_(layer(x, x, use_causal_mask=True))
    # A 3-token prompt (causal mask over itself), then one token onto the cache.
    prompt_mask = util.causal_mask(2, 3, 3)
    prompt_out, cache = layer.call_cached(x[:, :3], attention_mask=prompt_mask)
    out, cache = layer.call_cached(x[:, 3:], cache)
    np.testing.assert_allclose(np.concatenate([np_(prompt_out), np_(out)], 1), full, atol=1e-5)
    assert tuple(cache["value"].shape[:2]) == (2, 4)
    # A fixed-length cache written at `decode_loop_step` (static shapes).
    cache = layer.init_cache(batch_size=2, length=4)
    for name, shape in layer.cache_shapes(2, 4).items():
        assert tuple(cache[name].shape) == tuple(shape)
    for t in range(4):
        mask = np.zeros((2, 1, 4), bool)
        mask[:, :, : t + 1] = True
        out, cache = layer.call_cached(
            x[:, t : t + 1], cache, attention_mask=mask, decode_loop_step=t
        )
        np.testing.assert_allclose(np_(out)[:, 0], full[:, t], atol=1e-5)
    if kind == "fixed_head":  # The cache has the head size, not width / heads (16 / 4).
        assert layer.cache_shapes(2, 4)["key"] == [2, 4, 4, 6]


# ----------------------------------------------------------- other options
@pytest.mark.parametrize("kind", list(util.KINDS))
def test_dropout_only_in_training(kind):
    layer = util.make(kind, dropout=0.5, seed=3)
    x, y = util.data()
    infer_a, infer_b = np_(layer(x, y, training=False)), np_(layer(x, y))
    train = np_(layer(x, y, training=True))
    np.testing.assert_allclose(infer_a, infer_b, atol=1e-6)
    assert np.abs(train - infer_a).max() > 1e-3


@pytest.mark.parametrize("kind", list(util.KINDS))
def test_use_gate_and_sliding_window(kind):
    x, _ = util.data(6, 6)
    layer = util.make(kind, use_gate=True, sliding_window=2)
    out = layer(x, x, use_causal_mask=True)
    assert tuple(out.shape) == x.shape
    _, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    band = np.tril(np.ones((6, 6), bool)) & ~np.tril(np.ones((6, 6), bool), k=-2)
    np.testing.assert_allclose(np_(scores)[:, :, ~band], 0.0, atol=1e-7)
    if kind != "collaborative":
        stock = keras.layers.MultiHeadAttention(
            layer.num_heads, key_dim=layer.head_size, use_gate=True, sliding_window=2
        )
        stock(x, x)
        assert stock.count_params() == layer.count_params()
        stock.set_weights(layer.get_weights())
        np.testing.assert_allclose(np_(stock(x, x, use_causal_mask=True)), np_(out), atol=1e-5)


def test_mixing_initializers():
    x, _ = util.data(6, 6)
    layer = CollaborativeAttention(num_heads=4, shared_key_dim=12, mixing_initializer="zeros")
    layer(x, x)
    np.testing.assert_array_equal(np_(layer.mixing), np.zeros((4, 12)))
    assert layer.get_config()["mixing_initializer"] == "zeros"
    layer2 = CollaborativeAttention(
        num_heads=4, shared_key_dim=12, mixing_initializer=keras.initializers.Constant(0.5)
    )
    layer2(x, x)
    np.testing.assert_allclose(np_(layer2.mixing), np.full((4, 12), 0.5))
    clone = CollaborativeAttention.from_config(layer2.get_config())
    clone(x, x)
    np.testing.assert_allclose(np_(clone.mixing), np.full((4, 12), 0.5))
    np.testing.assert_array_equal(np_(ConcatenateMixing()((2, 4))), [[1, 1, 0, 0], [0, 0, 1, 1]])
    ones = CollaborativeAttention(num_heads=4, shared_key_dim=12, mixing_initializer="ones")
    ones(x, x)
    np.testing.assert_array_equal(np_(ones.mixing), np.ones((4, 12)))
    # "normal" / "uniform": variance head_size / D keeps a head's score variance.
    for name in ("normal", "uniform"):
        big = CollaborativeAttention(
            num_heads=4, shared_key_dim=256, head_size=4, mixing_initializer=name
        )
        big(x, x)
        assert abs(np_(big.mixing).var() - 4 / 256) < 0.3 * 4 / 256, name


def test_sequence_length_head_size():
    layer = FixedHeadAttention(num_heads=2, head_size="sequence_length")
    layer(keras.Input((4, 8)), keras.Input((6, 8)))
    assert layer.head_size == 6  # the key length
    assert layer.get_config()["head_size"] == "sequence_length"


@pytest.mark.parametrize(
    "spec, cls, head_size",
    [
        (AttentionSpec("standard", num_heads=4), StandardAttention, 4),
        (AttentionSpec("fixed_head", num_heads=4, head_size=6), FixedHeadAttention, 6),
        (
            {"kind": "collaborative", "num_heads": 4, "shared_key_dim": 8, "value_dim": 3},
            CollaborativeAttention,
            4,
        ),
    ],
)
def test_make_attention(spec, cls, head_size):
    layer = make_attention(spec, dropout=0.1, name="attn")
    assert type(layer) is cls and layer.name == "attn"
    x, _ = util.data(6, 6)
    layer(x, x)
    assert layer.head_size == head_size
    resolved = AttentionSpec.coerce(spec).resolve(WIDTH)
    assert (layer.num_heads, layer.value_dim) == (resolved.num_heads, resolved.value_dim)
