"""`headsize-tf prune --framework keras3` (and `export --framework keras3`) never import tf_keras.

The export's run itself is checked without tf_keras in `serving_test.py`'s JAX subprocess.
"""

from __future__ import annotations

import subprocess
import sys

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
"""


def test_the_keras3_prune_and_export_paths_do_not_import_tf_keras():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
