"""Tiny keras-hub models built from arguments (random weights) and saved as local presets.

Two layers of width 32 and 4 heads: a BERT and a DistilBERT text classifier
(WordPiece over `WORDS`), a bare BERT backbone with its preprocessor, and a
GPT-2 causal LM (byte-level BPE over lowercase letters). Nothing is
downloaded: `save_to_preset` writes each into a directory.
"""

from __future__ import annotations

import pathlib
import string

import keras
import numpy as np

WORDS = "the a cat dog sat on mat good bad movie film fun dull plot was and".split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SIZE = {"num_layers": 2, "num_heads": 4, "hidden_dim": 32, "intermediate_dim": 64}
MAX_LENGTH = 32
SENTENCES = ["the cat sat on the mat", "a good movie", "", "the dog was dull and the plot bad"]


def gpt2_vocabulary() -> tuple[dict[str, int], list[str]]:
    """Byte-level BPE over lowercase text: letters, a space + letter merge, newline."""
    tokens = ["<|endoftext|>", "Ġ", "Ċ", *string.ascii_lowercase]
    tokens += [f"Ġ{c}" for c in string.ascii_lowercase]
    merges = [f"Ġ {c}" for c in string.ascii_lowercase]
    return {token: i for i, token in enumerate(tokens)}, merges


def build_presets(root: pathlib.Path, seed: int = 0) -> dict[str, pathlib.Path]:
    """Saves the tiny models as keras-hub preset directories under `root`; returns them."""
    import keras_hub

    keras.utils.set_random_seed(seed)
    models = keras_hub.models
    vocabulary = SPECIAL + WORDS
    presets = {}

    tokenizer = models.BertTokenizer(vocabulary=vocabulary, lowercase=True)
    preprocessor = models.BertTextClassifierPreprocessor(tokenizer, sequence_length=16)
    backbone = models.BertBackbone(
        vocabulary_size=len(vocabulary), max_sequence_length=MAX_LENGTH, **SIZE
    )
    models.BertTextClassifier(backbone, num_classes=2, preprocessor=preprocessor).save_to_preset(
        str(root / "bert")
    )
    presets["bert"] = root / "bert"
    bare = models.BertBackbone(
        vocabulary_size=len(vocabulary), max_sequence_length=MAX_LENGTH, **SIZE
    )
    bare.save_to_preset(str(root / "bert_backbone"))
    preprocessor.save_to_preset(str(root / "bert_backbone"))
    presets["bert_backbone"] = root / "bert_backbone"

    tokenizer = models.DistilBertTokenizer(vocabulary=vocabulary, lowercase=True)
    preprocessor = models.DistilBertTextClassifierPreprocessor(tokenizer, sequence_length=16)
    backbone = models.DistilBertBackbone(
        vocabulary_size=len(vocabulary), max_sequence_length=MAX_LENGTH, **SIZE
    )
    models.DistilBertTextClassifier(
        backbone, num_classes=3, preprocessor=preprocessor, hidden_dim=24
    ).save_to_preset(str(root / "distil_bert"))
    presets["distil_bert"] = root / "distil_bert"

    vocab, merges = gpt2_vocabulary()
    tokenizer = models.GPT2Tokenizer(vocabulary=vocab, merges=merges)
    preprocessor = models.GPT2CausalLMPreprocessor(tokenizer, sequence_length=16)
    backbone = models.GPT2Backbone(
        vocabulary_size=len(vocab), max_sequence_length=MAX_LENGTH, **SIZE
    )
    models.GPT2CausalLM(backbone, preprocessor=preprocessor).save_to_preset(str(root / "gpt2"))
    presets["gpt2"] = root / "gpt2"
    return presets


def lm_lines(count: int = 80, seed: int = 0) -> list[str]:
    """Plain lowercase text lines of `WORDS`."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=6)) for _ in range(count)]


def labelled_csv(path: pathlib.Path, count: int = 96, seed: int = 0) -> pathlib.Path:
    """A text,label CSV whose label word is in the text ("good" / "bad")."""
    rng = np.random.default_rng(seed)
    rows = ["text,label"]
    for i in range(count):
        label = "good" if i % 2 else "bad"
        rows.append(" ".join([*rng.choice(WORDS[:6], size=4), label, "movie"]) + f",{label}")
    path.write_text("\n".join(rows) + "\n")
    return path
