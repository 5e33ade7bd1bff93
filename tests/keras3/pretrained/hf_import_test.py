"""Keras 3 import of Hugging Face-layout BERT checkpoints: parity with tf_keras, saving, errors."""

import json

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

from headsize_tf.core import hf_checkpoint
from headsize_tf.core.errors import CheckpointError
from headsize_tf.keras3.modeling import BertBackbone
from headsize_tf.keras3.pretrained import SentenceEncoder, import_hf_bert, load_sentence_encoder
from tests.hf_fixtures import CONFIG, VOCAB, write_checkpoint

TEXTS = ["the cat sat on a mat.", "dogs", "", "The Dog sat on the CAT. w1 w2 w3 w4 w5 w6 w7"]


def _tf_converted_name(name):
    """A checkpoint converted from TF: "bert." prefixes and LayerNorm gamma / beta."""
    if name.startswith("cls."):
        return name
    name = name.replace("LayerNorm.weight", "LayerNorm.gamma")
    return "bert." + name.replace("LayerNorm.bias", "LayerNorm.beta")


def tf_keras_embeddings(directory, texts=TEXTS):
    """(sequence output, embeddings) of the tf_keras import (the reference)."""
    import tensorflow as tf

    from headsize_tf.pretrained import import_hf_bert as tf_keras_import

    model = tf_keras_import(directory)
    inputs = model.tokenize(tf.constant(texts))
    sequence = model.encoder(inputs)["sequence_output"].numpy()
    return sequence, model.embed(texts), model


def sequence_output(encoder, texts=TEXTS):
    inputs = encoder.tokenize(texts)
    return keras.ops.convert_to_numpy(encoder.backbone(inputs)["sequence_output"])


@pytest.fixture
def bert_dir(tmp_path):
    write_checkpoint(tmp_path / "bert")
    return tmp_path / "bert"


def test_same_outputs_and_embeddings_as_tf_keras_import(bert_dir):
    encoder = load_sentence_encoder(checkpoint=bert_dir)
    assert isinstance(encoder.backbone, BertBackbone)
    assert encoder.pooling == "cls" and encoder.max_seq_length == 24  # HF defaults, capped
    assert [layer.num_heads for layer in encoder.backbone.attention_layers] == [4, 4]
    assert [layer.head_size for layer in encoder.backbone.attention_layers] == [4, 4]
    reference_sequence, reference, tf_keras_model = tf_keras_embeddings(bert_dir)
    assert encoder.token_ids(TEXTS) == tf_keras_model.token_ids(TEXTS)
    np.testing.assert_allclose(sequence_output(encoder), reference_sequence, atol=1e-5)
    embeddings = encoder.embed(TEXTS, batch_size=3)
    assert embeddings.shape == (4, 16) and embeddings.dtype == np.float32
    np.testing.assert_allclose(embeddings, reference, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-6)


def test_sentence_settings_aliases_and_tanh_gelu_match_tf_keras(tmp_path):
    directory = tmp_path / "st"
    write_checkpoint(
        directory,
        config={"hidden_act": "gelu_new"},
        seed=1,
        pooler=False,
        rename=_tf_converted_name,
        extra={"cls.predictions.bias": np.zeros(40, np.float32)},
    )
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 6}))
    (directory / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_mean_tokens": True})
    )
    encoder = import_hf_bert(directory, source="test")
    assert (encoder.pooling, encoder.max_seq_length, encoder.source) == ("mean", 6, "test")
    assert max(len(ids) for ids in encoder.token_ids(TEXTS)) == 6
    _, reference, _ = tf_keras_embeddings(directory)
    np.testing.assert_allclose(encoder.embed(TEXTS), reference, atol=1e-5)


def test_arrays_are_in_the_kernel_layout(bert_dir):
    tensors = load_file(str(bert_dir / "model.safetensors"))
    checkpoint = hf_checkpoint.read_hf_bert(bert_dir)
    query = checkpoint.arrays["layer_1/attention/query/kernel"]
    assert query.shape == (16, 4, 4)  # [width, heads, head_size]
    np.testing.assert_array_equal(
        query.reshape(16, 16), tensors["encoder.layer.1.attention.self.query.weight"].T
    )
    output = checkpoint.arrays["layer_0/attention/output/kernel"]
    assert output.shape == (4, 4, 16)  # [heads, head_size, width]
    assert checkpoint.arrays["layer_0/attention/key/bias"].shape == (4, 4)
    for role in hf_checkpoint.tensor_roles(2):
        array = checkpoint.arrays[role.role]
        restored = hf_checkpoint.from_keras_layout(array, role.layout)
        np.testing.assert_array_equal(restored, tensors[role.name])
        assert hf_checkpoint.from_keras_shape(array.shape, role.layout) == restored.shape


def test_save_load_round_trip(bert_dir, tmp_path):
    encoder = load_sentence_encoder(checkpoint=bert_dir)
    saved = encoder.save(tmp_path / "native")
    assert sorted(p.name for p in saved.iterdir()) == [
        "backbone.keras",
        "headsize_checkpoint.json",
        "vocab.txt",
    ]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    again = load_sentence_encoder(checkpoint=saved)
    assert isinstance(again, SentenceEncoder)
    assert (again.pooling, again.max_seq_length, again.source) == ("cls", 24, str(bert_dir))
    np.testing.assert_allclose(again.embed(TEXTS), encoder.embed(TEXTS), atol=1e-6)
    with pytest.raises(FileExistsError, match="exists"):
        encoder.save(saved)
    encoder.save(saved, overwrite=True)
    (saved / "vocab.txt").unlink()
    with pytest.raises(CheckpointError, match="has no vocab.txt"):
        load_sentence_encoder(checkpoint=saved)


def test_tf_keras_checkpoint_is_named(bert_dir, tmp_path):
    (tmp_path / "tfk").mkdir()
    (tmp_path / "tfk" / "headsize_checkpoint.json").write_text(json.dumps({"format": 1}))
    (tmp_path / "tfk" / "vocab.txt").write_text("\n".join(VOCAB))
    with pytest.raises(CheckpointError, match="format 1; expected 'keras3-1' .a tf_keras"):
        load_sentence_encoder(checkpoint=tmp_path / "tfk")


def test_bad_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="exactly one"):
        load_sentence_encoder()
    with pytest.raises(CheckpointError, match="does not exist"):
        load_sentence_encoder(checkpoint=tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"lacks \['config.json', 'model.safetensors'"):
        load_sentence_encoder(checkpoint=tmp_path / "empty")
    name = "encoder.layer.1.attention.self.key.weight"
    write_checkpoint(tmp_path / "missing", rename=lambda n: "dropped" if n == name else n)
    with pytest.raises(CheckpointError, match=f"tensor '{name}' is missing"):
        import_hf_bert(tmp_path / "missing")
    write_checkpoint(tmp_path / "shape", config={"intermediate_size": 31})
    (tmp_path / "shape" / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(CheckpointError, match=r"intermediate.dense.weight' has shape \(31, 16\)"):
        import_hf_bert(tmp_path / "shape")
    write_checkpoint(tmp_path / "extra", extra={"encoder.layer.9.output.dense.bias": np.ones(3)})
    with pytest.raises(CheckpointError, match="does not use.*encoder.layer.9"):
        import_hf_bert(tmp_path / "extra")
    write_checkpoint(tmp_path / "heads", config={"num_attention_heads": 3})
    with pytest.raises(CheckpointError, match="not a multiple of num_attention_heads 3"):
        import_hf_bert(tmp_path / "heads")
