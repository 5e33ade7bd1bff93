"""`headsize-tf convert --framework keras3` runs end to end without importing tf_keras."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.keras3.lm_file_test import write_lm_files

SCRIPT = """
import sys
from headsize_tf import cli
code = cli.main(sys.argv[1:])
assert code == 0, code
assert 'tf_keras' not in sys.modules, sorted(m for m in sys.modules if m.startswith('tf_keras'))
assert not any(m.startswith('official') for m in sys.modules)
"""


def test_the_keras3_convert_path_uptrains_without_tf_keras(tmp_path):
    files = write_lm_files(tmp_path)
    out = tmp_path / "out"
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
    done = subprocess.run([sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "KV-cache bytes per token: 256 -> 64 (0.25x)" in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert set(report["perplexity"]) == {"original", "converted", "uptrained"}
    assert report["uptrain_steps"] == 4 and report["source"] == str(files["model"])
