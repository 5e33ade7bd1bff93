"""`headsize-tf embed|compress --framework keras3` on a tiny Hugging Face BERT."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headsize_tf import cli
from headsize_tf.keras3.pretrained import load_sentence_encoder
from tests.hf_fixtures import write_checkpoint

SENTENCES = ["the cat sat", "a dog", "", "the dog sat on the cat"]


@pytest.fixture
def bert(tmp_path):
    write_checkpoint(tmp_path / "bert")
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    return tmp_path


def test_embed_keras3_equals_tf_keras(bert, capsys):
    for framework in ("tf_keras", "keras3"):
        argv = [
            "embed",
            "--checkpoint",
            str(bert / "bert"),
            "--input",
            str(bert / "in.txt"),
            "--output",
            str(bert / f"{framework}.npy"),
            "--framework",
            framework,
        ]
        assert cli.main(argv) == 0
    keras3, tf_keras = np.load(bert / "keras3.npy"), np.load(bert / "tf_keras.npy")
    assert keras3.shape == (len(SENTENCES), tf_keras.shape[1])
    np.testing.assert_allclose(keras3, tf_keras, atol=1e-5)


def test_compress_keras3_at_full_rank_keeps_embeddings(bert, capsys):
    out = bert / "compressed"
    heads_times_size = json.loads((bert / "bert" / "config.json").read_text())["hidden_size"]
    argv = [
        "compress",
        "--framework",
        "keras3",
        "--checkpoint",
        str(bert / "bert"),
        "--shared-key-dim",
        str(heads_times_size),
        "--eval-file",
        str(bert / "in.txt"),
        "--output",
        str(out),
    ]
    assert cli.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["framework"] == "keras3"
    assert report["embedding_cosine"] > 0.9999
    assert all(layer["relative_error"] < 1e-6 for layer in report["layers"])
    compressed = load_sentence_encoder(checkpoint=out)
    assert compressed.backbone.attention_spec.kind == "collaborative"
    original = load_sentence_encoder(checkpoint=bert / "bert")
    np.testing.assert_allclose(compressed.embed(SENTENCES), original.embed(SENTENCES), atol=1e-5)
    # Above the full rank: exit 2, one line, nothing written.
    capsys.readouterr()
    argv[argv.index("--shared-key-dim") + 1] = str(heads_times_size + 1)
    argv[-1] = str(bert / "too_big")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "shared_key_dim" in err and "full rank" in err
    assert not (bert / "too_big").exists()
