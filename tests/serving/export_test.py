"""`headsize-tf export`: SavedModels served from a process without our code."""

import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from headsize_tf import cli, serving
from headsize_tf.pretrained import load_sentence_encoder
from headsize_tf.pruning import prune
from headsize_tf.training import finetune as ft
from tests import clean_tf
from tests.hf_fixtures import write_checkpoint

TEXTS = ["the cat sat on a mat.", "Dogs!", "", "a DOG, the cat and w3 w4 w5 unknownword"]
SERVE = """
import json, sys
import numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401 (tokeniser ops)
model = tf.saved_model.load(sys.argv[1])
texts = json.loads(sys.argv[2])
out = model.signatures["serving_default"](text=tf.constant(texts))
ids = model.signatures["serve_ids"](input_word_ids=tf.constant(json.loads(sys.argv[3])),
                                   input_mask=tf.constant(json.loads(sys.argv[4])))
np.savez(sys.argv[5], **{f"text_{k}": v.numpy() for k, v in out.items()},
         **{f"ids_{k}": v.numpy() for k, v in ids.items()})
assert "headsize_tf" not in sys.modules and "official" not in sys.modules
"""


def _serve(path, texts, inputs, out):
    ids = inputs["input_word_ids"].numpy().tolist()
    mask = inputs["input_mask"].numpy().tolist()
    clean_tf.run(SERVE, path, json.dumps(texts), json.dumps(ids), json.dumps(mask), out)
    return dict(np.load(out))


class ExportTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _env(self, tmp_path, capsys):
        self.tmp = tmp_path
        self.capsys = capsys
        write_checkpoint(tmp_path / "bert")

    def test_embedding_export_serves_raw_text(self):
        code = cli.main(
            [
                "export",
                "--checkpoint",
                str(self.tmp / "bert"),
                "--task",
                "embedding",
                "--output",
                str(self.tmp / "export"),
            ]
        )
        self.assertEqual(code, 0)
        model = load_sentence_encoder(checkpoint=self.tmp / "bert")
        expected = model.embed(TEXTS)
        inputs = model.tokenize(tf.constant(TEXTS))
        served = _serve(self.tmp / "export" / "1", TEXTS, inputs, self.tmp / "out.npz")
        self.assertAllClose(served["text_embeddings"], expected, atol=1e-5)
        self.assertAllClose(served["ids_embeddings"], expected, atol=1e-5)
        show = clean_tf.run(
            "import runpy\n"
            "runpy.run_module('tensorflow.python.tools.saved_model_cli', run_name='__main__')",
            "show",
            "--dir",
            self.tmp / "export" / "1",
            "--all",
        )
        self.assertIn("signature_def['serving_default']", show)
        self.assertIn("signature_def['serve_ids']", show)
        self.assertIn("outputs['embeddings']", show)

    def test_classifier_export_and_overwrite_rules(self):
        encoder = load_sentence_encoder(checkpoint=self.tmp / "bert")
        classifier = ft.SentenceClassifier(encoder, 2)
        classifier(encoder.tokenize(tf.constant(TEXTS)))
        prune.save_pruned(classifier, self.tmp / "clf", {})
        argv = [
            "export",
            "--checkpoint",
            str(self.tmp / "clf"),
            "--task",
            "sentence_prediction",
            "--output",
            str(self.tmp / "export"),
            "--version",
            "3",
        ]
        self.assertEqual(cli.main(argv), 0)
        inputs = encoder.tokenize(tf.constant(TEXTS))
        logits = classifier(inputs).numpy()
        served = _serve(self.tmp / "export" / "3", TEXTS, inputs, self.tmp / "out.npz")
        self.assertAllClose(served["text_logits"], logits, atol=1e-5)
        self.assertAllClose(served["text_probabilities"], tf.nn.softmax(logits), atol=1e-5)
        self.assertAllClose(served["ids_logits"], logits, atol=1e-5)
        stamp = (self.tmp / "export" / "3" / "saved_model.pb").stat().st_mtime_ns
        self.assertEqual(cli.main(argv), 2)
        self.assertIn("export/3 exists; pass --overwrite", self.capsys.readouterr().err)
        self.assertEqual((self.tmp / "export" / "3" / "saved_model.pb").stat().st_mtime_ns, stamp)
        self.assertEqual(cli.main([*argv, "--overwrite"]), 0)
        self.assertEqual(sorted(p.name for p in (self.tmp / "export").iterdir()), ["3"])
        # A checkpoint without a classifier head cannot be exported as a classifier.
        bad = [
            "export",
            "--checkpoint",
            str(self.tmp / "bert"),
            "--task",
            "sentence_prediction",
            "--output",
            str(self.tmp / "export2"),
        ]
        self.assertEqual(cli.main(bad), 2)
        self.assertIn(
            "needs --model-dir or --checkpoint DIR with a classifier head",
            self.capsys.readouterr().err,
        )

    def test_failed_export_leaves_nothing(self):
        encoder = load_sentence_encoder(checkpoint=self.tmp / "bert")
        module = serving.ServingModule(encoder, "embedding")
        original = tf.saved_model.save

        def broken(*args, **kwargs):
            original(*args, **kwargs)
            raise OSError("disk full")

        tf.saved_model.save = broken
        try:
            with self.assertRaisesRegex(OSError, "disk full"):
                serving.export(module, self.tmp / "export")
        finally:
            tf.saved_model.save = original
        self.assertEqual(list((self.tmp / "export").iterdir()), [])
        with self.assertRaisesRegex(ValueError, "version must be a positive integer; got 0"):
            serving.export(module, self.tmp / "export", version=0)
        with self.assertRaisesRegex(ValueError, "Unknown export task 'masked_lm'"):
            serving.ServingModule(encoder, "masked_lm")
        with self.assertRaisesRegex(ValueError, "task 'lm' needs a model"):
            serving.ServingModule(encoder, "lm")

    def test_export_holds_the_variables_and_masked_gates_not_the_layers(self):
        # The module tracks its models' variables and head gates, not the tf_keras models
        # (whose SavedModel serialisation traces every layer's call again).
        encoder = load_sentence_encoder(checkpoint=self.tmp / "bert")
        # The head's initial weights set how far masking moves the logits: seeded, not
        # left to whatever ran before in this worker.
        tf_keras.utils.set_random_seed(0)
        classifier = ft.SentenceClassifier(encoder, 2)
        inputs = encoder.tokenize(tf.constant(TEXTS))
        full = classifier(inputs).numpy()
        layers = encoder.encoder.attention_layers
        layers[0].set_head_mask(np.eye(layers[0].num_heads)[0])  # One head of layer 0 left.
        masked = classifier(inputs).numpy()
        path = serving.export(
            serving.ServingModule(encoder, "sentence_prediction", classifier), self.tmp / "x"
        )
        loaded = tf.saved_model.load(str(path))
        self.assertFalse(hasattr(loaded, "encoder") or hasattr(loaded, "classifier"))
        gates = {id(layer.head_gates) for layer in layers}
        self.assertLen(loaded.model_variables, len({id(v) for v in classifier.variables} | gates))
        self.assertContainsSubset(
            {layer.head_gates.name for layer in layers}, {v.name for v in loaded.model_variables}
        )
        got = loaded.signatures["serving_default"](text=tf.constant(TEXTS))["logits"]
        self.assertAllClose(got, masked, atol=1e-5)
        nothing = loaded.signatures["serving_default"](text=tf.constant([], tf.string))
        self.assertEqual(nothing["logits"].shape, (0, got.shape[1]))  # No text: no rows.
        # The mask is what was served: it moves the logits by more than 10x the tolerance.
        self.assertGreater(np.abs(masked - full).max(), 1e-4)


LM_TINY = str(
    __import__("pathlib").Path(__file__).resolve().parents[2]
    / "official_configs"
    / "headsize_lm_austen_tiny.yaml"
)


class LanguageModelExportTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _env(self, austen_data_dir, tmp_path):
        self.data_dir = str(austen_data_dir)
        self.tmp = tmp_path

    def test_lm_export_scores_raw_text(self):
        from headsize_tf.data import corpora
        from headsize_tf.training import train

        model_dir = str(self.tmp / "lm")
        train.run(
            "headsize_lm/language_modeling",
            model_dir,
            [LM_TINY],
            "task.model.attention.kind=fixed_head,task.model.attention.head_size=32,"
            "trainer.train_steps=10,trainer.validation_steps=1,trainer.steps_per_loop=5,"
            "trainer.validation_interval=10,trainer.checkpoint_interval=10",
            data_dir=self.data_dir,
        )
        code = cli.main(
            [
                "export",
                "--model_dir",
                model_dir,
                "--task",
                "lm",
                "--output",
                str(self.tmp / "export"),
            ]
        )
        self.assertEqual(code, 0)
        texts = ["It is a truth universally acknowledged.", "Emma Woodhouse, handsome!"]
        tokenizer, lm = serving.experiment_language_model(model_dir)
        inputs = tokenizer.tokenize(tf.constant(texts), add_special_tokens=False)
        ids, mask = inputs["input_word_ids"].numpy(), inputs["input_mask"].numpy()
        vocab = corpora.corpus_path("austen", "vocab.txt", self.data_dir)
        for row, m, reference in zip(ids, mask, corpora.tokenize_lines(texts, vocab), strict=True):
            self.assertEqual(row[: m.sum()].tolist(), reference.tolist())  # as in training
        logits = lm(ids).numpy().astype(np.float64)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        expected = [
            sum(log_probs[b, t - 1, ids[b, t]] for t in range(1, m.sum()))
            for b, m in enumerate(mask)
        ]
        served = _serve(self.tmp / "export" / "1", texts, inputs, self.tmp / "out.npz")
        self.assertAllClose(served["text_log_likelihood"], expected, rtol=1e-5, atol=1e-4)
        self.assertAllClose(served["ids_log_likelihood"], expected, rtol=1e-5, atol=1e-4)
        self.assertAllClose(served["text_num_tokens"], mask.sum(1))
        self.assertAllClose(served["text_next_token_probabilities"].sum(-1), [1.0, 1.0], atol=1e-5)
