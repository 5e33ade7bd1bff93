"""The Keras 3 front runs on JAX with TensorFlow absent.

A JAX-only machine (a GPU or TPU image without TensorFlow) imports the layers,
models and tools, converts and prunes a model, and trains a reproduction run
(`reproduction --framework keras3`); only text tokenization and the SavedModel
export need TensorFlow. On a GPU image with JAX and no
TensorFlow, `headsize_tf.keras3.reparam` imported TensorFlow through the sentence
encoders' WordPiece tokenizer. One fresh Python process, TensorFlow made
unimportable, checks both (a process each would only repeat JAX's and Keras' import),
on JAX's CPU backend; the corpus arrays are exported beforehand, in this process,
with TensorFlow. A failure in the tools part fails both tests, with its traceback.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

BLOCK_TENSORFLOW = """
import sys

class NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text", "tf_keras", "official"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, NoTensorFlow())
"""

TOOLS = """
import numpy as np
import keras
import headsize_tf.keras3.distribution
import headsize_tf.keras3.hub
import headsize_tf.keras3.pretrained
import headsize_tf.keras3.tuning
from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.keras3.modeling import CausalLM
from headsize_tf.keras3.pruning import remove_heads, set_head_mask
from headsize_tf.keras3.reparam import compress_backbone, convert_model

assert keras.backend.backend() == "jax"
keras.utils.set_random_seed(0)
lm = CausalLM(vocabulary_size=32, num_layers=1, hidden_dim=16,
              attention={"kind": "standard", "num_heads": 2}, max_sequence_length=8)
ids = np.arange(1, 7, dtype="int32")[None]
full = keras.ops.convert_to_numpy(lm(ids))
for target in (ConversionTarget("latent", 16), ConversionTarget("grouped", 2)):
    converted = convert_model(lm, target)[0]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(converted(ids)), full, atol=1e-5)
collaborative = compress_backbone(lm, 16)[0]
np.testing.assert_allclose(keras.ops.convert_to_numpy(collaborative(ids)), full, atol=1e-5)
mask = np.array([[1.0, 0.0]], "float32")
set_head_mask(lm, mask)
masked = keras.ops.convert_to_numpy(lm(ids))
pruned = remove_heads(lm)
np.testing.assert_allclose(keras.ops.convert_to_numpy(pruned(ids)), masked, atol=1e-5)
assert tuple(pruned.attention_spec.num_heads) == (1,), pruned.attention_spec
assert not [m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tf_keras")]
print("tools: ok", flush=True)
"""


@pytest.fixture(scope="module")
def run(austen_data_dir, tmp_path_factory):
    from headsize_tf.experiments import lm_keras3

    root = tmp_path_factory.mktemp("no_tensorflow")
    data_dir = root / "data"  # A private copy: the runner writes its arrays into it.
    shutil.copytree(austen_data_dir, data_dir)
    lm_keras3.export_lm_arrays(data_dir / "austen")  # Done where TensorFlow is.
    out = root / "out"
    reproduction = textwrap.dedent(f"""
        from headsize_tf.experiments.reproduction.__main__ import main
        code = main(["--preset", "test", "--output", {str(out)!r},
                     "--work-dir", {str(root / "work")!r},
                     "--data-dir", {str(data_dir)!r}, "--framework", "keras3",
                     "--max-runs", "1", "--keys", "std_w16_h4_p4"])
        assert "tensorflow" not in sys.modules
        raise SystemExit(code)
    """)
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_TENSORFLOW + TOOLS + reproduction],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    return done, out


pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="no jax")


def test_the_keras3_tools_convert_and_prune_on_jax_without_tensorflow(run):
    done, _ = run
    assert "tools: ok" in done.stdout.splitlines(), done.stderr[-3000:]


def test_a_jax_reproduction_run_needs_no_tensorflow(run):
    done, out = run
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = (out / "runs").glob("*.json")
    record = json.loads(path.read_text())
    assert (record["framework"], record["backend"], record["key"]) == (
        "keras3",
        "jax",
        "std_w16_h4_p4",
    )
    assert np.isfinite(record["test_perplexity"])
