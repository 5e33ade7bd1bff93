"""Keras 3 tools: collaborative conversion, head importance, head removal.

Numbers are checked against the layers' own equivalences (full-rank
conversion and removal are exact), a central finite difference of the loss
(importance is |dL/dxi_h|), and the shared core formulas.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from headsize_tf.core.spec import SpecError
from headsize_tf.keras3.layers import FixedHeadAttention, StandardAttention
from headsize_tf.keras3.modeling import BertBackbone
from headsize_tf.keras3.pruning import head_importance, head_mask, remove_heads, set_head_mask
from headsize_tf.keras3.reparam import compress_backbone, to_collaborative

WIDTH, LENGTH, BATCH = 16, 6, 3


def _inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 50, size=(BATCH, LENGTH)).astype("int32")
    mask = np.ones_like(ids)
    mask[0, 4:] = 0  # Padding in one sequence.
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask}


def _backbone(attention: dict, seed: int = 1) -> BertBackbone:
    keras.utils.set_random_seed(seed)
    backbone = BertBackbone(
        vocabulary_size=50,
        num_layers=2,
        hidden_dim=WIDTH,
        intermediate_dim=32,
        attention=attention,
        dropout=0.0,
        max_sequence_length=LENGTH,
    )
    # Non-trivial biases, so that the content-bias path is exercised.
    for layer in backbone.attention_layers:
        for weight in layer.weights:
            if "bias" in weight.path:
                weight.assign(np.random.default_rng(2).normal(0, 0.1, weight.shape))
    return backbone


def _sequence(backbone: BertBackbone, inputs: dict) -> np.ndarray:
    out = backbone(inputs, training=False)["sequence_output"]
    return keras.ops.convert_to_numpy(out)


@pytest.mark.parametrize(
    "layer_cls,kwargs",
    [
        (StandardAttention, {}),
        (FixedHeadAttention, {"head_size": 6}),
        (StandardAttention, {"query_scale": 0.3}),  # Its own softmax scale (Gemma 27B's).
    ],
)
def test_layer_converts_exactly_at_full_rank(layer_cls, kwargs):
    keras.utils.set_random_seed(0)
    layer = layer_cls(num_heads=4, **kwargs)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, LENGTH, WIDTH)).astype("float32")
    y = rng.normal(size=(BATCH, LENGTH + 2, WIDTH)).astype("float32")
    mask = np.ones([BATCH, LENGTH, LENGTH + 2], bool)
    mask[1, :, -3:] = False
    layer(x, y, attention_mask=mask)
    for weight in layer.weights:  # Biases away from zero.
        if "bias" in weight.path:
            weight.assign(rng.normal(0, 0.2, weight.shape))
    expected = keras.ops.convert_to_numpy(layer(x, y, attention_mask=mask))
    full = 4 * layer.head_size
    collaborative, report = to_collaborative(layer, shared_key_dim=full)
    got = keras.ops.convert_to_numpy(collaborative(x, y, attention_mask=mask))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert report.relative_error < 1e-6 and report.method == "exact"
    # Collaborative heads drop the key bias and fold the query bias: fewer params.
    assert report.params_after == collaborative.count_params()
    assert report.params_before == layer.count_params()


def test_backbone_compresses_exactly_at_full_rank_and_approximately_below():
    backbone = _backbone({"kind": "standard", "num_heads": 4})
    inputs = _inputs()
    expected = _sequence(backbone, inputs)
    full, reports = compress_backbone(backbone, shared_key_dim=WIDTH)
    assert full.attention_spec.kind == "collaborative"
    np.testing.assert_allclose(_sequence(full, inputs), expected, atol=1e-5)
    assert all(r.relative_error < 1e-6 for r in reports)
    half, reports = compress_backbone(backbone, shared_key_dim=WIDTH // 2, seed=0)
    errors = [r.relative_error for r in reports]
    assert all(0 < e < 1 for e in errors), errors
    assert half.count_params() < full.count_params()
    # Random weights have no low-rank structure: the outputs move, but stay close.
    got = _sequence(half, inputs)
    cosine = (
        np.sum(got * expected, -1)
        / np.linalg.norm(got, axis=-1)
        / np.linalg.norm(expected, axis=-1)
    )
    assert cosine.mean() > 0.9
    with pytest.raises(SpecError, match=r"shared_key_dim must be an int in \[1, 16\]"):
        compress_backbone(backbone, shared_key_dim=17)


class _Classifier(keras.Model):
    def __init__(self, backbone: BertBackbone):
        super().__init__(name="classifier")
        self.backbone = backbone
        self.head = keras.layers.Dense(3)

    @property
    def attention_layers(self):
        return self.backbone.attention_layers

    def call(self, inputs, training=False):
        return self.head(self.backbone(inputs, training=training)["sequence_output"])


@pytest.mark.parametrize("kind", ["fixed_head", "collaborative"])
def test_importance_is_the_gate_gradient(kind):
    attention = {"kind": kind, "num_heads": 4}
    attention.update({"head_size": 8} if kind == "fixed_head" else {"shared_key_dim": 12})
    model = _Classifier(_backbone(attention))
    inputs = _inputs()
    # A per-token regression: every head moves the loss measurably.
    targets = np.random.default_rng(3).normal(size=(BATCH, LENGTH, 3)).astype("float32")
    model(inputs)
    loss = keras.losses.MeanSquaredError()
    scores = head_importance(model, [(inputs, targets)], loss, normalize=False)
    tokens = int(inputs["padding_mask"].sum())
    assert scores.shape == (2, 4)

    def loss_at(mask):
        set_head_mask(model.backbone, mask)
        value = float(keras.ops.convert_to_numpy(loss(targets, model(inputs))))
        set_head_mask(model.backbone, np.ones([2, 4]))
        return value

    # eps = 0.1: the loss is smooth in the gate (truncation < 0.1% here), and
    # the float32 noise of the two losses (~3e-7) stays < 0.2% of their
    # difference. At eps = 1e-2 that noise reached 2.6% on JAX (seen in CI).
    eps = 1e-1
    for layer, head in [(0, 0), (0, 3), (1, 2)]:
        plus, minus = np.ones([2, 4]), np.ones([2, 4])
        plus[layer, head] += eps
        minus[layer, head] -= eps
        numeric = abs(loss_at(plus) - loss_at(minus)) / (2 * eps) / tokens
        assert numeric > 1e-5  # A real signal, far above float32 noise.
        np.testing.assert_allclose(scores[layer, head], numeric, rtol=2e-2)
    normalized = head_importance(model, [(inputs, targets)], loss)
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("kind", ["standard", "fixed_head", "collaborative"])
def test_removed_heads_equal_masked_heads_and_save(kind, tmp_path):
    attention = {"kind": kind, "num_heads": 4}
    if kind == "fixed_head":
        attention["head_size"] = 8
    if kind == "collaborative":
        attention["shared_key_dim"] = 12
    backbone = _backbone(attention)
    inputs = _inputs()
    mask = np.ones([2, 4], np.float32)
    mask[0, [1, 3]] = 0
    mask[1, :] = 0  # A layer with no head left.
    mask[0, 0] = 0.5  # Kept heads keep their gate values.
    set_head_mask(backbone, mask)
    masked = _sequence(backbone, inputs)
    pruned = remove_heads(backbone)
    assert pruned.attention_spec.num_heads == (2, 1)
    # Gates all one; the empty layer's head (output rows zero) shows as pruned.
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(pruned.attention_layers[1].head_gates), [1]
    )
    np.testing.assert_allclose(head_mask(pruned), [[1, 1], [0, np.nan]])
    np.testing.assert_allclose(_sequence(pruned, inputs), masked, atol=1e-5)
    assert pruned.count_params() < backbone.count_params()
    np.testing.assert_array_equal(head_mask(backbone), mask)  # The source is unchanged.
    path = tmp_path / "pruned.keras"
    pruned.save(path)
    again = keras.models.load_model(path)
    np.testing.assert_allclose(_sequence(again, inputs), masked, atol=1e-5)
