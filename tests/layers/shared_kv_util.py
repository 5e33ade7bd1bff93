"""Checks shared by the grouped and latent attention tests (KV-cache head sharing)."""

from __future__ import annotations

import inspect
import os
import tempfile

import numpy as np
import tensorflow as tf
import tf_keras

from headsize_tf.core.kv_cache import cache_entries, dtype_bytes
from headsize_tf.core.params import attention_params
from headsize_tf.layers.head_attention import HeadAttentionBase
from headsize_tf.layers.roles import assign_weights, numpy_weights

WIDTH, HEADS, BATCH, T, S = 16, 4, 2, 5, 7


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


def check_cache_bytes(case, make, spec) -> None:
    """init_cache / call_cached arrays hold exactly `core.kv_cache.cache_entries` per token."""
    for policy in (None, "mixed_bfloat16", "mixed_float16"):
        layer = make(**({} if policy is None else {"dtype": policy}))
        x, _ = inputs()
        layer(x, x)
        entries = cache_entries(spec.resolve(WIDTH))
        itemsize = dtype_bytes(policy or "float32")
        cache = layer.init_cache(BATCH, length=6)
        case.assertEqual(sorted(cache), sorted(entries))
        case.assertEqual(cache_nbytes(cache), sum(entries.values()) * BATCH * 6 * itemsize)
        _, grown = layer.call_cached(x[:, :3], layer.init_cache(BATCH))
        case.assertEqual(cache_nbytes(grown), sum(entries.values()) * BATCH * 3 * itemsize)
        for name, size in entries.items():
            per_token = int(np.prod(grown[name].shape[2:]))
            case.assertEqual(per_token, size, name)


def check_cached_decoding(case, layer, atol: float = 1e-5) -> float:
    """Step-by-step and fixed-length (decode_loop_step) decoding equal the causal call."""
    x, _ = inputs(t=6)
    full = layer(x, x, use_causal_mask=True).numpy()
    cache = layer.init_cache(batch_size=BATCH)
    steps = []
    for t in range(6):
        out, cache = layer.call_cached(x[:, t : t + 1], cache)
        steps.append(out.numpy())
    worst = float(np.abs(np.concatenate(steps, axis=1) - full).max())
    case.assertAllClose(np.concatenate(steps, axis=1), full, atol=atol)
    # Two new positions at once over a cache of three.
    _, cache = layer.call_cached(x[:, :3], layer.init_cache(BATCH))
    mask = np.tril(np.ones((5, 5), bool), k=0)[3:][None].repeat(BATCH, 0)
    out, _ = layer.call_cached(x[:, 3:5], cache, attention_mask=mask)
    case.assertAllClose(out.numpy(), full[:, 3:5], atol=atol)
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
        case.assertAllClose(out.numpy()[:, 0], full[:, t], atol=atol)
    return worst


def check_config_and_params(case, make, spec_of) -> None:
    """get_config holds every constructor argument; from_config clones; count_params = formula."""
    x, y = inputs()
    for kwargs in ({}, {"use_bias": False}, {"value_dim": 3, "head_size": 6, "output_shape": 10}):
        layer = make(dropout=0.1, seed=7, kernel_initializer="he_normal", **kwargs)
        layer(x, y)
        config = layer.get_config()
        arguments = set(inspect.signature(type(layer).__init__).parameters)
        arguments |= set(inspect.signature(HeadAttentionBase.__init__).parameters)
        for name in arguments - {"self", "kwargs"}:
            case.assertIn(name, config)
        case.assertNotIn("key_dim", config)
        clone = type(layer).from_config(config)
        case.assertEqual(clone.get_config(), config)
        clone.set_weights(layer.get_weights())
        case.assertAllClose(clone(x, y), layer(x, y))
        expected = attention_params(
            spec_of(kwargs.get("head_size"), kwargs.get("value_dim")),
            WIDTH,
            use_bias=kwargs.get("use_bias", True),
            output_width=kwargs.get("output_shape"),
        )
        case.assertEqual(layer.count_params(), expected.trainable)


def check_saving(case, make) -> None:
    """.keras, tf_keras SavedModel and tf.saved_model round trips of a model holding the layer."""
    t_in = tf_keras.Input(shape=[T, WIDTH])
    s_in = tf_keras.Input(shape=[S, WIDTH])
    m_in = tf_keras.Input(shape=[T, S], dtype=tf.bool)
    layer = make()
    model = tf_keras.Model([t_in, s_in, m_in], layer(t_in, s_in, attention_mask=m_in))
    randomize(layer)  # Gates are not Keras weights: .keras files do not keep them.
    x, y = inputs()
    mask = masks()["keys"]
    expected = model([x, y, mask]).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        case.assertAllClose(tf_keras.models.load_model(path)([x, y, mask]), expected, atol=1e-6)
        sm_dir = os.path.join(tmp, "saved_model")
        tf_keras.models.save_model(model, sm_dir, save_format="tf")
        restored = tf_keras.models.load_model(sm_dir)
        case.assertAllClose(restored([x, y, mask]), expected, atol=1e-6)
        raw_dir = os.path.join(tmp, "raw")
        tf.saved_model.save(model, raw_dir)
        raw = tf.saved_model.load(raw_dir)
        case.assertAllClose(raw([x, y, mask], training=False), expected, atol=1e-6)


def check_fit(case, make) -> None:
    inp = tf_keras.Input(shape=[6, WIDTH])
    out = make()(inp, inp)
    model = tf_keras.Model(inp, tf_keras.layers.GlobalAveragePooling1D()(out))
    model.compile(tf_keras.optimizers.Adam(1e-2), "mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6, WIDTH)).astype(np.float32)
    target = np.roll(x, 1, axis=1).mean(1)
    history = model.fit(x, target, epochs=10, batch_size=16, verbose=0)
    case.assertLess(history.history["loss"][-1], 0.6 * history.history["loss"][0])


def check_mixed_precision(case, make) -> None:
    """mixed_float16 / mixed_bfloat16 layers with the same weights follow float32 loosely."""
    x, y = inputs()
    mask = masks()["keys"]
    reference = make()
    reference(x, y)
    weights = randomize(reference)
    expected = reference(x, y, attention_mask=mask).numpy()
    for policy, dtype in (("mixed_float16", tf.float16), ("mixed_bfloat16", tf.bfloat16)):
        layer = make(dtype=policy)
        layer(x, y)
        assign_weights(layer, weights)
        out = layer(x, y, attention_mask=mask)
        case.assertEqual(out.dtype, dtype)
        case.assertEqual(layer.trainable_weights[0].dtype, tf.float32)
        out = tf.cast(out, tf.float32).numpy()
        case.assertAllClose(out, expected, atol=0.05 * np.abs(expected).max())
