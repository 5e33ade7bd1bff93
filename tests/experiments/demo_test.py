"""`headsize-tf demo` end to end (short), and that a rerun reuses the first run."""

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from headsize_tf import cli, params
from headsize_tf.experiments import demo


class DemoTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _env(self, sentiment_data_dir, tmp_path, capsys):
        self.data_dir = str(sentiment_data_dir)
        self.tmp = tmp_path
        self.capsys = capsys

    def test_models_have_equal_parameter_counts(self):
        baseline, candidate = demo.demo_models()
        a = params.encoder_params(baseline.spec()).trainable
        b = params.encoder_params(candidate.spec()).trainable
        self.assertEqual(candidate.head_size, 32)
        self.assertLess(abs(a - b) / a, 0.01)

    def test_demo_runs_exports_and_reruns_quickly(self):
        out = self.tmp / "demo"
        argv = ["demo", "--output", str(out), "--data-dir", self.data_dir, "--steps", "20"]
        self.assertEqual(cli.main(argv), 0)
        printed = self.capsys.readouterr().out
        summary = json.loads((out / "comparison.json").read_text())
        self.assertLen(summary["models"], 2)
        for row in summary["models"]:
            self.assertIn(f"{100 * row['dev_accuracy']:.2f}%", printed)
        self.assertIn(f"exported ({summary['best']}): {summary['export']}", printed)
        self.assertGreater((out / "comparison.png").stat().st_size, 5_000)
        # The export answers raw text in a process without our code.
        code = (
            "import sys, tensorflow as tf, tensorflow_text\n"
            f"m = tf.saved_model.load({summary['export']!r})\n"
            "p = m.signatures['serving_default'](text=tf.constant(['a great film', 'awful']))\n"
            "print(p['probabilities'].numpy().sum(axis=1).tolist())\n"
            "assert 'headsize_tf' not in sys.modules\n"
        )
        done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                              text=True)  # fmt: skip
        self.assertAllClose(json.loads(done.stdout.strip().splitlines()[-1]), [1.0, 1.0],
                            atol=1e-5)  # fmt: skip
        export_time = (out / "export" / "1" / "saved_model.pb").stat().st_mtime_ns
        start = time.perf_counter()
        self.assertEqual(cli.main(argv), 0)
        self.assertLess(time.perf_counter() - start, 30)
        rerun = self.capsys.readouterr().out
        self.assertEqual(rerun.count("reusing"), 2)
        self.assertNotIn("training", rerun)
        self.assertEqual((out / "export" / "1" / "saved_model.pb").stat().st_mtime_ns, export_time)
        again = json.loads((out / "comparison.json").read_text())
        self.assertEqual(
            [r["dev_accuracy"] for r in again["models"]],
            [r["dev_accuracy"] for r in summary["models"]],
        )
        self.assertTrue(np.isfinite(again["seconds"]))
