"""Layer-wise healing: each layer nears the original's, and a rerun resumes from its state."""

from __future__ import annotations

import numpy as np
import pytest

from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.keras3.reparam import convert_model, heal
from headsize_tf.keras3.reparam.heal import layerwise_distill
from tests.keras3 import util
from tests.keras3.modeling.decoder_lm_test import VOCAB, tiny_lm
from tests.keras3.reparam.kv_compress_test import IDS, _decoder


def _converted():
    lm = _decoder()
    # Grouped 3 -> 1 by mean pooling: far from exact, so healing has work to do.
    converted, _ = convert_model(lm, ConversionTarget("grouped", 1, "mean"))
    return lm, converted


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_healing_resumes_from_the_layers_it_finished(tmp_path):
    lm, converted = _converted()
    lines = []
    report = layerwise_distill(
        lm, converted, IDS, 30, 3e-3, state_dir=tmp_path, progress=lines.append
    )
    for layer in report["layers"]:
        assert layer["relative_error_after"] < 0.9 * layer["relative_error_before"]
        assert layer["kept"] == "healed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layer_0.npz", "layer_1.npz"]
    healed = util.np_(converted(IDS))
    # An interrupted run: layer 1 never finished. The rerun restores layer 0 and trains layer 1
    # alike (same seed and batches), so the model is the same.
    (tmp_path / "layer_1.npz").unlink()
    _, again = _converted()
    lines = []
    resumed = layerwise_distill(lm, again, IDS, 30, 3e-3, state_dir=tmp_path, progress=lines.append)
    assert lines[0].startswith("layer 0: restored") and "->" in lines[1]
    assert resumed["layers"][0] == report["layers"][0]
    np.testing.assert_allclose(util.np_(again(IDS)), healed, atol=1e-3)
    # Other settings do not reuse the state.
    _, other = _converted()
    with pytest.raises(ValueError, match="was healed with"):
        layerwise_distill(lm, other, IDS, 31, 3e-3, state_dir=tmp_path, progress=None)


def test_a_layer_distillation_makes_worse_keeps_its_converted_weights():
    lm, converted = _converted()
    before = util.np_(converted(IDS))
    # Adam at a rate of 1: each step moves every weight by about 1 (the weights are ~0.3).
    report = layerwise_distill(lm, converted, IDS, 3, 1.0, progress=None)
    for layer in report["layers"]:
        assert layer["relative_error_after"] > layer["relative_error_before"]
        assert layer["kept"] == "converted"
    np.testing.assert_array_equal(util.np_(converted(IDS)), before)


def test_each_layer_trains_under_the_models_own_sliding_window():
    """The one-layer models healing fits give what each attention layer gives in the model's own
    forward pass, a sliding window shorter than the windows included."""
    lm = tiny_lm(sliding_window=3)
    ids = np.random.default_rng(0).integers(1, VOCAB, (2, 9)).astype("int32")
    _, outputs = util.recorded_attention_calls(lm, ids)
    (mask, *others) = [util.np_(m) for m in lm.attention_masks(9)]
    assert all(np.array_equal(mask, other) for other in others)  # Every block is local here.
    assert mask.shape == (1, 9, 9) and mask.sum() == 9 + 8 + 7  # Each query sees 3 keys at most.
    for i, _, h in lm.attention_inputs(ids):
        layer = lm.attention_layers[i]
        alone = util.np_(heal._one_layer_model(layer, mask).predict_on_batch(util.np_(h)))
        np.testing.assert_allclose(alone, outputs[i], atol=1e-5)
        # A causal mask alone is another function: the window matters here.
        causal = util.np_(layer(h, h, use_causal_mask=True))
        assert np.abs(causal - outputs[i]).max() > 1e-3
