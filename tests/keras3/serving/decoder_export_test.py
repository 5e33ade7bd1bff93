"""A decoder's SavedModel takes raw text: its own BPE in-graph, scores and greedy continuations."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from headsize_tf.data.hf_llama_dir import write_hf_llama_dir
from headsize_tf.keras3.pretrained.decoders import load_decoder
from headsize_tf.keras3.serving import export_source
from headsize_tf.keras3.serving.graph_tokenizer import GraphBytePairTokenizer
from tests.data.llama_files_test import random_checkpoint
from tests.data.llama_files_test import tokenizer_json as tokenizer_json_fixture

tokenizer_json = tokenizer_json_fixture  # The tiny byte-level BPE with SmolLM2's pre-tokenizer.
TEXTS = ["the quick brown fox 12345", "naïve café 東京 and 3.14", "a   b\n\n  c"]

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="a SavedModel is a TensorFlow graph"
)


@pytest.fixture(scope="module")
def decoder(tmp_path_factory, tokenizer_json):
    directory = write_hf_llama_dir(
        random_checkpoint(tokenizer_json), tmp_path_factory.mktemp("hf") / "tiny"
    )
    return str(directory), load_decoder(directory)


def _byte_level_text(lm, ids) -> bytes:
    """The bytes a byte-level BPE's tokens spell (GPT-2's byte <-> unicode map inverted)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars, extra = dict(zip(printable, printable, strict=True)), 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    to_byte = {chr(c): b for b, c in chars.items()}
    text = "".join(lm.tokenizer.id_to_token(int(i)) for i in ids)
    return bytes(to_byte[c] for c in text)


@pytest.mark.parametrize("adds_start", [True, False])
def test_the_graph_tokenizer_gives_the_models_ids(decoder, adds_start):
    _, lm = decoder
    tokenizer = type(lm.tokenizer).from_config(
        {**lm.tokenizer.get_config(), "add_start_token": adds_start}
    )
    graph = GraphBytePairTokenizer(tokenizer)
    tokens = graph.tokenize(tf.constant(TEXTS), 40)
    for row, text in enumerate(TEXTS):
        start = [tokenizer.start_token_id] if adds_start else []
        expected = [*start, *tokenizer.tokenize(text)]
        n = int(tokens["input_mask"][row].numpy().sum())
        assert tokens["input_word_ids"][row, :n].numpy().tolist() == expected


def test_a_sentencepiece_tokenizer_is_refused_not_mistokenized():
    from tokenizers import Tokenizer, decoders, models

    from headsize_tf.keras3.pretrained.bpe_tokenizer import BytePairTokenizer

    spm = Tokenizer(models.BPE({"<unk>": 0, "a": 1, "<0x62>": 2}, [], byte_fallback=True))
    spm.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    with pytest.raises(ValueError, match=r"SentencePiece BPE \(Llama 2, Mistral, Gemma\)"):
        GraphBytePairTokenizer(BytePairTokenizer(spm.to_str(), 0))


def test_the_export_scores_and_continues_raw_text_as_the_model(decoder, tmp_path):
    source, lm = decoder
    path = export_source(tmp_path / "export", "lm", decoder=source, max_length=32)
    served = tf.saved_model.load(str(path))
    text = tf.constant(TEXTS[:2])
    out = served.signatures["generate"](text=text, max_new_tokens=tf.constant(4))
    for row, prompt in enumerate(TEXTS[:2]):
        ids = np.array([[lm.tokenizer.start_token_id, *lm.tokenizer.tokenize(prompt)]], "int32")
        expected = lm.generate(ids, 4)[0, ids.shape[1] :]
        assert out["output_ids"][row].numpy().tolist() == expected.tolist()
        assert out["continuation"][row].numpy() == _byte_level_text(lm, expected)
    scores = served.signatures["serving_default"](text=text)
    ids = np.array([[lm.tokenizer.start_token_id, *lm.tokenizer.tokenize(TEXTS[0])]], "int32")
    logits = keras.ops.convert_to_numpy(lm(ids))[0].astype(np.float64)
    log_probs = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    expected = sum(log_probs[t, ids[0, t + 1]] for t in range(ids.shape[1] - 1))
    assert float(scores["log_likelihood"][0]) == pytest.approx(expected, rel=1e-4)


def test_more_positions_than_the_model_has_are_refused(decoder, tmp_path, capsys):
    from headsize_tf import cli
    from headsize_tf.core.errors import CheckpointError

    source, lm = decoder
    beyond = lm.max_sequence_length + 1
    with pytest.raises(CheckpointError, match=f"max_sequence_length={beyond} is beyond the"):
        export_source(tmp_path / "export", "lm", decoder=source, max_length=beyond)
    argv = ["export", "--decoder", source, "--task", "lm", "--format", "gguf"]
    argv += ["--output", str(tmp_path / "lm.gguf"), "--max-sequence-length", str(beyond)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"is beyond the {lm.max_sequence_length} positions" in err[0]
    assert not (tmp_path / "export").exists() and not (tmp_path / "lm.gguf").exists()


def test_a_text_with_a_nul_character_is_refused_not_cut(decoder):
    _, lm = decoder
    graph = GraphBytePairTokenizer(lm.tokenizer)
    with pytest.raises(tf.errors.InvalidArgumentError, match="NUL character"):
        graph.tokenize(tf.constant(["fine", "cut\x00here"]), 16)
    assert graph.tokenize(tf.constant(["a\x07b"]), 8)["input_mask"].numpy().sum() > 0


def test_a_pre_tokenizer_of_its_own_regex_is_refused_not_mistokenized(tokenizer_json):
    """Llama 3's and Qwen2's split by their own regex (Qwen2 after NFC): refused in one line."""
    import json

    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers

    from headsize_tf.data.gguf_llama import LLAMA3_REGEX
    from headsize_tf.keras3.pretrained.bpe_tokenizer import BytePairTokenizer

    llama3 = Tokenizer.from_str(tokenizer_json)
    llama3.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    with pytest.raises(ValueError, match=r"pre-tokenizers \['Split', 'ByteLevel'\]"):
        GraphBytePairTokenizer(BytePairTokenizer(llama3.to_str(), 0))
    qwen = Tokenizer.from_str(tokenizer_json)
    qwen.normalizer = normalizers.NFC()
    with pytest.raises(ValueError, match="has a NFC normalizer"):
        GraphBytePairTokenizer(BytePairTokenizer(qwen.to_str(), 0))
    assert json.loads(tokenizer_json)["pre_tokenizer"]["type"] == "Sequence"  # SmolLM2's: kept.


def test_detokenize_drops_special_tokens_and_a_continuation_stops_at_the_end(decoder):
    _, lm = decoder
    tokenizer = lm.tokenizer
    graph = GraphBytePairTokenizer(tokenizer)
    end = tokenizer.end_token_id
    special = [i for i in graph._special if i != end][0]
    head, tail = tokenizer.tokenize("the quick").tolist(), tokenizer.tokenize(" fox").tolist()
    row = [*head, special, *tail, end, *tail]
    ids = tf.constant([row])
    whole = tf.function(graph.detokenize)(ids)[0].numpy().decode()  # As in the SavedModel.
    assert whole == tokenizer.detokenize(row) == "the quick fox fox"
    cut = tf.function(lambda x: graph.detokenize(x, until_end=True))(ids)[0].numpy().decode()
    assert cut == tokenizer.detokenize(row[: row.index(end)]) == "the quick fox"
