"""`keras.distribution` with our Keras 3 layers: `DataParallel` and head-sharded `ModelParallel`
(`head_layout_map`) train to the same losses as one device.

Runs on JAX with 4 virtual CPU devices (`--xla_force_host_platform_device_count=4`, set
before JAX starts), in a subprocess: the device count is fixed when JAX first loads.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]

# One subprocess trains every layout (about 40 s): in the full run (docs/testing.md).
pytestmark = pytest.mark.slow

SCRIPT = r"""
import json, os, warnings
import numpy as np
import jax
import keras
from headsize_tf.keras3.distribution import head_layout_map, head_sharding_plan
from headsize_tf.keras3.modeling import CausalLM

assert len(jax.devices()) == 4, jax.devices()
ATTENTION = {"kind": "fixed_head", "num_heads": [4, 2, 3], "head_size": 8}


def build(attention=ATTENTION):
    lm = CausalLM(vocabulary_size=40, num_layers=3, hidden_dim=16, intermediate_dim=32,
                  attention=attention, max_sequence_length=16)
    lm(np.zeros((4, 8), "int32"))
    return lm


rng = np.random.default_rng(0)
x = rng.integers(1, 40, size=(8, 8)).astype("int32")
y = np.roll(x, -1, axis=1)
keras.utils.set_random_seed(0)
reference = build()
weights = reference.get_weights()


def losses(model):
    model.set_weights(weights)
    model.compile(optimizer=keras.optimizers.SGD(0.5),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    first = float(model.evaluate(x, y, batch_size=8, verbose=0))
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    return [first] + [float(v) for v in history.history["loss"]]


out = {"single": losses(build())}
data_parallel = keras.distribution.DataParallel(devices=jax.devices())
with data_parallel.scope():
    out["data_parallel"] = losses(build())

mesh = keras.distribution.DeviceMesh((2, 2), ["batch", "model"], devices=jax.devices())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    layout_map = head_layout_map(reference, mesh)
out["warnings"] = [str(w.message) for w in caught]
model_parallel = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
with model_parallel.scope():
    sharded = build()
    out["model_parallel"] = losses(sharded)
out["specs"] = {
    v.path.split("/", 1)[1]: [a for a in v.value.sharding.spec] + [None] * (len(v.shape) - len(v.value.sharding.spec))
    for v in sharded.weights if "self_attention_layer/" in v.path
}
out["plan"] = [[p.num_heads, p.sharded] for p in head_sharding_plan(reference, 2)]
from headsize_tf.keras3.modeling import DecoderLM


def build_decoder():
    lm = DecoderLM(vocabulary_size=40, num_layers=2, hidden_dim=16, intermediate_dim=32,
                   attention={"kind": "grouped", "num_heads": 4, "num_kv_heads": 2,
                              "rope_max_wavelength": 100.0},
                   attention_bias=True, max_sequence_length=16)
    lm(np.zeros((4, 8), "int32"))
    return lm


keras.utils.set_random_seed(1)
decoder = build_decoder()
weights = decoder.get_weights()
build = build_decoder
out["decoder_single"] = losses(build_decoder())
with data_parallel.scope():
    out["decoder_data_parallel"] = losses(build_decoder())
decoder_parallel = keras.distribution.ModelParallel(
    layout_map=head_layout_map(decoder, mesh), batch_dim_name="batch"
)
with decoder_parallel.scope():
    sharded_decoder = build_decoder()
    out["decoder_model_parallel"] = losses(sharded_decoder)
out["decoder_specs"] = {
    v.path.split("/", 1)[1]: [a for a in v.value.sharding.spec] + [None] * (len(v.shape) - len(v.value.sharding.spec))
    for v in sharded_decoder.weights if "self_attention/" in v.path
}
collaborative = CausalLM(vocabulary_size=40, num_layers=3, hidden_dim=16, intermediate_dim=32,
                         attention={"kind": "collaborative", "num_heads": 4,
                                    "shared_key_dim": 12}, max_sequence_length=16)
collaborative(np.zeros((4, 8), "int32"))
out["collaborative"] = {
    k: list(v) for k, v in head_sharding_plan(collaborative, 2)[0].layouts.items()
}
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def result():
    if importlib.util.find_spec("jax") is None:
        pytest.fail("jax is not installed (it is part of the test extra)")
    env = dict(os.environ, KERAS_BACKEND="jax")
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.stdout + done.stderr)[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_data_parallel_trains_like_one_device(result):
    single = result["single"]
    assert single[-1] < single[0]  # It trains.
    assert result["data_parallel"] == pytest.approx(single, rel=1e-5, abs=1e-5)


def test_head_sharded_model_parallel_trains_like_one_device(result):
    assert result["model_parallel"] == pytest.approx(result["single"], rel=1e-5, abs=1e-5)


def test_head_axes_are_sharded_and_undivisible_layers_replicated(result):
    specs = result["specs"]
    # Layers 0 and 1 (4 and 2 heads) split their heads over the 2-device model axis.
    for block in ("block_0", "block_1"):
        prefix = f"{block}/self_attention_layer/"
        for role in ("query", "key", "value"):
            assert specs[prefix + f"{role}/kernel"] == [None, "model", None]
            assert specs[prefix + f"{role}/bias"] == ["model", None]
        assert specs[prefix + "attention_output/kernel"] == ["model", None, None]
        assert specs[prefix + "attention_output/bias"] == [None]
    # Layer 2 has 3 heads: replicated, and the helper said so.
    assert all(
        all(axis is None for axis in axes)
        for path, axes in specs.items()
        if path.startswith("block_2/")
    )
    assert result["plan"] == [[4, True], [2, True], [3, False]]
    (warning,) = result["warnings"]
    assert "block_2/self_attention_layer (3 heads)" in warning and "replicated" in warning


def test_grouped_decoder_trains_alike_on_one_device_data_and_head_parallel(result):
    single = result["decoder_single"]
    assert single[-1] < single[0]
    assert result["decoder_data_parallel"] == pytest.approx(single, rel=1e-5, abs=1e-5)
    assert result["decoder_model_parallel"] == pytest.approx(single, rel=1e-5, abs=1e-5)
    specs = result["decoder_specs"]
    prefix = "block_0/self_attention/"
    assert specs[prefix + "query/kernel"] == [None, "model", None]  # 4 query heads.
    assert specs[prefix + "key/kernel"] == [None, "model", None]  # 2 key/value heads.
    assert specs[prefix + "key/bias"] == ["model", None]  # Rotated, kept.
    assert specs[prefix + "value/kernel"] == [None, "model", None]
    assert specs[prefix + "value_bias"] == ["model", None]  # Per query head.
    assert specs[prefix + "attention_output/kernel"] == ["model", None, None]


def test_collaborative_shares_query_key_replicated_and_shards_the_rest(result):
    layouts = result["collaborative"]
    prefix = "block_0/self_attention_layer/"
    assert layouts[prefix + "query/kernel"] == [None, None]  # Shared [width, D].
    assert layouts[prefix + "key/kernel"] == [None, None]
    assert layouts[prefix + "mixing"] == ["model", None]  # [heads, D].
    assert layouts[prefix + "value/kernel"] == [None, "model", None]
    assert layouts[prefix + "attention_output/kernel"] == ["model", None, None]
