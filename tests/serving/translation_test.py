"""Translation export: in-graph tokenisation + beam search, equal to step-by-step decoding."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from headsize_tf import cli
from headsize_tf.modeling import decoding
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq
from headsize_tf.serving import TranslationServingModule, export
from headsize_tf.training import train
from tests import clean_tf

LETTERS = list("abcdefghij")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + LETTERS + [f"##{c}" for c in LETTERS]
TEXTS = ["abc de", "j", "Hello Big World", ""]


def words_of(ids) -> str:
    """Python detokenisation of 0-padded ids ([SEP] and padding dropped)."""
    out = []
    for i in ids:
        if i in (0, 3):
            continue
        token = VOCAB[i]
        if token.startswith("##") and out:
            out[-1] += token[2:]
        else:
            out.append(token)
    return " ".join(out)


class TranslationExportTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path
        self.vocab = tmp_path / "vocab.txt"
        self.vocab.write_text("\n".join(VOCAB))
        tf.random.set_seed(3)
        # Fixed head size 32 at width 64 with 4 heads: head size != width / heads.
        self.model = HeadsizeSeq2Seq(
            vocab_size=len(VOCAB),
            hidden_size=64,
            num_encoder_layers=1,
            num_decoder_layers=2,
            attention={"kind": "fixed_head", "num_heads": 4, "head_size": 32},
            max_sequence_length=32,
            initializer_range=0.5,
        )

    def test_greedy_equals_uncached_decoding_and_text_matches_ids(self):
        module = TranslationServingModule(
            self.model, str(self.vocab), max_source_length=8, max_decode_length=6, beam_size=1
        )
        source = module.source_ids(tf.constant(TEXTS))
        self.assertAllEqual(source[0, :6], [5, 16, 17, 8, 19, 3])  # a ##b ##c d ##e [SEP]
        self.assertAllEqual(source[3, :1], [3])  # empty text: just [SEP]
        out = module.serve_text(tf.constant(TEXTS))
        start = tf.fill([len(TEXTS), 1], 2)
        reference = decoding.greedy_decode(
            self.model, start, 6, use_cache=False, source_ids=source
        ).numpy()[:, 1:]
        for got, want in zip(out["output_ids"].numpy(), reference, strict=True):
            n = list(want).index(3) + 1 if 3 in want else len(want)
            self.assertAllEqual(got[:n], want[:n])
            self.assertTrue(np.all(got[n:] == 0))
        self.assertGreater(int(tf.reduce_sum(tf.cast(out["output_ids"] > 4, tf.int32))), 0)
        texts = [t.decode() for t in out["translation"].numpy()]
        self.assertEqual(texts, [words_of(ids) for ids in out["output_ids"].numpy()])

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_saved_model_serves_without_our_code(self):
        module = TranslationServingModule(
            self.model, str(self.vocab), max_source_length=8, max_decode_length=5, beam_size=3
        )
        want = module.serve_text(tf.constant(TEXTS))
        path = export(module, self.tmp / "export")
        script = (
            "import sys, json, tensorflow as tf, tensorflow_text\n"
            f"m = tf.saved_model.load({str(path)!r})\n"
            f"out = m.signatures['serving_default'](text=tf.constant({TEXTS!r}))\n"
            "print(json.dumps({k: v.numpy().tolist() if v.dtype != tf.string else "
            "[s.decode() for s in v.numpy()] for k, v in out.items()}))\n"
        )
        import json

        got = json.loads(clean_tf.run(script).strip().splitlines()[-1])
        self.assertAllEqual(got["output_ids"], want["output_ids"])
        self.assertAllClose(got["score"], want["score"], atol=1e-5)
        self.assertEqual(got["translation"], [t.decode() for t in want["translation"].numpy()])

    def test_bad_settings(self):
        with self.assertRaisesRegex(ValueError, r"beam_size must be a positive int; got 0"):
            TranslationServingModule(self.model, str(self.vocab), beam_size=0)
        with self.assertRaisesRegex(ValueError, r"max_source_length must be >= 2; got 1"):
            TranslationServingModule(self.model, str(self.vocab), max_source_length=1)

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_cli_exports_a_trained_model_dir(self):
        (self.tmp / "wmt14").mkdir()
        (self.tmp / "wmt14" / "vocab.txt").write_text("\n".join(VOCAB))
        model_dir = str(self.tmp / "model")
        # A few small training steps in an eager loop (a tiny model's steps take less time
        # than tracing the loop's graph): the export reads the run's config and checkpoint.
        override = (
            "trainer.train_tf_function=false,trainer.train_tf_while_loop=false,"
            "task.model.vocab_size=25,task.model.attention.kind=collaborative,"
            "task.model.attention.shared_key_dim=32,trainer.train_steps=4,trainer.steps_per_loop=4,"
            "trainer.summary_interval=4,trainer.checkpoint_interval=4,"
            "task.train_data.global_batch_size=8,"
            # One layer each (the two-layer decoder's beam search export is tested above).
            "task.model.num_encoder_layers=1,task.model.num_decoder_layers=1"
        )
        with tfds.testing.mock_data(num_examples=16, policy=tfds.testing.MockPolicy.USE_CODE):
            train.run(
                "headsize_seq2seq/translation",
                model_dir,
                ["official_configs/cordonnier_nmt/tiny.yaml"],
                override,
                mode="train",
                data_dir=str(self.tmp),
            )
        out = self.tmp / "served"
        args = [
            "export",
            "--model_dir",
            model_dir,
            "--task",
            "translation",
            "--output",
            str(out),
            "--beam-size",
            "2",
            "--max-decode-length",
            "8",
        ]
        self.assertEqual(cli.main(args), 0)
        loaded = tf.saved_model.load(str(out / "1"))
        result = loaded.signatures["serving_default"](text=tf.constant(["abc", "de f"]))
        self.assertEqual(result["output_ids"].shape[0], 2)
        self.assertLessEqual(result["output_ids"].shape[1], 8)
        self.assertEqual(cli.main(args), 2)  # version 1 exists: refused without --overwrite
