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
from headsize_tf.core.llama_checkpoint import (  # noqa: E402
    LlamaCheckpoint,
    LlamaConfig,
    weight_shapes,
)
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
    metadata (one per layer in a "deci" file; a layer without heads is
    attention-free: it passes its input on, src/models/deci.cpp).
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
        if h == 0:  # Attention-free: the feed-forward block reads the layer's input.
            assert not any(name.startswith(b + "attn") for name in t)
            f = rms_norm(x, t[b + "ffn_norm.weight"], eps)
            gate, up = f @ t[b + "ffn_gate.weight"].T, f @ t[b + "ffn_up.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ t[b + "ffn_down.weight"].T
            continue
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


def test_a_layer_without_heads_is_written_attention_free(tmp_path, tokenizer_json):
    """A layer whose attention outputs zeros (pruning left it one head gated to 0) is an
    attention-free "deci" layer: no heads, no attention tensors, no KV cache in llama.cpp."""
    checkpoint = pruned_checkpoint(tokenizer_json, ((4, 2), (1, 1), (4, 4)))
    checkpoint.weights["model.layers.1.self_attn.o_proj.weight"][:] = 0
    path = write_gguf_llama(checkpoint, tmp_path / "free.gguf")

    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "deci"
    assert reader.fields["deci.attention.head_count"].contents() == [4, 0, 4]
    assert reader.fields["deci.attention.head_count_kv"].contents() == [2, 0, 4]
    names = {tensor.name for tensor in reader.tensors}
    assert not {n for n in names if n.startswith("blk.1.attn")}
    assert {"blk.1.ffn_norm.weight", "blk.0.attn_norm.weight", "blk.2.attn_q.weight"} <= names
    want = llama_logits(checkpoint, IDS)
    np.testing.assert_allclose(llama_cpp_logits(path, IDS), want, rtol=0, atol=1e-9)
    # Read back: the layer holds one head of zeros (the library's form of a layer with no
    # head left) and a norm of ones; the logits are the checkpoint's.
    back = read_gguf_llama(path)
    assert back.config.layer_heads == ((4, 2), (1, 1), (4, 4))
    assert not np.any(back.weights["model.layers.1.self_attn.q_proj.weight"])
    np.testing.assert_array_equal(back.weights["model.layers.1.input_layernorm.weight"], 1)
    np.testing.assert_allclose(llama_logits(back, IDS), want, rtol=0, atol=1e-9)
    # Written again, the same file.
    again = write_gguf_llama(back, tmp_path / "again.gguf", name="free")
    assert again.read_bytes() == path.read_bytes()
    # Layer 0 keeps its heads (llama.cpp reads the head size from it): a plain "llama"
    # file, all tensors kept.
    checkpoint = random_checkpoint(tokenizer_json)
    checkpoint.weights["model.layers.0.self_attn.o_proj.weight"][:] = 0
    reader = gguf.GGUFReader(str(write_gguf_llama(checkpoint, tmp_path / "zero.gguf")))
    assert reader.fields["general.architecture"].contents() == "llama"
    assert len(reader.tensors) == len(weight_shapes(checkpoint.config))


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


def test_a_decoder_pruned_of_a_whole_layer_is_attention_free_in_llama_cpp(tmp_path, tokenizer_json):
    """`remove_heads` leaves a layer with no head one head of output zeros; its GGUF file
    drops that layer's attention, and reads back with the pruned model's logits."""
    keras = pytest.importorskip("keras")
    from headsize_tf.keras3.modeling.llama_weights import decoder_from_checkpoint
    from headsize_tf.keras3.pretrained.decoders import load_decoder, save_decoder, tokenizer_of
    from headsize_tf.keras3.pruning.remove import remove_heads

    checkpoint = pruned_checkpoint(tokenizer_json, ((4, 2), (4, 2), (4, 2)))
    lm = decoder_from_checkpoint(checkpoint, tokenizer=tokenizer_of(checkpoint))
    mask = np.ones([3, 4], np.float32)
    mask[1] = 0  # Every head of the middle layer.
    mask[2, :2] = 0  # One key/value group of the last.
    pruned = remove_heads(lm, mask)
    ids = np.asarray([IDS], np.int32)
    want = keras.ops.convert_to_numpy(pruned(ids))[0]

    path = save_decoder(pruned, tmp_path / "pruned.gguf", format="gguf")
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["deci.attention.head_count"].contents() == [4, 0, 2]
    assert reader.fields["deci.attention.head_count_kv"].contents() == [2, 0, 1]
    np.testing.assert_allclose(llama_cpp_logits(path, IDS), want, rtol=0, atol=2e-4)
    back = load_decoder(path)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(back(ids))[0], want, atol=1e-5)


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


def test_every_gemma_norm_is_stored_as_one_plus_its_offset(tmp_path):
    _, vocabulary = _train(space_prefix=False)
    hf = hf_config("gemma3_text", len(vocabulary[0]), final_logit_softcapping=30.0)
    config = LlamaConfig.from_hf_config(hf)
    checkpoint = read_gguf_llama(
        write_like_llama_cpp(tmp_path / "cpp.gguf", hf, random_weights(config), vocabulary, True)
    )
    checkpoint = dataclasses.replace(checkpoint, config=config)  # The final cap, which
    path = write_gguf_llama(checkpoint, tmp_path / "ours.gguf")  # llama.cpp's Gemma 3 reads.

    reader = gguf.GGUFReader(str(path))
    assert reader.fields["gemma3.final_logit_softcapping"].contents() == 30.0
    stored = {t.name: np.asarray(t.data) for t in reader.tensors}
    layer = {"attn_q_norm", "attn_k_norm", "attn_norm", "post_attention_norm", "ffn_norm"}
    names = {"output_norm.weight": "model.norm.weight"}
    for i in range(config.num_layers):
        for name in (*layer, "post_ffw_norm"):
            names[f"blk.{i}.{name}.weight"] = (
                f"model.layers.{i}."
                + {
                    "attn_q_norm": "self_attn.q_norm",
                    "attn_k_norm": "self_attn.k_norm",
                    "attn_norm": "input_layernorm",
                    "post_attention_norm": "post_attention_layernorm",
                    "ffn_norm": "pre_feedforward_layernorm",
                    "post_ffw_norm": "post_feedforward_layernorm",
                }[name]
                + ".weight"
            )
    for gguf_name, hf_name in names.items():
        np.testing.assert_allclose(stored[gguf_name], checkpoint.weights[hf_name] + 1, atol=1e-6)
    assert read_gguf_llama(path).config == config


def test_gemma_models_llama_cpp_would_compute_otherwise_are_refused(tmp_path):
    _, vocabulary = _train(space_prefix=False)
    hf = hf_config("gemma2", len(vocabulary[0]))
    gemma2 = read_gguf_llama(
        write_like_llama_cpp(
            tmp_path / "cpp.gguf", hf, random_weights(LlamaConfig.from_hf_config(hf)), vocabulary
        )
    )
    config = gemma2.config
    no_cap = dataclasses.replace(config, final_logit_soft_cap=None)
    capped3 = dataclasses.replace(
        config, model_type="gemma3_text", qk_norm=True, local_rope_max_wavelength=1e4
    )
    for changed, match in (
        (no_cap, "llama.cpp's Gemma 2 caps both the attention and the output logits"),
        (dataclasses.replace(config, tie_word_embeddings=False), "untied"),
        (capped3, "Gemma 3 has no attention logit cap"),
    ):
        weights = dict(gemma2.weights)
        if not changed.tie_word_embeddings:
            weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
        for i in range(changed.num_layers if changed.qk_norm else 0):
            for n in "qk":
                weights[f"model.layers.{i}.self_attn.{n}_norm.weight"] = np.zeros(16, np.float32)
        with pytest.raises(CheckpointError, match=match) as error:
            write_gguf_llama(
                dataclasses.replace(gemma2, config=changed, weights=weights), tmp_path / "bad.gguf"
            )
        assert "\n" not in str(error.value)


def test_llama3_frequency_factors_follow_llama_cpps_converter_and_stay_llama_only(
    tmp_path, tokenizer_json
):
    checkpoint = random_checkpoint(tokenizer_json)
    scaling = {"rope_type": "llama3", "factor": 32.0}  # Llama 3.2's, the rest defaulted.
    config = dataclasses.replace(
        checkpoint.config, rope_max_wavelength=500000.0, rope_scaling=scaling
    )
    path = write_gguf_llama(dataclasses.replace(checkpoint, config=config), tmp_path / "l3.gguf")
    stored = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}["rope_freqs.weight"].data

    # convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors, loop for loop.
    base, dim, factor, low, high, old = 500000.0, 16, 32.0, 1.0, 4.0, 8192
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    want = []
    for freq in freqs:
        wavelen = 2 * np.pi / freq
        if wavelen < old / high:
            want.append(1)
        elif wavelen > old / low:
            want.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            want.append(1 / ((1 - smooth) / factor + smooth))
    np.testing.assert_allclose(stored, want, rtol=1e-5)
    assert read_gguf_llama(path).config.rope_scaling["factor"] == 32.0

    other = dict(scaling, high_freq_factor=2.0)
    for changed, match in (
        (dataclasses.replace(config, rope_scaling=other), "not read back from rope_freqs"),
        (dataclasses.replace(config, model_type="qwen3", qk_norm=True), "'llama' and 'deci' files"),
    ):
        weights = dict(checkpoint.weights)
        for i in range(2 if changed.qk_norm else 0):
            for n in "qk":
                weights[f"model.layers.{i}.self_attn.{n}_norm.weight"] = np.ones(16, np.float32)
        with pytest.raises(CheckpointError, match=match):
            write_gguf_llama(
                dataclasses.replace(checkpoint, config=changed, weights=weights),
                tmp_path / "bad.gguf",
            )


def test_q8_0_rows_that_are_not_whole_blocks_fall_back_to_f16(tmp_path, tokenizer_json):
    checkpoint = random_checkpoint(tokenizer_json)
    config = dataclasses.replace(checkpoint.config, hidden_dim=48, head_dim=16)
    rng = np.random.default_rng(0)
    weights = {
        name: (0.1 * rng.standard_normal(shape)).astype(np.float32)
        for name, shape in weight_shapes(config).items()
    }
    path = write_gguf_llama(
        dataclasses.replace(checkpoint, config=config, weights=weights), tmp_path / "q.gguf", "q8_0"
    )
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}
    assert types["blk.0.attn_q.weight"] == "F16"  # Rows of 48.
    assert types["blk.0.ffn_down.weight"] == "Q8_0"  # Rows of 96.


def test_vocabulary_padding_added_tokens_and_bos_rules_are_written_for_llama_cpp(
    tmp_path, tokenizer_json
):
    checkpoint = random_checkpoint(tokenizer_json)
    size = checkpoint.config.vocabulary_size
    with_added = tokenizers.Tokenizer.from_str(tokenizer_json)
    with_added.add_tokens(["<tab>"])  # A user-defined token, id `size`.
    config = dataclasses.replace(checkpoint.config, vocabulary_size=size + 3, bos_token_id=None)
    rng = np.random.default_rng(0)
    weights = {
        name: (0.1 * rng.standard_normal(shape)).astype(np.float32)
        for name, shape in weight_shapes(config).items()
    }
    padded = dataclasses.replace(
        checkpoint, config=config, weights=weights, tokenizer_json=with_added.to_str()
    )
    path = write_gguf_llama(padded, tmp_path / "padded.gguf")

    fields = gguf.GGUFReader(str(path)).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    assert tokens[size:] == ["<tab>", f"[PAD{size + 1}]", f"[PAD{size + 2}]"]
    assert types[size:] == [4, 5, 5]  # User-defined, then llama.cpp's unused padding.
    assert types[:3] == [3, 3, 3]  # The special tokens are control tokens.
    assert len(set(tokens)) == len(tokens)
    assert fields["tokenizer.ggml.add_bos_token"].contents() is False  # No BOS id: none added.
    assert "tokenizer.ggml.bos_token_id" not in fields
    back = read_gguf_llama(path)
    assert back.config.vocabulary_size == size + 3 and not back.add_bos_token
    assert tokenizers.Tokenizer.from_str(back.tokenizer_json).encode("a<tab>b").ids[1] == size


def test_per_layer_heads_need_only_divide_within_each_layer(tmp_path, tokenizer_json):
    checkpoint = pruned_checkpoint(tokenizer_json, ((6, 3), (8, 2)))  # 8 % 3: fine per layer.
    assert (checkpoint.config.num_query_heads, checkpoint.config.num_key_value_heads) == (8, 3)
    path = write_gguf_llama(checkpoint, tmp_path / "deci.gguf")
    np.testing.assert_allclose(
        llama_cpp_logits(path, IDS), llama_logits(checkpoint, IDS), rtol=0, atol=1e-9
    )
    assert read_gguf_llama(path).config.layer_heads == ((6, 3), (8, 2))


def test_a_metaspace_sentencepiece_tokenizer_keeps_its_space_prefix(tmp_path):
    processor, vocabulary = _train(space_prefix=True)
    first = write_gguf(
        tmp_path / "cpp.gguf",
        tiny_checkpoint(len(vocabulary[0])),
        tokenizer_model="llama",
        vocabulary=vocabulary,
    )
    original = read_gguf_llama(first)
    data = json.loads(original.tokenizer_json)  # Llama 2's newer tokenizer.json form:
    data["normalizer"] = None  # no Prepend normalizer, a Metaspace pre-tokenizer.
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "split": False}
    metaspace = dataclasses.replace(original, tokenizer_json=json.dumps(data))
    path = write_gguf_llama(metaspace, tmp_path / "ours.gguf")
    assert gguf.GGUFReader(str(path)).fields["tokenizer.ggml.add_space_prefix"].contents()
    tokenizer = tokenizers.Tokenizer.from_str(read_gguf_llama(path).tokenizer_json)
    source = tokenizers.Tokenizer.from_str(metaspace.tokenizer_json)
    for text in ("It is a truth", "tabs\tand 123", "  two spaces"):
        assert tokenizer.encode(text, add_special_tokens=False).ids == processor.encode(text)
    # Metaspace adds no space before a leading one; SentencePiece (and the file) do.
    assert source.encode("  two spaces").ids != processor.encode("  two spaces")
