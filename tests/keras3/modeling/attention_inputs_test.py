"""`attention_inputs`: what each block's attention layer sees in the model's own forward pass."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from headsize_tf.keras3.modeling import CausalLM
from tests.keras3 import util
from tests.keras3.modeling.decoder_lm_test import tiny_lm


def _causal_lm():
    keras.utils.set_random_seed(0)
    return CausalLM(vocabulary_size=50, num_layers=3, hidden_dim=16, max_sequence_length=12)


@pytest.mark.parametrize(
    "make",
    [_causal_lm, lambda: tiny_lm(), lambda: tiny_lm(sliding_window=3)],
    ids=["causal_lm", "decoder_lm", "decoder_lm_sliding_window"],
)
def test_attention_inputs_are_what_each_attention_layer_sees(make):
    lm = make()
    ids = np.random.default_rng(0).integers(1, 50, (2, 9)).astype("int32")
    expected, _ = util.recorded_attention_calls(lm, ids)
    got = list(lm.attention_inputs(ids))
    assert [i for i, _, _ in got] == list(range(len(expected)))
    assert [block for _, block, _ in got] == lm.transformer_layers
    for (_, _, h), want in zip(got, expected, strict=True):
        np.testing.assert_allclose(np.asarray(keras.ops.convert_to_numpy(h)), want, atol=1e-5)
    # Layers past the first see the earlier blocks' outputs: the recording is not trivial.
    assert not np.allclose(expected[0], expected[-1])
