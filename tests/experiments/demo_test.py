"""`headsize-tf demo`: its bookkeeping, and end to end (tiny settings): the three ideas, one
table, export, reuse."""

import dataclasses
import json
import re
import time
from unittest import mock

import pytest
import tensorflow as tf

from headsize_tf import cli, params
from headsize_tf.experiments import demo

TINY = demo.DemoSettings(
    steps=2,
    finetune_steps=2,
    prune_fraction=0.1,
    importance_examples=32,
    speed_repeats=1,
    dev_examples=64,
    cp_max_iter=3,
)


def test_models_have_equal_parameter_counts():
    baseline, candidate = demo.demo_models()
    a = params.encoder_params(baseline.spec()).trainable
    b = params.encoder_params(candidate.spec()).trainable
    assert candidate.head_size == 32
    assert abs(a - b) / a < 0.01


def test_cli_flags_make_the_settings():
    with mock.patch.object(demo, "run_demo") as run:
        assert cli.main(["demo", "--quick", "--output", "o"]) == 0
        assert run.call_args.args[2] == demo.DemoSettings(steps=300, finetune_steps=60)
        cli.main(["demo", "--quick", "--steps", "5", "--prune-fraction", "0.2"])
        assert run.call_args.args[2] == demo.DemoSettings(
            steps=5, finetune_steps=60, prune_fraction=0.2
        )
        cli.main(["demo"])
        assert run.call_args.args[2] == demo.DemoSettings()


def _fake_steps(monkeypatch, calls: list[str]) -> None:
    """The demo's steps as records made at once (their work is tested on its own and end to
    end below): what is left is the demo's own bookkeeping."""

    def record(slug, idea, **extra):
        calls.append(slug)
        return {"idea": idea, "name": slug, "dev_accuracy": 0.5, "encoder_params": 10, **extra}

    def train_small(model, slug, output, data_dir, settings):
        return record(slug, "fixed head size", kind="experiment", model_dir=str(output / slug))

    def finetune_minilm(directory, shared_key_dim, data_dir, settings, in_memory=None):
        return record(directory.name, "collaborative heads", kind="classifier")

    def measure_speed(rows, data_dir, repeats, dev_examples, in_memory=None):
        calls.append("speed")
        models = {r["slug"]: {"examples_per_second": 100.0, "attention_params": 7} for r in rows}
        return {"models": models}

    def export_pruned(pruned_dir, export_dir):
        calls.append("export")
        return {"export": str(export_dir / "1")}

    monkeypatch.setattr("headsize_tf.data.corpora.prepare", lambda name, data_dir: None)
    steps = demo.steps
    monkeypatch.setattr(steps, "train_small", train_small)
    monkeypatch.setattr(steps, "finetune_minilm", finetune_minilm)
    monkeypatch.setattr(
        steps, "prune_minilm", lambda output, data_dir, settings: record("pruned", "head pruning")
    )
    monkeypatch.setattr(steps, "measure_speed", measure_speed)
    monkeypatch.setattr(steps, "export_pruned", export_pruned)


def test_a_rerun_reuses_each_step_and_redoes_what_a_setting_changes(tmp_path, capsys, monkeypatch):
    calls: list[str] = []
    _fake_steps(monkeypatch, calls)
    out = tmp_path / "demo"
    order = ["standard", "fixed_head", "minilm", "collaborative", "pruned", "speed", "export"]
    summary = demo.run_demo(out, None, TINY, quiet=False)
    assert calls == order and summary["redone"] == order
    assert [r["slug"] for r in summary["models"]] == order[:5]
    assert all(r["examples_per_second"] == 100.0 for r in summary["models"])
    assert json.loads((out / "summary.json").read_text())["models"] == summary["models"]
    table = (out / "summary.md").read_text().splitlines()
    assert len(table) == 2 + 5 and table[2].startswith("| fixed head size | standard | 10 | 7 |")
    assert (out / "summary.png").stat().st_size > 10_000
    printed = capsys.readouterr().out
    for line in printed.splitlines():
        assert re.match(r"^(\[\d/\d\] |      done in |\||$|plot: |exported |total )", line), line
    assert printed.count(" ...\n") == demo.STAGES - 1
    # The same settings: every record is reused, nothing is made again.
    calls.clear()
    again = demo.run_demo(out, None, TINY, quiet=False)
    assert (calls, again["redone"]) == ([], [])
    assert again["models"] == summary["models"]
    assert capsys.readouterr().out.count("reusing") == demo.STAGES - 1
    # Another pruning fraction: the pruned model, then the side-by-side speeds and the export.
    changed = dataclasses.replace(TINY, prune_fraction=0.2)
    assert demo.run_demo(out, None, changed, quiet=False)["redone"] == ["pruned", "speed", "export"]
    # More training steps: the two small models and the speeds; the export is the pruned one's.
    more = dataclasses.replace(changed, steps=3)
    assert demo.run_demo(out, None, more, quiet=False)["redone"] == [
        "standard",
        "fixed_head",
        "speed",
    ]


class DemoTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _env(self, sentiment_data_dir, minilm_dir, tmp_path, capfd, monkeypatch):
        self.data_dir = str(sentiment_data_dir)
        # The demo fetches MiniLM into the cache: the run's shared copy is that cache.
        monkeypatch.setenv("HEADSIZE_TF_CACHE_DIR", str(minilm_dir.parent))
        self.tmp = tmp_path
        self.capsys = capfd  # File descriptors: native (C++) log lines are seen too.

    # The demo on real text and the pretrained MiniLM (about 3 minutes on 2 cores): in the
    # full run (docs/testing.md); its steps run in the default run on their own.
    @pytest.mark.slow
    def test_three_ideas_one_table_export_and_reuse(self):
        out = self.tmp / "demo"
        summary = demo.run_demo(out, self.data_dir, TINY)
        printed, errors = self.capsys.readouterr()
        # Only the demo's own progress and results: TensorFlow's and the trainer's logs
        # go to files under logs/.
        self.assertEqual(errors, "")
        for line in printed.splitlines():
            self.assertRegex(line, r"^(\[\d/\d\] |      done in |\||$|plot: |exported |total )")
        self.assertTrue((out / "logs" / "standard.log").read_text().count("train | step:"))
        rows = {r["slug"]: r for r in summary["models"]}
        self.assertEqual(
            list(rows), ["standard", "fixed_head", "minilm", "collaborative", "pruned"]
        )
        self.assertEqual(
            json.loads((out / "summary.json").read_text())["models"], summary["models"]
        )
        for row in rows.values():
            self.assertBetween(row["dev_accuracy"], 0.0, 1.0)
            # Every row is scored on the same first `dev_examples` snippets (64 here).
            hits = row["dev_accuracy"] * TINY.dev_examples
            self.assertAlmostEqual(hits, round(hits), places=3, msg=row["slug"])
            self.assertGreater(row["examples_per_second"], 0)
            line = next(
                x
                for x in printed.splitlines()
                if x.startswith(f"| {row['idea']} | {row['name']} |")
            )
            self.assertIn(f"{100 * row['dev_accuracy']:.2f}%", line)
            self.assertIn(f"{row['attention_params']:,}", line)
        # Idea 1: equal encoder parameters.
        self.assertLess(
            abs(rows["standard"]["encoder_params"] - rows["fixed_head"]["encoder_params"])
            / rows["standard"]["encoder_params"],
            0.01,
        )
        # Idea 2: D = 192 shares half of MiniLM's query/key dimensions: per layer W_Q, W_K
        # go from 384 x 384 (+ biases) to 384 x 192, plus a 12 x 192 mixing matrix and a
        # 384 x 12 content bias.
        minilm_attention = rows["minilm"]["attention_params"]
        self.assertEqual(
            minilm_attention - rows["collaborative"]["attention_params"],
            6 * (2 * 384 * (384 - 192) + 2 * 384 - 12 * 192 - 384 * 12),
        )
        self.assertBetween(rows["collaborative"]["cp_relative_error"], 0.05, 0.9)
        # Idea 3: 10% of 72 heads pruned and removed: 7 heads of 4 x 32 x 384 + 3 x 32 weights.
        self.assertIn("(65 of 72 kept)", rows["pruned"]["name"])
        self.assertEqual(
            minilm_attention - rows["pruned"]["attention_params"], 7 * (4 * 32 * 384 + 3 * 32)
        )
        self.assertEqual([p["fraction"] for p in rows["pruned"]["curve"]][0], 0.0)
        self.assertGreater((out / "summary.png").stat().st_size, 10_000)
        self.assertGreater((out / "importance.png").stat().st_size, 5_000)
        self.assertIn(f"exported (pruned MiniLM, raw text in): {summary['export']}", printed)

        # The export answers raw text (tests/serving/export_test.py serves the same kind of
        # export from a process without our code).
        served = tf.saved_model.load(summary["export"]).signatures["serving_default"](
            text=tf.constant(["a great film", "awful"])
        )
        self.assertAllClose(served["probabilities"].numpy().sum(axis=1), [1.0, 1.0], atol=1e-5)

        # A rerun with the same settings reuses every step (nothing trained or written).
        export_time = (out / "export" / "1" / "saved_model.pb").stat().st_mtime_ns
        start = time.perf_counter()
        again = demo.run_demo(out, self.data_dir, TINY)
        self.assertLess(time.perf_counter() - start, 30)
        rerun = self.capsys.readouterr().out
        self.assertEqual(rerun.count("reusing"), demo.STAGES - 1)
        self.assertEqual(again["redone"], [])
        self.assertEqual((out / "export" / "1" / "saved_model.pb").stat().st_mtime_ns, export_time)
        self.assertEqual(again["models"], summary["models"])
