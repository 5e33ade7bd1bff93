"""The Keras 3 CLI paths never import tf_keras (or Model Garden).

`headsize-tf prune --framework keras3` and `export --framework keras3` import and parse
without it, and `headsize-tf convert --framework keras3` runs end to end (convert,
uptrain, report) without it. One fresh Python process checks both (a process each
would only repeat TensorFlow's and Keras' import); the export's run itself is checked
without tf_keras in `serving/serving_test.py`'s JAX subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.keras3.reparam.lm_file_test import write_lm_files

SCRIPT = """
import sys
from headsize_tf.cli import build_parser, prune
from headsize_tf.data.text_tasks import load_task
from headsize_tf.core import prune_loop, prune_report
import headsize_tf.keras3.pruning.classifier
import headsize_tf.cli._prune_keras3
build_parser().parse_args(
    ['prune', '--framework', 'keras3', '--model', 'minilm-l6', '--output', 'out']
)
from headsize_tf.cli import export
import headsize_tf.keras3.serving
assert 'tf_keras' not in sys.modules, sorted(m for m in sys.modules if m.startswith('tf_keras'))
print('prune and export: no tf_keras', flush=True)

from headsize_tf import cli
code = cli.main(sys.argv[1:])
assert code == 0, code
assert 'tf_keras' not in sys.modules, sorted(m for m in sys.modules if m.startswith('tf_keras'))
assert not any(m.startswith('official') for m in sys.modules)
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("no_tf_keras")
    files = write_lm_files(root)
    out = root / "out"
    argv = [
        "convert",
        "--framework",
        "keras3",
        "--model",
        str(files["model"]),
        "--to",
        "latent",
        "--kv-rank",
        "8",
        "--output",
        str(out),
        "--data-file",
        str(files["text"]),
        "--vocab",
        str(files["vocab"]),
        "--uptrain-steps",
        "4",
        "--batch-size",
        "4",
        "--decode-tokens",
        "4",
    ]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, timeout=600
    )
    return done, files, out


def test_the_keras3_prune_and_export_paths_do_not_import_tf_keras(run):
    done, _, _ = run
    assert "prune and export: no tf_keras" in done.stdout, done.stderr[-2000:]


def test_the_keras3_convert_path_uptrains_without_tf_keras(run):
    done, files, out = run
    assert done.returncode == 0, done.stderr[-2000:]
    assert "KV-cache bytes per token: 256 -> 64 (0.25x)" in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert set(report["perplexity"]) == {"original", "converted", "uptrained"}
    assert report["uptrain_steps"] == 4 and report["source"] == str(files["model"])
