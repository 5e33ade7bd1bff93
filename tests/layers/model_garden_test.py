"""The layers plug into Model Garden's Transformer blocks."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from official.nlp.modeling import layers as nlp_layers
from official.nlp.modeling import networks

from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention

CASES = [
    ("standard", StandardAttention, {"num_heads": 4}),
    ("fixed_head", FixedHeadAttention, {"num_heads": 4, "head_size": 32}),
    ("collaborative", CollaborativeAttention, {"num_heads": 4, "shared_key_dim": 8}),
]


class ModelGardenTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(*CASES)
    def test_transformer_scaffold(self, cls, cfg):
        block = nlp_layers.TransformerScaffold(
            num_attention_heads=4,
            inner_dim=32,
            inner_activation="gelu",
            attention_cls=cls,
            attention_cfg=dict(cfg, dropout=0.1, name="self_attention"),
        )
        x = tf.random.normal([2, 6, 16])
        mask = np.ones((2, 6, 6), np.float32)
        mask[:, :, -1] = 0
        out = block([x, mask])
        self.assertEqual(out.shape, (2, 6, 16))
        self.assertIsInstance(block._attention_layer, cls)

    @parameterized.named_parameters(*CASES)
    def test_encoder_scaffold_with_layer_seed(self, cls, cfg):
        encoder = networks.EncoderScaffold(
            num_hidden_instances=2,
            pooled_output_dim=16,
            embedding_cfg={
                "vocab_size": 50,
                "type_vocab_size": 2,
                "hidden_size": 16,
                "seq_length": 6,
                "max_seq_length": 6,
                "initializer": "glorot_uniform",
                "dropout_rate": 0.1,
            },
            hidden_cls=nlp_layers.TransformerScaffold,
            hidden_cfg={
                "num_attention_heads": 4,
                "inner_dim": 32,
                "inner_activation": "gelu",
                "attention_cls": cls,
                "attention_cfg": dict(cfg),
            },
            layer_idx_as_attention_seed=True,
            dict_outputs=True,
        )
        ids = np.random.default_rng(0).integers(0, 50, size=(2, 6)).astype(np.int32)
        outputs = encoder([ids, np.ones_like(ids), np.zeros_like(ids)])
        self.assertEqual(outputs["sequence_output"].shape, (2, 6, 16))
        seeds = [layer._attention_layer._seed for layer in encoder.hidden_layers]
        self.assertEqual(seeds, [0, 1])
