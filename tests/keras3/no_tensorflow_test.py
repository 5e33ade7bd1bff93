"""The Keras 3 front runs on JAX with TensorFlow absent.

A JAX-only machine (a GPU or TPU image without TensorFlow) imports the layers,
models and tools, converts and prunes a model, tokenizes text (the sentence encoders'
WordPiece on Hugging Face `tokenizers`, the ids tensorflow-text gives:
tests/data/wordpiece_backends_test.py) and trains a reproduction run
(`reproduction --framework keras3`); only the SavedModel export needs TensorFlow, and
says so in one line naming the `tf` extra. On a GPU image with JAX and no
TensorFlow, `headsize_tf.keras3.reparam` imported TensorFlow through the sentence
encoders' WordPiece tokenizer. One fresh Python process, TensorFlow made
unimportable, checks both (a process each would only repeat JAX's and Keras' import),
on JAX's CPU backend; the corpus arrays are exported beforehand, in this process,
with TensorFlow. A failure in the tools part fails both tests, with its traceback.

The base install (`pip install headsize-tf`, then `[jax]`: docs/install.md) has none of
the other extras either: a second process, with every optional package but JAX made
unimportable, imports the Keras 3 front and runs a model, and finds each extra-gated
module failing with one line naming its extra.
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
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
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

# Text: the sentence encoder tokenizes with `tokenizers` (TensorFlow's ids) and embeds.
import pathlib, tempfile
from headsize_tf.core.extras import MissingExtraError
from headsize_tf.data.wordpiece import WordPieceTokenizer
from headsize_tf.keras3.modeling import BertBackbone
from headsize_tf.keras3.pretrained import SentenceEncoder
assert WordPieceTokenizer.__name__ == "HFWordPieceTokenizer", WordPieceTokenizer
vocab = pathlib.Path(tempfile.mkdtemp()) / "vocab.txt"
vocab.write_text("\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "##s", "."]))
backbone = BertBackbone(vocabulary_size=9, num_layers=1, hidden_dim=8, intermediate_dim=16,
                        attention={"kind": "standard", "num_heads": 2}, max_sequence_length=16)
encoder = SentenceEncoder(backbone, vocab)
assert encoder.token_ids(["The cats sat.", "", "Dogs"]) == [
    [2, 4, 5, 7, 6, 8, 3], [2, 3], [2, 1, 3]], encoder.token_ids(["The cats sat.", "", "Dogs"])
assert encoder.embed(["the cat", "cats sat."]).shape == (2, 8)
# Text for `.keras` LMs (`load_lm_text`): the prepared corpora's tokenization, NFKC-folded.
from headsize_tf.data.lm_text import text_windows
from headsize_tf.data.vocab import tokenize_lines
ids = [row.tolist() for row in tokenize_lines(["The cats sat.", "ＣＡＴ"], str(vocab))]
assert ids == [[4, 5, 7, 6, 8], [5]], ids
assert text_windows(["The cats sat.", "the cat"], str(vocab), 3).shape[1] == 3
try:
    import headsize_tf.keras3.serving
except MissingExtraError as err:
    assert str(err).endswith('pip install "headsize-tf[tf]"'), err
else:
    raise AssertionError("headsize_tf.keras3.serving imported without TensorFlow")
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

# The base install plus JAX: every optional package of another extra unimportable.
BLOCK_EXTRAS = """
import sys
from headsize_tf.core.extras import EXTRAS

BLOCKED = {module for module, extra in EXTRAS.items() if extra != "jax"}

class BaseInstall:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, BaseInstall())
"""

BASE = """
import importlib
import numpy as np
import keras
import headsize_tf.keras3.distribution
import headsize_tf.keras3.hub
import headsize_tf.keras3.lm_training
import headsize_tf.keras3.pretrained
import headsize_tf.keras3.pruning
import headsize_tf.keras3.reparam
from headsize_tf.core.extras import MissingExtraError
from headsize_tf.data import gguf_llama, hf_llama_dir, lm_text, plain_text, wordpiece
from headsize_tf.keras3.modeling import CausalLM, DecoderLM

assert keras.backend.backend() == "jax"
assert wordpiece.WordPieceTokenizer.__name__ == "HFWordPieceTokenizer"
lm = CausalLM(vocabulary_size=32, num_layers=1, hidden_dim=16,
              attention={"kind": "standard", "num_heads": 2}, max_sequence_length=8)
assert lm.generate(np.arange(1, 4, dtype="int32")[None], max_new_tokens=2).shape == (1, 5)

def one_line_naming(extra, call):
    try:
        call()
    except ImportError as err:  # MissingExtraError (the keras-hub bridge has its own)
        message = str(err)
        assert "\\n" not in message and message.endswith(f'pip install "headsize-tf[{extra}]"'), message
    else:
        raise AssertionError(f"no error for the {extra} extra")

one_line_naming("tune", lambda: importlib.import_module("headsize_tf.keras3.tuning"))
one_line_naming("tf", lambda: importlib.import_module("headsize_tf.keras3.serving"))
one_line_naming("gguf", lambda: gguf_llama.read_gguf_llama("model.gguf"))
one_line_naming("hub", lambda: headsize_tf.keras3.hub.load_hub_preset("gpt2_base_en"))
loaded = sorted({m.split(".")[0] for m in sys.modules} & BLOCKED)
assert not loaded, loaded
print("base: ok", flush=True)
"""


def test_the_base_install_runs_the_keras3_front_and_names_each_missing_extra():
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_EXTRAS + BASE],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert "base: ok" in done.stdout.splitlines(), done.stderr[-3000:]


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
