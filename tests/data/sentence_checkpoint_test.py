"""data.sentence_checkpoint: what both fronts' SentenceEncoder share (no Keras model needed)."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from headsize_tf.core.errors import CheckpointError
from headsize_tf.data.sentence_checkpoint import (
    CHECKPOINT_FILE,
    SentenceEncoderSettings,
    open_sentence_encoder,
)

SETTINGS = {"lower_case": False, "max_seq_length": 8, "pooling": "cls", "normalize": False}
read = SentenceEncoderSettings._read_checkpoint


@pytest.fixture
def vocab(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"]) + "\n")
    return path


class Encoder(SentenceEncoderSettings):
    def __init__(self, vocab_file, **settings):
        self.tokenizer = self._set_text_settings(vocab_file, **settings)


def test_settings_round_trip_through_a_checkpoint(tmp_path, vocab):
    encoder = Encoder(vocab, source="here", **SETTINGS)
    assert encoder.text_settings() == {**SETTINGS, "source": "here"}
    assert encoder.text_settings("there")["source"] == "there"
    out = tmp_path / "ckpt"
    out.mkdir()
    encoder._write_checkpoint_files(out, {"format": 7, **encoder.text_settings()})
    config, kwargs = read(out, 7, required=(), layout="files")
    assert config["format"] == 7
    assert kwargs == {"vocab_file": out / "vocab.txt", **SETTINGS, "source": "here"}
    assert Encoder(**kwargs).text_settings() == encoder.text_settings()


def test_unknown_pooling_is_named(vocab):
    with pytest.raises(
        ValueError, match=r"Unknown pooling 'max'; expected one of \['mean', 'cls'\]"
    ):
        Encoder(vocab, pooling="max")


def _checkpoint(tmp_path, config):
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    (tmp_path / CHECKPOINT_FILE).write_text(
        config if isinstance(config, str) else json.dumps(config)
    )
    return tmp_path


def test_missing_files_are_named(tmp_path):
    with pytest.raises(CheckpointError, match=r"has no headsize_checkpoint.json; expected L\.$"):
        read(tmp_path, 1, required=(), layout="L")
    _checkpoint(tmp_path, {"format": 1, **SETTINGS})
    with pytest.raises(CheckpointError, match=r"has no ckpt; expected L\.$"):
        read(tmp_path, 1, required=("ckpt",), layout="L")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("{", "is not valid JSON"),
        ("[1]", "holds list; expected a JSON object"),
        ({"format": 2}, "has format 2; expected 1.$"),
        ({}, "has format None; expected 1.$"),
        ({"format": "keras3-1"}, r"expected 1 \(a Keras 3 checkpoint: open it with headsize_tf"),
    ],
)
def test_bad_configs_are_named(tmp_path, config, message):
    # Before the front's own files (`ckpt` here): another front's checkpoint lacks them.
    with pytest.raises(CheckpointError, match=message):
        read(_checkpoint(tmp_path, config), 1, required=("ckpt",), layout="L")


def test_a_tf_keras_checkpoint_is_named_to_keras3(tmp_path):
    with pytest.raises(CheckpointError, match=r"expected 'keras3-1' \(a tf_keras checkpoint"):
        read(_checkpoint(tmp_path, {"format": 1}), "keras3-1", required=(), layout="L")


@given(st.lists(st.text(max_size=12), max_size=30), st.integers(1, 7))
def test_length_batches_cover_every_text_once_longest_first(texts, batch_size):
    batches = list(SentenceEncoderSettings._length_batches(texts, batch_size))
    order = np.concatenate(batches) if batches else np.array([], int)
    assert sorted(order.tolist()) == list(range(len(texts)))
    assert all(len(b) == batch_size for b in batches[:-1])
    lengths = [len(texts[i]) for i in order]
    assert lengths == sorted(lengths, reverse=True)


@pytest.mark.parametrize("batch_size", [0, -1, 2.0, True, "4"])
def test_bad_batch_size_is_named(batch_size):
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        SentenceEncoderSettings._length_batches([], batch_size)


def test_unpadded_rows():
    ids = np.array([[2, 5, 3, 0], [2, 3, 0, 0]])
    mask = (ids > 0).astype(np.int32)
    assert SentenceEncoderSettings._unpadded(ids, mask) == [[2, 5, 3], [2, 3]]


def test_open_dispatches_between_registry_saved_and_hugging_face(tmp_path, monkeypatch):
    from headsize_tf.data import sentence_checkpoint

    calls = []
    monkeypatch.setattr(sentence_checkpoint, "fetch_pretrained", lambda name, cache: tmp_path)

    def load(directory):
        calls.append(("load", directory))

    def import_hf(directory, source=None):
        calls.append(("import", directory, source))

    open_sentence_encoder("minilm-l6", None, None, load, import_hf)
    hf = tmp_path / "hf"
    hf.mkdir()
    open_sentence_encoder(None, hf, None, load, import_hf)
    open_sentence_encoder(None, _checkpoint(tmp_path, {}), None, load, import_hf)
    assert calls == [
        ("import", tmp_path, "minilm-l6"),
        ("import", hf, None),
        ("load", tmp_path),
    ]
    for model, checkpoint in ((None, None), ("minilm-l6", tmp_path)):
        with pytest.raises(CheckpointError, match="exactly one of a model name"):
            open_sentence_encoder(model, checkpoint, None, load, import_hf)
    with pytest.raises(CheckpointError, match="does not exist"):
        open_sentence_encoder(None, tmp_path / "nowhere", None, load, import_hf)
