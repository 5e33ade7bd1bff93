"""`training.finetune` at its edges: one example, labels as a list, nothing to predict."""

from __future__ import annotations

import numpy as np
import pytest

from headsize_tf.modeling import HeadsizeBertEncoder
from headsize_tf.modeling.sentence_encoder import SentenceEncoder
from headsize_tf.training import finetune as ft

WORDS = "the a good bad movie film great awful plot was is".split()


@pytest.fixture
def sentence_encoder(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    encoder = HeadsizeBertEncoder(
        vocab_size=5 + len(WORDS),
        hidden_size=16,
        num_layers=1,
        inner_dim=32,
        max_sequence_length=16,
        attention={"kind": "fixed_head", "num_heads": 2, "head_size": 8},
    )
    return SentenceEncoder(encoder, str(vocab))


CONFIG = ft.FinetuneConfig(epochs=1, batch_size=4, max_seq_length=8)


@pytest.mark.parametrize(
    "texts, labels",
    [(["good movie"], np.array([1])), ([("good movie", "the plot")], [1]), (["a", "b"], [1, 0])],
    ids=["one_text", "one_pair", "labels_as_a_list"],
)
def test_small_inputs_train_one_step(sentence_encoder, texts, labels):
    model, info = ft.finetune(sentence_encoder, (texts, labels), CONFIG, verbose=0)
    assert info["steps"] == 1 and np.isfinite(info["final_loss"])
    ids = ft.tokenize_all(sentence_encoder, list(texts), 8)
    assert ft.predict_logits(model, ids).shape == (len(texts), 2)
    assert ft.predict_logits(model, []).shape == (0, 2)


def test_texts_and_labels_must_pair(sentence_encoder):
    with pytest.raises(ValueError, match="one label per text and at least one text; got 2"):
        ft.finetune(sentence_encoder, (["a", "b"], [1]), CONFIG, verbose=0)
    with pytest.raises(ValueError, match="got 0 texts"):
        ft.finetune(sentence_encoder, ([], []), CONFIG, verbose=0)
