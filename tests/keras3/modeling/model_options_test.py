"""The BertBackbone / CausalLM options the keras-hub import needs (no keras-hub here):
no segment embedding, the pooler kind and width, the LM's activation, intermediate dropout,
padding mask and an attached tokenizer (text in, text out)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from headsize_tf.core.spec import SpecError
from headsize_tf.keras3.modeling import BertBackbone, CausalLM, gelu_approximate
from headsize_tf.keras3.modeling.surgery import non_attention_layers, with_attention

VOCAB, WIDTH, POSITIONS = 30, 16, 16


def bert(**kwargs) -> BertBackbone:
    kwargs = {"dropout": 0.0, "max_sequence_length": POSITIONS, **kwargs}
    return BertBackbone(VOCAB, 2, WIDTH, 32, attention={"num_heads": 4}, **kwargs)


def lm(**kwargs) -> CausalLM:
    kwargs = {"max_sequence_length": POSITIONS, **kwargs}
    return CausalLM(VOCAB, 2, WIDTH, attention={"num_heads": 4}, **kwargs)


def ids(batch=2, length=6, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, VOCAB, size=(batch, length)).astype("int32")


def np_(x) -> np.ndarray:
    return np.asarray(ops.convert_to_numpy(x), np.float64)


def test_no_segments_drops_the_input_and_the_embedding(tmp_path):
    model = bert(num_segments=0)
    assert sorted(model.input) == ["padding_mask", "token_ids"]
    assert model.segment_embedding is None
    x = {"token_ids": ids(), "padding_mask": np.ones((2, 6), "int32")}
    # Token + position embeddings only: a model with segments at segment 0 whose segment
    # table is zero computes the same.
    with_segments = bert()
    for dst, src in zip(
        [
            layer
            for layer in non_attention_layers(with_segments)
            if layer.name != "segment_embedding"
        ],
        non_attention_layers(model),
        strict=True,
    ):
        dst.set_weights(src.get_weights())
    with_segments.segment_embedding.set_weights([np.zeros((2, WIDTH), "float32")])
    for dst, src in zip(with_segments.attention_layers, model.attention_layers, strict=True):
        dst.set_weights(src.get_weights())
    expected = with_segments({**x, "segment_ids": np.zeros((2, 6), "int32")})["sequence_output"]
    assert np.max(np.abs(np_(model(x)["sequence_output"]) - np_(expected))) < 1e-6
    model.save(tmp_path / "m.keras")
    again = keras.saving.load_model(tmp_path / "m.keras")
    assert again.get_config()["num_segments"] == 0
    np.testing.assert_allclose(
        np_(again(x)["pooled_output"]), np_(model(x)["pooled_output"]), atol=1e-6
    )
    with pytest.raises(SpecError, match="num_segments"):
        bert(num_segments=-1)


@pytest.mark.parametrize("pooler, pooled_dim", [("tanh", None), ("relu", 24), ("none", None)])
def test_pooler_kind_and_width(pooler, pooled_dim):
    model = bert(pooler=pooler, pooled_dim=pooled_dim)
    x = {
        "token_ids": ids(),
        "segment_ids": np.zeros((2, 6), "int32"),
        "padding_mask": np.ones((2, 6), "int32"),
    }
    out = model(x)
    first = np_(out["sequence_output"])[:, 0]
    pooled = np_(out["pooled_output"])
    assert pooled.shape == (2, pooled_dim or WIDTH)
    if pooler == "none":
        assert model.pooled_dense is None
        np.testing.assert_allclose(pooled, first, atol=1e-6)
    else:
        kernel, bias = (np_(w) for w in model.pooled_dense.weights)
        linear = first @ kernel + bias
        expected = np.tanh(linear) if pooler == "tanh" else np.maximum(linear, 0.0)
        np.testing.assert_allclose(pooled, expected, atol=1e-5)
    config = model.get_config()
    assert (config["pooler"], config["pooled_dim"]) == (pooler, pooled_dim)
    assert BertBackbone.from_config(config).get_config() == config
    # Surgery keeps the option (and copies the pooler, if any).
    rebuilt = with_attention(model, {"kind": "fixed_head", "num_heads": 2, "head_size": 8})
    assert rebuilt.get_config()["pooler"] == pooler


def test_bad_pooler_options_are_named():
    with pytest.raises(SpecError, match="pooler"):
        bert(pooler="gelu")
    with pytest.raises(SpecError, match="pooled_dim"):
        bert(pooler="none", pooled_dim=8)


def test_lm_activation_and_intermediate_dropout_are_configurable(tmp_path):
    exact, approximate = (
        lm(),
        lm(activation="gelu_approximate", intermediate_dropout=0.0, dropout=0.1),
    )
    assert exact.transformer_layers[0].activation is keras.activations.gelu
    assert approximate.transformer_layers[0].activation is gelu_approximate
    block = approximate.transformer_layers[0]
    assert (block.dropout, block.intermediate_dropout) == (0.1, 0.0)
    assert lm(dropout=0.1).transformer_layers[0].intermediate_dropout == 0.1  # None: dropout
    x = np.linspace(-3, 3, 7, dtype="float32")
    tanh_form = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(np_(block.activation(x)), tanh_form, atol=1e-6)
    config = approximate.get_config()
    assert config["intermediate_dropout"] == 0.0
    again = CausalLM.from_config(config)
    assert again.transformer_layers[0].activation is gelu_approximate
    approximate.save(tmp_path / "lm.keras")
    loaded = keras.saving.load_model(tmp_path / "lm.keras")
    np.testing.assert_allclose(np_(loaded(ids())), np_(approximate(ids())), atol=1e-6)


def test_lm_padding_mask_hides_padded_keys():
    model = lm()
    tokens = ids(batch=1, length=6)
    padded = np.concatenate([tokens, np.zeros((1, 3), "int32")], axis=1)
    mask = np.array([[1] * 6 + [0] * 3], "int32")
    full = np_(model({"token_ids": padded, "padding_mask": mask}))
    np.testing.assert_allclose(full[:, :6], np_(model(tokens)), atol=1e-5)
    # Left padding: without the mask the real tokens would see the pad tokens.
    left = np.concatenate([np.zeros((1, 3), "int32"), tokens], axis=1)
    left_mask = mask[:, ::-1].copy()
    masked = np_(model({"token_ids": left, "padding_mask": left_mask}))
    unmasked = np_(model(left))
    assert np.max(np.abs(masked[:, 3:] - unmasked[:, 3:])) > 1e-4


@keras.saving.register_keras_serializable(package="headsize_tf_tests")
class CharTokenizer(keras.layers.Layer):
    """Space and a-z are ids 1-27 (higher ids print "?"); id 0 is the start / end token."""

    start_token_id = end_token_id = 0
    alphabet = " abcdefghijklmnopqrstuvwxyz"

    def tokenize(self, text):
        return np.array([1 + self.alphabet.index(c) for c in text], "int32")

    def detokenize(self, ids):
        return "".join(self.alphabet[i - 1] if i <= 27 else "?" for i in np.asarray(ids).tolist())


def test_an_attached_tokenizer_makes_generate_take_and_return_text(tmp_path):
    model = lm(tokenizer=CharTokenizer())
    prompt = "the cat"
    token_ids = np.array([[0, *CharTokenizer().tokenize(prompt)]], "int32")
    expected = model.generate(token_ids, max_new_tokens=4, end_token_id=-1)[0]
    text = model.generate(prompt, max_new_tokens=4, end_token_id=-1)
    kept = [t for t in expected.tolist() if t != 0]
    assert text == CharTokenizer().detokenize(kept) and text.startswith(prompt)
    assert (
        model.generate([prompt, "a"], max_new_tokens=2, end_token_id=-1)[0]
        == text[: len(prompt) + 2]
    )
    config = model.get_config()
    assert config["tokenizer"]["class_name"] == "CharTokenizer"
    model.save(tmp_path / "lm.keras")
    loaded = keras.saving.load_model(tmp_path / "lm.keras")
    assert isinstance(loaded.tokenizer, CharTokenizer)
    assert loaded.generate(prompt, max_new_tokens=4, end_token_id=-1) == text
    # Conversion keeps the tokenizer object.
    assert with_attention(model, {"num_heads": 2}).tokenizer is model.tokenizer
    with pytest.raises(ValueError, match="no tokenizer"):
        lm().generate("the cat", max_new_tokens=2)
