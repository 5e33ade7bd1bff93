"""`embed` and `export --task embedding` from the encoder of a `headsize-tf train` model_dir:
a masked-LM pretraining run on Austen, checked against a numpy oracle of mean / [CLS] pooling
and L2 normalisation over the trained encoder's outputs."""

import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from headsize_tf import cli
from headsize_tf.training import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = str(ROOT / "official_configs" / "headsize_bert_pretraining_tiny.yaml")
SHORT = (
    "trainer.train_steps=4,trainer.validation_steps=1,trainer.steps_per_loop=4,"
    "trainer.summary_interval=4,trainer.checkpoint_interval=4,trainer.validation_interval=4,"
    "task.train_data.global_batch_size=8,task.validation_data.global_batch_size=8"
)
SENTENCES = ["Emma Woodhouse, handsome, clever, and rich.", "", "It was a truth."]


@pytest.fixture(scope="module")
def pretrained(austen_data_dir, tmp_path_factory):
    """(model_dir, data_dir): a tiny masked-LM encoder trained 4 steps on Austen."""
    model_dir = str(tmp_path_factory.mktemp("mlm") / "model")
    train.run("headsize_bert/pretraining", model_dir, [TINY], SHORT, data_dir=str(austen_data_dir))
    return model_dir, austen_data_dir


def _oracle(model_dir, vocab, pooling):
    """Each sentence alone (no padding): [CLS] pieces [SEP] through the trained encoder."""
    _, model = train.load_trained_model(model_dir)
    encoder = model.checkpoint_items["encoder"]
    tokenizer = tf_text.BertTokenizer(str(vocab), lower_case=True, token_out_type=tf.int32)
    lines = pathlib.Path(vocab).read_text().split("\n")
    cls, sep = lines.index("[CLS]"), lines.index("[SEP]")
    out = []
    for text in SENTENCES:
        pieces = tokenizer.tokenize([text]).merge_dims(-2, -1).to_list()[0]
        ids = np.array([[cls, *pieces, sep]], np.int32)
        inputs = {
            "input_word_ids": ids,
            "input_mask": np.ones_like(ids),
            "input_type_ids": np.zeros_like(ids),
        }
        hidden = encoder(inputs)["sequence_output"].numpy()[0]
        vector = hidden.mean(axis=0) if pooling == "mean" else hidden[0]
        out.append(vector / np.linalg.norm(vector))
    return np.stack(out)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_embed_reads_the_encoder_of_a_pretraining_model_dir(pretrained, tmp_path, pooling):
    model_dir, data_dir = pretrained
    text = tmp_path / "in.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    argv = [
        "embed",
        "--model_dir",
        model_dir,
        "--input",
        str(text),
        "--output",
        str(tmp_path / "vectors.npy"),
        "--batch-size",
        "2",
    ]
    if pooling == "cls":
        argv += ["--pooling", "cls"]
    assert cli.main(argv) == 0
    vectors = np.load(tmp_path / "vectors.npy")
    assert vectors.shape == (3, 64)
    want = _oracle(model_dir, data_dir / "austen" / "vocab.txt", pooling)
    np.testing.assert_allclose(vectors, want, atol=2e-5)


def test_export_embedding_of_a_model_dir_scores_text_as_embed(pretrained, tmp_path):
    model_dir, data_dir = pretrained
    assert (
        cli.main(
            [
                "export",
                "--model_dir",
                model_dir,
                "--task",
                "embedding",
                "--output",
                str(tmp_path / "export"),
            ]
        )
        == 0
    )
    loaded = tf.saved_model.load(str(tmp_path / "export" / "1"))
    got = loaded.signatures["serving_default"](text=tf.constant(SENTENCES))["embeddings"]
    want = _oracle(model_dir, data_dir / "austen" / "vocab.txt", "mean")
    np.testing.assert_allclose(got.numpy(), want, atol=2e-5)
