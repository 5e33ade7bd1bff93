"""`headsize-tf embed`, `compress` and `analyze spectrum` on the real MiniLM."""

import json

import numpy as np
import pytest
import tensorflow as tf

from headsize_tf import cli


class PretrainedCliTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _env(self, minilm, minilm_dir, tmp_path, monkeypatch, capsys):
        monkeypatch.setenv("HEADSIZE_TF_CACHE_DIR", str(minilm_dir.parent))
        self.model = minilm
        self.tmp = tmp_path
        self.capsys = capsys

    def test_embed_keeps_order_and_empty_lines(self):
        lines = ["A man is eating food.", "", "A man is eating a piece of bread.", "Zebras!"]
        (self.tmp / "in.txt").write_text("\n".join(lines) + "\n")
        code = cli.main(
            [
                "embed",
                "--model",
                "minilm-l6",
                "--input",
                str(self.tmp / "in.txt"),
                "--output",
                str(self.tmp / "out.npy"),
                "--batch-size",
                "3",
            ]
        )
        self.assertEqual(code, 0)
        vectors = np.load(self.tmp / "out.npy")
        self.assertEqual(vectors.shape, (4, 384))
        self.assertEqual(vectors.dtype, np.float32)
        self.assertAllClose(vectors, self.model.embed(lines), atol=2e-5)
        self.assertAllClose(float(vectors[0] @ vectors[2]), 0.755, atol=0.001)

    def test_embed_bad_input(self):
        code = cli.main(
            [
                "embed",
                "--model",
                "minilm-l6",
                "--input",
                str(self.tmp / "none.txt"),
                "--output",
                str(self.tmp / "o.npy"),
            ]
        )
        self.assertEqual(code, 2)
        self.assertIn("none.txt' does not exist", self.capsys.readouterr().err)
        self.assertFalse((self.tmp / "o.npy").exists())
        (self.tmp / "x.txt").write_text("hello\n")
        code = cli.main(
            [
                "embed",
                "--checkpoint",
                str(self.tmp),
                "--input",
                str(self.tmp / "x.txt"),
                "--output",
                str(self.tmp / "y.npy"),
            ]
        )
        self.assertEqual(code, 2)
        self.assertIn("config.json", self.capsys.readouterr().err)

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_compress_then_embed_from_the_checkpoint(self):
        (self.tmp / "eval.txt").write_text("a fine film\nthe plot is thin\nI loved it\n")
        out = self.tmp / "c192"
        code = cli.main(
            [
                "compress",
                "--model",
                "minilm-l6",
                "--shared-key-dim",
                "192",
                "--output",
                str(out),
                "--eval-file",
                str(self.tmp / "eval.txt"),
                "--max-iter",
                "10",
            ]
        )
        self.assertEqual(code, 0)
        report = json.loads((out / "report.json").read_text())
        self.assertEqual(report["eval_sentences"], 3)
        self.assertIn(f"{report['embedding_cosine']:.4f}", self.capsys.readouterr().out)
        code = cli.main(
            [
                "embed",
                "--checkpoint",
                str(out),
                "--input",
                str(self.tmp / "eval.txt"),
                "--output",
                str(self.tmp / "e.npy"),
            ]
        )
        self.assertEqual(code, 0)
        original = self.model.embed(["a fine film", "the plot is thin", "I loved it"])
        cosine = np.mean(np.sum(np.load(self.tmp / "e.npy") * original, axis=1))
        self.assertAllClose(cosine, report["embedding_cosine"], atol=1e-5)
        with self.assertRaises(SystemExit) as exit_:
            cli.main(
                [
                    "compress",
                    "--model",
                    "minilm-l6",
                    "--shared-key-dim",
                    "0",
                    "--output",
                    str(self.tmp / "bad"),
                ]
            )
        self.assertEqual(exit_.exception.code, 2)
        self.assertIn(
            "--shared-key-dim: expected a positive integer, got '0'", self.capsys.readouterr().err
        )
        self.assertFalse((self.tmp / "bad").exists())

    def test_spectrum(self):
        code = cli.main(
            [
                "analyze",
                "spectrum",
                "--model",
                "minilm-l6",
                "--output",
                str(self.tmp / "spectrum.png"),
            ]
        )
        self.assertEqual(code, 0)
        data = json.loads((self.tmp / "spectrum.json").read_text())
        self.assertLen(data["layers"], 6)
        for layer in data["layers"]:
            self.assertLen(layer["per_head"], 32)
            self.assertLen(layer["concatenated_key"], 384)
            self.assertAllClose(layer["concatenated_key"][-1], 1.0)
            self.assertTrue(np.all(np.diff(layer["concatenated_key"]) >= -1e-9))
        self.assertGreater((self.tmp / "spectrum.png").stat().st_size, 10_000)
