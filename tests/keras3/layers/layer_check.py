"""Checks of the Keras 3 attention layers, shared by their test files (numpy and keras only).

Every layer meets the same contract on every backend (in the manner of keras-hub's
`TestCase.run_layer_test`): `CASES` holds the five classes of
`headsize_tf.keras3.layers` at width 16, by class name, and `check_build`,
`check_config_and_params`, `check_keras_file`, `check_masks`,
`check_dtype_policies` and `check_fit` assert the contract for one of them. No
TensorFlow import: the checks also run on JAX (tests/keras3/jax_backend_test.py).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import keras
import numpy as np

from headsize_tf.core.params import attention_params
from headsize_tf.core.spec import AttentionSpec
from headsize_tf.keras3.layers import (
    CollaborativeAttention,
    FixedHeadAttention,
    GroupedAttention,
    HeadAttentionBase,
    LatentAttention,
    StandardAttention,
)
from headsize_tf.keras3.layers.factory import ATTENTION_CLASSES
from headsize_tf.keras3.layers.roles import numpy_weights
from tests.keras3 import util
from tests.keras3.util import WIDTH, np_

BATCH, T, S = 2, 5, 7
_SPEC_FIELDS = {field.name for field in dataclasses.fields(AttentionSpec)}
_KIND_OF = {cls: kind for kind, cls in ATTENTION_CLASSES.items()}


@dataclasses.dataclass(frozen=True)
class LayerCase:
    """A layer class with its sizes at width 16, and the arguments its config check varies."""

    cls: type
    sizes: dict[str, Any]
    variants: tuple[dict[str, Any], ...]

    @property
    def name(self) -> str:
        return self.cls.__name__

    def make(self, **kwargs: Any) -> HeadAttentionBase:
        return self.cls(**{**self.sizes, **kwargs})

    def spec(self, **kwargs: Any) -> AttentionSpec:
        """The `AttentionSpec` of `make(**kwargs)` (what `attention_params` counts)."""
        sizes = {k: v for k, v in {**self.sizes, **kwargs}.items() if k in _SPEC_FIELDS}
        return AttentionSpec(_KIND_OF[self.cls], **sizes)


# The config check's variants: defaults, no biases, and value / head / output sizes
# that differ from the query width (the head size where the class takes one).
_NO_BIAS = {"use_bias": False}
_SIZES = {"value_dim": 3, "output_shape": 10}
CASES = {
    case.name: case
    for case in (
        LayerCase(StandardAttention, {"num_heads": 4}, ({}, _NO_BIAS, _SIZES)),
        LayerCase(
            FixedHeadAttention,
            {"num_heads": 4, "head_size": 6},  # 4 * 6 != 16
            ({}, _NO_BIAS, {**_SIZES, "head_size": 5}),
        ),
        LayerCase(
            CollaborativeAttention,
            {"num_heads": 4, "shared_key_dim": 12},
            ({}, _NO_BIAS, {**_SIZES, "head_size": 6}),
        ),
        LayerCase(
            GroupedAttention,
            {"num_heads": 4, "num_kv_heads": 2},
            ({}, _NO_BIAS, {**_SIZES, "head_size": 6}),
        ),
        LayerCase(
            LatentAttention,
            {"num_heads": 4, "kv_latent_dim": 6},
            ({}, {**_NO_BIAS, "absorb": False}, {**_SIZES, "head_size": 6}),
        ),
    )
}


def randomize(layer, seed: int = 0) -> None:
    """Normal(0, 0.3) values in every weight of a built layer, biases included."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))


def padding_mask() -> np.ndarray:
    """[B, T, S] key padding with a fully masked row (query 2 of batch entry 1)."""
    mask = util.padding_mask(BATCH, T, S)
    mask[1, 2] = False
    return mask


def _constructor_args(cls) -> set[str]:
    names = set()
    for klass in (cls, HeadAttentionBase):
        for name, param in inspect.signature(klass.__init__).parameters.items():
            if name != "self" and param.kind is not inspect.Parameter.VAR_KEYWORD:
                names.add(name)
    return names


def _dtype(x) -> str:
    return keras.backend.standardize_dtype(x.dtype)


# ------------------------------------------------------------- the layer contract
def check_build(case: LayerCase) -> None:
    """Building on the first call; output and score shapes, eager and symbolic."""
    x, y = util.data(T, S)
    layer = case.make()
    assert not layer.built
    out, scores = layer(x, y, return_attention_scores=True)
    assert layer.built
    assert tuple(out.shape) == (BATCH, T, WIDTH)
    assert tuple(scores.shape) == (BATCH, layer.num_heads, T, S)
    q, kv = keras.Input((T, WIDTH)), keras.Input((S, WIDTH))
    sym_out, sym_scores = case.make()(q, kv, return_attention_scores=True)
    assert tuple(sym_out.shape) == (None, T, WIDTH)
    assert tuple(sym_scores.shape) == (None, layer.num_heads, T, S)


def check_config_and_params(case: LayerCase) -> None:
    """get_config holds every constructor argument; from_config clones; count_params = formula.

    The head gates are a non-trainable variable, not a weight: the formula does not
    count them.
    """
    x, y = util.data(T, S)
    arguments = _constructor_args(case.cls)
    for kwargs in case.variants:
        layer = case.make(
            dropout=0.1, seed=7, kernel_initializer="he_normal", flash_attention=False, **kwargs
        )
        config = layer.get_config()
        assert arguments <= set(config), arguments - set(config)
        assert "key_dim" not in config
        assert config["flash_attention"] is False
        clone = case.cls.from_config(config)
        assert clone.get_config() == config
        out = np_(layer(x, y))
        assert out.shape == (BATCH, T, kwargs.get("output_shape", WIDTH))
        clone.build(x.shape, y.shape)
        clone.set_weights(layer.get_weights())
        np.testing.assert_allclose(np_(clone(x, y)), out, atol=1e-6)
        formula = attention_params(
            case.spec(**kwargs),
            WIDTH,
            use_bias=kwargs.get("use_bias", True),
            output_width=kwargs.get("output_shape"),
        )
        assert layer.count_params() == formula.total
        assert sum(int(np.prod(w.shape)) for w in layer.trainable_weights) == formula.trainable
        value_dim = kwargs.get("value_dim", layer.head_size)
        assert layer.value_dim == value_dim
        roles = numpy_weights(layer)
        value_kernel = roles.get("value_kernel", roles.get("value_up_kernel"))
        assert value_kernel.shape[-1] == value_dim
        np.testing.assert_array_equal(roles["head_gates"], np.ones(layer.num_heads))
        assert all(w is not layer.head_gates for w in layer.weights)
        assert any(v is layer.head_gates for v in layer.variables)
        assert any(v is layer.head_gates for v in layer.non_trainable_variables)


def check_keras_file(case: LayerCase, path) -> None:
    """A `.keras` round trip of a model holding the layer, with an attention-mask input."""
    t_in, s_in = keras.Input((T, WIDTH)), keras.Input((S, WIDTH))
    m_in = keras.Input((T, S), dtype="bool")
    layer = case.make(name="attention")
    model = keras.Model([t_in, s_in, m_in], layer(t_in, s_in, attention_mask=m_in))
    randomize(layer, seed=7)
    x, y = util.data(T, S)
    mask = padding_mask()
    expected = np_(model([x, y, mask]))
    model.save(path)
    restored = keras.models.load_model(path)
    restored_layer = restored.get_layer("attention")
    assert type(restored_layer) is case.cls
    assert restored_layer.get_config() == layer.get_config()
    assert restored_layer.count_params() == layer.count_params()
    np.testing.assert_allclose(np_(restored([x, y, mask])), expected, atol=1e-6)
    # The head mask is not saved: a restored layer has all gates open.
    np.testing.assert_array_equal(np_(restored_layer.head_gates), np.ones(layer.num_heads))


def check_masks(layer: HeadAttentionBase) -> None:
    """Masks through `attention_mask`, `use_causal_mask` and Keras masks.

    Masked keys get zero weight; a fully masked row gets zero weights (as stock
    Keras 3 MultiHeadAttention computing its scores), so its output is the output
    bias, with or without the scores returned; outputs are finite.
    `query_mask` / `value_mask` and an `Embedding(mask_zero=True)` equal the
    attention mask they stand for.
    """
    x, y = util.data(T, S)
    mask = padding_mask()
    rows = mask.any(-1)  # [B, T]: False where every key is masked.
    out, scores = layer(x, y, attention_mask=mask, return_attention_scores=True)
    out, scores = np_(out), np_(scores)
    assert np.all(np.isfinite(out))
    hidden = np.broadcast_to(~mask[:, None], scores.shape)
    np.testing.assert_array_equal(scores[hidden], 0.0)
    sums = np.broadcast_to(rows[:, None], scores.shape[:-1]).astype(np.float64)
    np.testing.assert_allclose(scores.sum(-1), sums, atol=1e-6)
    np.testing.assert_allclose(np_(layer(x, y, attention_mask=mask)), out, atol=1e-5)
    bias = np_(layer.output_dense.bias) if layer.use_bias else 0.0
    np.testing.assert_allclose(out[~rows], np.broadcast_to(bias, out[~rows].shape), atol=1e-6)
    # Causal.
    causal, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    future = np.broadcast_to(np.triu(np.ones((T, T), bool), k=1), scores.shape)
    np.testing.assert_array_equal(np_(scores)[future], 0.0)
    assert np.all(np.isfinite(np_(causal)))
    # Keras masks: query / value masks, and an Embedding's mask reaching the layer.
    value_mask = np.ones((BATCH, S), bool)
    value_mask[0, 5:] = False
    query_mask = np.ones((BATCH, T), bool)
    query_mask[1, 3:] = False
    full = query_mask[:, :, None] & value_mask[:, None, :]
    expected = np_(layer(x, y, attention_mask=full))
    np.testing.assert_allclose(
        np_(layer(x, y, query_mask=query_mask, value_mask=value_mask)), expected, atol=1e-5
    )
    tokens = keras.Input((T,), dtype="int32")
    embedding = keras.layers.Embedding(10, WIDTH, mask_zero=True)
    model = keras.Model(tokens, layer(embedding(tokens), embedding(tokens)))
    ids = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]], np.int32)
    out = np_(model(ids))
    assert np.all(np.isfinite(out))
    embedded = np_(embedding(ids)).astype("float32")
    present = ids != 0
    expected = layer(embedded, embedded, attention_mask=present[:, :, None] & present[:, None])
    np.testing.assert_allclose(out, np_(expected), atol=1e-5)


def check_dtype_policies(case: LayerCase, reference: HeadAttentionBase) -> None:
    """mixed_bfloat16 (the global policy) and bfloat16 layers with the weights of the
    built float32 `reference`: bfloat16 outputs, finite with masks, close to float32.

    mixed_bfloat16 also returns finite scores and causal outputs.
    """
    x, y = util.data(T, S)
    mask = padding_mask()
    expected = np_(reference(x, y, attention_mask=mask))
    weights = reference.get_weights()
    for policy, variables in (("mixed_bfloat16", "float32"), ("bfloat16", "bfloat16")):
        if policy.startswith("mixed"):
            previous = keras.config.dtype_policy()
            keras.config.set_dtype_policy(policy)
            try:
                layer = case.make()
            finally:
                keras.config.set_dtype_policy(previous)
        else:
            layer = case.make(dtype=policy)
        layer.build(x.shape, y.shape)
        layer.set_weights(weights)
        assert all(_dtype(w) == variables for w in layer.weights), policy
        out = layer(x, y, attention_mask=mask)
        assert _dtype(out) == "bfloat16", policy
        out = np_(out)
        assert np.all(np.isfinite(out)), policy
        np.testing.assert_allclose(out, expected, atol=0.05 * np.abs(expected).max())
        if policy == "mixed_bfloat16":
            out, scores = layer(x, y, return_attention_scores=True)
            assert _dtype(out) == "bfloat16"
            assert np.all(np.isfinite(np_(out))) and np.all(np.isfinite(np_(scores)))
            assert np.all(np.isfinite(np_(layer(x, x, use_causal_mask=True))))


def check_fit(*cases: LayerCase, jit_compile: bool | str = "auto", optimizer: str = "adam") -> None:
    """`fit` lowers the loss of a model holding the layers of `cases` (causal self-attention,
    one after another).

    One epoch of 16 steps (to 0.15-0.45 of the first loss; an epoch costs more than a
    step). `jit_compile="auto"`: what `compile` picks (a compiled train step on JAX;
    none on TensorFlow, where the tests turn op determinism on).
    """
    keras.utils.set_random_seed(0)
    inp = keras.Input((6, WIDTH))
    hidden = inp
    for case in cases:
        hidden = case.make()(hidden, hidden, use_causal_mask=True)
    model = keras.Model(inp, keras.layers.GlobalAveragePooling1D()(hidden))
    optimizer = keras.optimizers.Adam(2e-2) if optimizer == "adam" else keras.optimizers.SGD(0.2)
    model.compile(optimizer, "mse", jit_compile=jit_compile)
    if isinstance(jit_compile, bool):
        assert model.jit_compile is jit_compile
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 6, WIDTH)).astype(np.float32)
    target = np.roll(x, 1, axis=1).mean(1)

    def loss() -> float:  # Eager, so that only the train step is compiled.
        return float(np.mean((np_(model(x)) - target) ** 2))

    initial = loss()
    model.fit(x, target, epochs=1, batch_size=8, verbose=0)
    final = loss()
    assert final < 0.7 * initial, (initial, final)
