"""HeadsizeBertEncoder: Model Garden compatibility, counts, save/restore."""

import logging
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
import yaml
from absl.testing import parameterized
from official.nlp.configs import encoders
from official.nlp.modeling import models, networks

from headsize_tf import params
from headsize_tf.configs import encoders as hs_encoders
from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder

TYPES = [
    ("standard", "standard", {}, StandardAttention),
    ("fixed_head", "fixed_head", {"head_size": 32}, FixedHeadAttention),
    ("collaborative", "collaborative", {"shared_key_dim": 16}, CollaborativeAttention),
]
SMALL = dict(
    vocab_size=60,
    hidden_size=32,
    num_layers=2,
    intermediate_size=64,
    max_position_embeddings=16,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
)


def _inputs(batch=3, length=8, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 60, size=(batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, -3:] = 0
    return dict(input_word_ids=ids, input_mask=mask, input_type_ids=np.zeros_like(ids))


def _attention(kind, extra):
    return hs_encoders.attention_config(**{"kind": kind, "num_heads": 4, **extra})


def _build(attention_type, extra):
    return encoders.build_encoder(
        hs_encoders.encoder_config(attention=_attention(attention_type, extra), **SMALL)
    )


class HeadsizeBertEncoderTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.named_parameters(*TYPES)
    def test_outputs_and_params(self, attention_type, extra, cls):
        encoder = _build(attention_type, extra)
        out = encoder(_inputs())
        self.assertEqual(set(out), {"sequence_output", "pooled_output", "encoder_outputs"})
        self.assertEqual(out["sequence_output"].shape, (3, 8, 32))
        self.assertEqual(out["pooled_output"].shape, (3, 32))
        self.assertLen(out["encoder_outputs"], 2)
        for layer in encoder.attention_layers:
            self.assertIsInstance(layer, cls)
        config = hs_encoders.HeadsizeEncoderConfig(
            attention=_attention(attention_type, extra), **SMALL
        )
        count = params.encoder_params(hs_encoders.to_spec(config))
        self.assertEqual(encoder.count_params(), count.total)

    def test_standard_equals_stock_bert_encoder_v2(self):
        ours = _build("standard", {})
        stock = networks.BertEncoderV2(
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
        inputs = _inputs()
        ours(inputs)
        stock(inputs)

        def by_name(model):  # Without the model's own name prefix.
            return {v.name.split("/", 1)[1]: v for v in model.weights if "head_gates" not in v.name}

        ours_vars, stock_vars = by_name(ours), by_name(stock)
        self.assertEqual(sorted(ours_vars), sorted(stock_vars))
        for name, var in stock_vars.items():
            ours_vars[name].assign(var)
        for key in ("sequence_output", "pooled_output"):
            # The same operations in the same order: equal to the last bit.
            self.assertAllClose(ours(inputs)[key], stock(inputs)[key], rtol=0, atol=1e-7)

    def test_activation_alias_reaches_the_blocks_as_in_bert_encoder_v2(self):
        kwargs = dict(vocab_size=60, hidden_size=32, num_layers=2, activation="relu")
        ours = HeadsizeBertEncoder(attention={"kind": "standard", "num_heads": 4}, **kwargs)
        stock = networks.BertEncoderV2(num_attention_heads=4, **kwargs)
        self.assertEqual(ours.get_config()["inner_activation"], "relu")
        self.assertEqual(
            [block._inner_activation for block in ours.transformer_layers],
            [block._inner_activation for block in stock.transformer_layers],
        )
        clone = HeadsizeBertEncoder.from_config(ours.get_config())
        self.assertEqual(
            [block._inner_activation for block in clone.transformer_layers], ["relu"] * 2
        )

    @parameterized.named_parameters(*TYPES)
    def test_checkpoint_savedmodel_and_config_round_trip(self, attention_type, extra, cls):
        encoder = _build(attention_type, extra)
        inputs = _inputs()
        expected = encoder(inputs)["sequence_output"].numpy()
        with tempfile.TemporaryDirectory() as tmp:
            path = tf.train.Checkpoint(encoder=encoder).write(os.path.join(tmp, "ckpt"))
            clone = type(encoder).from_config(encoder.get_config())
            clone(inputs)
            tf.train.Checkpoint(encoder=clone).read(path).assert_consumed()
            self.assertAllClose(clone(inputs)["sequence_output"], expected, atol=1e-6)

            sm = os.path.join(tmp, "sm")
            fn = tf.function(lambda x: encoder(x)["sequence_output"]).get_concrete_function(
                {k: tf.TensorSpec([None, None], tf.int32, name=k) for k in inputs}
            )
            tf.saved_model.save(encoder, sm, signatures=fn)
            loaded = tf.saved_model.load(sm)
            served = loaded.signatures["serving_default"](
                **{k: tf.constant(v) for k, v in inputs.items()}
            )
            self.assertAllClose(list(served.values())[0], expected, atol=1e-6)

    # Collaborative heads, the kind furthest from stock attention, in the default run; every
    # kind in the full run (docs/testing.md): 25 epochs each.
    def test_model_garden_heads_train_collaborative(self):
        self._model_garden_heads_train("collaborative", {"shared_key_dim": 16})

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_model_garden_heads_train_standard_and_fixed_head(self):
        for _, attention_type, extra, _ in TYPES[:2]:
            self._model_garden_heads_train(attention_type, extra)

    def _model_garden_heads_train(self, attention_type, extra):
        encoder = _build(attention_type, extra)
        classifier = models.BertClassifier(encoder, num_classes=2)
        inputs = _inputs(batch=16, seed=1)
        labels = (inputs["input_word_ids"][:, 0] > 30).astype(np.int32)
        classifier.compile(
            tf_keras.optimizers.Adam(3e-3),
            tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        history = classifier.fit(inputs, labels, epochs=25, batch_size=16, verbose=0)
        self.assertLess(history.history["loss"][-1], 0.5 * history.history["loss"][0])

        pretrainer = models.BertPretrainerV2(encoder_network=_build(attention_type, extra))
        mlm_inputs = dict(_inputs(), masked_lm_positions=np.array([[1, 2]] * 3, np.int32))
        mlm = pretrainer(mlm_inputs)
        self.assertEqual(mlm["mlm_logits"].shape, (3, 2, 60))
        span = models.BertSpanLabeler(network=_build(attention_type, extra))
        start, end = span(_inputs())
        self.assertEqual(start.shape, (3, 8))

    def test_params_override_switches_attention_type(self):
        model_config = hs_encoders.encoder_config(attention=_attention("standard", {}), **SMALL)
        model_config.override(
            {"any": {"attention": {"kind": "fixed_head", "head_size": 24}}}, is_strict=True
        )
        encoder = encoders.build_encoder(model_config)
        encoder(_inputs())
        self.assertIsInstance(encoder.attention_layers[0], FixedHeadAttention)
        self.assertEqual(encoder.attention_layers[0].head_size, 24)
        count = params.encoder_params(hs_encoders.to_spec(model_config.any))
        self.assertEqual(encoder.count_params(), count.total)

    def test_bad_config_values(self):
        with self.assertRaisesRegex(ValueError, r"Unknown attention kind 'fixed'"):
            _build("fixed", {})
        with self.assertRaisesRegex(ValueError, r"got 'big'"):
            _build("fixed_head", {"head_size": "big"})
        with self.assertRaisesRegex(ValueError, r"got -1"):
            _build("fixed_head", {"head_size": -1})
        with self.assertRaisesRegex(ValueError, r"needs `shared_key_dim`"):
            _build("collaborative", {})
        with self.assertRaisesRegex(
            ValueError, r"width \(32\) is not a multiple of num_heads \(5\); standard"
        ):
            encoders.build_encoder(
                hs_encoders.encoder_config(
                    attention=_attention("standard", {"num_heads": 5}), **SMALL
                )
            )
        with self.assertRaisesRegex(ValueError, r"head_size=32 is only for kind 'fixed_head'"):
            _build("standard", {"head_size": 32})

    def test_sequence_length_resolves_to_max_position_embeddings(self):
        encoder = _build("fixed_head", {"head_size": "sequence_length"})
        encoder(_inputs(length=8))  # Shorter inputs: still max_position_embeddings (16).
        self.assertEqual([layer.head_size for layer in encoder.attention_layers], [16, 16])

    def test_old_yaml_keys_name_the_new_key(self):
        from headsize_tf.training import train

        with self.assertRaisesRegex(ValueError, r"`attention_type` is now `attention.kind`"):
            train.build_params(
                "headsize_bert/pretraining",
                params_override="task.model.encoder.any.attention_type=fixed_head",
            )

    def test_legacy_saved_config_migrates(self):
        from headsize_tf.modeling import HeadsizeBertEncoder

        old = dict(
            vocab_size=60,
            hidden_size=32,
            num_layers=1,
            num_attention_heads=4,
            attention_type="fixed_head",
            head_size=8,
            shared_key_dim=None,
            mixing_initializer="uniform",
            inner_dim=64,
        )
        encoder = HeadsizeBertEncoder.from_config(old).build_weights()
        self.assertEqual(encoder.attention_spec.kind, "fixed_head")
        self.assertEqual(encoder.attention_layers[0].head_size, 8)
        with self.assertRaisesRegex(ValueError, r"attention_type='fixed_head'; it is now"):
            HeadsizeBertEncoder(**old)

    def test_per_layer_yaml_round_trip(self):
        config = hs_encoders.HeadsizeEncoderConfig(
            attention=_attention("fixed_head", {"num_heads": [2, 6], "head_size": [16, 8]}),
            **SMALL,
        )
        text = yaml.safe_dump(config.as_dict())
        self.assertIn("num_heads:\n  - 2\n  - 6", text)
        config = hs_encoders.HeadsizeEncoderConfig()
        config.override(yaml.safe_load(text), is_strict=True)
        self.assertEqual(config.attention.to_spec().num_heads, (2, 6))
        encoder = hs_encoders.build_headsize_encoder(config)
        encoder(_inputs())
        self.assertEqual([layer.num_heads for layer in encoder.attention_layers], [2, 6])
        count = params.encoder_params(hs_encoders.to_spec(config))
        self.assertEqual(
            int(sum(np.prod(w.shape) for w in encoder.trainable_weights)), count.trainable
        )


class HeadCountWarningTest(tf.test.TestCase):
    """Model Garden's "input size is not a multiple of the number of attention heads"
    warning applies to width // heads head sizes only."""

    def _warnings(self, attention, width=32):
        """The head-count warnings logged while a block builds (and calls) on `width`."""
        from headsize_tf.modeling.transformer_block import HeadsizeTransformerBlock

        records = []

        class Capture(logging.Handler):
            def emit(self, record):
                records.append(record.getMessage())

        handler = Capture(level=logging.WARNING)
        logger = logging.getLogger("absl")
        logger.addHandler(handler)
        try:
            block = HeadsizeTransformerBlock(
                attention=attention, inner_dim=64, inner_activation="relu"
            )
            block(tf.zeros([2, 5, width]))
        finally:
            logger.removeHandler(handler)
            self.last_records = records
        return [m for m in records if "number of attention heads" in m]

    def test_standard_heads_that_do_not_divide_the_width_warn_and_fail(self):
        from headsize_tf.core.spec import AttentionSpec

        # The stock path keeps Model Garden's warning where it applies, and our layer refuses.
        with self.assertRaisesRegex(
            ValueError, r"'self_attention'.*query width \(32\) is not a multiple of num_heads \(6\)"
        ):
            self._warnings(AttentionSpec("standard", num_heads=6))
        self.assertEqual(
            [m for m in self.last_records if "number of attention heads" in m],
            ["The input size (32) is not a multiple of the number of attention heads (6)"],
        )

    def test_standard_heads_that_divide_the_width_log_no_warning(self):
        from headsize_tf.core.spec import AttentionSpec

        self.assertEqual(self._warnings(AttentionSpec("standard", num_heads=4)), [])

    def test_without_log_drops_only_its_text_and_only_inside(self):
        from headsize_tf.modeling.transformer_block import _HEAD_COUNT_WARNING, _without_log

        records = []

        class Capture(logging.Handler):
            def emit(self, record):
                records.append(record.getMessage())

        logger = logging.getLogger("headsize_tf.test_without_log")
        logger.propagate = False
        logger.addHandler(Capture(level=logging.WARNING))
        warning = f"The input size (32) {_HEAD_COUNT_WARNING} (6)"
        with self.assertRaises(RuntimeError):
            with _without_log(logger, _HEAD_COUNT_WARNING):
                logger.warning(warning)
                logger.warning("another warning")
                raise RuntimeError("the filter goes even on errors")
        logger.warning(warning)
        self.assertEqual(records, ["another warning", warning])
        self.assertEqual(logger.filters, [])

    def test_fixed_heads_of_any_count_log_no_head_count_warning(self):
        from headsize_tf.core.spec import AttentionSpec

        self.assertEqual(self._warnings(AttentionSpec("fixed_head", num_heads=6, head_size=8)), [])
        self.assertEqual(
            self._warnings(
                AttentionSpec("collaborative", num_heads=6, shared_key_dim=12, head_size=8)
            ),
            [],
        )

    def test_per_layer_fixed_heads_encoder_logs_no_head_count_warning(self):
        records = []

        class Capture(logging.Handler):
            def emit(self, record):
                records.append(record.getMessage())

        handler = Capture(level=logging.WARNING)
        logging.getLogger("absl").addHandler(handler)
        try:
            encoder = encoders.build_encoder(
                hs_encoders.encoder_config(
                    attention=hs_encoders.attention_config(
                        kind="fixed_head", num_heads=[6, 4], head_size=[8, 16]
                    ),
                    **SMALL,
                )
            )
            encoder(_inputs())
        finally:
            logging.getLogger("absl").removeHandler(handler)
        self.assertEqual([m for m in records if "number of attention heads" in m], [])
