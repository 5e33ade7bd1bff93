"""The keras-hub bridge: tiny keras-hub models from arguments, saved as local presets, in the
Keras 3 tools (equal outputs, the head kept, save back, pruned / converted reloads, the CLI)."""

from __future__ import annotations

import json
import os
import pathlib
import sys

import keras
import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from headsize_tf import cli  # noqa: E402
from headsize_tf.core.conversion import ConversionTarget  # noqa: E402
from headsize_tf.keras3.hub import (  # noqa: E402
    MissingExtraError,
    compress_hub_model,
    convert_hub_model,
    import_hub_model,
    load_hub_preset,
)
from headsize_tf.keras3.pruning import remove_heads  # noqa: E402
from tests.keras3.hub.keras_hub_util import (  # noqa: E402
    SENTENCES,
    build_presets,
    labelled_csv,
    lm_lines,
)

TEXTS = ["the cat sat on the mat", "a good movie and a bad plot"]
LM_TEXTS = ["the cat", "a dog sat on a mat"]  # Fewer than 16 tokens: both padded.
# Two tests here (import, generation, pruning, grouped conversion, saving) run again on JAX
# with the model options: tests/keras3/jax_backend_test.py.


@pytest.fixture(scope="module")
def presets(tmp_path_factory) -> dict[str, pathlib.Path]:
    return build_presets(tmp_path_factory.mktemp("presets"))


def np_(x) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x), np.float64)


def lm_inputs(preprocessor, texts=LM_TEXTS) -> dict[str, np.ndarray]:
    x, _, _ = preprocessor(texts)
    return {k: np.asarray(v).astype("int32") for k, v in x.items()}


def max_diff(a, b) -> float:
    return float(np.max(np.abs(np_(a) - np_(b))))


def test_bert_classifier_imports_with_equal_outputs_and_keeps_its_head(presets):
    reference = keras_hub.models.TextClassifier.from_preset(str(presets["bert"]))
    hub = load_hub_preset(presets["bert"])
    assert (hub.architecture, hub.task, hub.num_classes) == ("bert", "text_classifier", 2)
    assert hub.backbone.activation.__name__ == "gelu_approximate"
    inputs = hub.tokenize(TEXTS)
    assert sorted(inputs) == ["padding_mask", "segment_ids", "token_ids"]
    theirs, mine = reference.backbone(inputs), hub.backbone(inputs)
    assert max_diff(theirs["sequence_output"], mine["sequence_output"]) < 1e-5
    assert max_diff(theirs["pooled_output"], mine["pooled_output"]) < 1e-5
    logits = hub.predict(TEXTS)
    assert logits.shape == (2, 2)
    assert max_diff(reference.predict(TEXTS, verbose=0), logits) < 1e-5
    np.testing.assert_array_equal(np_(hub.head.kernel), np_(reference.output_dense.kernel))


def test_distil_bert_classifier_imports_with_equal_outputs(presets):
    reference = keras_hub.models.TextClassifier.from_preset(str(presets["distil_bert"]))
    hub = load_hub_preset(presets["distil_bert"])
    spec = hub.backbone.get_config()
    assert (spec["num_segments"], spec["pooler"], spec["pooled_dim"]) == (0, "relu", 24)
    inputs = hub.tokenize(TEXTS)
    assert sorted(inputs) == ["padding_mask", "token_ids"]
    assert max_diff(reference.backbone(inputs), hub.backbone(inputs)["sequence_output"]) < 1e-5
    pre_classifier = reference.pooled_dense(reference.backbone(inputs)[:, 0])
    assert max_diff(pre_classifier, hub.backbone(inputs)["pooled_output"]) < 1e-5
    assert max_diff(reference.predict(TEXTS, verbose=0), hub.predict(TEXTS)) < 1e-5
    # A bare DistilBERT backbone: no pooler (the pooled output is the first hidden state).
    bare = import_hub_model(reference.backbone, preprocessor=reference.preprocessor)
    assert bare.task == "backbone" and bare.backbone.pooler == "none"
    assert max_diff(reference.backbone(inputs), bare.backbone(inputs)["sequence_output"]) < 1e-5


def test_gpt2_imports_with_equal_lm_logits(presets):
    reference = keras_hub.models.CausalLM.from_preset(str(presets["gpt2"]))
    hub = load_hub_preset(presets["gpt2"])
    assert (hub.architecture, hub.task) == ("gpt2", "causal_lm")
    inputs = lm_inputs(reference.preprocessor)
    assert inputs["padding_mask"][0].sum() < inputs["padding_mask"][1].sum() < 16
    assert max_diff(reference(inputs), hub.backbone(inputs)) < 1e-5
    # Text in: the start token and keras-hub's tokens (keras-hub's training preprocessor adds
    # an end token too), padded to the longest with a padding mask.
    logits = hub.predict(LM_TEXTS)
    rows = [int(m.sum()) - 1 for m in inputs["padding_mask"]]
    assert logits.shape[:2] == (2, max(rows))
    for i, n in enumerate(rows):
        assert max_diff(logits[i, :n], np_(reference(inputs))[i, :n]) < 1e-5
    # Greedy generation: the same tokens as keras-hub's, and text through its tokenizer.
    packed = reference.preprocessor.generate_preprocess(["the cat"], sequence_length=12)
    prompt = {k: np.asarray(v).astype("int32") for k, v in packed.items()}
    length = int(prompt["padding_mask"].sum())
    assert length == 7  # The start token and 6 tokens; 5 to generate.
    reference.compile(sampler="greedy")
    reference.preprocessor, preprocessor = None, reference.preprocessor
    theirs = reference.generate(
        {"token_ids": prompt["token_ids"], "padding_mask": prompt["padding_mask"]},
        stop_token_ids=None,
    )["token_ids"][0]
    mine = hub.backbone.generate(prompt["token_ids"][:, :length], max_new_tokens=12 - length)[0]
    np.testing.assert_array_equal(np.asarray(theirs), mine)
    text = hub.generate("the cat", max_new_tokens=12 - length, end_token_id=-1)
    kept = [t for t in mine.tolist() if t != preprocessor.tokenizer.end_token_id]
    assert isinstance(text, str) and text.startswith("the cat")
    assert text == preprocessor.tokenizer.detokenize(np.array(kept, "int32"))


def test_unmodified_models_save_back_as_keras_hub_presets(presets, tmp_path):
    for name, cls in (("bert", "TextClassifier"), ("gpt2", "CausalLM")):
        hub = load_hub_preset(presets[name])
        assert hub.keras_hub_incompatibility() is None
        hub.save(tmp_path / name)
        assert (tmp_path / name / "config.json").exists()
        assert not (tmp_path / name / "headsize_hub.json").exists()
        task = getattr(keras_hub.models, cls)
        original, again = (
            task.from_preset(str(presets[name])),
            task.from_preset(str(tmp_path / name)),
        )
        if name == "gpt2":
            inputs = lm_inputs(original.preprocessor)
            assert max_diff(original(inputs), again(inputs)) < 1e-5
        else:
            assert (
                max_diff(original.predict(TEXTS, verbose=0), again.predict(TEXTS, verbose=0)) < 1e-5
            )
    # A bare backbone with its preprocessor goes back as a backbone preset with a tokenizer.
    hub = load_hub_preset(presets["bert_backbone"])
    assert hub.task == "backbone"
    hub.save(tmp_path / "bare")
    assert {"config.json", "tokenizer.json"} <= set(os.listdir(tmp_path / "bare"))
    again = load_hub_preset(tmp_path / "bare")
    np.testing.assert_allclose(again.embed(SENTENCES), hub.embed(SENTENCES), atol=1e-5)


def test_pruned_and_converted_gpt2_reloads(presets, tmp_path):
    hub = load_hub_preset(presets["gpt2"])
    inputs = lm_inputs(hub.preprocessor)
    mask = np.ones([2, 4], np.float32)
    mask[0, :2] = 0
    pruned = hub.with_backbone(remove_heads(hub.backbone, mask))
    assert "attention" in pruned.keras_hub_incompatibility()
    hub.backbone.attention_layers[1].set_head_mask([1, 0, 1, 1])  # masked, not removed
    assert "masked" in hub.keras_hub_incompatibility()
    hub.backbone.attention_layers[1].set_head_mask([1, 1, 1, 1])
    # Grouped K/V at G = heads is exact; then G = 1 (2 query heads share one K/V head).
    exact, reports = convert_hub_model(pruned, ConversionTarget("grouped", (2, 4)))
    assert len(reports) == 2
    assert max_diff(exact.backbone(inputs), pruned.backbone(inputs)) < 1e-5
    grouped, _ = convert_hub_model(pruned, ConversionTarget("grouped", 1))
    assert grouped.backbone.attention_spec.num_kv_heads == 1
    for model, name in ((pruned, "pruned"), (grouped, "grouped")):
        model.save(tmp_path / name)
        assert (tmp_path / name / "headsize_hub.json").exists()
        again = load_hub_preset(tmp_path / name)
        assert again.architecture == "gpt2"
        assert max_diff(again.backbone(inputs), model.backbone(inputs)) < 1e-5
        text = again.generate("the cat", max_new_tokens=4, end_token_id=-1)
        assert text == model.generate("the cat", max_new_tokens=4, end_token_id=-1)
    # The keras-hub object itself converts too (Python API).
    direct, _ = convert_hub_model(
        keras_hub.models.GPT2CausalLM.from_preset(str(presets["gpt2"])),
        ConversionTarget("grouped", 4),
    )
    assert max_diff(direct.backbone(inputs), hub.backbone(inputs)) < 1e-5


def test_compressed_bert_classifier_reloads_with_its_head(presets, tmp_path):
    hub = load_hub_preset(presets["bert"])
    report = compress_hub_model(hub, 32, tmp_path / "c", eval_sentences=SENTENCES, max_iter=200)
    assert report["embedding_cosine"] > 0.9999
    again = load_hub_preset(tmp_path / "c")
    assert again.backbone.attention_spec.kind == "collaborative"
    assert again.task == "text_classifier"
    assert max_diff(again.predict(TEXTS), hub.predict(TEXTS)) < 1e-4


def test_cli_bert_embed_prune_and_compress_from_a_local_preset(presets, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    argv = [
        "embed",
        "--keras-hub-preset",
        str(presets["bert"]),
        "--input",
        str(tmp_path / "in.txt"),
    ]
    assert cli.main([*argv, "--output", str(tmp_path / "e.npy")]) == 0
    vectors = np.load(tmp_path / "e.npy")
    assert vectors.shape == (4, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(
        vectors, load_hub_preset(presets["bert"]).embed(SENTENCES), atol=1e-5
    )

    csv = labelled_csv(tmp_path / "reviews.csv")
    out = tmp_path / "pruned"
    argv = ["prune", "--keras-hub-preset", str(presets["bert"]), "--data-file", str(csv)]
    argv += ["--target-fraction", "0.5", "--step", "0.25", "--finetune-epochs", "0"]
    assert cli.main([*argv, "--importance-examples", "16", "--output", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert [p["heads_pruned"] for p in report["curve"]] == [0, 2, 4]
    assert sum(report["heads_per_layer"]) == 4
    assert report["params"]["pruned"] < report["params"]["original"]
    assert report["accuracy"]["pruned"] == report["accuracy"]["masked"]
    pruned = load_hub_preset(out)
    assert list(pruned.backbone.attention_spec.num_heads) == report["heads_per_layer"]
    original = keras_hub.models.TextClassifier.from_preset(str(presets["bert"]))
    # No fine-tuning: the pruned model carries keras-hub's own classifier head.
    np.testing.assert_array_equal(np_(pruned.head.kernel), np_(original.output_dense.kernel))

    argv = ["compress", "--keras-hub-preset", str(out), "--shared-key-dim", "16"]
    argv += ["--eval-file", str(tmp_path / "in.txt"), "--output", str(tmp_path / "c")]
    assert cli.main(argv) == 0
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    assert report["architecture"] == "bert" and len(report["layers"]) == 2
    assert load_hub_preset(tmp_path / "c").backbone.attention_spec.kind == "collaborative"
    assert "output:" in capsys.readouterr().out


def test_cli_gpt2_prune_and_compress_from_a_local_preset(presets, tmp_path, capsys):
    text = tmp_path / "lines.txt"
    text.write_text("\n".join(lm_lines()) + "\n")
    out = tmp_path / "pruned"
    argv = ["prune", "--keras-hub-preset", str(presets["gpt2"]), "--data-file", str(text)]
    argv += ["--target-fraction", "0.25", "--step", "0.25", "--importance-examples", "8"]
    assert cli.main([*argv, "--output", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["metric"] == "perplexity" and report["architecture"] == "gpt2"
    assert [p["heads_pruned"] for p in report["curve"]] == [0, 2]
    assert sorted(report["heads_per_layer"]) in ([2, 4], [3, 3])
    assert report["perplexity"]["pruned"] == pytest.approx(report["perplexity"]["masked"], rel=1e-4)
    assert 1.0 < report["perplexity"]["original"] < 200.0
    pruned = load_hub_preset(out)
    assert list(pruned.backbone.attention_spec.num_heads) == report["heads_per_layer"]
    assert pruned.generate("the cat", max_new_tokens=3).startswith("the cat")

    argv = ["compress", "--keras-hub-preset", str(presets["gpt2"]), "--shared-key-dim", "32"]
    argv += ["--eval-file", str(text), "--max-iter", "200", "--output", str(tmp_path / "c")]
    assert cli.main(argv) == 0
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    assert report["perplexity_after"] == pytest.approx(report["perplexity_before"], rel=1e-3)
    assert "perplexity" in capsys.readouterr().out


@pytest.fixture(scope="module")
def roberta(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("roberta") / "roberta"
    keras_hub.models.RobertaBackbone(
        vocabulary_size=20,
        max_sequence_length=16,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
    ).save_to_preset(str(path))
    return path


@pytest.mark.parametrize(
    "case",
    ["offline_name", "unsupported", "not_a_preset", "missing_directory", "tool", "labelled_lm"],
)
def test_cli_bad_keras_hub_input_is_one_line_and_writes_nothing(
    case, presets, roberta, tmp_path, capsys, monkeypatch
):
    (tmp_path / "in.txt").write_text("the cat\n")
    (tmp_path / "empty").mkdir()
    csv = labelled_csv(tmp_path / "reviews.csv", count=20)
    out = tmp_path / "out"
    embed = ["embed", "--input", str(tmp_path / "in.txt"), "--output", str(out)]
    argv, fragment = {
        "offline_name": (
            [*embed, "--keras-hub-preset", "gpt2_base_en"],
            "needs the network",
        ),
        "unsupported": (
            [*embed, "--keras-hub-preset", str(roberta)],
            "RobertaBackbone; the bridge supports BertBackbone, DistilBertBackbone, GPT2Backbone",
        ),
        "not_a_preset": (
            [*embed, "--keras-hub-preset", str(tmp_path / "empty")],
            "is not a keras-hub preset directory",
        ),
        "missing_directory": (
            [*embed, "--keras-hub-preset", str(tmp_path / "nope")],
            "does not exist",
        ),
        "tool": (
            [*embed, "--keras-hub-preset", str(presets["gpt2"])],
            "embed does not apply to gpt2 (a causal LM); embed takes bert, distil_bert",
        ),
        "labelled_lm": (
            ["prune", "--keras-hub-preset", str(presets["gpt2"]), "--data-file", str(csv)]
            + ["--label-column", "label", "--output", str(out)],
            "--label-column: labelled data; gpt2 (a causal LM) is pruned on plain text",
        ),
    }[case]
    monkeypatch.setenv("HEADSIZE_TF_OFFLINE", "1")
    before = sorted(os.listdir(tmp_path))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("headsize-tf") and fragment in lines[0], lines[0]
    assert sorted(os.listdir(tmp_path)) == before


def test_a_preset_name_without_the_network_or_unknown_says_so(monkeypatch):
    import requests
    from keras_hub.src.utils import preset_utils

    from headsize_tf.core.errors import CheckpointError

    for name in ("HEADSIZE_TF_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(CheckpointError, match="neither a local directory nor a keras-hub preset"):
        load_hub_preset("no_such_preset")  # keras-hub rejects it before any download

    def no_network(preset, path):
        raise requests.ConnectionError("Failed to resolve 'api.kaggle.com'")

    monkeypatch.setattr(preset_utils, "load_json", no_network)
    with pytest.raises(CheckpointError, match="needs the network.*ConnectionError.*local preset"):
        load_hub_preset("gpt2_base_en")


def test_missing_keras_hub_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "keras_hub", None)
    with pytest.raises(MissingExtraError, match=r'pip install "headsize-tf\[hub\]"'):
        load_hub_preset(tmp_path)
    (tmp_path / "in.txt").write_text("the cat\n")
    argv = ["embed", "--keras-hub-preset", str(tmp_path), "--input", str(tmp_path / "in.txt")]
    assert cli.main([*argv, "--output", str(tmp_path / "e.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "headsize-tf[hub]" in err
    assert not (tmp_path / "e.npy").exists()
