"""data.gguf_llama: GGUF files with a SentencePiece vocabulary (`tokenizer.ggml.model` "llama").

Llama 2, Mistral, TinyLlama and Gemma GGUF files carry SentencePiece BPE
vocabularies: pieces, scores and token types, no merges. The reader rebuilds
them as a `tokenizers` BPE with byte fallback; the oracle is `sentencepiece`
itself, on models trained here with Llama's settings (a space prefix) and
Gemma's (none).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")
spm = pytest.importorskip("sentencepiece")
tokenizers = pytest.importorskip("tokenizers")

from headsize_tf.core.errors import CheckpointError  # noqa: E402
from headsize_tf.core.llama_checkpoint import LlamaCheckpoint, weight_shapes  # noqa: E402
from headsize_tf.data.gguf_llama import read_gguf_llama, sentencepiece_merges  # noqa: E402
from tests.data.llama_files_test import CORPUS, tiny_config, write_gguf  # noqa: E402

USER_DEFINED = "<tab>"
TRAINING_TEXT = CORPUS + [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune,",
    "must be in want of a wife. However little known the feelings or views of such a man may be",
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the",
    "surrounding families, that he is considered the rightful property of some one or other.",
    "    def main():\n        return 42  # four spaces, eight spaces",
]
# Characters the trained vocabularies lack (accents, CJK, emoji) fall back to bytes.
ALPHABET = st.sampled_from(list("abcdefghijklmnopqrstuvwxyz ETAO,.'\n\t0123456789éü漢字🙂—"))
PIECES = st.sampled_from(["the", "ing", " and", "  ", "    ", " truth", "man "])
TEXT = st.lists(st.one_of(ALPHABET, PIECES), max_size=40).map("".join)


def _train(space_prefix: bool):
    """A SentencePiece BPE (byte fallback, no normalisation) and its (tokens, scores, types)."""
    from sentencepiece import sentencepiece_model_pb2

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_TEXT),
        model_writer=model,
        vocab_size=420,
        model_type="bpe",
        byte_fallback=True,
        normalization_rule_name="identity",
        add_dummy_prefix=space_prefix,
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        split_digits=True,
        user_defined_symbols=[USER_DEFINED],
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    vocabulary = (
        [p.piece for p in proto.pieces],
        [p.score for p in proto.pieces],
        [int(p.type) for p in proto.pieces],  # SentencePiece's numbering is llama.cpp's.
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue()), vocabulary


def tiny_checkpoint(vocabulary_size: int) -> LlamaCheckpoint:
    """The tiny random Llama of llama_files_test over a vocabulary of `vocabulary_size`."""
    config = tiny_config(vocabulary_size)
    rng = np.random.default_rng(1)
    weights = {
        name: (0.2 * rng.standard_normal(shape)).astype(np.float32)
        for name, shape in weight_shapes(config).items()
    }
    return LlamaCheckpoint(config, weights, chat_template="{{ messages }}", source="test")


@pytest.fixture(scope="module", params=[True, False], ids=["llama_prefix", "gemma_no_prefix"])
def trained(request, tmp_path_factory):
    """(sentencepiece processor, the GGUF file's checkpoint, space prefix) per setting."""
    processor, vocabulary = _train(request.param)
    path = tmp_path_factory.mktemp("spm") / "tiny.gguf"
    write_gguf(
        path,
        tiny_checkpoint(len(vocabulary[0])),
        tokenizer_model="llama",
        vocabulary=vocabulary,
        extra={"add_add_space_prefix": request.param},
    )
    return processor, read_gguf_llama(path), request.param


def test_merges_rank_splits_by_the_pieces_score_then_ids():
    tokens = ["<unk>", "a", "b", "c", "ab", "bc", "abc", "<0x41>", "ca"]
    scores = [0.0, 0.0, 0.0, 0.0, -2.0, -1.0, -3.0, 0.0, -9.0]
    types = [2, 1, 1, 1, 1, 1, 1, 6, 5]  # "ca" is unused: never a merge.
    assert sentencepiece_merges(tokens, scores, types) == [
        ("b", "c"),  # "bc" scores highest.
        ("a", "b"),
        ("a", "bc"),  # Both splits of "abc", by the ids of their parts.
        ("ab", "c"),
    ]


@settings(max_examples=300, deadline=None)
@given(text=TEXT)
def test_gguf_sentencepiece_ids_and_text_equal_sentencepiece(trained, text):
    processor, checkpoint, _ = trained
    tokenizer = tokenizers.Tokenizer.from_str(checkpoint.tokenizer_json)
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert ids == processor.encode(text)
    assert tokenizer.decode(ids) == processor.decode(ids)


def test_gguf_sentencepiece_reads_pieces_bytes_and_specials(trained):
    processor, checkpoint, prefix = trained
    tokenizer = tokenizers.Tokenizer.from_str(checkpoint.tokenizer_json)
    text = "It is a truth 🙂"
    pieces = [tokenizer.id_to_token(i) for i in tokenizer.encode(text).ids]
    assert pieces == processor.encode(text, out_type=str)
    assert pieces[0].startswith("\u2581") == prefix
    assert "<0xF0>" in pieces  # 🙂 = F0 9F 99 82: bytes, by fallback.
    assert tokenizer.decode(tokenizer.encode(text).ids) == text
    assert tokenizer.encode("</s>").ids == [processor.eos_id()]  # A control token.
    assert checkpoint.config.vocabulary_size == processor.get_piece_size()
    assert checkpoint.add_bos_token  # llama.cpp's default for SentencePiece files.


def test_gguf_sentencepiece_bad_vocabularies_are_one_line_errors(tmp_path):
    _, (tokens, scores, types) = _train(True)
    checkpoint = tiny_checkpoint(len(tokens))

    def read(**vocabulary):
        path = tmp_path / "bad.gguf"
        path.unlink(missing_ok=True)
        parts = {"tokens": tokens, "scores": scores, "types": types, **vocabulary}
        unknown = parts.pop("unknown", None)
        write_gguf(
            path,
            checkpoint,
            tokenizer_model="llama",
            vocabulary=(parts["tokens"], parts["scores"], parts["types"]),
            extra={} if unknown is None else {"add_unk_token_id": unknown},
        )
        with pytest.raises(CheckpointError) as error:
            read_gguf_llama(path)
        assert "\n" not in str(error.value)
        return str(error.value)

    assert "scores has 3 entries for" in read(scores=scores[:3])
    assert "unknown_token_id=9999 is not a token id" in read(unknown=9999)
    assert "token_type has 5 entries for" in read(types=types[:5])


def test_gguf_sentencepiece_text_after_special_tokens_is_encoded_as_by_llama_cpp(trained):
    """llama.cpp encodes each text fragment between special and user-defined tokens alone,
    with the space prefix (where the file asks for one) before each fragment."""
    processor, checkpoint, prefix = trained
    tokenizer = tokenizers.Tokenizer.from_str(checkpoint.tokenizer_json)
    parts = ["the man", USER_DEFINED, "in want", "</s>", " a wife"]
    want = []
    for part in parts:
        want += [part] if part in (USER_DEFINED, "</s>") else processor.encode(part, out_type=str)
    ids = tokenizer.encode("".join(parts), add_special_tokens=False).ids
    assert [tokenizer.id_to_token(i) for i in ids] == want
    assert want[want.index(USER_DEFINED) + 1].startswith("\u2581") == prefix
