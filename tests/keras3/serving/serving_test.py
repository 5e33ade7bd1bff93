"""`headsize-tf export --framework keras3`: Keras 3 models served by a process without our code.

Tiny models of the TensorFlow backend (exported in this process) and of the
JAX backend (built and exported in a `KERAS_BACKEND=jax` subprocess, which
rebuilds them on TensorFlow in a further subprocess) are exported through the
CLI, their sources deleted, and every export is loaded with `tensorflow` and
`tensorflow_text` alone in one fresh process; its outputs are compared with
the Keras models' own (embeddings, logits and log-likelihoods numerically,
greedy continuations token for token against `CausalLM.generate`). This file
is not in `jax_backend_test.JAX_GROUPS`: its JAX case is the subprocess here
(the in-process exports would only repeat it through slower subprocesses).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from headsize_tf import cli
from headsize_tf.data.vocab import tokenize_lines
from headsize_tf.keras3.layers import CollaborativeAttention, FixedHeadAttention
from headsize_tf.keras3.modeling import BertBackbone, CausalLM
from headsize_tf.keras3.pretrained import SentenceEncoder
from headsize_tf.keras3.pruning.classifier import HEAD_FILE, classifier
from tests import clean_tf

ROOT = pathlib.Path(__file__).resolve().parents[3]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "."]
VOCAB += ["##s", "a", "dog", ","] + [f"w{i}" for i in range(25)]
TEXTS = ["the cat sat on a mat.", "Dogs!", "", "a DOG, the cat and w3 w4 w5 unknownword"]
PROMPTS = ["the cat sat on the mat", "dogs"]  # Of 6 and 2 tokens, served in one batch.
LL_TEXTS = [*PROMPTS, ""]
NEW_TOKENS, LENGTH = 6, 24
TASKS = ("embedding", "sentence_prediction", "lm")
# The JAX run exports the classifier (the encoder's tokenizer and backbone with a head)
# and the LM: the embedding export adds only pooling, tested on TensorFlow.
JAX_TASKS = ("sentence_prediction", "lm")


def numpy(x) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def write_sources(directory: pathlib.Path, tasks=TASKS) -> dict[str, np.ndarray]:
    """Tiny models saved as the CLI reads them; returns their own outputs (this backend)."""
    directory.mkdir(parents=True)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    keras.utils.set_random_seed(0)
    backbone = BertBackbone(
        vocabulary_size=len(VOCAB),
        num_layers=2,
        hidden_dim=16,
        intermediate_dim=32,
        attention={"kind": "collaborative", "num_heads": 4, "shared_key_dim": 8},
        max_sequence_length=LENGTH,
    )
    encoder = SentenceEncoder(backbone, vocab)
    encoder.save(directory / "encoder")
    model = classifier(backbone, 3)
    encoder.save(directory / "classifier")  # The layout of `prune --framework keras3`.
    kernel, bias = (numpy(w) for w in model.get_layer("logits").weights)
    np.savez(directory / "classifier" / HEAD_FILE, kernel=kernel, bias=bias)
    lm = CausalLM(
        vocabulary_size=len(VOCAB),
        num_layers=2,
        hidden_dim=16,
        attention={"kind": "fixed_head", "num_heads": [2, 4], "head_size": 8},
        max_sequence_length=LENGTH,
        initializer_range=0.5,  # Logits far apart: greedy choices are not near-ties.
    )
    lm.save(str(directory / "lm.keras"))

    # Compiled calls (`predict_on_batch`, `generate`): one compilation per shape on JAX.
    inputs = encoder.tokenize(TEXTS)
    lm_inputs = encoder.tokenizer.tokenize(LL_TEXTS, LENGTH, add_special_tokens=False)
    ids, mask = lm_inputs["input_word_ids"].numpy(), lm_inputs["input_mask"].numpy()
    logits = np.asarray(lm.predict_on_batch(ids), np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    log_likelihood = [
        sum(log_probs[b, t - 1, ids[b, t]] for t in range(1, m.sum())) for b, m in enumerate(mask)
    ]
    greedy = []
    for row, m in zip(ids[: len(PROMPTS)], mask, strict=False):
        prompt = row[None, : m.sum()]
        greedy.append(lm.generate(prompt, NEW_TOKENS)[0, prompt.shape[1] :])
    reference = {
        "encoder_ids": inputs["token_ids"],
        "encoder_mask": inputs["padding_mask"],
        "logits": np.asarray(model.predict_on_batch(inputs)),
        "lm_ids": ids,
        "lm_mask": mask,
        "log_likelihood": np.array(log_likelihood),
        "greedy": np.array(greedy),
    }
    if "embedding" in tasks:
        reference["embeddings"] = encoder.embed(TEXTS)
    return reference


def cli_exports(sources: pathlib.Path, output: pathlib.Path, tasks=TASKS) -> list[list[str]]:
    """`headsize-tf export --framework keras3` of each task's source."""
    source = {
        "embedding": ["--checkpoint", str(sources / "encoder")],
        "sentence_prediction": ["--checkpoint", str(sources / "classifier"), "--version", "2"],
        "lm": ["--checkpoint", str(sources / "lm.keras")]
        + ["--vocab-file", str(sources / "vocab.txt")],
    }
    return [
        ["export", "--framework", "keras3", "--task", task, "--output", str(output / task)]
        + source[task]
        for task in tasks
    ]


# Builds and exports the JAX models (backend from the environment), runs the plain
# `model.export` test, then checks that the Keras 3 export path never imported tf_keras.
JAX_RUN = """
import sys, pathlib, numpy as np
import tests.keras3.conftest  # noqa: F401 (the Keras 3 tests' JAX settings: compilation cache)
from headsize_tf import cli
from tests.keras3.serving import serving_test as t
out = pathlib.Path(sys.argv[1])
reference = t.write_sources(out / "src", t.JAX_TASKS)
for argv in t.cli_exports(out / "src", out / "export", t.JAX_TASKS):
    assert cli.main(argv) == 0, argv
np.savez(out / "reference.npz", **reference)
t.test_plain_keras_export_of_a_model_with_our_layers(out / "plain")
import keras
assert keras.backend.backend() == "jax", keras.backend.backend()
assert "tf_keras" not in sys.modules, sorted(m for m in sys.modules if m.startswith("tf_keras"))
"""

# Loads every export with TensorFlow alone and runs the signatures of a job file.
SERVE = """
import json, sys
import numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401 (tokeniser ops)
jobs = json.loads(open(sys.argv[1]).read())
arrays, strings, errors, loaded = {}, {}, {}, {}
for name, (path, signature, inputs) in jobs.items():
    if path not in loaded:
        loaded[path] = tf.saved_model.load(path)
    args = {k: tf.constant(value, dtype=dtype) for k, (value, dtype) in inputs.items()}
    try:
        out = loaded[path].signatures[signature](**args)
    except tf.errors.InvalidArgumentError as err:
        errors[name] = err.message
        continue
    for key, value in out.items():
        if value.dtype == tf.string:
            strings[f"{name}/{key}"] = [s.decode() for s in value.numpy().tolist()]
        else:
            arrays[f"{name}/{key}"] = value.numpy()
np.savez(sys.argv[2], **arrays)
signatures = {path: sorted(model.signatures) for path, model in loaded.items()}
imported = sorted(m for m in sys.modules if m.split(".")[0] in ("headsize_tf", "tf_keras", "keras"))
info = {"strings": strings, "errors": errors, "signatures": signatures, "imported": imported}
open(sys.argv[3], "w").write(json.dumps(info))
"""


def _jobs(export: pathlib.Path, reference: dict[str, np.ndarray], tasks) -> dict:
    def text(texts):
        return {"text": (list(texts), "string")}

    def ids(prefix):
        return {
            "input_word_ids": (reference[f"{prefix}_ids"].tolist(), "int32"),
            "input_mask": (reference[f"{prefix}_mask"].tolist(), "int32"),
        }

    embedding, classifier_dir, lm = (
        str(export / "embedding" / "1"),
        str(export / "sentence_prediction" / "2"),
        str(export / "lm" / "1"),
    )
    jobs = {
        "embedding_text": (embedding, "serving_default", text(TEXTS)),
        "embedding_ids": (embedding, "serve_ids", ids("encoder")),
        "classifier_text": (classifier_dir, "serving_default", text(TEXTS)),
        "classifier_ids": (classifier_dir, "serve_ids", ids("encoder")),
        "lm_text": (lm, "serving_default", text(LL_TEXTS)),
        "lm_ids": (lm, "serve_ids", ids("lm")),
        "generate": (lm, "generate", {**text(PROMPTS), "max_new_tokens": (NEW_TOKENS, "int32")}),
        "too_long": (lm, "generate", {**text(PROMPTS), "max_new_tokens": (LENGTH, "int32")}),
        "empty_prompt": (lm, "generate", {**text(["", "dogs"]), "max_new_tokens": (2, "int32")}),
        "negative": (lm, "generate", {**text(PROMPTS), "max_new_tokens": (-1, "int32")}),
        "ids_too_long": (
            lm,
            "serve_ids",
            {
                "input_word_ids": (np.ones([1, LENGTH + 1], int).tolist(), "int32"),
                "input_mask": (np.ones([1, LENGTH + 1], int).tolist(), "int32"),
            },
        ),
    }
    task_of = {"embedding": "embedding", "classifier": "sentence_prediction"}
    return {
        name: job for name, job in jobs.items() if task_of.get(name.split("_")[0], "lm") in tasks
    }


def _jax_available() -> bool:
    return keras.backend.backend() != "jax" and importlib.util.find_spec("jax") is not None


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Exports of both backends, their sources deleted, served by one TensorFlow-only process."""
    root = tmp_path_factory.mktemp("keras3_serving")
    runs = {}
    if _jax_available():  # Runs while this process exports its own models.
        env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(ROOT))
        env.pop("PYTEST_XDIST_WORKER", None)
        runs["jax"] = subprocess.Popen(
            [sys.executable, "-c", JAX_RUN, str(root / "jax")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    references = {"tf": write_sources(root / "tf" / "src")}
    for argv in cli_exports(root / "tf" / "src", root / "tf" / "export"):
        assert cli.main(argv) == 0, argv
    failures = {}
    for name, run in runs.items():
        try:
            output = run.communicate(timeout=400)[0]
        except subprocess.TimeoutExpired:
            run.kill()
            output = run.communicate()[0] + "\n(timed out after 400 s)"
        if run.returncode:
            failures[name] = output[-4000:]
        else:
            references[name] = dict(np.load(root / name / "reference.npz"))
    jobs = {}
    for name, reference in references.items():
        # The served models must not need their sources: vocabulary and weights are inside.
        shutil.rmtree(root / name / "src")
        tasks = TASKS if name == "tf" else JAX_TASKS
        for job, spec in _jobs(root / name / "export", reference, tasks).items():
            jobs[f"{name}/{job}"] = spec
    (root / "jobs.json").write_text(json.dumps(jobs))
    clean_tf.run(SERVE, *(root / f for f in ("jobs.json", "out.npz", "info.json")))
    info = json.loads((root / "info.json").read_text())
    return {
        "root": root,
        "references": references,
        "arrays": dict(np.load(root / "out.npz")),
        "failures": failures,
        **info,
    }


def _check_encoders(served, backend: str, tasks) -> None:
    reference, arrays = served["references"][backend], served["arrays"]
    if "embedding" in tasks:
        for job in ("embedding_text", "embedding_ids"):
            np.testing.assert_allclose(
                arrays[f"{backend}/{job}/embeddings"], reference["embeddings"], atol=1e-5
            )
    for job in ("classifier_text", "classifier_ids"):
        logits = arrays[f"{backend}/{job}/logits"]
        np.testing.assert_allclose(logits, reference["logits"], atol=1e-5)
        np.testing.assert_allclose(
            arrays[f"{backend}/{job}/probabilities"], tf.nn.softmax(logits).numpy(), atol=1e-6
        )


def _check_language_model(served, backend: str) -> None:
    reference, arrays = served["references"][backend], served["arrays"]
    for job in ("lm_text", "lm_ids"):
        np.testing.assert_allclose(
            arrays[f"{backend}/{job}/log_likelihood"],
            reference["log_likelihood"],
            rtol=1e-5,
            atol=1e-4,
        )
        np.testing.assert_array_equal(
            arrays[f"{backend}/{job}/num_tokens"], reference["lm_mask"].sum(1)
        )
    assert reference["lm_mask"].sum(1).tolist()[-1] == 0  # "" scores 0 over 0 tokens.
    np.testing.assert_array_equal(arrays[f"{backend}/generate/output_ids"], reference["greedy"])
    words = [" ".join(_detokenize([VOCAB[i] for i in row])) for row in reference["greedy"].tolist()]
    assert served["strings"][f"{backend}/generate/continuation"] == words
    errors = served["errors"]
    assert (
        f"prompt tokens + max_new_tokens must be <= max_sequence_length ({LENGTH})"
        in (errors[f"{backend}/too_long"])
    )
    assert "every prompt needs at least one token" in errors[f"{backend}/empty_prompt"]
    assert "max_new_tokens must be >= 1" in errors[f"{backend}/negative"]
    assert f"serve_ids takes at most {LENGTH} positions" in errors[f"{backend}/ids_too_long"]


def _detokenize(pieces: list[str]) -> list[str]:
    words: list[str] = []
    for piece in pieces:
        if piece.startswith("##") and words:
            words[-1] += piece[2:]
        else:
            words.append(piece)
    return words


@pytest.mark.slow  # the `served` fixture exports on TensorFlow and JAX (about 65 s): full run
def test_encoder_exports_serve_embeddings_and_scores_of_raw_text(served):
    _check_encoders(served, "tf", TASKS)
    export = served["root"] / "tf" / "export"
    assert served["signatures"][str(export / "embedding" / "1")] == ["serve_ids", "serving_default"]
    assert (export / "embedding" / "1" / "assets" / "vocab.txt").read_text().split() == VOCAB
    assert sorted(p.name for p in (export / "sentence_prediction").iterdir()) == ["2"]
    assert not any(m.split(".")[0] == "headsize_tf" for m in served["imported"])


@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_causal_lm_export_scores_text_and_continues_it_as_generate(served, tmp_path):
    _check_language_model(served, "tf")
    # Text becomes the ids the corpora are prepared with (`headsize-tf data prepare`).
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    reference = served["references"]["tf"]
    prepared = tokenize_lines(LL_TEXTS, str(tmp_path / "vocab.txt"))
    for row, mask, ids in zip(reference["lm_ids"], reference["lm_mask"], prepared, strict=True):
        assert row[: mask.sum()].tolist() == ids.tolist()
    path = served["root"] / "tf" / "export" / "lm" / "1"
    assert served["signatures"][str(path)] == ["generate", "serve_ids", "serving_default"]
    assert (path / "assets" / "vocab.txt").read_text().split() == VOCAB


@pytest.mark.skipif(not _jax_available(), reason="jax is not installed, or this is the JAX run")
@pytest.mark.slow  # end to end, in the full run (docs/testing.md)
def test_jax_built_models_export_through_the_tensorflow_backend(served):
    assert "jax" not in served["failures"], served["failures"].get("jax")
    _check_encoders(served, "jax", JAX_TASKS)
    _check_language_model(served, "jax")
    # The weights crossed backends exactly: the two backends' models differ (other
    # random draws), each export equals its own model.
    assert not np.allclose(
        served["references"]["jax"]["logits"], served["references"]["tf"]["logits"]
    )


def _bad(argv: list[str], capsys) -> str:
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as stop:  # argparse's own checks (types, choices).
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_bad_keras3_export_input_exits_2_naming_it_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (tmp_path / "big_vocab.txt").write_text("\n".join(VOCAB + ["extra"]) + "\n")
    keras.utils.set_random_seed(0)
    lm = CausalLM(vocabulary_size=len(VOCAB), num_layers=1, hidden_dim=8, max_sequence_length=8)
    lm.save(str(tmp_path / "lm.keras"))
    out = tmp_path / "export"
    base = ["export", "--framework", "keras3", "--output", str(out)]
    lm_source = ["--task", "lm", "--checkpoint", str(tmp_path / "lm.keras")]
    # More cases that need no model: tests/cli_bad_input_test.py (`export_keras3_*`).
    cases = [
        (lm_source, "needs --vocab-file"),
        (
            [*lm_source, "--vocab-file", str(tmp_path / "big_vocab.txt")],
            f"has {len(VOCAB) + 1} tokens; the CausalLM's vocabulary_size is {len(VOCAB)}",
        ),
        ([*lm_source, "--vocab-file", str(tmp_path / "vocab.txt"), "--version", "0"], "'0'"),
    ]
    for extra, message in cases:
        err = _bad(base + extra, capsys)
        assert message in err, (extra, err)
        assert not out.exists(), extra
    (out / "1").mkdir(parents=True)
    err = _bad([*base, *lm_source, "--vocab-file", str(tmp_path / "vocab.txt")], capsys)
    assert "export/1 exists; pass --overwrite" in err
    assert list((out / "1").iterdir()) == []


def test_plain_keras_export_of_a_model_with_our_layers(tmp_path):
    """`model.export(path, format="tf_saved_model")` keeps working on our layers and models.

    Also run on JAX (`JAX_RUN`), where Keras converts the model with jax2tf: the
    attention layers read symbolic dims as unknown, and a variable length needs
    its bound (the position table is sliced) and no gradient (jax2tf traces it
    without the bound).
    """
    keras.utils.set_random_seed(0)
    x_in = keras.Input((5, 16))
    x = FixedHeadAttention(num_heads=2, head_size=6)(x_in, x_in)
    x = CollaborativeAttention(num_heads=4, shared_key_dim=8)(x, x)
    model = keras.Model(x_in, keras.layers.Dense(3)(x))
    lm = CausalLM(vocabulary_size=len(VOCAB), num_layers=1, hidden_dim=8, max_sequence_length=8)
    x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32")
    ids = np.array([[5, 6, 7, 8], [9, 10, 11, 12]], "int32")
    lm_export = {"input_signature": [tf.TensorSpec([None, None], tf.int32)]}
    if keras.backend.backend() == "jax":
        lm_export["jax2tf_kwargs"] = {
            "polymorphic_shapes": ["(b, n)"],
            "polymorphic_constraints": ["n <= 8"],
            "with_gradient": False,
        }
    for name, keras_model, inputs, kwargs in (
        ("functional", model, [x], {}),
        ("lm", lm, [ids, ids[:, :3]], lm_export),
    ):
        path = str(tmp_path / name)
        keras_model.export(path, format="tf_saved_model", verbose=False, **kwargs)
        loaded = tf.saved_model.load(path)
        for batch in inputs:
            np.testing.assert_allclose(
                loaded.serve(tf.constant(batch)).numpy(),
                keras_model.predict(batch, verbose=0),
                atol=1e-6,
            )
