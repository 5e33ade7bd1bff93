"""One head-size rule in every model: the spec, resolved from max_sequence_length."""

import json

import numpy as np
import pytest

from headsize_tf.core import AttentionSpec
from headsize_tf.modeling import HeadsizeTransformerBlock
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq

SEQ_SPEC = AttentionSpec("fixed_head", num_heads=2, head_size="sequence_length")


def test_seq2seq_sequence_length_resolves_to_max_sequence_length_everywhere():
    # Before the spec, encoder heads took the key length (8) and decoder heads 16.
    model = HeadsizeSeq2Seq(
        vocab_size=20,
        hidden_size=16,
        num_encoder_layers=1,
        num_decoder_layers=1,
        attention=SEQ_SPEC,
        max_sequence_length=16,
    )
    ids = np.ones([2, 8], np.int32)
    model({"inputs": ids, "targets": ids})
    assert [layer.head_size for layer in model.attention_layers] == [16, 16, 16]


def test_causal_lm_resolves_the_same_way():
    model = HeadsizeCausalLM(
        vocab_size=20, hidden_size=16, num_layers=2, attention=SEQ_SPEC, max_sequence_length=12
    )
    model(np.ones([1, 5], np.int32))
    assert [layer.head_size for layer in model.attention_layers] == [12, 12]
    assert model.attention_spec.head_size == 12


def test_stray_key_dim_in_a_block_is_an_error():
    with pytest.raises(ValueError, match=r"key_dim=3; the head sizes come from the attention spec"):
        HeadsizeTransformerBlock(
            attention=AttentionSpec("standard", 4),
            inner_dim=8,
            inner_activation="relu",
            key_dim=3,
        )
    with pytest.raises(ValueError, match=r"num_attention_heads=2 disagrees"):
        HeadsizeTransformerBlock(
            attention=AttentionSpec("standard", 4),
            num_attention_heads=2,
            inner_dim=8,
            inner_activation="relu",
        )


def test_a_block_keeps_every_stock_argument_in_its_config():
    # Model Garden's own get_config leaves out use_rms_norm and return_attention_scores.
    block = HeadsizeTransformerBlock(
        attention=AttentionSpec("grouped", num_heads=4, num_kv_heads=2),
        num_kv_heads=2,  # Agrees with the spec.
        inner_dim=12,
        inner_activation="relu",
        norm_first=True,
        use_rms_norm=True,
        return_attention_scores=True,
    )
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    out, scores = block(x)
    assert scores.shape == (2, 4, 5, 5)
    clone = HeadsizeTransformerBlock.from_config(block.get_config())
    assert clone.get_config() == block.get_config()
    clone(x)
    clone.set_weights(block.get_weights())
    np.testing.assert_allclose(clone(x)[0].numpy(), out.numpy(), atol=1e-6)
    assert type(clone._attention_layer_norm).__name__ == "RMSNorm"


def test_stock_attention_options_the_spec_does_not_hold_are_errors():
    with pytest.raises(ValueError, match=r"num_kv_heads=1 disagrees with the attention spec"):
        HeadsizeTransformerBlock(
            attention=AttentionSpec("standard", 4),
            num_kv_heads=1,
            inner_dim=8,
            inner_activation="relu",
        )
    with pytest.raises(ValueError, match=r"src_block_size=\.\.\.; Model Garden's block-sparse"):
        HeadsizeTransformerBlock(
            attention=AttentionSpec("standard", 4),
            src_block_size=2,
            inner_dim=8,
            inner_activation="relu",
        )


def test_old_constructor_arguments_name_the_new_key():
    with pytest.raises(ValueError, match=r"attention_type='fixed_head'; it is now attention.kind"):
        HeadsizeCausalLM(vocab_size=5, hidden_size=8, num_layers=1, attention_type="fixed_head")


def test_per_layer_heads_in_the_lm_and_config_round_trip():
    spec = AttentionSpec("fixed_head", num_heads=[1, 3], head_size=[8, 4])
    model = HeadsizeCausalLM(vocab_size=20, hidden_size=16, num_layers=2, attention=spec)
    ids = np.arange(10, dtype=np.int32).reshape(2, 5) % 20
    logits = model(ids)
    assert [(a.num_heads, a.head_size) for a in model.attention_layers] == [(1, 8), (3, 4)]
    clone = HeadsizeCausalLM.from_config(model.get_config())
    clone(ids)
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(clone(ids).numpy(), logits.numpy(), atol=1e-6)
    assert json.loads(json.dumps(model.get_config()))["attention"]["num_heads"] == [1, 3]
