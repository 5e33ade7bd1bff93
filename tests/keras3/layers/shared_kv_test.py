"""Keras 3 grouped-query and shared-latent attention: oracles, conversions, cache, stock GQA.

The contract every layer meets (build, config, parameter count, saving, masks, dtype
policies, fit) is checked in layer_contract_test.py.
"""

from __future__ import annotations

import io
import zipfile

import h5py
import keras
import numpy as np
import pytest

from headsize_tf.core import kv_cache, kv_sharing
from headsize_tf.core.spec import AttentionSpec
from headsize_tf.keras3.layers import GroupedAttention, LatentAttention, StandardAttention
from headsize_tf.keras3.layers.factory import make_attention
from headsize_tf.keras3.layers.latent_attention import _HeadFirstUpProjection
from headsize_tf.keras3.layers.roles import assign_weights, numpy_weights
from tests import kv_oracle
from tests.keras3 import util
from tests.keras3.layers import layer_check

WIDTH = util.WIDTH


def _built(layer, x, y):
    layer(x, y)
    return layer


def _source(x, y, seed=0):
    """A StandardAttention with random weights and biases (4 heads of 4)."""
    source = _built(StandardAttention(num_heads=4), x, y)
    # Stock Keras 3 MHA gives fully masked rows zero weights on its einsum path (and another
    # answer through `ops.dot_product_attention`): compare with the einsum path.
    source._force_einsum = True
    layer_check.randomize(source, seed)
    source.set_head_mask([1.0, 0.0, 0.5, 1.0])
    return source


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_grouped_matches_the_oracle(groups):
    x, y = util.data()
    layer = _built(GroupedAttention(num_heads=4, num_kv_heads=groups, value_dim=3), x, y)
    layer_check.randomize(layer, 1)
    layer.set_head_mask([1.0, 0.3, 0.0, 1.0])
    mask = util.padding_mask(2, 5, 7)
    mask[1, 2] = False  # A fully masked row: zero weights, as stock Keras 3 MHA.
    w = numpy_weights(layer)
    assert w["key_kernel"].shape == (WIDTH, groups, 4) and w["value_bias"].shape == (4, 3)
    out, scores = layer(x, y, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(
        util.np_(out), kv_oracle.grouped(w, x, y, mask, "zero"), rtol=1e-4, atol=1e-5
    )
    assert tuple(scores.shape) == (2, 4, 5, 7)


def test_latent_matches_the_oracle_with_a_per_head_mask():
    x, y = util.data()
    layer = _built(LatentAttention(num_heads=4, kv_latent_dim=6, head_size=5), x, y)
    layer_check.randomize(layer, 2)
    mask = np.random.default_rng(0).random((2, 4, 5, 7)) > 0.3
    mask[0, 3, 1] = False
    w = numpy_weights(layer)
    np.testing.assert_allclose(
        util.np_(layer(x, y, attention_mask=mask)),
        kv_oracle.latent(w, x, y, mask, "zero"),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("method", kv_sharing.GROUPED_METHODS)
def test_converted_grouped_layer_with_one_head_per_group_equals_the_source(method):
    x, y = util.data()
    source = _source(x, y)
    converted, _ = kv_sharing.grouped_weights(numpy_weights(source), 4, method=method)
    layer = _built(GroupedAttention(num_heads=4, num_kv_heads=4), x, y)
    assign_weights(layer, converted)
    mask = util.padding_mask(2, 5, 7)
    mask[0, 0] = False
    np.testing.assert_allclose(
        util.np_(layer(x, y, attention_mask=mask)),
        util.np_(source(x, y, attention_mask=mask)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_converted_latent_layer_at_full_rank_equals_the_source_and_logits_agree():
    x, y = util.data()
    source = _source(x, y, seed=3)
    weights = numpy_weights(source)
    full = kv_sharing.latent_full_rank(weights)
    converted, _ = kv_sharing.latent_weights(weights, full)
    layer = _built(LatentAttention(num_heads=4, kv_latent_dim=full), x, y)
    assign_weights(layer, converted)
    np.testing.assert_allclose(
        util.np_(layer(x, y, use_causal_mask=False)),
        util.np_(source(x, y)),
        rtol=1e-5,
        atol=1e-5,
    )
    logits = layer._logits_from_projected(x, layer._project_key_value(y, y))
    np.testing.assert_allclose(
        util.np_(logits),
        kv_oracle.mha_logits({**weights, "key_bias": None}, x, y),
        rtol=1e-5,
        atol=1e-5,
    )


def _decode_step_by_step(layer, x, fixed_length=False):
    batch, length, _ = x.shape
    cache = layer.init_cache(batch, length if fixed_length else 0)
    outputs = []
    for t in range(length):
        if fixed_length:
            mask = np.broadcast_to(np.arange(length) <= t, (batch, 1, length))
            out, cache = layer.call_cached(x[:, t : t + 1], cache, mask, decode_loop_step=t)
        else:
            out, cache = layer.call_cached(x[:, t : t + 1], cache)
        outputs.append(util.np_(out))
    return np.concatenate(outputs, axis=1), cache


@pytest.mark.parametrize(
    "make",
    [
        lambda: GroupedAttention(num_heads=4, num_kv_heads=2),
        lambda: LatentAttention(num_heads=4, kv_latent_dim=6),
        lambda: LatentAttention(num_heads=4, kv_latent_dim=6, absorb=False),
    ],
    ids=["grouped", "latent_absorbed", "latent_up_projected"],
)
@pytest.mark.parametrize("fixed_length", [False, True])
def test_cached_decoding_equals_the_causal_call(make, fixed_length):
    x, _ = util.data(t=6, s=6)
    layer = _built(make(), x, x)
    layer_check.randomize(layer, 4)
    full = util.np_(layer(x, x, use_causal_mask=True))
    decoded, cache = _decode_step_by_step(layer, x, fixed_length)
    np.testing.assert_allclose(decoded, full, rtol=1e-4, atol=1e-5)
    assert all(v.shape[1] == 6 for v in cache.values())


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: StandardAttention(num_heads=2, **kw),
        lambda **kw: GroupedAttention(num_heads=4, num_kv_heads=2, **kw),
        lambda **kw: LatentAttention(num_heads=4, kv_latent_dim=6, **kw),
    ],
    ids=["standard", "grouped", "latent"],
)
@pytest.mark.parametrize("window", [None, 2])
def test_cached_calls_are_causal_without_a_mask_and_keep_the_window(make, window):
    """A prompt prefilled in one call, steps of a growing cache and of a fixed-length one,
    no mask given: each equals the causal call, the layer's `sliding_window` included."""
    x, _ = util.data(t=6, s=6, seed=2)
    layer = _built(make(sliding_window=window), x, x)
    layer_check.randomize(layer, 6)
    full = util.np_(layer(x, x, use_causal_mask=True))
    prefill, cache = layer.call_cached(x[:, :4])
    np.testing.assert_allclose(util.np_(prefill), full[:, :4], rtol=1e-4, atol=1e-5)
    rest, _ = layer.call_cached(x[:, 4:], cache)
    np.testing.assert_allclose(util.np_(rest), full[:, 4:], rtol=1e-4, atol=1e-5)
    grown, fixed = None, layer.init_cache(2, 6)
    for t in range(6):
        out, grown = layer.call_cached(x[:, t : t + 1], grown)
        np.testing.assert_allclose(util.np_(out)[:, 0], full[:, t], rtol=1e-4, atol=1e-5)
        out, fixed = layer.call_cached(x[:, t : t + 1], fixed, decode_loop_step=t)
        np.testing.assert_allclose(util.np_(out)[:, 0], full[:, t], rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a tf.function trace")
def test_a_rotary_step_traced_with_a_cache_of_unknown_length_starts_at_its_length():
    import tensorflow as tf

    x, _ = util.data(t=4, s=4, seed=3)
    layer = StandardAttention(num_heads=2, rope_max_wavelength=10000.0)
    full = util.np_(layer(x, x, use_causal_mask=True))
    spec = {name: tf.TensorSpec([2, None, 2, 8]) for name in ("key", "value")}
    step = tf.function(layer.call_cached, input_signature=[tf.TensorSpec([2, 1, 16]), spec])
    _, cache = layer.call_cached(x[:, :2])
    out, _ = step(tf.constant(x[:, 2:3]), cache)
    np.testing.assert_allclose(util.np_(out)[:, 0], full[:, 2], rtol=1e-4, atol=1e-5)


def test_absorbed_and_up_projected_decoding_agree_on_one_latent():
    x, _ = util.data(t=6, s=6, seed=5)
    absorbed = _built(LatentAttention(num_heads=4, kv_latent_dim=6), x, x)
    layer_check.randomize(absorbed, 5)
    plain = _built(LatentAttention(num_heads=4, kv_latent_dim=6, absorb=False), x, x)
    plain.set_weights(absorbed.get_weights())
    mask = util.causal_mask(2, 6, 6)
    mask[1, 3] = False  # A fully masked row: the value bias drops out on both paths.
    a, _ = absorbed.call_cached(x, None, mask)
    b, _ = plain.call_cached(x, None, mask)
    np.testing.assert_allclose(util.np_(a), util.np_(b), rtol=1e-5, atol=1e-5)


def _rank_first_copy(path, out):
    """`path`'s `.keras` file as the rank-first layout wrote it: every latent up-projection
    kernel `[r, h, p]`, no `head_first` entry."""
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    buffer = io.BytesIO(files["model.weights.h5"])
    with h5py.File(buffer, "r+") as weights:
        groups = []
        weights.visititems(
            lambda name, node: groups.append(name) if name.endswith("_up_dense/vars") else None
        )
        for name in groups:
            kernel = weights[name]["0"][()]
            del weights[name]["0"], weights[name]["head_first"]
            weights[name]["0"] = kernel.transpose(1, 0, 2)
    files["model.weights.h5"] = buffer.getvalue()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return sorted(groups)


@pytest.mark.parametrize("rank", [6, 4])  # r = h = 4: the shapes cannot tell the layouts apart.
def test_up_projections_are_head_first_roles_show_the_core_layout_and_old_files_load(
    tmp_path, rank
):
    x, _ = util.data(t=6, s=6, seed=6)
    inputs = keras.Input((6, WIDTH))
    layer = LatentAttention(num_heads=4, kv_latent_dim=rank)
    model = keras.Model(inputs, layer(inputs, inputs))
    layer_check.randomize(layer, 6)
    stored = util.np_(layer._key_up_dense.kernel)
    weights = numpy_weights(layer)
    assert stored.shape == (4, rank, 4) and weights["key_up_kernel"].shape == (rank, 4, 4)
    np.testing.assert_array_equal(weights["key_up_kernel"], stored.transpose(1, 0, 2))
    weights["value_up_kernel"] = 2.0 * weights["value_up_kernel"]
    assign_weights(layer, weights)
    np.testing.assert_array_equal(
        util.np_(layer._value_up_dense.kernel), weights["value_up_kernel"].transpose(1, 0, 2)
    )
    expected = util.np_(model(x))
    model.save(tmp_path / "head_first.keras")
    groups = _rank_first_copy(tmp_path / "head_first.keras", tmp_path / "rank_first.keras")
    assert [g.rsplit("/", 2)[-2] for g in groups] == ["_key_up_dense", "_value_up_dense"]
    for name in ("head_first.keras", "rank_first.keras"):
        loaded = keras.saving.load_model(tmp_path / name)
        np.testing.assert_allclose(util.np_(loaded(x)), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rank", [4, 6])  # r = h = 4, and r != h.
@pytest.mark.parametrize("mode", [None, "int8", "float8", "int4"])
def test_rank_first_stores_load_into_head_first_up_projections(mode, rank):
    """Variables saved by the rank-first up-projection (a plain `EinsumDense`, "abc,cde->abde",
    kernel `[r, h, p]`), quantized or not, load into the head-first one and compute the same;
    a packed int4 kernel is refused with a clear error."""
    heads, size = 4, 3
    latent = np.random.default_rng(3).normal(size=(2, 5, rank)).astype("float32")
    old = keras.layers.EinsumDense("abc,cde->abde", output_shape=(None, heads, size))
    new = _HeadFirstUpProjection("abc,dce->abde", output_shape=(None, heads, size))
    old.build(latent.shape)
    new.build(latent.shape)
    old.kernel.assign(np.random.default_rng(4).normal(size=(rank, heads, size)))
    if mode is not None:
        old.quantize(mode)
        new.quantize(mode)
    store = {}
    old.save_own_variables(store)
    assert "head_first" not in store
    if mode == "int4":
        with pytest.raises(ValueError, match="rank-first .* int4-quantized"):
            new.load_own_variables(store)
        return
    new.load_own_variables(store)
    np.testing.assert_allclose(util.np_(new(latent)), util.np_(old(latent)), rtol=1e-6, atol=1e-6)
    saved = {}
    new.save_own_variables(saved)
    assert saved.pop("head_first") == 1 and saved.keys() == store.keys()
    again = _HeadFirstUpProjection("abc,dce->abde", output_shape=(None, heads, size))
    again.build(latent.shape)
    if mode is not None:
        again.quantize(mode)
    again.load_own_variables({**saved, "head_first": np.ones([1], np.int8)})
    np.testing.assert_array_equal(util.np_(again(latent)), util.np_(new(latent)))
    if mode is None and rank != heads:  # Head-first, written before the entry existed.
        again.kernel.assign(np.zeros_like(util.np_(again.kernel)))
        again.load_own_variables(saved)
        np.testing.assert_array_equal(util.np_(again(latent)), util.np_(new(latent)))


def test_int8_quantized_up_projections_decode_as_the_quantized_forward():
    x, _ = util.data(t=6, s=6, seed=7)
    inputs = keras.Input((6, WIDTH))
    layer = LatentAttention(num_heads=4, kv_latent_dim=6)
    model = keras.Model(inputs, layer(inputs, inputs))
    layer_check.randomize(layer, 7)
    mask = util.causal_mask(2, 6, 6)
    want = util.np_(layer(x, x, attention_mask=mask))
    model.quantize("int8")
    assert layer._key_up_dense.quantization_mode == "int8"
    assert layer._value_up_dense.quantization_mode == "int8"
    full = util.np_(layer(x, x, attention_mask=mask))
    cached, _ = layer.call_cached(x, None, mask)  # Quantized kernels: up-projected, not absorbed.
    np.testing.assert_allclose(util.np_(cached), full, rtol=1e-5, atol=1e-5)
    assert 1e-4 < np.linalg.norm(full - want) / np.linalg.norm(want) < 0.05


@pytest.mark.parametrize(
    "spec",
    [
        AttentionSpec("grouped", num_heads=4, num_kv_heads=2, head_size=6, value_dim=5),
        AttentionSpec("grouped", num_heads=4, num_kv_heads=1),
        AttentionSpec("latent", num_heads=4, kv_latent_dim=5),
        AttentionSpec("latent", num_heads=2, kv_latent_dim=12, head_size=3),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_cache_holds_exactly_the_formulas_bytes(spec, dtype):
    x, _ = util.data(t=4, s=4)
    layer = make_attention(spec, dtype=dtype)
    layer(x, x)
    _, cache = _decode_step_by_step(layer, x)
    entries = kv_cache.cache_entries(spec.resolve(WIDTH))
    assert sorted(cache) == sorted(entries)
    itemsize = kv_cache.dtype_bytes(dtype)
    for name, tensor in cache.items():
        array = keras.ops.convert_to_numpy(tensor)
        assert array.nbytes == 2 * 4 * entries[name] * itemsize, name
    total = sum(keras.ops.convert_to_numpy(t).nbytes for t in cache.values())
    assert total == 2 * 4 * kv_cache.kv_cache_bytes_per_token(spec, WIDTH, dtype=dtype)


def test_stock_grouped_query_attention_weights_map_in_exactly():
    x, y = util.data()
    stock = keras.layers.GroupQueryAttention(
        head_dim=4, num_query_heads=4, num_key_value_heads=2, bias_initializer="random_normal"
    )
    stock(x, y)
    ours = _built(GroupedAttention(num_heads=4, num_kv_heads=2), x, y)
    kernels = {
        "query_kernel": stock._query_dense.kernel,
        "query_bias": stock._query_dense.bias,
        "key_kernel": stock._key_dense.kernel,  # The key bias cannot change a softmax.
        "value_kernel": stock._value_dense.kernel,
        "value_bias": np.repeat(util.np_(stock._value_dense.bias), 2, axis=0),
        "output_kernel": stock._output_dense.kernel,
        "output_bias": stock._output_dense.bias,
    }
    assign_weights(ours, {k: util.np_(v).astype("float32") for k, v in kernels.items()})
    mask = util.padding_mask(2, 5, 7)
    np.testing.assert_allclose(
        util.np_(ours(x, y, attention_mask=mask)),
        util.np_(stock(x, y, attention_mask=mask)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_gating_a_head_removes_its_share_value_bias_included():
    x, y = util.data()
    layer = _built(GroupedAttention(num_heads=4, num_kv_heads=2), x, y)
    layer_check.randomize(layer, 8)
    full = util.np_(layer(x, y))
    layer.set_head_mask([1.0, 0.0, 1.0, 1.0])
    gated = util.np_(layer(x, y))
    layer.set_head_mask(np.ones(4))
    w = numpy_weights(layer)
    w["output_kernel"][1] = 0.0
    np.testing.assert_allclose(gated, kv_oracle.grouped(w, x, y), rtol=1e-4, atol=1e-5)
    assert np.max(np.abs(gated - full)) > 1e-3


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="num_kv_heads=3 does not divide num_heads=4"):
        GroupedAttention(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="kv_latent_dim"):
        LatentAttention(num_heads=4, kv_latent_dim=0)
    x, y = util.data()
    layer = LatentAttention(num_heads=4, kv_latent_dim=4)
    with pytest.raises(ValueError, match="from one input"):
        layer(x, y, key=x)
    with pytest.raises(ValueError, match="not a multiple of num_heads"):
        GroupedAttention(num_heads=3, num_kv_heads=1)(x, y)


def test_compute_attention_override_names_the_alternative():
    class Custom(GroupedAttention):
        def _compute_attention(self, *args, **kwargs):
            raise AssertionError("never called")

    x, y = util.data()
    with pytest.raises(NotImplementedError, match="_logits_from_projected"):
        Custom(num_heads=4, num_kv_heads=2)(x, y)
