"""Rotary positions on every Keras 3 attention kind, against numpy oracles and keras-hub."""

from __future__ import annotations

import importlib.util

import hypothesis.extra.numpy as hnp
import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headsize_tf.core import kv_cache, rope
from headsize_tf.core.spec import AttentionSpec, SpecError
from headsize_tf.keras3.layers import GroupedAttention, LatentAttention, StandardAttention, rotary
from headsize_tf.keras3.layers.factory import make_attention
from tests.keras3 import util

WIDTH = 16
BASE = 500.0


def _w(layer, name):
    return util.np_(getattr(layer, name).kernel)


def _rms(x, scale, eps):
    return x / np.sqrt(np.mean(x**2, -1, keepdims=True) + eps) * scale


def grouped_oracle(layer: GroupedAttention | StandardAttention, x, mask, start=0):
    """Grouped-query attention with RoPE (per-head rotary sets), biases, query-key norm."""
    heads = layer.num_heads
    groups = getattr(layer, "num_kv_heads", heads)
    n, p = heads // groups, layer.head_size
    q = np.einsum("btd,dhp->bthp", x, _w(layer, "_query_dense"))
    k = np.einsum("bsd,dgp->bsgp", x, _w(layer, "_key_dense"))
    v = np.einsum("bsd,dgv->bsgv", x, _w(layer, "_value_dense"))
    if layer._query_dense.bias is not None:
        q = q + util.np_(layer._query_dense.bias)
    if layer._key_dense.bias is not None:
        k = k + util.np_(layer._key_dense.bias)
    if getattr(layer._value_dense, "bias", None) is not None:
        v = v + util.np_(layer._value_dense.bias)
    if layer.query_norm is not None:
        eps = layer._query_key_norm_epsilon
        q, k = _rms(q, util.np_(layer.query_norm), eps), _rms(k, util.np_(layer.key_norm), eps)
    positions = start + np.arange(x.shape[1])
    inverse = rope.frequency_table(layer.rope_sets, p, BASE, layer._rope_scaling)
    inverse_q = np.repeat(inverse, n, axis=0) if len(inverse) > 1 else inverse
    q = rope.rotate_numpy(q, positions, inverse_q)
    k = rope.rotate_numpy(k, positions, inverse)
    k, v = np.repeat(k, n, axis=2), np.repeat(v, n, axis=2)
    logits = np.einsum("bthp,bshp->bhts", q, k) / np.sqrt(p)
    logits = np.where(mask[:, None], logits, -1e9)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum("bhts,bshv->bthv", weights, v)
    value_bias = getattr(layer, "value_bias", None)
    if value_bias is not None:
        context = context + util.np_(value_bias)
    out = np.einsum("bthv,hvd->btd", context, _w(layer, "_output_dense"))
    if layer._output_dense.bias is not None:
        out = out + util.np_(layer._output_dense.bias)
    return out


def _randomize(layer, seed=0):
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in layer.get_weights()])


@pytest.mark.parametrize(
    "layer",
    [
        lambda: StandardAttention(num_heads=4, rope_max_wavelength=BASE),
        lambda: GroupedAttention(
            num_heads=4, num_kv_heads=2, head_size=6, rope_max_wavelength=BASE
        ),
        # Partial RoPE, one set per key/value head; keys keep their (rotated) bias.
        lambda: GroupedAttention(
            num_heads=4,
            num_kv_heads=2,
            head_size=8,
            rope_max_wavelength=BASE,
            rope_frequencies=[[0, 3], [1]],
        ),
        # Qwen3's query-key norm, Qwen2's projections without an output bias, Llama 3 scaling.
        lambda: GroupedAttention(
            num_heads=4,
            num_kv_heads=1,
            head_size=8,
            rope_max_wavelength=BASE,
            query_key_norm_epsilon=1e-6,
            use_output_bias=False,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),
    ],
    ids=["standard", "grouped", "grouped_partial", "grouped_qk_norm_llama3"],
)
def test_rotary_layers_match_the_numpy_oracle_and_decode_cached(layer):
    layer = layer()
    x, _ = util.data(t=6, s=6, seed=3)
    mask = util.causal_mask(2, 6, 6)
    layer(x, x)
    _randomize(layer)
    expected = grouped_oracle(layer, x.astype(np.float64), mask)
    np.testing.assert_allclose(util.np_(layer(x, x, attention_mask=mask)), expected, atol=2e-5)
    np.testing.assert_allclose(util.np_(layer(x, x, use_causal_mask=True)), expected, atol=2e-5)
    # Cached decoding rotates each new token at its own position (decode_loop_step).
    _, cache = layer.call_cached(x[:, :2], None, util.causal_mask(2, 2, 2))
    cache = {
        k: keras.ops.pad(v, [(0, 0), (0, 4)] + [(0, 0)] * (v.ndim - 2)) for k, v in cache.items()
    }
    for t in range(2, 6):
        step_mask = np.broadcast_to(np.arange(6) <= t, (2, 1, 6))
        out, cache = layer.call_cached(x[:, t : t + 1], cache, step_mask, decode_loop_step=t)
        np.testing.assert_allclose(util.np_(out)[:, 0], expected[:, t], atol=2e-5)


# A latent whose two rotary keys turn different pairs.
TWO_ROTARY_KEYS = AttentionSpec(
    "latent",
    num_heads=4,
    kv_latent_dim=5,
    head_size=8,
    num_rope_heads=2,
    rope_max_wavelength=BASE,
    rope_frequencies=[[0, 2], [1, 3]],
)


@pytest.mark.parametrize(
    "spec",
    [
        AttentionSpec("fixed_head", num_heads=2, head_size=6, rope_max_wavelength=BASE),
        AttentionSpec("collaborative", num_heads=4, shared_key_dim=8, rope_max_wavelength=BASE),
        AttentionSpec("latent", num_heads=4, kv_latent_dim=6, rope_max_wavelength=BASE),
        TWO_ROTARY_KEYS,
    ],
    ids=["fixed_head", "collaborative", "latent", "latent_two_rotary_keys"],
)
def test_every_kind_decodes_cached_equal_to_its_causal_call(spec):
    """Appending (no index) and writing at an index both rotate at the true positions; latent
    layers decode absorbed (in latent space) and up-projected alike."""
    for absorb in (True, False) if spec.kind == "latent" else (None,):
        _check_cached_decoding(spec, absorb)


def _check_cached_decoding(spec, absorb):
    kwargs = {"use_bias": True} if spec.kind != "latent" else {"absorb": absorb}
    layer = make_attention(spec, **kwargs)
    x, _ = util.data(t=5, s=5, seed=4)
    layer(x, x)
    _randomize(layer, 1)
    # Batch 1 too: one row per step is where absorbed decoding on JAX's CPU backend takes
    # its block-diagonal per-head products.
    for rows in (x, x[:1]):
        full = util.np_(layer(rows, rows, use_causal_mask=True))
        cache = layer.init_cache(len(rows), 0)
        for t in range(5):
            out, cache = layer.call_cached(rows[:, t : t + 1], cache)
            np.testing.assert_allclose(util.np_(out)[:, 0], full[:, t], atol=3e-5)
    entries = kv_cache.cache_entries(spec.resolve(WIDTH))
    assert {k: int(np.prod(v.shape[2:])) for k, v in cache.items()} == entries


def test_latent_rotary_keys_with_every_frequency_equal_grouped_attention():
    """MHA2MLA's limit: every pair on RoPE, one rotary key per key/value head, the latent
    holding exactly the values: the latent layer is the grouped one."""
    x, _ = util.data(t=5, s=5, seed=6)
    grouped = GroupedAttention(
        num_heads=4, num_kv_heads=2, head_size=4, rope_max_wavelength=BASE, use_bias=False
    )
    grouped(x, x)
    _randomize(grouped, 2)
    latent = LatentAttention(
        num_heads=4,
        kv_latent_dim=WIDTH,
        head_size=4,
        num_rope_heads=2,
        rope_max_wavelength=BASE,
        rope_frequencies=[0, 1],
        use_bias=False,
    )
    latent(x, x)
    assert latent.nope_dim == 0 and latent.rope_pairs == 2
    value = _w(grouped, "_value_dense")  # [d, G, v]
    latent._query_dense.kernel.assign(_w(grouped, "_query_dense"))
    latent._latent_dense.kernel.assign(np.eye(WIDTH, dtype="float32"))
    latent._value_up_dense.kernel.assign(np.repeat(value, 2, axis=1).transpose(1, 0, 2))
    latent._rope_key_dense.kernel.assign(_w(grouped, "_key_dense"))
    latent._output_dense.kernel.assign(_w(grouped, "_output_dense"))
    expected = util.np_(grouped(x, x, use_causal_mask=True))
    np.testing.assert_allclose(util.np_(latent(x, x, use_causal_mask=True)), expected, atol=2e-5)
    out, _ = latent.call_cached(x, None, util.causal_mask(2, 5, 5))
    np.testing.assert_allclose(util.np_(out), expected, atol=2e-5)


def normed_latent_oracle(layer: LatentAttention, x, mask):
    """A rotary latent with per-head query/key norms (numpy, no biases): each head's query,
    and its key `[c W_UK^(i), k_R of its group]` as a whole, RMS-normalised with its group's
    scales, then the last 2k dimensions rotated."""
    h, groups, p = layer.num_heads, layer.num_rope_heads, layer.head_size
    n, nope = h // groups, layer.nope_dim
    eps, offset = layer._query_key_norm_epsilon, layer._query_key_norm_offset
    query_scale = np.repeat(util.np_(layer.query_norm) + offset, n, axis=0)  # [h, p]
    key_scale = np.repeat(util.np_(layer.key_norm) + offset, n, axis=0)
    q = np.einsum("btd,dhp->bthp", x, _w(layer, "_query_dense"))
    c = x @ _w(layer, "_latent_dense")
    nope_key = np.einsum("bsr,hrn->bshn", c, util.np_(layer._key_up_dense.kernel))
    rope_key = np.einsum("bsd,dgc->bsgc", x, _w(layer, "_rope_key_dense"))
    k = np.concatenate([nope_key, np.repeat(rope_key, n, axis=2)], axis=-1)
    q, k = _rms(q, query_scale, eps), _rms(k, key_scale, eps)
    positions = np.arange(x.shape[1])
    inverse = np.repeat(rope.compact_table(layer.rope_sets, p, BASE), n, axis=0)  # [h, k]
    q[..., nope:] = rope.rotate_numpy(q[..., nope:], positions, inverse)
    k[..., nope:] = rope.rotate_numpy(k[..., nope:], positions, inverse)
    logits = np.einsum("bthp,bshp->bhts", q, k) / np.sqrt(p)
    logits = np.where(mask[:, None], logits, -1e9)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    values = np.einsum("bsr,hrv->bshv", c, util.np_(layer._value_up_dense.kernel))
    context = np.einsum("bhts,bshv->bthv", weights, values)
    return np.einsum("bthv,hvd->btd", context, _w(layer, "_output_dense"))


@pytest.mark.parametrize("offset", [0.0, 1.0], ids=["qwen3", "gemma3"])
def test_a_latent_with_query_key_norms_matches_its_oracle_and_decodes_it(offset):
    """Qwen3's norms (Gemma 3's scale by 1 + w) on a latent whose two rotary keys turn
    different pairs; decoding, absorbed or up-projected, scales each head's scores by the
    inverse key RMS it cached (h values per token beside the latent and rotary keys)."""
    x, _ = util.data(t=6, s=6, seed=7)
    spec = TWO_ROTARY_KEYS
    layer = make_attention(
        spec, use_bias=False, query_key_norm_epsilon=1e-3, query_key_norm_offset=offset
    )
    layer(x, x)
    _randomize(layer, 3)
    assert tuple(layer.key_norm.shape) == (2, 8)
    mask = util.causal_mask(2, 6, 6)
    expected = normed_latent_oracle(layer, x.astype(np.float64), mask)
    np.testing.assert_allclose(util.np_(layer(x, x, use_causal_mask=True)), expected, atol=2e-5)
    for absorb in (True, False):
        layer.absorb = absorb
        cache = layer.init_cache(2, 0)
        for t in range(6):
            out, cache = layer.call_cached(x[:, t : t + 1], cache)
            np.testing.assert_allclose(util.np_(out)[:, 0], expected[:, t], atol=3e-5)
    entries = kv_cache.cache_entries(spec.resolve(WIDTH), query_key_norm=True)
    assert entries == {"latent": 5 + 2 * 4 + 4}
    assert {k: int(np.prod(v.shape[2:])) for k, v in cache.items()} == entries
    with pytest.raises(ValueError, match="for rotary latents"):
        LatentAttention(num_heads=4, kv_latent_dim=5, query_key_norm_epsilon=1e-3)(x, x)


@settings(max_examples=25, deadline=None)
@given(
    heads=st.sampled_from([(1, 1), (2, 2), (4, 2), (6, 3)]),
    pairs=st.integers(1, 4),
    shift=st.integers(0, 50),
    data=st.data(),
)
def test_rotary_scores_depend_on_the_position_difference_only(heads, pairs, shift, data):
    h, rows = heads
    sets = [
        data.draw(st.lists(st.integers(0, pairs - 1), min_size=0, max_size=pairs, unique=True))
        for _ in range(rows)
    ]
    inverse = rope.frequency_table([tuple(s) for s in sets], 2 * pairs, 1000.0)
    q = data.draw(
        hnp.arrays(
            np.float32,
            (1, 1, h, 2 * pairs),
            elements=st.floats(-2, 2, width=32, allow_subnormal=False),
        )
    )
    k = data.draw(
        hnp.arrays(
            np.float32,
            (1, 1, h, 2 * pairs),
            elements=st.floats(-2, 2, width=32, allow_subnormal=False),
        )
    )
    t, s = data.draw(st.integers(0, 40)), data.draw(st.integers(0, 40))

    def score(t, s):
        qt = util.np_(rotary.rotate(q, inverse, t))
        ks = util.np_(rotary.rotate(k, inverse, s))
        return np.sum(qt * ks, axis=-1)

    np.testing.assert_allclose(score(t, s), score(t + shift, s + shift), atol=2e-4)
    # A pair outside every set keeps its values.
    np.testing.assert_allclose(util.np_(rotary.rotate(q, np.zeros_like(inverse), t)), q, atol=0)


@pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None, reason="keras-hub absent")
@pytest.mark.parametrize(
    "scaling",
    [
        None,
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    ],
)
def test_rotation_equals_keras_hubs_rotary_embedding(scaling):
    import keras_hub

    kwargs = {}
    if scaling is not None:
        kwargs = {"scaling_factor": scaling["factor"], "rope_type": scaling["rope_type"]}
        if scaling["rope_type"] == "yarn":
            kwargs["original_max_position_embeddings"] = 32
    theirs = keras_hub.layers.RotaryEmbedding(max_wavelength=BASE, **kwargs)
    x = np.random.default_rng(0).normal(size=(2, 40, 3, 8)).astype("float32")
    inverse = rope.frequency_table([tuple(range(4))], 8, BASE, scaling)
    ours = rotary.rotate(x, inverse, 5, rope.attention_factor(scaling))
    np.testing.assert_allclose(util.np_(ours), util.np_(theirs(x, start_index=5)), atol=2e-5)


@pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None, reason="keras-hub absent")
def test_llama3_frequencies_equal_keras_hubs():
    from keras_hub.src.models.llama.llama_rotary_embedding import LlamaRotaryEmbedding

    theirs = LlamaRotaryEmbedding(
        max_wavelength=BASE,
        frequency_adjustment_factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        pretraining_sequence_length=16,
    )
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    np.testing.assert_allclose(
        rope.inverse_frequencies(16, BASE, scaling),
        util.np_(theirs._get_inverse_freq(16)),
        rtol=1e-6,
    )


def test_rotary_specs_refuse_bad_settings_in_one_line():
    with pytest.raises(SpecError, match="needs rotary positions"):
        AttentionSpec("standard", num_heads=4, rope_frequencies=[0])
    with pytest.raises(SpecError, match="has 4 frequency pairs"):
        AttentionSpec(
            "standard", num_heads=2, rope_max_wavelength=BASE, rope_frequencies=[0, 4]
        ).resolve(16)
    with pytest.raises(SpecError, match="only for kind 'latent'"):
        AttentionSpec(
            "grouped", num_heads=4, num_kv_heads=2, rope_max_wavelength=BASE, num_rope_heads=2
        )
    with pytest.raises(SpecError, match="Unknown rope_scaling type"):
        AttentionSpec(
            "standard", num_heads=4, rope_max_wavelength=BASE, rope_scaling={"rope_type": "ntk"}
        )
    from headsize_tf.layers.factory import make_attention as tf_keras_make_attention

    with pytest.raises(SpecError, match="Keras 3 front"):
        tf_keras_make_attention(AttentionSpec("standard", num_heads=4, rope_max_wavelength=BASE))


def test_specs_without_rope_keep_their_dict_and_rotary_dicts_round_trip():
    plain = AttentionSpec("grouped", num_heads=4, num_kv_heads=2)
    assert "rope_max_wavelength" not in plain.to_dict()
    spec = AttentionSpec(
        "latent",
        num_heads=4,
        kv_latent_dim=8,
        num_rope_heads=[1, 2],
        rope_max_wavelength=1e4,
        rope_frequencies=[[[0, 1]], [[0, 1], [2, 3]]],
    )
    assert AttentionSpec.from_dict(spec.to_dict()) == spec
    assert spec.for_layer(1).resolve(32).rope_sets == ((0, 1), (2, 3))
    # The cache: latent 8 + 2 rotary keys x 4 dimensions in layer 1.
    assert kv_cache.kv_cache_bytes_per_token(spec, 32, num_layers=2, dtype="float32") == 4 * (
        (8 + 4) + (8 + 8)
    )
