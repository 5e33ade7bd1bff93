"""Import of Hugging Face-layout BERT checkpoints: round trip and bad input."""

import json

import numpy as np
import pytest
import tensorflow as tf

from headsize_tf.pretrained import CheckpointError, load_sentence_encoder
from tests.hf_fixtures import CONFIG, write_checkpoint


class HFImportTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path

    def test_weights_land_where_a_numpy_bert_expects_them(self):
        tensors = write_checkpoint(self.tmp / "bert")
        model = load_sentence_encoder(checkpoint=self.tmp / "bert")
        inputs = model.tokenize(tf.constant(["the cat sat on a mat.", "dogs"]))
        ids = inputs["input_word_ids"].numpy()
        self.assertEqual(ids[0].tolist(), [2, 5, 6, 7, 8, 12, 9, 10, 3])
        self.assertEqual(ids[1, :4].tolist(), [2, 13, 11, 3])
        got = model.encoder(inputs)["sequence_output"].numpy()
        self.assertAllClose(got, _numpy_bert(tensors, ids, inputs["input_mask"].numpy()), atol=2e-5)

    def test_missing_files(self):
        (self.tmp / "empty").mkdir()
        with self.assertRaisesRegex(CheckpointError, r"lacks \['config.json', 'model.safetensors'"):
            load_sentence_encoder(checkpoint=self.tmp / "empty")
        with self.assertRaisesRegex(CheckpointError, "does not exist"):
            load_sentence_encoder(checkpoint=self.tmp / "nowhere")
        with self.assertRaisesRegex(CheckpointError, "exactly one"):
            load_sentence_encoder()

    def test_missing_tensor_is_named(self):
        name = "encoder.layer.1.attention.self.key.weight"
        write_checkpoint(self.tmp / "bert", drop=name)
        with self.assertRaisesRegex(CheckpointError, f"tensor '{name}' is missing"):
            load_sentence_encoder(checkpoint=self.tmp / "bert")

    def test_misshaped_tensor_is_named(self):
        name = "encoder.layer.0.intermediate.dense.weight"
        write_checkpoint(self.tmp / "bert", reshape=name)
        with self.assertRaisesRegex(CheckpointError, f"tensor '{name}' has shape \\(32, 15\\)"):
            load_sentence_encoder(checkpoint=self.tmp / "bert")

    def test_unsupported_config(self):
        write_checkpoint(self.tmp / "bert")
        config = dict(CONFIG, position_embedding_type="relative_key")
        (self.tmp / "bert" / "config.json").write_text(json.dumps(config))
        with self.assertRaisesRegex(CheckpointError, "position_embedding_type 'relative_key'"):
            load_sentence_encoder(checkpoint=self.tmp / "bert")

    def test_corrupt_safetensors(self):
        write_checkpoint(self.tmp / "bert")
        (self.tmp / "bert" / "model.safetensors").write_bytes(b"not a safetensors file")
        with self.assertRaisesRegex(CheckpointError, "model.safetensors is unreadable"):
            load_sentence_encoder(checkpoint=self.tmp / "bert")

    def test_native_checkpoint_round_trip_and_missing_parts(self):
        write_checkpoint(self.tmp / "bert")
        model = load_sentence_encoder(checkpoint=self.tmp / "bert")
        model.save(self.tmp / "native")
        again = load_sentence_encoder(checkpoint=self.tmp / "native")
        texts = ["the cat", "a dog sat", ""]
        self.assertAllClose(again.embed(texts), model.embed(texts), atol=1e-6)
        (self.tmp / "native" / "vocab.txt").unlink()
        with self.assertRaisesRegex(CheckpointError, "has no vocab.txt"):
            load_sentence_encoder(checkpoint=self.tmp / "native")


def _layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def _numpy_bert(t, ids, mask):
    from scipy.special import erf

    def gelu(x):
        return 0.5 * x * (1 + erf(x / np.sqrt(2)))

    def linear(x, name):
        return x @ t[f"{name}.weight"].T + t[f"{name}.bias"]

    n = ids.shape[1]
    x = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:n]
    x = x + t["embeddings.token_type_embeddings.weight"][0]
    x = _layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])
    heads, p = 4, 4
    for i in range(2):
        pre = f"encoder.layer.{i}."
        q, k, v = (
            linear(x, f"{pre}attention.self.{r}").reshape(*x.shape[:2], heads, p)
            for r in ("query", "key", "value")
        )
        logits = np.einsum("bthp,bshp->bhts", q, k) / np.sqrt(p)
        logits = np.where(mask[:, None, None, :] > 0, logits, -1e9)
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = np.einsum("bhts,bshp->bthp", probs, v).reshape(x.shape)
        attn = linear(context, f"{pre}attention.output.dense")
        x = _layer_norm(
            x + attn,
            t[f"{pre}attention.output.LayerNorm.weight"],
            t[f"{pre}attention.output.LayerNorm.bias"],
        )
        h = linear(gelu(linear(x, f"{pre}intermediate.dense")), f"{pre}output.dense")
        x = _layer_norm(x + h, t[f"{pre}output.LayerNorm.weight"], t[f"{pre}output.LayerNorm.bias"])
    return x
