"""Checks of the tf_keras attention layers, shared by their test files.

Every layer meets the same contract (in the manner of keras-hub's
`TestCase.run_layer_test`): `CASES` holds the five classes of `headsize_tf.layers`
at width 16, by class name, and `check_build`, `check_config_and_params`,
`check_saving`, `check_masks`, `check_dtype_policies` and `check_fit` assert the
contract for one of them. The decoding-cache checks (`check_cached_decoding`,
`check_cache_bytes`) and the inputs, masks and random weights below serve the
layer-specific tests as well.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import tempfile
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from headsize_tf.core.kv_cache import cache_entries, dtype_bytes
from headsize_tf.core.params import attention_params
from headsize_tf.core.spec import AttentionSpec
from headsize_tf.layers import (
    CollaborativeAttention,
    FixedHeadAttention,
    GroupedAttention,
    LatentAttention,
    StandardAttention,
)
from headsize_tf.layers.factory import ATTENTION_CLASSES
from headsize_tf.layers.head_attention import HeadAttentionBase
from headsize_tf.layers.roles import assign_weights, numpy_weights

WIDTH, HEADS, BATCH, T, S = 16, 4, 2, 5, 7
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
            {"num_heads": 3, "head_size": 8},  # 3 * 8 != 16
            ({}, _NO_BIAS, {**_SIZES, "head_size": 6}),
        ),
        LayerCase(
            CollaborativeAttention,
            {"num_heads": 4, "shared_key_dim": 12},
            ({}, _NO_BIAS, {**_SIZES, "head_size": 6}),
        ),
        LayerCase(
            GroupedAttention,
            {"num_heads": HEADS, "num_kv_heads": 2},
            ({}, _NO_BIAS, {**_SIZES, "head_size": 6}),
        ),
        LayerCase(
            LatentAttention,
            {"num_heads": HEADS, "kv_latent_dim": 6},
            ({}, {**_NO_BIAS, "absorb": False}, {**_SIZES, "head_size": 6}),
        ),
    )
}


def inputs(seed: int = 0, t: int = T, s: int = S):
    rng = np.random.default_rng(seed)
    return (
        tf.constant(rng.normal(size=(BATCH, t, WIDTH)), tf.float32),
        tf.constant(rng.normal(size=(BATCH, s, WIDTH)), tf.float32),
    )


def masks(seed: int = 1) -> dict[str, np.ndarray | None]:
    """No mask, [B, T, S] with a fully masked row, per head [B, N, T, S] with one."""
    rng = np.random.default_rng(seed)
    keys = rng.random((BATCH, T, S)) > 0.3
    keys[:, :, 0] = True
    keys[1, 2] = False  # A fully masked row.
    per_head = rng.random((BATCH, HEADS, T, S)) > 0.4
    per_head[..., 1] = True
    per_head[0, 3, 4] = False
    return {"none": None, "keys": keys, "per_head": per_head}


def randomize(layer, seed: int = 0, gates=None) -> dict:
    """Random weights for every role of a built layer (set through `assign_weights`)."""
    rng = np.random.default_rng(seed)
    weights = {}
    for role, value in numpy_weights(layer).items():
        if value is None or role == "head_gates":
            weights[role] = None  # Absent biases stay absent.
            continue
        scale = 0.5 if role.endswith("bias") else 1.0 / np.sqrt(value.shape[0])
        weights[role] = rng.normal(0.0, scale, value.shape).astype(np.float32)
    weights["head_gates"] = np.ones(layer.num_heads, np.float32) if gates is None else gates
    assign_weights(layer, weights)
    return weights


def cache_nbytes(cache: dict) -> int:
    return sum(int(t.shape.num_elements()) * t.dtype.size for t in cache.values())


def check_cache_bytes(test, make, spec) -> None:
    """init_cache / call_cached arrays hold exactly `core.kv_cache.cache_entries` per token."""
    for policy in (None, "mixed_bfloat16", "mixed_float16"):
        layer = make(**({} if policy is None else {"dtype": policy}))
        x, _ = inputs()
        layer(x, x)
        entries = cache_entries(spec.resolve(WIDTH))
        itemsize = dtype_bytes(policy or "float32")
        cache = layer.init_cache(BATCH, length=6)
        test.assertEqual(sorted(cache), sorted(entries))
        test.assertEqual(cache_nbytes(cache), sum(entries.values()) * BATCH * 6 * itemsize)
        _, grown = layer.call_cached(x[:, :3], layer.init_cache(BATCH))
        test.assertEqual(cache_nbytes(grown), sum(entries.values()) * BATCH * 3 * itemsize)
        for name, size in entries.items():
            per_token = int(np.prod(grown[name].shape[2:]))
            test.assertEqual(per_token, size, name)


def check_cached_decoding(test, layer, atol: float = 1e-5) -> float:
    """Step-by-step and fixed-length (decode_loop_step) decoding equal the causal call."""
    x, _ = inputs(t=6)
    full = layer(x, x, use_causal_mask=True).numpy()
    cache = layer.init_cache(batch_size=BATCH)
    steps = []
    for t in range(6):
        out, cache = layer.call_cached(x[:, t : t + 1], cache)
        steps.append(out.numpy())
    worst = float(np.abs(np.concatenate(steps, axis=1) - full).max())
    test.assertAllClose(np.concatenate(steps, axis=1), full, atol=atol)
    # Two new positions at once over a cache of three.
    _, cache = layer.call_cached(x[:, :3], layer.init_cache(BATCH))
    mask = np.tril(np.ones((5, 5), bool), k=0)[3:][None].repeat(BATCH, 0)
    out, _ = layer.call_cached(x[:, 3:5], cache, attention_mask=mask)
    test.assertAllClose(out.numpy(), full[:, 3:5], atol=atol)
    # A fixed-length cache written at decode_loop_step (static shapes, tf.function).
    cache = layer.init_cache(batch_size=BATCH, length=6)
    step = tf.function(
        lambda q, c, m, i: layer.call_cached(q, c, attention_mask=m, decode_loop_step=i)
    )
    for t in range(6):
        mask = np.zeros((BATCH, 1, 6), bool)
        mask[:, :, : t + 1] = True
        out, cache = step(x[:, t : t + 1], cache, mask, tf.constant(t))
        worst = max(worst, float(np.abs(out.numpy()[:, 0] - full[:, t]).max()))
        test.assertAllClose(out.numpy()[:, 0], full[:, t], atol=atol)
    return worst


# ------------------------------------------------------------- the layer contract
def check_build(test, case: LayerCase) -> None:
    """Building on the first call; output and score shapes, eager and symbolic."""
    x, y = inputs()
    layer = case.make()
    test.assertFalse(layer.built)
    out, scores = layer(x, y, return_attention_scores=True)
    test.assertTrue(layer.built)
    test.assertEqual(out.shape, (BATCH, T, WIDTH))
    test.assertEqual(scores.shape, (BATCH, layer.num_heads, T, S))
    symbolic, symbolic_scores = case.make()(
        tf_keras.Input([T, WIDTH]), tf_keras.Input([S, WIDTH]), return_attention_scores=True
    )
    test.assertEqual(symbolic.shape.as_list(), [None, T, WIDTH])
    test.assertEqual(symbolic_scores.shape.as_list(), [None, layer.num_heads, T, S])


def check_config_and_params(test, case: LayerCase) -> None:
    """get_config holds every constructor argument; from_config clones; count_params = formula."""
    x, y = inputs()
    arguments = set(inspect.signature(case.cls.__init__).parameters)
    arguments |= set(inspect.signature(HeadAttentionBase.__init__).parameters)
    for kwargs in case.variants:
        layer = case.make(dropout=0.1, seed=7, kernel_initializer="he_normal", **kwargs)
        out = layer(x, y)
        test.assertEqual(out.shape, (BATCH, T, kwargs.get("output_shape", WIDTH)))
        config = layer.get_config()
        for name in arguments - {"self", "kwargs"}:
            test.assertIn(name, config)
        test.assertNotIn("key_dim", config)
        clone = case.cls.from_config(config)
        test.assertEqual(clone.get_config(), config)
        clone(x, y)
        clone.set_weights(layer.get_weights())
        test.assertAllClose(clone(x, y), out)
        expected = attention_params(
            case.spec(**kwargs),
            WIDTH,
            use_bias=kwargs.get("use_bias", True),
            output_width=kwargs.get("output_shape"),
        )
        test.assertEqual(layer.count_params(), expected.trainable)
        test.assertEqual(sum(int(np.prod(w.shape)) for w in layer.weights), expected.total)


def check_saving(test, case: LayerCase) -> None:
    """.keras, tf_keras SavedModel and tf.saved_model round trips of a model holding the layer."""
    t_in = tf_keras.Input(shape=[T, WIDTH])
    s_in = tf_keras.Input(shape=[S, WIDTH])
    m_in = tf_keras.Input(shape=[T, S], dtype=tf.bool)
    layer = case.make()
    model = tf_keras.Model([t_in, s_in, m_in], layer(t_in, s_in, attention_mask=m_in))
    randomize(layer)  # Gates are not Keras weights: .keras files do not keep them.
    x, y = inputs()
    mask = masks()["keys"]
    expected = model([x, y, mask]).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        test.assertAllClose(tf_keras.models.load_model(path)([x, y, mask]), expected, atol=1e-6)
        sm_dir = os.path.join(tmp, "saved_model")
        tf_keras.models.save_model(model, sm_dir, save_format="tf")
        restored = tf_keras.models.load_model(sm_dir)
        test.assertAllClose(restored([x, y, mask]), expected, atol=1e-6)
        raw = tf.saved_model.load(sm_dir)  # The same SavedModel, without tf_keras.
        test.assertAllClose(raw([x, y, mask], training=False), expected, atol=1e-6)


def check_masks(test, layer: HeadAttentionBase) -> None:
    """Padding (with a fully masked row) and causal masks: finite, masked keys get zero weight.

    A fully masked row attends uniformly to every key, as tf_keras's
    MultiHeadAttention does.
    """
    x, y = inputs()
    mask = masks()["keys"]
    out, scores = layer(x, y, attention_mask=mask, return_attention_scores=True)
    test.assertTrue(np.all(np.isfinite(out.numpy())))
    scores = scores.numpy()
    rows = mask.any(-1)  # [B, T]: False where every key is masked.
    test.assertFalse(rows.all())
    hidden = np.broadcast_to((~mask & rows[..., None])[:, None], scores.shape)
    test.assertAllEqual(scores[hidden], np.zeros(hidden.sum()))
    test.assertAllClose(scores.sum(-1), np.ones(scores.shape[:-1]), atol=1e-6)
    test.assertAllClose(
        scores.transpose(0, 2, 1, 3)[~rows], np.full(((~rows).sum(), layer.num_heads, S), 1 / S)
    )
    out, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    test.assertTrue(np.all(np.isfinite(out.numpy())))
    future = np.broadcast_to(np.triu(np.ones((T, T), bool), k=1), scores.shape)
    test.assertAllEqual(scores.numpy()[future], np.zeros(future.sum()))


def check_dtype_policies(test, case: LayerCase, reference: HeadAttentionBase) -> None:
    """mixed_float16 / mixed_bfloat16 layers with the weights of the built float32 `reference`:
    float16 / bfloat16 outputs, float32 variables, finite with masks, close to float32."""
    x, y = inputs()
    mask = masks()["keys"]
    weights = numpy_weights(reference)
    expected = reference(x, y, attention_mask=mask).numpy()
    for policy, dtype in (("mixed_float16", tf.float16), ("mixed_bfloat16", tf.bfloat16)):
        layer = case.make(dtype=policy)
        layer(x, y)
        assign_weights(layer, weights)
        out = layer(x, y, attention_mask=mask)
        test.assertEqual(out.dtype, dtype)
        for weight in layer.weights:
            test.assertEqual(weight.dtype, tf.float32, weight.name)
        out = tf.cast(out, tf.float32).numpy()
        test.assertTrue(np.all(np.isfinite(out)))
        test.assertAllClose(out, expected, atol=0.05 * np.abs(expected).max())


def check_fit(test, case: LayerCase) -> None:
    """`fit` lowers the loss of a model holding the layer (to 0.1-0.5 of the first epoch's)."""
    tf_keras.utils.set_random_seed(0)
    inp = tf_keras.Input(shape=[6, WIDTH])
    out = case.make()(inp, inp)
    model = tf_keras.Model(inp, tf_keras.layers.GlobalAveragePooling1D()(out))
    model.compile(tf_keras.optimizers.Adam(1e-2), "mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6, WIDTH)).astype(np.float32)
    target = np.roll(x, 1, axis=1).mean(1)
    history = model.fit(x, target, epochs=8, batch_size=16, verbose=0)
    test.assertLess(history.history["loss"][-1], 0.7 * history.history["loss"][0])
