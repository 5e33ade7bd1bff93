"""Drop-in with Model Garden's checkpoint contract: a stock `BertEncoderV2` checkpoint restores
into `HeadsizeBertEncoder` through `SentencePredictionTask.initialize` and `assert_consumed()`
wherever the attention shapes agree; our own masked checkpoints keep their masks; a stock
encoder's `get_weights()` goes into ours by `set_weights()`. Where the attention shapes cannot
agree, restoring raises one error naming every such layer, and `restore_encoder(...,
skip_mismatched_attention=True)` restores everything else."""

import os

import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from official.nlp.configs import encoders
from official.nlp.modeling import networks
from official.nlp.tasks import sentence_prediction

from headsize_tf.configs import encoders as hs_encoders
from headsize_tf.modeling import (
    HeadsizeBertEncoder,
    attention_mismatches,
    check_attention_checkpoint,
    restore_encoder,
)
from tests.modeling import checkpoint_util

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
# Attention configs that cannot restore from the stock checkpoint, with the blocks that cannot.
MISMATCHED = [
    ("fixed_head_of_another_size", dict(kind="fixed_head", num_heads=4, head_size=16), [0, 1]),
    ("collaborative", dict(kind="collaborative", num_heads=4, shared_key_dim=16), [0, 1]),
    (
        "second_layer_of_another_size",
        dict(kind="fixed_head", num_heads=[4, 4], head_size=[8, 16]),
        [1],
    ),
    ("second_layer_of_another_head_count", dict(kind="standard", num_heads=[4, 2]), [1]),
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


def _sequence_output(encoder):
    return encoder(_inputs())["sequence_output"]


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

    def test_weights_load_from_the_models_own_saved_model(self):
        """`load_weights(dir/variables/variables)` of a `model.save(dir)`: the SavedModel's graph
        also lists the weights by position (`variables/0`), which the check must not take for
        the attention's names."""
        import tf_keras

        from headsize_tf.core import AttentionSpec

        def classifier():
            encoder = HeadsizeBertEncoder(
                vocab_size=60,
                hidden_size=32,
                num_layers=2,
                inner_dim=64,
                max_sequence_length=16,
                attention=AttentionSpec("standard", num_heads=4),
            )
            inputs = {k: tf_keras.Input((8,), dtype=tf.int32) for k in _inputs()}
            return tf_keras.Model(inputs, encoder(inputs)["pooled_output"])

        saved = classifier()
        path = os.path.join(self.get_temp_dir(), "saved")
        saved.save(path, include_optimizer=False)
        fresh = classifier()
        fresh.load_weights(os.path.join(path, "variables", "variables"))
        self.assertAllClose(fresh(_inputs()), saved(_inputs()), atol=0)

    def test_masked_checkpoint_keeps_its_mask(self):
        def make():
            return encoders.build_encoder(_encoder_config(dict(kind="standard", num_heads=4)))

        path = checkpoint_util.assert_masked_checkpoint_keeps_its_mask(
            self,
            make,
            _sequence_output,
            lambda encoder: encoder.attention_layers,
            {1: [1.0, 0.0, 1.0, 0.0]},
            key="encoder",
        )
        # A stock encoder cannot hold the mask: the checkpoint's extra values are reported.
        stock = _stock()
        stock(_inputs())
        with self.assertRaises(AssertionError):
            tf.train.Checkpoint(encoder=stock).read(path).assert_consumed()

    @parameterized.named_parameters(*STOCK_SHAPED, ("collaborative", MISMATCHED[1][1]))
    def test_unmasked_checkpoint_restores_under_both_checks(self, attention):
        checkpoint_util.assert_unmasked_checkpoint_restores(
            self,
            lambda: encoders.build_encoder(_encoder_config(attention)),
            _sequence_output,
            key="encoder",
        )

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

    def _assert_names_exactly(self, message, mismatching):
        for i in range(SMALL["num_layers"]):
            name = f"transformer/layer_{i}/self_attention"
            if i in mismatching:
                self.assertIn(name, message)
            else:
                self.assertNotIn(name, message)
        self.assertIn("skip_mismatched_attention=True", message)

    @parameterized.named_parameters(*MISMATCHED)
    def test_checkpoint_read_names_every_mismatching_layer(self, attention, mismatching):
        _, path = self._stock_checkpoint()
        for build_first in (True, False):  # Built, or restored before the first call.
            ours = encoders.build_encoder(_encoder_config(attention))
            if build_first:
                ours(_inputs())
            with self.assertRaises(ValueError) as caught:
                tf.train.Checkpoint(encoder=ours).read(path)
            self._assert_names_exactly(str(caught.exception), mismatching)
        self.assertIn(f"{len(mismatching)} of the 2 layers", str(caught.exception))

    def test_error_shows_checkpoint_and_model_shapes(self):
        _, path = self._stock_checkpoint()
        ours = encoders.build_encoder(_encoder_config(MISMATCHED[0][1]))
        with self.assertRaises(ValueError) as caught:
            check_attention_checkpoint(ours, path)
        message = str(caught.exception)
        self.assertIn("_query_dense/kernel: checkpoint [32, 4, 8], model [32, 4, 16]", message)
        self.assertIn("encoder/_transformer_layers/1/_attention_layer", message)
        collaborative = encoders.build_encoder(_encoder_config(MISMATCHED[1][1]))
        [first, _] = attention_mismatches(collaborative, path)
        self.assertIn("mixing: checkpoint none, model [4, 16]", first.differences())
        self.assertIn("_query_dense/bias: checkpoint [4, 8], model none", first.differences())

    @parameterized.named_parameters(*MISMATCHED)
    def test_task_initialize_names_every_mismatching_layer(self, attention, mismatching):
        _, path = self._stock_checkpoint()
        config = sentence_prediction.SentencePredictionConfig(
            init_checkpoint=path,
            model=sentence_prediction.ModelConfig(
                encoder=_encoder_config(attention), num_classes=2
            ),
        )
        task = sentence_prediction.SentencePredictionTask(config)
        model = task.build_model()
        with self.assertRaises(ValueError) as caught:
            task.initialize(model)
        self._assert_names_exactly(str(caught.exception), mismatching)

    @parameterized.named_parameters(*STOCK_SHAPED)
    def test_stock_shapes_have_no_mismatch(self, attention):
        stock, path = self._stock_checkpoint()
        ours = encoders.build_encoder(_encoder_config(attention))
        self.assertEqual(attention_mismatches(ours, path), [])
        directory = os.path.join(self.get_temp_dir(), "saved")
        tf.train.Checkpoint(encoder=stock).save(os.path.join(directory, "ckpt"))
        check_attention_checkpoint(ours, directory)  # A directory: its latest checkpoint.
        self.assertEqual(restore_encoder(ours, path), [])
        self.assertAllClose(_sequence_output(ours), _sequence_output(stock), atol=1e-5)

    @parameterized.named_parameters(*MISMATCHED)
    def test_partial_restore_restores_everything_else(self, attention, mismatching):
        stock, path = self._stock_checkpoint()
        ours = encoders.build_encoder(_encoder_config(attention))
        with self.assertRaisesRegex(ValueError, "cannot restore"):
            restore_encoder(ours, path)
        initial = [layer.get_weights() for layer in ours.attention_layers]
        skipped = restore_encoder(ours, path, skip_mismatched_attention=True)
        self.assertEqual(skipped, [f"transformer/layer_{i}/self_attention" for i in mismatching])
        # Embeddings, layer norms, feed-forward layers and pooler are the stock encoder's.
        theirs = HeadsizeBertEncoder.non_attention_layers(stock)  # Same attribute layout.
        for mine, stocks in zip(ours.non_attention_layers(), theirs, strict=True):
            for a, b in zip(mine.get_weights(), stocks.get_weights(), strict=True):
                self.assertAllEqual(a, b)
        stock_attention = [block._attention_layer for block in stock._transformer_layers]
        for i, layer in enumerate(ours.attention_layers):
            expected = initial[i] if i in mismatching else stock_attention[i].get_weights()
            for a, b in zip(layer.get_weights(), expected, strict=True):
                self.assertAllEqual(a, b)
