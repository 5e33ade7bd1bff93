"""`headsize-tf tune`: Keras Tuner trials of a tiny experiment on real Austen text."""

import csv
import json
import pathlib

import pytest
import tensorflow as tf
import yaml

from headsize_tf import cli, tuning
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
LM_TINY = str(ROOT / "official_configs" / "headsize_lm_austen_tiny.yaml")
# A trial is a short run: 12 steps of 4 sequences in one loop, one checkpoint, one
# validation batch (the losses differ by configuration all the same).
SHORT = """
task:
  train_data: {global_batch_size: 4}
trainer:
  train_steps: 12
  validation_steps: 1
  steps_per_loop: 12
  summary_interval: 12
  checkpoint_interval: 12
  validation_interval: 12
  optimizer_config:
    learning_rate: {polynomial: {initial_learning_rate: 0.003, decay_steps: 12}}
    warmup: {polynomial: {warmup_steps: 1}}
"""
SPACE = """
attention_type: [standard, fixed_head, collaborative]
num_heads: [2, 4]
head_size: [16, 64]
shared_key_dim: [16, 32]
"""


class TuneTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _env(self, austen_data_dir, tmp_path, capsys):
        self.data_dir = str(austen_data_dir)
        self.tmp = tmp_path
        self.capsys = capsys
        (tmp_path / "short.yaml").write_text(SHORT)
        (tmp_path / "space.yaml").write_text(SPACE)
        self.configs = [LM_TINY, str(tmp_path / "short.yaml")]

    def _tune(self, *extra):
        argv = [
            "tune",
            "--experiment",
            "headsize_lm/language_modeling",
            "--config_file",
            self.configs[0],
            "--config_file",
            self.configs[1],
            "--search-space",
            str(self.tmp / "space.yaml"),
            "--data-dir",
            self.data_dir,
            "--output",
            str(self.tmp / "tune"),
            *extra,
        ]
        return cli.main(argv)

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_trials_budget_skip_and_best_yaml_trains(self):
        # Four configurations: 2x16 (353,856 params) and 4x16 (370,432) fit 380k;
        # 2x64 (403,584) and 4x64 (469,888) are over budget and must not train.
        (self.tmp / "space.yaml").write_text(
            "attention_type: [fixed_head]\nnum_heads: [2, 4]\nhead_size: [16, 64]\n"
        )
        code = self._tune("--max-trials", "4", "--budget-params", "380000")
        self.assertEqual(code, 0)
        rows = list(csv.DictReader(open(self.tmp / "tune" / "results.csv")))
        by_status = {s: [r for r in rows if r["status"] == s] for s in ("ok", "skipped")}
        self.assertEqual(sorted(int(r["params"]) for r in by_status["ok"]), [353856, 370432])
        self.assertEqual(sorted(int(r["params"]) for r in by_status["skipped"]), [403584, 469888])
        for row in by_status["skipped"]:
            self.assertIn("> budget 380000", row["message"])
            self.assertFalse((self.tmp / "tune" / "trials" / row["trial_id"] / "model").exists())
        losses = [float(r["validation_loss"]) for r in rows if r["status"] == "ok"]
        self.assertEqual(losses, sorted(losses))  # Sorted, best first.
        self.assertIn(f"{losses[0]:.4f}", (self.tmp / "tune" / "results.md").read_text())
        # The best YAML trains with `headsize-tf train` and reproduces the trial.
        result = train.run(
            "headsize_lm/language_modeling",
            str(self.tmp / "best_model"),
            [str(self.tmp / "tune" / "best.yaml")],
            data_dir=self.data_dir,
        )
        self.assertAllClose(result.metrics["validation_loss"], losses[0], rtol=1e-5)
        # A rerun resumes: nothing new is trained.
        self.capsys.readouterr()
        self.assertEqual(self._tune("--max-trials", "4", "--budget-params", "380000"), 0)
        self.assertNotIn("training", self.capsys.readouterr().out)

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_per_layer_heads_under_a_budget(self):
        from headsize_tf import params

        def lm_params(heads):
            spec = params.EncoderSpec(
                vocab_size=4096,
                width=64,
                num_layers=2,
                intermediate_size=256,
                max_sequence_length=128,
                attention=params.AttentionSpec("fixed_head", num_heads=heads, head_size=[16, 16]),
            )
            return params.causal_lm_params(spec).trainable

        (self.tmp / "space.yaml").write_text(
            "attention_type: [fixed_head]\nnum_heads_per_layer: [1, 4]\nhead_size_per_layer: [16]\n"
        )
        budget = lm_params([1, 4]) + 1  # [4, 4] is over it; [1, 1], [1, 4], [4, 1] fit.
        self.assertEqual(self._tune("--max-trials", "4", "--budget-params", str(budget)), 0)
        rows = list(csv.DictReader(open(self.tmp / "tune" / "results.csv")))
        heads = {r["num_heads"]: r for r in rows}
        self.assertEqual(set(heads), {"[1, 1]", "[1, 4]", "[4, 1]", "[4, 4]"})
        self.assertEqual(heads["[4, 4]"]["status"], "skipped")
        for key in ("[1, 1]", "[1, 4]", "[4, 1]"):
            self.assertEqual(heads[key]["status"], "ok")
            self.assertEqual(int(heads[key]["params"]), lm_params(json.loads(key)))
        best = yaml.safe_load((self.tmp / "tune" / "best.yaml").read_text())
        self.assertIsInstance(best["task"]["model"]["attention"]["num_heads"], list)

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_bayesian_with_matched_params(self):
        # The head count is matched, not searched.
        (self.tmp / "space.yaml").write_text(
            "attention_type: [standard, fixed_head]\nhead_size: [16, 64]\n"
        )
        code = self._tune(
            "--tuner",
            "bayesian",
            "--max-trials",
            "2",
            "--budget-params",
            "366000",
            "--match-params",
        )
        self.assertEqual(code, 0)
        rows = list(csv.DictReader(open(self.tmp / "tune" / "results.csv")))
        self.assertLen(rows, 2)
        for row in rows:
            self.assertEqual(row["status"], "ok")
            self.assertLess(abs(int(row["params"]) - 366000), 10000)

    def test_bad_inputs(self):
        (self.tmp / "empty.yaml").write_text("")
        with self.assertRaisesRegex(tuning.SearchSpaceError, "is empty"):
            tuning.SearchSpace.from_yaml(self.tmp / "empty.yaml")
        with self.assertRaisesRegex(
            tuning.SearchSpaceError, r"unknown hyperparameter\(s\) \['heads'\]"
        ):
            tuning.SearchSpace.from_dict({"heads": [2]})
        with self.assertRaisesRegex(tuning.SearchSpaceError, "num_heads has an empty list"):
            tuning.SearchSpace.from_dict({"num_heads": []})
        space = tuning.SearchSpace.from_dict({"num_heads": [2, 4]})
        with self.assertRaisesRegex(
            tuning.SearchSpaceError,
            r"Budget 1,000 params is below the smallest configuration "
            r"of the search space \(370,432 params\)",
        ):
            tuning.tune(
                "headsize_lm/language_modeling",
                space,
                self.tmp / "t",
                config_files=tuple(self.configs),
                budget_params=1000,
                data_dir=self.data_dir,
            )
        self.assertFalse((self.tmp / "t").exists())
        self.assertEqual(self._tune("--tuner", "random", "--match-params"), 2)
        self.assertIn("--match-params needs --budget-params", self.capsys.readouterr().err)
