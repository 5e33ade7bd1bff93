"""The TFDS input path (lm1b on networked machines), tested on tfds' mock data."""

import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from headsize_tf.configs import language_modeling
from headsize_tf.tasks import language_modeling as lm_task
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY_LM = str(ROOT / "official_configs" / "headsize_lm_austen_tiny.yaml")
LETTERS = list("abcdefghij")


class TfdsInputTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path
        self.vocab = tmp_path / "vocab.txt"
        pieces = LETTERS + [f"##{c}" for c in LETTERS]
        self.vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + pieces))

    def _data_config(self, **kwargs):
        fields = dict(
            tfds_name="lm1b",
            tfds_split="train",
            vocab_file=str(self.vocab),
            seq_length=8,
            global_batch_size=4,
            is_training=False,
        )
        return language_modeling.LMDataConfig(**dict(fields, **kwargs))

    def test_lm1b_windows_are_shifted_token_streams(self):
        task = lm_task.LanguageModelingTask(language_modeling.LanguageModelingConfig())
        with tfds.testing.mock_data(num_examples=50, policy=tfds.testing.MockPolicy.USE_CODE):
            dataset = task.build_inputs(self._data_config())
            inputs, targets = next(iter(dataset))
            mock_text = [
                ex["text"].numpy().decode() for ex in tfds.load("lm1b", split="train").take(50)
            ]
        self.assertEqual(inputs.shape, (4, 8))
        self.assertAllEqual(inputs[:, 1:], targets[:, :-1])
        # The first window is the first 9 word pieces of the mock text: a word's first
        # letter is its letter's id, each further letter its "##" piece's id.
        stream = [
            LETTERS.index(c) + (5 if i == 0 else 15)
            for word in " ".join(mock_text).split()
            for i, c in enumerate(word)
        ]
        self.assertAllEqual(inputs[0], stream[:8])
        self.assertAllEqual(targets[0], stream[1:9])
        self.assertTrue(np.all(inputs.numpy() >= 5))

    def test_missing_vocab_file(self):
        task = lm_task.LanguageModelingTask(language_modeling.LanguageModelingConfig())
        with self.assertRaisesRegex(ValueError, r"tfds_name='lm1b' needs `vocab_file`"):
            task.build_inputs(self._data_config(vocab_file=""))

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_train_on_mock_lm1b(self):
        override = (
            "task.train_data.input_path=,task.train_data.tfds_name=lm1b,"
            "task.train_data.tfds_split=train,"
            f"task.train_data.vocab_file={self.vocab},task.model.vocab_size=25,"
            "task.validation_data.input_path=,task.validation_data.tfds_name=lm1b,"
            f"task.validation_data.tfds_split=test,task.validation_data.vocab_file={self.vocab},"
            "task.validation_data.global_batch_size=4,"
            "trainer.train_steps=20,trainer.steps_per_loop=10,trainer.summary_interval=10,"
            "trainer.checkpoint_interval=20,trainer.validation_interval=20,"
            "trainer.validation_steps=2"
        )
        with tfds.testing.mock_data(num_examples=200, policy=tfds.testing.MockPolicy.USE_CODE):
            result = train.run(
                "headsize_lm/language_modeling",
                str(self.tmp / "model"),
                [TINY_LM],
                override,
                data_dir=str(self.tmp),
            )
        self.assertTrue(np.isfinite(result.metrics["validation_loss"]))
        self.assertLess(result.metrics["validation_loss"], np.log(25))  # better than uniform
        self.assertTrue(tf.train.latest_checkpoint(str(self.tmp / "model")).endswith("ckpt-20"))
