"""Drop-in with Model Garden's checkpoint contract: a stock `BertEncoderV2` checkpoint restores
into `HeadsizeBertEncoder` through `SentencePredictionTask.initialize` and `assert_consumed()`
wherever the attention shapes agree; our own masked checkpoints keep their masks; a stock
encoder's `get_weights()` goes into ours by `set_weights()`."""

import os

import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from official.nlp.configs import encoders
from official.nlp.modeling import networks
from official.nlp.tasks import sentence_prediction

from headsize_tf.configs import encoders as hs_encoders

SMALL = dict(
    vocab_size=60,
    hidden_size=32,
    num_layers=2,
    intermediate_size=64,
    max_position_embeddings=16,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
)
# Attention configs whose shapes equal the stock encoder's (4 heads of 32 // 4).
STOCK_SHAPED = [
    ("standard", dict(kind="standard", num_heads=4)),
    ("fixed_head_of_stock_size", dict(kind="fixed_head", num_heads=4, head_size=8)),
    ("per_layer_stock_sizes", dict(kind="fixed_head", num_heads=[4, 4], head_size=[8, 8])),
]


def _stock():
    return networks.BertEncoderV2(
        vocab_size=60,
        hidden_size=32,
        num_layers=2,
        num_attention_heads=4,
        inner_dim=64,
        max_sequence_length=16,
        type_vocab_size=2,
        output_dropout=0.0,
        attention_dropout=0.0,
        inner_activation="gelu",
    )


def _inputs():
    ids = np.random.default_rng(0).integers(1, 60, size=(3, 8)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, -3:] = 0
    return dict(input_word_ids=ids, input_mask=mask, input_type_ids=np.zeros_like(ids))


def _encoder_config(attention):
    return hs_encoders.encoder_config(attention=hs_encoders.attention_config(**attention), **SMALL)


class StockCheckpointTest(tf.test.TestCase, parameterized.TestCase):
    def _stock_checkpoint(self):
        stock = _stock()
        stock(_inputs())
        path = tf.train.Checkpoint(encoder=stock).write(os.path.join(self.get_temp_dir(), "ckpt"))
        return stock, path

    @parameterized.named_parameters(*STOCK_SHAPED)
    def test_sentence_prediction_task_initialize_from_stock_checkpoint(self, attention):
        stock, path = self._stock_checkpoint()
        config = sentence_prediction.SentencePredictionConfig(
            init_checkpoint=path,
            model=sentence_prediction.ModelConfig(
                encoder=_encoder_config(attention), num_classes=2
            ),
        )
        task = sentence_prediction.SentencePredictionTask(config)
        model = task.build_model()
        model(_inputs())
        task.initialize(model)  # Model Garden's own assert_existing_objects_matched().
        ours = model.checkpoint_items["encoder"]
        for key in ("sequence_output", "pooled_output"):
            self.assertAllClose(ours(_inputs())[key], stock(_inputs())[key], atol=1e-5)

    @parameterized.named_parameters(*STOCK_SHAPED)
    def test_assert_consumed_both_ways(self, attention):
        stock, path = self._stock_checkpoint()
        ours = encoders.build_encoder(_encoder_config(attention))
        ours(_inputs())
        tf.train.Checkpoint(encoder=ours).read(path).assert_consumed()
        back = _stock()
        back(_inputs())
        ours_path = tf.train.Checkpoint(encoder=ours).write(os.path.join(self.get_temp_dir(), "o"))
        tf.train.Checkpoint(encoder=back).read(ours_path).assert_consumed()
        self.assertAllClose(back(_inputs())["sequence_output"], stock(_inputs())["sequence_output"])

    def test_restore_before_build_then_build(self):
        stock, path = self._stock_checkpoint()
        ours = encoders.build_encoder(_encoder_config(dict(kind="standard", num_heads=4)))
        status = tf.train.Checkpoint(encoder=ours).read(path)
        out = ours(_inputs())["sequence_output"]  # Deferred restore on build.
        status.assert_consumed()
        self.assertAllClose(out, stock(_inputs())["sequence_output"], atol=1e-5)

    def test_masked_checkpoint_keeps_its_mask(self):
        ours = encoders.build_encoder(_encoder_config(dict(kind="standard", num_heads=4)))
        ours(_inputs())
        ours.attention_layers[1].set_head_mask([1.0, 0.0, 1.0, 0.0])
        path = tf.train.Checkpoint(encoder=ours).write(os.path.join(self.get_temp_dir(), "m"))
        for build_first in (True, False):
            fresh = encoders.build_encoder(_encoder_config(dict(kind="standard", num_heads=4)))
            if build_first:
                fresh(_inputs())
            status = tf.train.Checkpoint(encoder=fresh).read(path)
            out = fresh(_inputs())["sequence_output"]
            status.assert_consumed()
            self.assertAllEqual(fresh.attention_layers[1].head_gates.numpy(), [1, 0, 1, 0])
            self.assertAllEqual(fresh.attention_layers[0].head_gates.numpy(), [1, 1, 1, 1])
            self.assertAllClose(out, ours(_inputs())["sequence_output"], atol=1e-6)
        # A stock encoder cannot hold the mask: the checkpoint's extra values are reported.
        stock = _stock()
        stock(_inputs())
        with self.assertRaises(AssertionError):
            tf.train.Checkpoint(encoder=stock).read(path).assert_consumed()

    def test_unmasked_checkpoint_with_gates_from_before_restores_under_checks(self):
        # Checkpoints written before gates were left out while all ones hold "head_gate_values".
        ours = encoders.build_encoder(_encoder_config(dict(kind="standard", num_heads=4)))
        ours(_inputs())
        for layer in ours.attention_layers:  # The old, unconditional dependency.
            layer._track_trackable(layer.head_gates, name="head_gate_values", overwrite=True)
        path = tf.train.Checkpoint(encoder=ours).write(os.path.join(self.get_temp_dir(), "legacy"))
        fresh = encoders.build_encoder(_encoder_config(dict(kind="standard", num_heads=4)))
        fresh(_inputs())
        status = tf.train.Checkpoint(encoder=fresh).read(path)
        status.expect_partial().assert_existing_objects_matched()
        status.assert_consumed()

    @parameterized.named_parameters(*STOCK_SHAPED)
    def test_set_weights_takes_the_stock_order(self, attention):
        stock = _stock()
        stock(_inputs())
        ours = encoders.build_encoder(_encoder_config(attention))
        ours(_inputs())
        ours.set_weights(stock.get_weights())
        self.assertAllClose(
            ours(_inputs())["sequence_output"], stock(_inputs())["sequence_output"], atol=1e-5
        )

    def test_other_head_size_names_the_layer(self):
        _, path = self._stock_checkpoint()
        ours = encoders.build_encoder(
            _encoder_config(dict(kind="fixed_head", num_heads=4, head_size=16))
        )
        ours(_inputs())
        with self.assertRaisesRegex(ValueError, "self_attention"):
            tf.train.Checkpoint(encoder=ours).read(path)
