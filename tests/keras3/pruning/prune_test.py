"""`headsize-tf prune --framework keras3` on a tiny Hugging Face BERT and a CSV."""

from __future__ import annotations

import json

import numpy as np

from headsize_tf import cli
from headsize_tf.keras3.pretrained import load_sentence_encoder
from headsize_tf.keras3.pruning.classifier import accuracy, load_classifier
from tests.hf_fixtures import write_checkpoint


def test_prune_keras3_writes_a_smaller_equivalent_classifier(tmp_path, capsys):
    write_checkpoint(tmp_path / "bert")
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "mat", "a", "dog"]
    rows = ["text,label"]
    for i in range(160):
        label = "dog" if i % 2 else "cat"
        text = " ".join(rng.choice(words, size=4)) + f" {label} w{i % 20}"
        rows.append(f"{text},{label}")
    (tmp_path / "F.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "pruned"
    argv = [
        "prune",
        "--framework",
        "keras3",
        "--checkpoint",
        str(tmp_path / "bert"),
        "--data-file",
        str(tmp_path / "F.csv"),
        "--target-fraction",
        "0.5",
        "--step",
        "0.25",
        "--finetune-epochs",
        "1",
        "--importance-examples",
        "32",
        "--output",
        str(out),
    ]
    assert cli.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["framework"] == "keras3"
    assert [p["heads_pruned"] for p in report["curve"]] == [0, 2, 4]
    assert sum(report["heads_per_layer"]) == 4 and min(report["heads_per_layer"]) >= 1
    assert report["params"]["pruned"] < report["params"]["original"]
    assert report["accuracy"]["pruned"] == report["accuracy"]["masked"]
    assert json.loads((out / "label_map.json").read_text()) == {"cat": 0, "dog": 1}
    # The saved model reloads with its head and gives the reported accuracy.
    model = load_classifier(out)
    encoder = load_sentence_encoder(checkpoint=out)
    assert list(encoder.backbone.attention_spec.num_heads) == report["heads_per_layer"]
    from headsize_tf.data.text_tasks import load_task

    task = load_task(data_file=str(tmp_path / "F.csv"))
    x_dev = encoder.tokenize(task.dev_texts, max_seq_length=64)
    assert accuracy(model, x_dev, np.asarray(task.dev_labels)) == report["accuracy"]["pruned"]
    assert "output:" in capsys.readouterr().out
