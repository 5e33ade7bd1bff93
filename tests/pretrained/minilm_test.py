"""The imported all-MiniLM-L6-v2 reproduces the reference model; compression of it."""

import json

import numpy as np
import pytest
import tensorflow as tf

from headsize_tf.pretrained import SentenceEncoder, load_sentence_encoder
from headsize_tf.reparam import compress, compress_encoder

# Punctuation, casing, accents, numbers, CJK, emoji, control/format characters,
# Greek final sigma, empty and whitespace-only, over-long words and texts.
SENTENCES = [
    "Hello, World!",
    "Café déjà vu — naïve résumé",
    "12,345.67 dollars, $5 and 100%!",
    "",
    "   ",
    "tab\there\nnewline\r\nCRLF",
    "ＡＢＣ full-width letters",
    "中文字符 mixed with English",
    "emoji 😀 ok",
    "zero\u200bwidth and control\x07char",
    "don't can't won't y'all",
    "a" * 150,
    "über" * 30,
    "Ǆ ﬁ ligatures",
    "ÀÉÎÕÜ ñ ç ß",
    "İstanbul ΣΊΣΥΦΟΣ ὁδός",
    "<html> &amp; {json: [1,2]} e.g. i.e. A.B.C.",
    "word " * 300,
]


def _reference_ids(minilm_dir, texts, max_len):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    out = []
    for text in texts:
        ids = tokenizer.encode(text).ids
        out.append(ids if len(ids) <= max_len else ids[: max_len - 1] + [ids[-1]])
    return out


class MiniLMTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _model(self, minilm, minilm_dir, tmp_path):
        self.model = minilm
        self.model_dir = minilm_dir
        self.tmp = tmp_path

    def test_reference_cosine(self):
        e = self.model.embed(["A man is eating food.", "A man is eating a piece of bread."])
        self.assertEqual(e.shape, (2, 384))
        self.assertEqual(e.dtype, np.float32)
        self.assertAllClose(np.linalg.norm(e, axis=1), [1.0, 1.0], atol=1e-6)
        self.assertAllClose(float(e[0] @ e[1]), 0.755, atol=0.001)

    def test_token_ids_equal_tokenizer_json(self):
        ours = self.model.token_ids(SENTENCES)
        reference = _reference_ids(self.model_dir, SENTENCES, self.model.max_seq_length)
        for text, a, b in zip(SENTENCES, ours, reference, strict=True):
            self.assertEqual(a, b, f"token ids differ for {text!r}")
        self.assertLen(ours[-1], 256)  # truncated to max_seq_length with [SEP] kept
        self.assertEqual(ours[3], [101, 102])  # empty sentence

    def test_embed_order_and_batching_do_not_matter(self):
        texts = SENTENCES[:8]
        one = self.model.embed(texts, batch_size=1)
        many = self.model.embed(texts, batch_size=5)
        self.assertAllClose(one, many, atol=2e-5)
        reversed_ = self.model.embed(texts[::-1], batch_size=3)
        self.assertAllClose(reversed_[::-1], one, atol=2e-5)

    def test_full_rank_conversion_of_every_layer_is_exact(self):
        inputs = self.model.tokenize(tf.constant(SENTENCES[:6]))
        before = self.model.encoder(inputs)["sequence_output"].numpy()
        full, reports = compress_encoder(self.model.encoder, 12 * 32, progress=False)
        self.assertEqual([r.method for r in reports], ["exact"] * 6)
        after = full(inputs)["sequence_output"].numpy()
        mask = inputs["input_mask"].numpy().astype(bool)
        self.assertLessEqual(np.abs(after - before)[mask].max(), 1e-4)

    def test_compress_writes_a_loadable_checkpoint_and_report(self):
        out = self.tmp / "c128"
        sentences = SENTENCES[:10]
        report = compress.compress(
            self.model, 128, out, eval_sentences=sentences, progress=False, max_iter=20
        )
        on_disk = json.loads((out / "report.json").read_text())
        self.assertEqual(on_disk["shared_key_dim"], 128)
        self.assertLen(on_disk["layers"], 6)
        self.assertLess(on_disk["params_after"], on_disk["params_before"])
        self.assertBetween(on_disk["embedding_cosine"], 0.5, 1.0)
        loaded = load_sentence_encoder(checkpoint=out)
        self.assertEqual(loaded.encoder.get_config()["attention"]["shared_key_dim"], 128)
        # Reloaded embeddings reproduce the report's cosine against the original.
        cosine = compress.mean_cosine(self.model.embed(sentences), loaded.embed(sentences))
        self.assertAllClose(cosine, report["embedding_cosine"], atol=1e-5)
        with self.assertRaisesRegex(FileExistsError, "exists"):
            compress.compress(self.model, 128, out, progress=False)

    def test_interrupted_compress_leaves_no_output(self):
        out = self.tmp / "broken"

        def fail(*args, **kwargs):
            raise KeyboardInterrupt

        original = SentenceEncoder.checkpoint_config
        SentenceEncoder.checkpoint_config = fail
        try:
            with self.assertRaises(KeyboardInterrupt):
                compress.compress(self.model, 64, out, progress=False, max_iter=2)
        finally:
            SentenceEncoder.checkpoint_config = original
        self.assertFalse(out.exists())
        self.assertEqual([p.name for p in self.tmp.iterdir()], [])

    def test_compressed_checkpoint_initialises_a_train_experiment(self):
        from headsize_tf.configs import experiments  # noqa: F401  (registers experiments)
        from headsize_tf.training import train

        out = self.tmp / "c96"
        compress.compress(self.model, 96, out, progress=False, max_iter=5)
        params = train.build_params(
            "headsize_bert/sentence_prediction", [str(out / "encoder.yaml")]
        )
        from official.core import task_factory

        task = task_factory.get_task(params.task)
        model = task.build_model()
        task.initialize(model)
        loaded = load_sentence_encoder(checkpoint=out)
        inputs = self.model.tokenize(tf.constant(SENTENCES[:3]))
        self.assertAllClose(
            model.checkpoint_items["encoder"](inputs)["sequence_output"],
            loaded.encoder(inputs)["sequence_output"],
            atol=1e-5,
        )
