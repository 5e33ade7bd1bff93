"""`headsize-tf prune` end to end on a tiny BERT checkpoint and real Rotten Tomatoes data."""

import json

import numpy as np
import pytest
import tensorflow as tf

from headsize_tf import cli
from headsize_tf.data.text_tasks import rotten_tomatoes_splits
from headsize_tf.pruning import head_mask, prune
from headsize_tf.training import finetune as ft
from tests.hf_fixtures import write_checkpoint


class PruneCliTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _env(self, tmp_path, capsys):
        self.tmp = tmp_path
        self.capsys = capsys

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_prune_writes_a_smaller_equivalent_model(self):
        write_checkpoint(self.tmp / "bert")
        out = self.tmp / "pruned"
        argv = [
            "prune",
            "--checkpoint",
            str(self.tmp / "bert"),
            "--data-dir",
            str(self.tmp / "data"),
            "--target-fraction",
            "0.5",
            "--step",
            "0.25",
            "--finetune-epochs",
            "0.03",
            "--importance-examples",
            "64",
            "--output",
            str(out),
        ]
        self.assertEqual(cli.main(argv), 0)
        report = json.loads((out / "report.json").read_text())
        self.assertEqual([p["fraction"] for p in report["curve"]], [0.0, 0.25, 0.5])
        self.assertEqual([p["heads_pruned"] for p in report["curve"]], [0, 2, 4])
        self.assertEqual(np.asarray(report["importance"]).shape, (2, 4))
        self.assertEqual(sum(len(h) for h in report["pruned_heads"]), 4)
        self.assertTrue(all(len(h) <= 3 for h in report["pruned_heads"]))  # >= 1 head kept
        self.assertLess(report["params"]["pruned"], report["params"]["original"])
        self.assertAllClose(report["accuracy"]["pruned"], report["accuracy"]["masked"], atol=1e-9)
        for plot in ("importance.png", "curve.png"):
            self.assertGreater((out / plot).stat().st_size, 5_000)
        model = prune.load_classifier(out)
        self.assertEqual(int((head_mask(model.encoder) == 0).sum()), 4)
        splits = rotten_tomatoes_splits(self.tmp / "data")
        ids = ft.tokenize_all(model.sentence_encoder, splits["dev"][0], 64)
        self.assertAllClose(ft.accuracy(model, ids, splits["dev"][1]), report["accuracy"]["pruned"])
        self.assertEqual(cli.main(argv), 2)
        self.assertIn("exists; pass --overwrite", self.capsys.readouterr().err)
        # A pruned model prunes further: it starts from its removed heads.
        again = self.tmp / "pruned_again"
        argv = [
            "prune",
            "--checkpoint",
            str(out),
            "--data-dir",
            str(self.tmp / "data"),
            "--target-fraction",
            "0.75",
            "--step",
            "0.25",
            "--importance-examples",
            "64",
            "--output",
            str(again),
        ]
        self.assertEqual(cli.main(argv), 0)
        report2 = json.loads((again / "report.json").read_text())
        self.assertEqual([p["heads_pruned"] for p in report2["curve"]], [4, 4, 4, 6])
        self.assertAllClose(report2["curve"][0]["metric"], report["accuracy"]["pruned"])
        kept = [set(range(4)) - set(h) for h in report2["pruned_heads"]]
        self.assertEqual(sum(len(k) for k in kept), 2)
        first = [set(range(4)) - set(h) for h in report["pruned_heads"]]
        self.assertTrue(all(k <= f for k, f in zip(kept, first, strict=True)))

    def test_bad_fractions(self):
        for flag, value in (("--target-fraction", "1.0"), ("--step", "-0.1")):
            with self.assertRaises(SystemExit):
                cli.main(["prune", "--model", "minilm-l6", flag, value, "--output", "x"])
            self.assertIn(
                f"expected a fraction in [0, 1), got '{value}'", self.capsys.readouterr().err
            )
