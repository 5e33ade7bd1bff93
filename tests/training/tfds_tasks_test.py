"""TFDS inputs of the translation (wmt14) and raw-text GLUE (sst2, mnli) experiments.

No TFDS download works here, so every test runs on tfds' mock data (random
words of the letters a-j) through the same code users run on Colab.
"""

import functools
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from absl.testing import parameterized

from headsize_tf.configs import translation
from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention
from headsize_tf.tasks import translation as tr_task
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY_WMT = str(ROOT / "official_configs" / "cordonnier_nmt" / "tiny.yaml")
TINY_SST2 = str(ROOT / "official_configs" / "headsize_bert_sst2_tiny.yaml")
LETTERS = list("abcdefghij")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + LETTERS + [f"##{c}" for c in LETTERS]
FAST = (
    "trainer.train_steps=60,trainer.steps_per_loop=20,trainer.summary_interval=20,"
    "trainer.checkpoint_interval=60,trainer.validation_interval=60,trainer.validation_steps=2"
)

# Mock sentences have at most 18 letters (= pieces): every pair fits 24 tokens, where the
# config's 64 were two thirds padding (the same losses in two thirds of the time).
SHORT_WMT = "task.train_data.max_seq_length=24,task.validation_data.max_seq_length=24"


def mock(num_examples: int = 64):
    return tfds.testing.mock_data(
        num_examples=num_examples, policy=tfds.testing.MockPolicy.USE_CODE
    )


def piece_ids(text: str) -> list[int]:
    """Expected WordPiece ids under VOCAB: first letter of a word, then ## pieces."""
    return [VOCAB.index(c if i == 0 else f"##{c}") for w in text.split() for i, c in enumerate(w)]


class TranslationInputTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path
        (tmp_path / "wmt14").mkdir()
        self.vocab = tmp_path / "wmt14" / "vocab.txt"
        self.vocab.write_text("\n".join(VOCAB))

    def test_pair_layout(self):
        fn = tr_task.pair_fn(str(self.vocab), max_seq_length=8)
        features, labels = fn(tf.constant("ab c"), tf.constant("Dee"))
        self.assertAllEqual(features["inputs"], piece_ids("ab c") + [3])  # + [SEP]
        self.assertAllEqual(features["targets"], [2] + piece_ids("dee"))  # [CLS] + pieces
        self.assertAllEqual(labels, piece_ids("dee") + [3])
        features, labels = tr_task.pad_pairs(features, labels, 8)
        self.assertAllEqual(features["inputs"], piece_ids("ab c") + [3, 0, 0, 0, 0])
        # Truncation keeps room for [SEP]: 7 pieces + [SEP].
        features, labels = fn(tf.constant("abcdefghij"), tf.constant("a"))
        self.assertAllEqual(features["inputs"], piece_ids("abcdefg") + [3])

    def _data(self, **kwargs):
        fields = dict(
            tfds_name="wmt14_translate/de-en",
            tfds_split="train",
            vocab_file=str(self.vocab),
            max_seq_length=12,
            global_batch_size=8,
        )
        return translation.TranslationDataConfig(**dict(fields, **kwargs))

    def test_training_drops_long_pairs_eval_truncates(self):
        task = tr_task.TranslationTask(translation.TranslationConfig())
        with mock(64):
            raw = [
                (ex["en"].numpy().decode(), ex["de"].numpy().decode())
                for ex in tfds.load("wmt14_translate/de-en", split="validation").take(64)
            ]
            train_batch = next(iter(task.build_inputs(self._data())))
            evals = list(task.build_inputs(self._data(tfds_split="validation", is_training=False)))
        features, labels = train_batch
        self.assertEqual(features["inputs"].shape, (8, 12))  # static shapes for TPUs
        for row in features["inputs"].numpy():  # every kept pair ends in [SEP] within 12
            self.assertIn(3, row)
        self.assertEqual(sum(int(b[1].shape[0]) for b in evals), 64)  # eval keeps every pair
        first = evals[0]
        en, de = raw[0]
        want_src = (piece_ids(en)[:11] + [3] + [0] * 12)[:12]
        want_lab = (piece_ids(de)[:11] + [3] + [0] * 12)[:12]
        self.assertAllEqual(first[0]["inputs"][0], want_src)
        self.assertAllEqual(first[1][0], want_lab)
        want_tgt = ([2] + piece_ids(de)[:11] + [0] * 12)[:12]
        self.assertAllEqual(first[0]["targets"][0], want_tgt)

    def test_vocab_errors(self):
        bad = self.tmp / "bad.txt"
        bad.write_text("\n".join(["[UNK]", "[PAD]", "[CLS]", "[SEP]", "a"]))
        with self.assertRaisesRegex(ValueError, r"must have \[PAD\] at id 0; got 1"):
            tr_task.special_ids(str(bad))
        bad.write_text("\n".join(["[PAD]", "[UNK]", "a"]))
        with self.assertRaisesRegex(ValueError, r"lacks the tokens \['\[CLS\]', '\[SEP\]'\]"):
            tr_task.special_ids(str(bad))
        task = tr_task.TranslationTask(translation.TranslationConfig())
        with self.assertRaisesRegex(ValueError, r"needs `vocab_file`.*headsize-tf data vocab"):
            task.build_inputs(self._data(vocab_file=""))

    def test_missing_vocab_file_is_a_config_error(self):
        with self.assertRaisesRegex(train.ConfigError, r"vocab_file .*nowhere.*does not exist"):
            train.build_params(
                "headsize_seq2seq/translation",
                [TINY_WMT],
                f"task.train_data.vocab_file={self.tmp}/nowhere/vocab.txt",
                data_dir=str(self.tmp),
                mode="train",
            )


class TfdsTrainingTest(tf.test.TestCase, parameterized.TestCase):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path
        for sub in ("wmt14", "glue"):
            (tmp_path / sub).mkdir()
            (tmp_path / sub / "vocab.txt").write_text("\n".join(VOCAB))

    @parameterized.named_parameters(
        ("standard", "", StandardAttention),
        (
            "fixed_head",
            "task.model.attention.kind=fixed_head,task.model.attention.head_size=32",
            FixedHeadAttention,
        ),
        (
            "collaborative",
            "task.model.attention.kind=collaborative,task.model.attention.shared_key_dim=32",
            CollaborativeAttention,
        ),
    )
    def test_translation_overrides_build_each_attention_kind(self, override, cls):
        from official.core import task_factory

        params = train.build_params(
            "headsize_seq2seq/translation",
            [TINY_WMT],
            ",".join(x for x in ("task.model.vocab_size=25", override) if x),
            data_dir=str(self.tmp),
        )
        model = task_factory.get_task(params.task).build_model()
        self.assertLen(model.attention_layers, 2 + 2 * 2)
        self.assertTrue(all(isinstance(layer, cls) for layer in model.attention_layers))

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_translation_trains_on_mock_wmt14(self):
        # Fixed heads here; standard and collaborative translation models train in
        # tests/pruning/translation_test.py and tests/serving/translation_test.py.
        model_dir = str(self.tmp / "model")
        run = functools.partial(
            train.run,
            "headsize_seq2seq/translation",
            model_dir,
            [TINY_WMT],
            f"{FAST},task.model.vocab_size=25,{SHORT_WMT},"
            "task.model.attention.kind=fixed_head,task.model.attention.head_size=32",
            data_dir=str(self.tmp),
        )
        with mock(128):
            initial = run(mode="eval").metrics["validation_loss"]
            result = run(mode="train_and_eval")
        self.assertGreater(initial, 3.0)  # ~ ln(25) untrained
        self.assertLess(result.metrics["validation_loss"], initial - 0.5)

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_sst2_trains_from_raw_text(self):
        # Mock TFDS ignores `repeat_filenames`; `cache` makes the reader repeat. A mock
        # sentence, [CLS] and [SEP] fit 24 tokens (the config's 64 for real SST-2).
        override = (
            f"{FAST},task.model.encoder.any.vocab_size=25,task.train_data.cache=true,"
            "task.train_data.seq_length=24,task.validation_data.seq_length=24"
        )
        run = functools.partial(
            train.run,
            "headsize_bert/sentence_prediction_text",
            str(self.tmp / "m"),
            [TINY_SST2],
            override,
            data_dir=str(self.tmp),
        )
        with mock(256):
            initial = run(mode="eval").metrics["validation_loss"]
            result = run(mode="train_and_eval")
        self.assertTrue(np.isfinite(result.metrics["validation_loss"]))
        self.assertLess(result.metrics["validation_loss"], initial)
        self.assertTrue(tf.train.latest_checkpoint(str(self.tmp / "m")).endswith("ckpt-60"))

    def test_mnli_pairs_become_two_segments(self):
        from official.core import task_factory

        params = train.build_params(
            "headsize_bert/sentence_prediction_text",
            [TINY_SST2],
            {
                "task": {
                    "model": {"num_classes": 3},
                    "train_data": {
                        "tfds_name": "glue/mnli",
                        "tfds_split": "train",
                        "text_fields": ["premise", "hypothesis"],
                    },
                }
            },
            data_dir=str(self.tmp),
        )
        task = task_factory.get_task(params.task)
        with mock(64):
            features = next(iter(task.build_inputs(params.task.train_data)))
        labels = features["label"]
        self.assertEqual(features["input_word_ids"].shape, (32, 64))
        types = features["input_type_ids"].numpy()
        self.assertTrue(np.all(types.max(axis=1) == 1))  # the hypothesis is segment 1
        self.assertTrue(set(labels.numpy().tolist()) <= {0, 1, 2})
