"""data.gguf_llama_writer: checkpoints written as GGUF files llama.cpp runs.

Two oracles. The raw file, read with `gguf`'s own reader (not ours), must
compute the checkpoint's logits with llama.cpp's conventions from the
equations (`llama_cpp_logits`: llama.cpp's tensor names, its adjacent-pair
rotary embedding, the per-layer head counts of its "deci" architecture).
And `read_gguf_llama` must read every file back as the checkpoint it came
from: config, weights, tokenizer ids. The files the reader's own tests
write the way llama.cpp's converter does (Gemma 1-3, SentencePiece
vocabularies) are read, written and read again.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings

gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("sentencepiece")

from headsize_tf.core.errors import CheckpointError  # noqa: E402
from headsize_tf.core.llama_checkpoint import LlamaCheckpoint, LlamaConfig  # noqa: E402
from headsize_tf.data.gguf_llama import read_gguf_llama  # noqa: E402
from headsize_tf.data.gguf_llama_writer import PROBE_TEXTS, write_gguf_llama  # noqa: E402
from tests.data.gguf_gemma_test import hf_config, random_weights, write_like_llama_cpp  # noqa: E402
from tests.data.gguf_sentencepiece_test import TEXT, _train, tiny_checkpoint  # noqa: E402
from tests.data.llama_files_test import (  # noqa: E402
    CORPUS,
    llama_logits,
    random_checkpoint,
    rms_norm,
    rope_interleaved,
    tiny_config,
    write_gguf,
)
from tests.data.llama_files_test import tokenizer_json as tokenizer_json  # noqa: E402, F401

IDS = [1, 5, 77, 120, 9, 250, 33, 4, 18, 201]


def pruned_checkpoint(tokenizer_json: str, layer_heads, seed: int = 3) -> LlamaCheckpoint:
    """A tiny random Llama whose layers keep `layer_heads` (query, key/value) heads."""
    vocab = len(json.loads(tokenizer_json)["model"]["vocab"])
    config = tiny_config(vocab, num_layers=len(layer_heads), head_dim=16, layer_heads=layer_heads)
    base = random_checkpoint(tokenizer_json, seed=seed)
    rng = np.random.default_rng(seed)
    from headsize_tf.core.llama_checkpoint import weight_shapes

    weights = {
        name: (
            (1 + 0.1 * rng.standard_normal(shape))
            if len(shape) == 1
            else 0.15 * rng.standard_normal(shape)
        ).astype(np.float32)
        for name, shape in weight_shapes(config).items()
    }
    return dataclasses.replace(base, config=config, weights=weights)


def llama_cpp_logits(path, ids) -> np.ndarray:
    """Logits `[T, vocab]` of a "llama" or "deci" GGUF file as llama.cpp computes them.

    Only `gguf`'s reader: llama.cpp's tensor names and `[out, in]` arrays, its
    adjacent-pair RoPE on the stored (permuted) rows, head counts from the
    metadata (one per layer in a "deci" file).
    """
    reader = gguf.GGUFReader(str(path))
    arch = reader.fields["general.architecture"].contents()

    def meta(key):
        return reader.fields[f"{arch}.{key}"].contents()

    t = {
        tensor.name: np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), np.float64)
        for tensor in reader.tensors
    }
    layers = meta("block_count")
    heads, groups = meta("attention.head_count"), meta("attention.head_count_kv")
    heads = heads if isinstance(heads, list) else [heads] * layers
    groups = groups if isinstance(groups, list) else [groups] * layers
    p, eps, theta = (
        meta("attention.key_length"),
        meta("attention.layer_norm_rms_epsilon"),
        meta("rope.freq_base"),
    )
    x = t["token_embd.weight"][np.asarray(ids)]
    n = len(ids)
    causal = np.tril(np.ones((n, n), bool))
    for i in range(layers):
        h, g = heads[i], groups[i]
        b = f"blk.{i}."
        a = rms_norm(x, t[b + "attn_norm.weight"], eps)
        q = rope_interleaved((a @ t[b + "attn_q.weight"].T).reshape(n, h, p), theta)
        k = rope_interleaved((a @ t[b + "attn_k.weight"].T).reshape(n, g, p), theta)
        v = (a @ t[b + "attn_v.weight"].T).reshape(n, g, p)
        out = []
        for head in range(h):
            kv = head // (h // g)
            scores = np.where(causal, q[:, head] @ k[:, kv].T / np.sqrt(p), -np.inf)
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            out.append(probs / probs.sum(-1, keepdims=True) @ v[:, kv])
        x = x + np.concatenate(out, -1) @ t[b + "attn_output.weight"].T
        f = rms_norm(x, t[b + "ffn_norm.weight"], eps)
        gate, up = f @ t[b + "ffn_gate.weight"].T, f @ t[b + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ t[b + "ffn_down.weight"].T
    x = rms_norm(x, t["output_norm.weight"], eps)
    return x @ t.get("output.weight", t["token_embd.weight"]).T


def assert_same_checkpoint(back: LlamaCheckpoint, original: LlamaCheckpoint, atol=0.0):
    assert back.config == original.config
    assert set(back.weights) == set(original.weights)
    for name, array in original.weights.items():
        np.testing.assert_allclose(back.weights[name], array, rtol=0, atol=atol, err_msg=name)
    written = tokenizers.Tokenizer.from_str(back.tokenizer_json)
    source = tokenizers.Tokenizer.from_str(original.tokenizer_json)
    for text in (*PROBE_TEXTS, *CORPUS):
        assert (
            written.encode(text, add_special_tokens=False).ids
            == source.encode(text, add_special_tokens=False).ids
        )
    assert back.add_bos_token == original.add_bos_token
    assert back.chat_template == original.chat_template


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_llama_file_computes_the_checkpoints_logits_in_llama_cpps_conventions(
    tmp_path, tokenizer_json, tie
):
    checkpoint = random_checkpoint(tokenizer_json, tie=tie)
    path = write_gguf_llama(checkpoint, tmp_path / "tiny.gguf")

    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["tokenizer.ggml.pre"].contents() == "smollm"  # The digit-splitting one.
    assert ("output.weight" in {t.name for t in reader.tensors}) is not tie
    np.testing.assert_allclose(
        llama_cpp_logits(path, IDS), llama_logits(checkpoint, IDS), rtol=0, atol=1e-9
    )
    assert_same_checkpoint(read_gguf_llama(path), checkpoint)


def test_pruned_layers_become_llama_cpps_deci_architecture(tmp_path, tokenizer_json):
    layer_heads = ((4, 2), (2, 1), (4, 4))  # Grouped, one group left, multi-head.
    checkpoint = pruned_checkpoint(tokenizer_json, layer_heads)
    path = write_gguf_llama(checkpoint, tmp_path / "pruned.gguf")

    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "deci"
    assert reader.fields["deci.attention.head_count"].contents() == [4, 2, 4]
    assert reader.fields["deci.attention.head_count_kv"].contents() == [2, 1, 4]
    np.testing.assert_allclose(
        llama_cpp_logits(path, IDS), llama_logits(checkpoint, IDS), rtol=0, atol=1e-9
    )
    back = read_gguf_llama(path)
    assert back.config.layer_heads == layer_heads
    assert (back.config.num_query_heads, back.config.num_key_value_heads) == (4, 4)
    assert_same_checkpoint(back, checkpoint)


def test_decoder_lm_of_a_deci_file_equals_the_pruned_model(tmp_path, tokenizer_json):
    """A pruned `DecoderLM` -> GGUF -> `load_decoder`: the same heads and logits."""
    keras = pytest.importorskip("keras")
    from headsize_tf.keras3.modeling.llama_weights import decoder_from_checkpoint
    from headsize_tf.keras3.pretrained.decoders import load_decoder, save_decoder, tokenizer_of

    checkpoint = pruned_checkpoint(tokenizer_json, ((4, 2), (2, 1), (4, 4)))
    lm = decoder_from_checkpoint(checkpoint, tokenizer=tokenizer_of(checkpoint))
    assert lm.attention_spec.num_heads == (4, 2, 4)
    assert lm.attention_spec.num_kv_heads == (2, 1, 4)
    ids = np.asarray([IDS], np.int32)
    want = llama_logits(checkpoint, IDS)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(lm(ids))[0], want, atol=2e-4)

    path = save_decoder(lm, tmp_path / "lm.gguf", format="gguf")
    back = load_decoder(path)
    assert back.attention_spec.num_heads == (4, 2, 4)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(back(ids)), keras.ops.convert_to_numpy(lm(ids)), atol=1e-6
    )
    with pytest.raises(CheckpointError, match="differ in heads.*GGUF"):
        save_decoder(lm, tmp_path / "hf", format="hf")
    with pytest.raises(CheckpointError, match="ends in .gguf"):
        save_decoder(lm, tmp_path / "lm.bin", format="gguf")


@pytest.mark.parametrize(
    "tensor_type, stored, atol",
    [("f16", "F16", 5e-4), ("bf16", "BF16", 4e-3), ("q8_0", "Q8_0", 5e-3)],
)
def test_half_and_8_bit_matrices_keep_vectors_in_float32(
    tmp_path, tokenizer_json, tensor_type, stored, atol
):
    checkpoint = random_checkpoint(tokenizer_json)
    path = write_gguf_llama(checkpoint, tmp_path / "tiny.gguf", tensor_type)

    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}
    assert types["blk.0.attn_norm.weight"] == types["output_norm.weight"] == "F32"
    assert types["blk.0.attn_q.weight"] == stored
    # Rows of 96 (down projection) are whole Q8_0 blocks; the 64-wide rows too.
    assert types["blk.1.ffn_down.weight"] == stored
    back = read_gguf_llama(path)
    assert back.config == checkpoint.config
    for name, array in checkpoint.weights.items():
        error = np.abs(back.weights[name] - array)
        if array.ndim == 1:
            assert error.max() == 0, name
        elif tensor_type == "q8_0":  # Blocks of 32 scaled by their largest value / 127.
            assert error.max() <= atol, name
        else:  # Relative rounding: 2^-11 (f16), 2^-8 (bf16).
            assert (error <= atol * np.abs(array) + 1e-7).all(), name


def test_llama3_rope_scaling_is_written_as_llama_cpps_frequency_factors(tmp_path, tokenizer_json):
    checkpoint = random_checkpoint(tokenizer_json)
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    config = dataclasses.replace(
        checkpoint.config, rope_max_wavelength=500000.0, rope_scaling=scaling
    )
    checkpoint = dataclasses.replace(checkpoint, config=config)
    path = write_gguf_llama(checkpoint, tmp_path / "llama3.gguf")
    factors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}["rope_freqs.weight"]
    assert factors.data.shape == (8,) and factors.data.max() == 8.0 and factors.data.min() == 1.0
    assert read_gguf_llama(path).config == config


@pytest.mark.parametrize(
    "model_type, overrides",
    [
        ("gemma", {}),
        ("gemma2", {}),
        ("gemma2", {"num_hidden_layers": 46, "query_pre_attn_scalar": 8}),
        ("gemma3_text", {"rope_local_base_freq": 20_000.0}),
        ("gemma2", {"no_window": True}),
    ],
    ids=["gemma", "gemma2", "gemma2_27b", "gemma3", "gemma2_no_window"],
)
def test_gemma_files_read_write_and_read_back(tmp_path, model_type, overrides):
    _, vocabulary = _train(space_prefix=False)
    no_window = overrides.pop("no_window", False)
    hf = hf_config(model_type, len(vocabulary[0]), **overrides)
    config = LlamaConfig.from_hf_config(hf)
    original = read_gguf_llama(
        write_like_llama_cpp(tmp_path / "cpp.gguf", hf, random_weights(config), vocabulary, True)
    )
    if no_window:  # Every layer global: written as a pattern of no local layer.
        config = dataclasses.replace(
            original.config, sliding_window=None, sliding_window_layers=None
        )
        original = dataclasses.replace(original, config=config)
    path = write_gguf_llama(original, tmp_path / "ours.gguf")

    stored = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(path)).tensors}
    np.testing.assert_allclose(  # Norms as 1 + offset, as llama.cpp's converter stores them.
        stored["blk.0.attn_norm.weight"],
        original.weights["model.layers.0.input_layernorm.weight"] + 1,
        atol=1e-6,
    )
    assert_same_checkpoint(read_gguf_llama(path), original, atol=1e-6)


@pytest.mark.parametrize("space_prefix", [True, False], ids=["llama_prefix", "gemma_no_prefix"])
def test_sentencepiece_vocabularies_write_as_sentencepiece_splits_them(tmp_path, space_prefix):
    processor, vocabulary = _train(space_prefix)
    first = write_gguf(
        tmp_path / "cpp.gguf",
        tiny_checkpoint(len(vocabulary[0])),
        tokenizer_model="llama",
        vocabulary=vocabulary,
        extra={"add_add_space_prefix": space_prefix},
    )
    original = read_gguf_llama(first)
    back = read_gguf_llama(write_gguf_llama(original, tmp_path / "ours.gguf"))
    assert_same_checkpoint(back, original)
    tokenizer = tokenizers.Tokenizer.from_str(back.tokenizer_json)

    @settings(max_examples=100, deadline=None)
    @given(text=TEXT)
    def same_as_sentencepiece(text):
        assert tokenizer.encode(text, add_special_tokens=False).ids == processor.encode(text)

    same_as_sentencepiece()
    fields = gguf.GGUFReader(str(tmp_path / "ours.gguf")).fields
    types = fields["tokenizer.ggml.token_type"].contents()
    assert types.count(6) == 256  # Byte pieces, as llama.cpp's byte fallback looks them up.
    assert fields["tokenizer.ggml.add_space_prefix"].contents() is space_prefix


def test_qwen_files_keep_their_biases_norms_and_pre_tokenizer(tmp_path, tokenizer_json):
    for model_type, bias, norm in (("qwen2", True, False), ("qwen3", False, True)):
        checkpoint = random_checkpoint(tokenizer_json)
        config = dataclasses.replace(
            checkpoint.config, model_type=model_type, attention_bias=bias, qk_norm=norm
        )
        from headsize_tf.core.llama_checkpoint import weight_shapes

        rng = np.random.default_rng(5)
        weights = {
            name: checkpoint.weights.get(name, rng.standard_normal(shape).astype(np.float32))
            for name, shape in weight_shapes(config).items()
        }
        checkpoint = dataclasses.replace(checkpoint, config=config, weights=weights)
        path = write_gguf_llama(checkpoint, tmp_path / f"{model_type}.gguf")
        back = read_gguf_llama(path)
        assert back.config.model_type == model_type
        assert_same_checkpoint(back, checkpoint)


def test_what_llama_cpp_cannot_run_is_refused_in_one_line(tmp_path, tokenizer_json):
    checkpoint = random_checkpoint(tokenizer_json)
    config = checkpoint.config

    def refused(match, **changes):
        changed = dataclasses.replace(
            checkpoint, **{k: v for k, v in changes.items() if k != "config"}
        )
        if "config" in changes:
            changed = dataclasses.replace(changed, config=changes["config"])
        with pytest.raises(CheckpointError, match=match) as error:
            write_gguf_llama(changed, tmp_path / "bad.gguf", changes.get("tensor_type", "f32"))
        assert "\n" not in str(error.value)
        assert not (tmp_path / "bad.gguf").exists()

    with pytest.raises(CheckpointError, match="Unknown GGUF tensor type 'q4'"):
        write_gguf_llama(checkpoint, tmp_path / "bad.gguf", "q4")
    refused(
        "attends to the whole context",
        config=dataclasses.replace(config, model_type="mistral", sliding_window=16),
    )
    refused(
        "'yarn' has no GGUF form",
        config=dataclasses.replace(config, rope_scaling={"rope_type": "yarn", "factor": 4.0}),
    )
    pruned = pruned_checkpoint(tokenizer_json, ((4, 2), (2, 1)))
    qwen = dataclasses.replace(pruned.config, model_type="qwen3", qk_norm=True)
    norms = {
        f"model.layers.{i}.self_attn.{n}_norm.weight": np.ones(16, np.float32)
        for i in range(2)
        for n in "qk"
    }
    qwen_pruned = dataclasses.replace(pruned, config=qwen, weights={**pruned.weights, **norms})
    with pytest.raises(CheckpointError, match="'deci' architecture"):
        write_gguf_llama(qwen_pruned, tmp_path / "bad.gguf")
    wordpiece = tokenizers.Tokenizer(
        tokenizers.models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")
    )
    refused("'WordPiece' tokenizer has no GGUF form", tokenizer_json=wordpiece.to_str())
    no_digits = tokenizers.Tokenizer.from_str(tokenizer_json)
    no_digits.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    refused("splits text unlike every llama.cpp pre-tokenizer", tokenizer_json=no_digits.to_str())


def test_gemma_query_scales_other_than_llama_cpps_are_refused(tmp_path):
    _, vocabulary = _train(space_prefix=False)
    hf = hf_config("gemma2", len(vocabulary[0]), query_pre_attn_scalar=8)  # 4 layers: not 27B.
    config = LlamaConfig.from_hf_config(hf)
    checkpoint = read_gguf_llama(
        write_like_llama_cpp(
            tmp_path / "cpp.gguf",
            hf_config("gemma2", len(vocabulary[0])),
            random_weights(config),
            vocabulary,
        )
    )
    scaled = dataclasses.replace(checkpoint, config=config)
    with pytest.raises(CheckpointError, match=r"1/sqrt\(16\) \(its 27B rule\).*1/sqrt\(8\)"):
        write_gguf_llama(scaled, tmp_path / "bad.gguf")


def test_layer_heads_are_validated_and_collapse_when_equal():
    config = tiny_config(300, head_dim=16, layer_heads=((4, 2), (4, 2)))
    assert config.layer_heads is None and (config.num_query_heads, config.num_key_value_heads) == (
        4,
        2,
    )
    with pytest.raises(CheckpointError, match="the second dividing the first"):
        tiny_config(300, head_dim=16, layer_heads=((4, 3), (4, 2)))
    with pytest.raises(CheckpointError, match="one .* pair per layer"):
        tiny_config(300, head_dim=16, layer_heads=((4, 2),))
    with pytest.raises(CheckpointError, match="needs head_dim"):
        tiny_config(300, layer_heads=((4, 2), (2, 1)))
    with pytest.raises(CheckpointError, match="config.json has one head count"):
        tiny_config(300, head_dim=16, layer_heads=((4, 2), (2, 1))).to_hf_config()
