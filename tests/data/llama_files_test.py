"""data.gguf_llama and data.hf_llama_dir: Llama checkpoints from GGUF files and HF directories.

A tiny random Llama (2 layers, width 64, 4 query / 2 key-value heads of 16)
with a byte-level BPE tokenizer of about 300 tokens trained here is written
as a GGUF file the way llama.cpp's converter writes one (q/k rows permuted,
some tensors quantized) and as a Hugging Face directory, read back, and run
through keras-hub; a numpy forward pass written from the Llama equations is
the oracle of the logits.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

from headsize_tf.core.errors import CheckpointError  # noqa: E402
from headsize_tf.core.llama_checkpoint import (  # noqa: E402
    LlamaCheckpoint,
    LlamaConfig,
    weight_shapes,
)
from headsize_tf.data.gguf_llama import (  # noqa: E402
    GLOBAL_TENSORS,
    LAYER_TENSORS,
    permute_llama_cpp,
    read_gguf_llama,
    unpermute_llama_cpp,
)
from headsize_tf.data.hf_llama_dir import read_hf_llama_dir, write_hf_llama_dir  # noqa: E402

Q = gguf.GGMLQuantizationType
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The capital of France is Paris, and the capital of Germany is Berlin.",
    "the cat sat on the mat; the dog sat on the log. 12345 67890",
    "naïve café 東京 — déjà vu!",
    "a   b\n\n  c\tdef  ghi\n",
    "I'm here, you're there, we'll see. It's 2024.",
] * 4
TEXTS = ["12345", "naïve café 東京", "a   b\n\n  c", "The cat's 3 dogs", "<|im_start|>hi<|im_end|>"]
HF_TO_GGUF_LAYER = {hf: gg for gg, hf in LAYER_TENSORS.items()}
HF_TO_GGUF_GLOBAL = {hf: gg for gg, hf in GLOBAL_TENSORS.items()}


# ------------------------------------------------------------------ the tiny model
@pytest.fixture(scope="module")
def tokenizer_json() -> str:
    """A byte-level BPE trained on CORPUS, SmolLM2's pre-tokenizer, special tokens 0-2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = smollm_pre_tokenizer()
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer.to_str()


def smollm_pre_tokenizer():
    """Hugging Face SmolLM2's pre-tokenizer: single digits, then byte-level with the GPT-2 regex."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def vocab_and_merges(tokenizer_json: str) -> tuple[list[str], list[str]]:
    model = json.loads(tokenizer_json)["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, merges


def tiny_config(vocabulary_size: int, tie: bool = False, **overrides) -> LlamaConfig:
    settings_ = dict(
        model_type="llama",
        vocabulary_size=vocabulary_size,
        num_layers=2,
        hidden_dim=64,
        num_query_heads=4,
        num_key_value_heads=2,
        intermediate_dim=96,
        rope_max_wavelength=10000.0,
        rms_norm_epsilon=1e-6,  # keras-hub's Llama 3 uses 1e-6 whatever config.json says.
        tie_word_embeddings=tie,
        max_sequence_length=64,
        bos_token_id=1,
        eos_token_id=2,
    )
    return LlamaConfig(**{**settings_, **overrides})


def random_checkpoint(tokenizer_json: str, tie: bool = False, seed: int = 0) -> LlamaCheckpoint:
    vocab = len(vocab_and_merges(tokenizer_json)[0])
    config = tiny_config(vocab, tie)
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in weight_shapes(config).items():
        if len(shape) == 1:
            weights[name] = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            weights[name] = (0.15 * rng.standard_normal(shape)).astype(np.float32)
    return LlamaCheckpoint(
        config, weights, tokenizer_json, chat_template="{{ messages }}", source="test"
    )


def gguf_name(hf_name: str) -> str:
    if hf_name in HF_TO_GGUF_GLOBAL:
        return HF_TO_GGUF_GLOBAL[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{HF_TO_GGUF_LAYER[rest]}"


def write_gguf(
    path,
    checkpoint: LlamaCheckpoint,
    quant: dict[str, Q] | None = None,
    architecture: str = "llama",
    pre: str = "smollm",
    tokenizer_model: str = "gpt2",
    extra=None,
    tensors=None,
    raw=None,
    vocabulary=None,
):
    """Writes `checkpoint` as llama.cpp's converter does, `quant` per GGUF name.

    Architecture "llama" has its q/k rows (and biases) permuted; Qwen's are written as they are.

    `extra`: GGUFWriter method -> value; `tensors`: more float32 tensors by GGUF name;
    `raw`: GGUF name -> (bytes as uint8, type) written in place of that weight;
    `vocabulary`: (tokens, scores, token types) of a SentencePiece vocabulary, written without
    merges or pre-tokenizer (`tokenizer_model` "llama").
    """
    config = checkpoint.config
    if vocabulary is None:
        tokens, merges = vocab_and_merges(checkpoint.tokenizer_json)
        types = [3 if t in SPECIAL else 1 for t in tokens]
    else:
        (tokens, scores, types), merges = vocabulary, None
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(config.num_layers)
    writer.add_context_length(config.max_sequence_length)
    writer.add_embedding_length(config.hidden_dim)
    writer.add_feed_forward_length(config.intermediate_dim)
    if "add_head_count" not in (extra or {}):  # Else per-layer counts, from `extra`.
        writer.add_head_count(config.num_query_heads)
        writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_max_wavelength)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_epsilon)
    writer.add_vocab_size(config.vocabulary_size)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if merges is None:
        writer.add_token_scores(scores)
    else:
        writer.add_tokenizer_pre(pre)
        writer.add_token_merges(merges)
    writer.add_bos_token_id(config.bos_token_id)
    writer.add_eos_token_id(config.eos_token_id)
    writer.add_chat_template(checkpoint.chat_template)
    for key, value in (extra or {}).items():
        getattr(writer, key)(value)
    for name, array in checkpoint.weights.items():
        if architecture != "llama":
            pass
        elif name.endswith(("q_proj.weight", "q_proj.bias")):
            array = permute_llama_cpp(array, config.num_query_heads)
        elif name.endswith(("k_proj.weight", "k_proj.bias")):
            array = permute_llama_cpp(array, config.num_key_value_heads)
        name = gguf_name(name)
        qtype = (quant or {}).get(name, Q.F32)
        if name in (raw or {}):
            writer.add_tensor(name, raw[name][0], raw_dtype=raw[name][1])
        elif qtype == Q.F32:
            writer.add_tensor(name, np.ascontiguousarray(array, np.float32))
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    for name, array in (tensors or {}).items():
        writer.add_tensor(name, np.asarray(array, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ------------------------------------------------------------------ the numpy oracle
def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope_half_split(x, theta):
    """Hugging Face's rotary embedding of `x` `[T, heads, p]`: pairs (i, i + p/2)."""
    t, _, p = x.shape
    inv_freq = theta ** (-np.arange(0, p, 2) / p)
    angles = np.arange(t)[:, None] * inv_freq[None]  # [T, p/2]
    cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
    x1, x2 = x[..., : p // 2], x[..., p // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rope_interleaved(x, theta):
    """llama.cpp's rotary embedding (its "NORM" mode) of `x` `[T, heads, p]`: pairs (2i, 2i+1)."""
    t, _, p = x.shape
    inv_freq = theta ** (-np.arange(0, p, 2) / p)
    angles = np.arange(t)[:, None] * inv_freq[None]
    cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out


def llama_logits(checkpoint: LlamaCheckpoint, ids) -> np.ndarray:
    """Logits `[T, vocab]` of a Llama on `ids`, in float64, from the equations."""
    config = checkpoint.config
    w = {name: np.asarray(a, np.float64) for name, a in checkpoint.weights.items()}
    p, eps = config.head_dim, config.rms_norm_epsilon
    x = w["model.embed_tokens.weight"][np.asarray(ids)]
    t = len(ids)
    causal = np.tril(np.ones((t, t), bool))
    for i in range(config.num_layers):
        h, g = config.heads(i)  # Per-layer heads of a pruned model (`layer_heads`).
        prefix = f"model.layers.{i}."
        a = rms_norm(x, w[prefix + "input_layernorm.weight"], eps)
        q = (a @ w[prefix + "self_attn.q_proj.weight"].T).reshape(t, h, p)
        k = (a @ w[prefix + "self_attn.k_proj.weight"].T).reshape(t, g, p)
        v = (a @ w[prefix + "self_attn.v_proj.weight"].T).reshape(t, g, p)
        q = rope_half_split(q, config.rope_max_wavelength)
        k = rope_half_split(k, config.rope_max_wavelength)
        heads = []
        for head in range(h):
            kv = head // (h // g)
            scores = q[:, head] @ k[:, kv].T / np.sqrt(p)
            scores = np.where(causal, scores, -np.inf)
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            heads.append(probs @ v[:, kv])
        x = x + np.concatenate(heads, axis=-1) @ w[prefix + "self_attn.o_proj.weight"].T
        b = rms_norm(x, w[prefix + "post_attention_layernorm.weight"], eps)
        gate = b @ w[prefix + "mlp.gate_proj.weight"].T
        up = b @ w[prefix + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[prefix + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight" if config.tie_word_embeddings else "lm_head.weight"]
    return x @ head.T


# ------------------------------------------------------------------ the permutation
@settings(max_examples=60, deadline=None)
@given(n_head=st.integers(1, 8), half=st.integers(1, 8), cols=st.integers(1, 4), bias=st.booleans())
def test_unpermute_inverts_llama_cpp_permutation(n_head, half, cols, bias):
    shape = (n_head * 2 * half,) if bias else (n_head * 2 * half, cols)
    w = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    permuted = permute_llama_cpp(w, n_head)
    assert permuted.shape == w.shape
    np.testing.assert_array_equal(unpermute_llama_cpp(permuted, n_head), w)
    np.testing.assert_array_equal(permute_llama_cpp(unpermute_llama_cpp(w, n_head), n_head), w)


def test_permutation_maps_half_split_pairs_to_adjacent_pairs():
    n_head, p = 2, 6
    w = np.arange(n_head * p, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    permuted = permute_llama_cpp(w, n_head)
    for head in range(n_head):
        for i in range(p // 2):
            # llama.cpp's pair (2i, 2i+1) holds Hugging Face's pair (i, i + p/2).
            np.testing.assert_array_equal(permuted[head * p + 2 * i], w[head * p + i])
            np.testing.assert_array_equal(permuted[head * p + 2 * i + 1], w[head * p + i + p // 2])
    np.testing.assert_array_equal(permute_llama_cpp(np.arange(4.0), 1), [0, 2, 1, 3])
    # So llama.cpp's rotary embedding of the permuted projection is the permuted half-split one.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 8))  # 5 positions, width 8
    wq = rng.standard_normal((n_head * p, 8))
    hf = rope_half_split((x @ wq.T).reshape(5, n_head, p), 500.0).reshape(5, -1)
    cpp = rope_interleaved(
        (x @ permute_llama_cpp(wq, n_head).T).reshape(5, n_head, p), 500.0
    ).reshape(5, -1)
    np.testing.assert_allclose(cpp, permute_llama_cpp(hf.T, n_head).T, atol=1e-12)


# ------------------------------------------------------------------ GGUF
@pytest.mark.parametrize("tie", [False, True])
def test_gguf_round_trip_config_weights_and_tokenizer(tmp_path, tokenizer_json, tie):
    original = random_checkpoint(tokenizer_json, tie=tie)
    quant = {
        "token_embd.weight": Q.Q8_0,
        "blk.0.attn_q.weight": Q.Q8_0,
        "blk.1.attn_k.weight": Q.Q4_1,
        "blk.0.ffn_gate.weight": Q.Q4_1,
        "blk.1.ffn_down.weight": Q.Q4_1,
    }
    path = write_gguf(tmp_path / "tiny.gguf", original, quant)
    checkpoint = read_gguf_llama(path)

    assert checkpoint.config == original.config
    assert checkpoint.source == f"gguf:{path}"
    assert checkpoint.chat_template == "{{ messages }}"
    assert set(checkpoint.weights) == set(original.weights)
    assert checkpoint.weights["model.layers.0.self_attn.k_proj.weight"].shape == (32, 64)
    for name, want in original.weights.items():
        got = checkpoint.weights[name]
        assert got.dtype == np.float32 and got.flags.c_contiguous, name
        qtype = quant.get(gguf_name(name))
        if qtype is None:
            np.testing.assert_array_equal(got, want, err_msg=name)
            continue
        # Quantization is row-wise, so it commutes with the row permutation.
        np.testing.assert_array_equal(
            got, gguf.quants.dequantize(gguf.quants.quantize(want, qtype), qtype), err_msg=name
        )
        step = np.abs(want).max() / 127 if qtype == Q.Q8_0 else np.ptp(want) / 15
        assert np.abs(got - want).max() <= step, name

    tokenizer = tokenizers.Tokenizer.from_str(checkpoint.tokenizer_json)
    trained = tokenizers.Tokenizer.from_str(tokenizer_json)
    for text in TEXTS:
        assert tokenizer.encode(text).ids == trained.encode(text).ids, text
        assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) == text
    assert tokenizer.encode("<|im_start|>hi").ids[0] == 1
    assert tokenizer.encode("hi").ids[0] != 1  # No BOS added by a post-processor.


@pytest.mark.parametrize(
    "extra, pre, adds",
    [
        ({"add_add_bos_token": False}, "llama-bpe", False),
        ({"add_add_bos_token": True}, "smollm", True),
        ({}, "smollm", False),  # llama.cpp's defaults: byte-level BPE adds none ...
        ({}, "llama-bpe", True),  # ... but Llama 3's does.
    ],
)
def test_gguf_add_bos_token_follows_the_file_then_llama_cpp(
    tmp_path, tokenizer_json, extra, pre, adds
):
    path = write_gguf(tmp_path / "t.gguf", random_checkpoint(tokenizer_json), pre=pre, extra=extra)
    assert read_gguf_llama(path).add_bos_token is adds


def test_gguf_tokenizer_follows_the_digit_splitting_rule(tmp_path, tokenizer_json):
    from tokenizers import Tokenizer, models

    checkpoint = read_gguf_llama(write_gguf(tmp_path / "t.gguf", random_checkpoint(tokenizer_json)))
    tokenizer = Tokenizer.from_str(checkpoint.tokenizer_json)
    tokens, merges = vocab_and_merges(tokenizer_json)
    reference = Tokenizer(
        models.BPE({t: i for i, t in enumerate(tokens)}, [tuple(m.split(" ")) for m in merges])
    )
    reference.pre_tokenizer = smollm_pre_tokenizer()
    for text in ["12345", "naïve café 東京", "a   b\n\n  c", "x1y22 z333"]:
        assert tokenizer.encode(text).ids == reference.encode(text).ids, text
    pieces = [piece for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str("12345")]
    assert pieces == ["1", "2", "3", "4", "5"]
    pieces = [piece for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str("a   b\n\n  c")]
    assert pieces == ["a", "ĠĠ", "Ġb", "ĊĊĠ", "Ġc"]


@pytest.mark.parametrize(
    ("pre", "text", "pieces"),
    [
        ("llama-bpe", "12345 I'M", ["123", "45", "ĠI", "'M"]),
        ("gpt-2", "12345 I'M", ["12345", "ĠI", "'", "M"]),
        ("default", "12345+x", ["123", "45", "+", "x"]),
        ("qwen2", "12345 I'M", ["1", "2", "3", "4", "5", "ĠI", "'M"]),
    ],
)
def test_gguf_pre_tokenizers_of_llama_cpp(tmp_path, tokenizer_json, pre, text, pieces):
    path = write_gguf(tmp_path / "t.gguf", random_checkpoint(tokenizer_json), pre=pre)
    tokenizer = tokenizers.Tokenizer.from_str(read_gguf_llama(path).tokenizer_json)
    assert [piece for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text)] == pieces
    assert tokenizer.decode(tokenizer.encode("naïve café 東京").ids) == "naïve café 東京"


@pytest.mark.parametrize("architecture", ["qwen2", "qwen3"])
def test_gguf_qwen_files_read_their_biases_and_norms_unpermuted(
    tmp_path, tokenizer_json, architecture
):
    """Qwen2's q/k/v biases and Qwen3's per-head q/k norms, written as llama.cpp's converter
    writes them (unpermuted: llama.cpp runs Qwen's RoPE half-split), read back to the same
    checkpoint; a file whose tensors another architecture holds is refused in one line."""
    vocab = len(vocab_and_merges(tokenizer_json)[0])
    config = tiny_config(
        vocab,
        model_type=architecture,
        attention_bias=architecture == "qwen2",
        qk_norm=architecture == "qwen3",
        head_dim=16,
    )
    rng = np.random.default_rng(7)
    weights = {
        name: (
            1 + 0.1 * rng.standard_normal(shape)
            if name.endswith("norm.weight")
            else 0.15 * rng.standard_normal(shape)
        ).astype(np.float32)
        for name, shape in weight_shapes(config).items()
    }
    original = LlamaCheckpoint(config, weights, tokenizer_json, chat_template="{{ messages }}")
    path = write_gguf(tmp_path / "m.gguf", original, architecture=architecture, pre="qwen2")
    checkpoint = read_gguf_llama(path)
    assert checkpoint.config == config
    assert set(checkpoint.weights) == set(weights)
    for name, want in weights.items():
        np.testing.assert_array_equal(checkpoint.weights[name], want, err_msg=name)
    # Qwen's NFC normalizer: a decomposed accent is the composed one.
    tokenizer = tokenizers.Tokenizer.from_str(checkpoint.tokenizer_json)
    assert tokenizer.encode("cafe\u0301").ids == tokenizer.encode("café").ids
    other = write_gguf(tmp_path / "llama.gguf", original, architecture="llama", pre="qwen2")
    with pytest.raises(CheckpointError, match="has no place in a 'llama' model") as error:
        read_gguf_llama(other)
    assert "\n" not in str(error.value)


def test_gguf_rope_scaling(tmp_path, tokenizer_json):
    checkpoint = random_checkpoint(tokenizer_json)
    linear = {"add_rope_scaling_type": gguf.RopeScalingType.LINEAR, "add_rope_scaling_factor": 4}
    config = read_gguf_llama(write_gguf(tmp_path / "l.gguf", checkpoint, extra=linear)).config
    assert config.rope_scaling == {"rope_type": "linear", "factor": 4.0}
    yarn = {"add_rope_scaling_type": gguf.RopeScalingType.YARN, "add_rope_scaling_factor": 4}
    with pytest.raises(CheckpointError, match="RoPE scaling type 'yarn' is not supported"):
        read_gguf_llama(write_gguf(tmp_path / "y.gguf", checkpoint, extra=yarn))


def test_gguf_llama3_frequency_factors_become_rope_scaling(tmp_path, tokenizer_json):
    checkpoint = random_checkpoint(tokenizer_json)
    theta, p, factor = 10000.0, checkpoint.config.head_dim, 8.0
    # llama.cpp's converter writes Llama 3.1's rope_scaling as frequency factors (low/high
    # frequency factors 1 and 4, 8192 original positions): with theta 10000 and p = 16, six
    # wavelengths lie below 8192/4, one inside the band, one above 8192.
    wavelengths = 2 * np.pi * theta ** (np.arange(0, p, 2) / p)
    smooth = (8192 / wavelengths - 1) / (4 - 1)
    freqs = np.where(
        wavelengths < 8192 / 4,
        1.0,
        np.where(wavelengths > 8192, factor, 1 / ((1 - smooth) / factor + smooth)),
    )
    assert list(np.unique(freqs, return_counts=True)[1]) == [6, 1, 1]
    path = write_gguf(tmp_path / "l3.gguf", checkpoint, tensors={"rope_freqs.weight": freqs})
    assert read_gguf_llama(path).config.rope_scaling == {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    freqs[-2] *= 1.5
    path = write_gguf(tmp_path / "odd.gguf", checkpoint, tensors={"rope_freqs.weight": freqs})
    with pytest.raises(CheckpointError, match="rope_freqs.weight matches no Llama 3 RoPE"):
        read_gguf_llama(path)


def test_gguf_bad_inputs_are_one_line_errors(tmp_path, tokenizer_json):
    checkpoint = random_checkpoint(tokenizer_json)
    good = write_gguf(tmp_path / "good.gguf", checkpoint)
    cases = {}
    cases[
        "architecture 'gpt2' is not supported; expected one of ['deci', 'gemma', 'gemma2', 'gemma3',"
    ] = write_gguf(tmp_path / "gpt2.gguf", checkpoint, architecture="gpt2")
    # Nemotron NAS's linear-attention layers (query heads, no key/value heads) have no
    # DecoderLM form (its attention-free layers do: tests/data/gguf_writer_test.py).
    cases["layer 1 has 4 query and 0 key/value heads (a linear-attention layer"] = write_gguf(
        tmp_path / "deci.gguf",
        checkpoint,
        architecture="deci",
        extra={"add_head_count": [4, 4], "add_head_count_kv": [2, 0]},
    )
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size * 2 // 3])
    cases["truncated.gguf is not a readable GGUF file"] = truncated
    text = tmp_path / "notes.gguf"
    text.write_text("hello, not a GGUF file\n" * 10)
    cases["notes.gguf is not a readable GGUF file"] = text
    cases["missing.gguf does not exist"] = tmp_path / "missing.gguf"
    cases["pre-tokenizer 'deepseek-llm' is not supported"] = write_gguf(
        tmp_path / "deepseek.gguf", checkpoint, pre="deepseek-llm"
    )
    cases["tokenizer model 'bert' is not supported"] = write_gguf(
        tmp_path / "bert.gguf", checkpoint, tokenizer_model="bert"
    )
    cases["tensor 'output_norm.weight' has type Q8_1, which gguf cannot dequantize"] = (
        write_q8_1_norm(tmp_path / "q8_1.gguf", checkpoint)
    )
    for message, path in cases.items():
        with pytest.raises(CheckpointError) as error:
            read_gguf_llama(path)
        assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


def write_q8_1_norm(path, checkpoint):
    """A GGUF whose output_norm.weight is Q8_1 (zeros): a type gguf's numpy code cannot read."""
    block, size = gguf.GGML_QUANT_SIZES[Q.Q8_1]
    raw = np.zeros((checkpoint.config.hidden_dim // block * size,), np.uint8)
    return write_gguf(path, checkpoint, raw={"output_norm.weight": (raw, Q.Q8_1)})


# ------------------------------------------------------------------ Hugging Face directories
def test_hf_dir_round_trip_and_bad_inputs(tmp_path, tokenizer_json):
    checkpoint = random_checkpoint(tokenizer_json)
    out = write_hf_llama_dir(checkpoint, tmp_path / "hf")
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (tokenizer_config["bos_token"], tokenizer_config["eos_token"]) == tuple(SPECIAL[1:3])
    assert tokenizer_config["chat_template"] == "{{ messages }}"
    assert json.loads((out / "generation_config.json").read_text()) == {
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    back = read_hf_llama_dir(out)
    assert back.config == checkpoint.config and back.chat_template == "{{ messages }}"
    for name, array in checkpoint.weights.items():
        np.testing.assert_array_equal(back.weights[name], array, err_msg=name)
    # The model adds BOS: so does Hugging Face's tokenizer of the directory; the ids of the
    # text are the original tokenizer's.
    assert tokenizer_config["add_bos_token"] is True and back.add_bos_token is True
    written = tokenizers.Tokenizer.from_str(back.tokenizer_json)
    original = tokenizers.Tokenizer.from_str(tokenizer_json)
    for text in TEXTS:
        assert written.encode(text).ids == [1, *original.encode(text).ids], text
        assert written.encode(text, add_special_tokens=False).ids == original.encode(text).ids
    del tokenizer_config["add_bos_token"]  # Without the key, the post-processor decides.
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    assert read_hf_llama_dir(out).add_bos_token is True
    # A model that adds none (SmolLM2, Qwen): neither does the directory's tokenizer, whose
    # post-processor says so for readers without the key.
    plain = dataclasses.replace(checkpoint, add_bos_token=False)
    out = write_hf_llama_dir(plain, tmp_path / "plain")
    assert read_hf_llama_dir(out).add_bos_token is False
    written = tokenizers.Tokenizer.from_str(read_hf_llama_dir(out).tokenizer_json)
    assert all(written.encode(t).ids == original.encode(t).ids for t in TEXTS)
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    del tokenizer_config["add_bos_token"]
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    assert read_hf_llama_dir(out).add_bos_token is False
    # A ByteLevel post-processor (SmolLM2's tokenizer.json) is kept, BOS put after it.
    data = json.loads(tokenizer_json)
    data["post_processor"] = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": True,
    }
    byte_level = dataclasses.replace(checkpoint, tokenizer_json=json.dumps(data))
    out = write_hf_llama_dir(byte_level, tmp_path / "bl")
    processor = json.loads((out / "tokenizer.json").read_text())["post_processor"]
    assert [step["type"] for step in processor["processors"]] == ["ByteLevel", "TemplateProcessing"]
    written = tokenizers.Tokenizer.from_str((out / "tokenizer.json").read_text())
    assert written.encode("hi").ids == [1, *original.encode("hi").ids]
    (out / "tokenizer_config.json").write_text("{}")  # Llama 3's form: the Sequence decides.
    assert read_hf_llama_dir(out).add_bos_token is True
    plain_byte_level = dataclasses.replace(byte_level, add_bos_token=False)
    out = write_hf_llama_dir(plain_byte_level, tmp_path / "plain_bl")
    assert read_hf_llama_dir(out).tokenizer_json == byte_level.tokenizer_json  # As it came.

    (out / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError) as error:
        read_hf_llama_dir(out)
    assert str(error.value) == (
        f"{out} has no tokenizer.json; a Hugging Face directory needs config.json, "
        "model.safetensors and tokenizer.json."
    )


def test_hf_dir_reads_sharded_half_precision_weights(tmp_path, tokenizer_json):
    from safetensors.numpy import save_file

    checkpoint = random_checkpoint(tokenizer_json, tie=True)
    directory = write_hf_llama_dir(checkpoint, tmp_path / "hf")
    (directory / "model.safetensors").unlink()
    names = list(checkpoint.weights)
    first, second = names[: len(names) // 2], names[len(names) // 2 :]
    save_file(
        {n: checkpoint.weights[n].astype(np.float16) for n in first},
        str(directory / "model-00001-of-00002.safetensors"),
    )
    write_bfloat16_safetensors(
        directory / "model-00002-of-00002.safetensors", {n: checkpoint.weights[n] for n in second}
    )
    weight_map = {n: "model-00001-of-00002.safetensors" for n in first}
    weight_map.update({n: "model-00002-of-00002.safetensors" for n in second})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    back = read_hf_llama_dir(directory)
    for name in first:
        np.testing.assert_array_equal(
            back.weights[name], checkpoint.weights[name].astype(np.float16).astype(np.float32)
        )
    for name in second:
        want = (checkpoint.weights[name].view(np.uint32) & 0xFFFF0000).view(np.float32)
        np.testing.assert_array_equal(back.weights[name], want)
        assert back.weights[name].dtype == np.float32


def write_bfloat16_safetensors(path, arrays):
    """A safetensors file of bfloat16 tensors (the top 16 bits of each float32)."""
    header, chunks, offset = {}, [], 0
    for name, array in arrays.items():
        data = (np.ascontiguousarray(array, np.float32).view(np.uint32) >> 16).astype("<u2")
        raw = data.tobytes()
        header[name] = {
            "dtype": "BF16",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(chunks))


# ------------------------------------------------------------------ keras-hub
def test_gguf_to_hf_dir_loads_in_keras_hub_with_the_oracle_logits(tmp_path, tokenizer_json):
    keras_hub = pytest.importorskip("keras_hub")
    import keras

    original = random_checkpoint(tokenizer_json, seed=1)
    from_gguf = read_gguf_llama(write_gguf(tmp_path / "tiny.gguf", original))
    directory = write_hf_llama_dir(from_gguf, tmp_path / "hf")
    lm = keras_hub.models.CausalLM.from_preset(str(directory))
    assert type(lm).__name__ == "Llama3CausalLM"

    ids = [1, *tokenizers.Tokenizer.from_str(tokenizer_json).encode("the cat sat, 12").ids]
    token_ids = np.array([ids], np.int32)
    logits = lm({"token_ids": token_ids, "padding_mask": np.ones_like(token_ids)})
    want = llama_logits(original, ids)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(logits)[0], want, atol=1e-4, rtol=0)
    # The oracle is not blind to the permutation: llama.cpp's row order gives other logits.
    permuted = dict(original.weights)
    for name in permuted:
        if name.endswith("q_proj.weight"):
            permuted[name] = permute_llama_cpp(permuted[name], original.config.num_query_heads)
    wrong = llama_logits(LlamaCheckpoint(original.config, permuted), ids)
    assert np.abs(wrong - want).max() > 1e-2
    shutil.rmtree(directory)


def test_gemma_configs_read_their_gelu_and_tying_and_refuse_what_gemma_1_lacks():
    """Hugging Face Gemma configs: "gelu" in hidden_act is the tanh GELU Gemma was trained with,
    embeddings are tied unless said otherwise, and the config implies the embedding scale and
    the norms' offset."""
    hf = {
        "model_type": "gemma",
        "vocab_size": 64,
        "num_hidden_layers": 2,
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "intermediate_size": 48,
        "hidden_act": "gelu",
    }
    config = LlamaConfig.from_hf_config(hf)
    assert config.hidden_activation == "gelu_pytorch_tanh" and config.tie_word_embeddings
    assert config.embedding_scale == np.sqrt(32.0) and config.norm_offset == 1.0
    written = config.to_hf_config()
    assert written["architectures"] == ["GemmaForCausalLM"]
    assert written["hidden_activation"] == "gelu_pytorch_tanh" and "sliding_window" not in written
    assert LlamaConfig.from_hf_config(written) == config
    llama = LlamaConfig.from_hf_config({**hf, "model_type": "llama", "hidden_act": "silu"})
    assert (llama.embedding_scale, llama.norm_offset, llama.tie_word_embeddings) == (None, 0, False)
    with pytest.raises(CheckpointError, match="GeGLU"):
        LlamaConfig.from_hf_config({**hf, "hidden_activation": "silu"})
    with pytest.raises(CheckpointError, match="no sliding window"):
        dataclasses.replace(config, sliding_window=8)


def test_gemma2_configs_read_their_caps_local_layers_and_the_27b_query_scale():
    hf = {
        "model_type": "gemma2",
        "vocab_size": 64,
        "num_hidden_layers": 4,
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 48,
        "hidden_activation": "gelu_pytorch_tanh",
        "sliding_window": 8,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "query_pre_attn_scalar": 16,
    }
    config = LlamaConfig.from_hf_config(hf)
    # Without layer_types, transformers' default: the even layers are local.
    assert config.sliding_window_layers == (True, False, True, False)
    assert (config.attention_logit_soft_cap, config.final_logit_soft_cap) == (50.0, 30.0)
    assert config.post_norms and config.norm_offset == 1.0 and config.tie_word_embeddings
    assert "model.layers.3.post_feedforward_layernorm.weight" in weight_shapes(config)
    assert LlamaConfig.from_hf_config(config.to_hf_config()) == config
    types = ["full_attention", "sliding_attention"] * 2
    assert LlamaConfig.from_hf_config({**hf, "layer_types": types}).sliding_window_layers == (
        False,
        True,
        False,
        True,
    )
    # Gemma 2 27B: queries scaled by 144 ** -0.5 (width / heads), not by the head size.
    big = LlamaConfig.from_hf_config({**hf, "query_pre_attn_scalar": 144})
    assert big.query_pre_attn_scalar == 144.0 and big.query_scale == 144**-0.5
    assert config.query_pre_attn_scalar is None and config.query_scale is None
    assert big.to_hf_config()["query_pre_attn_scalar"] == 144
    assert LlamaConfig.from_hf_config(big.to_hf_config()) == big
    for bad in (0, float("inf"), "x"):
        with pytest.raises(CheckpointError, match="a finite number > 0"):
            dataclasses.replace(big, query_pre_attn_scalar=bad)
    # null, as absent but for its default: the head size.
    assert LlamaConfig.from_hf_config({**hf, "query_pre_attn_scalar": None}) == config
    with pytest.raises(CheckpointError, match="is Gemma 2's and 3's"):
        dataclasses.replace(
            big,
            model_type="gemma",
            sliding_window=None,
            sliding_window_layers=None,
            attention_logit_soft_cap=None,
            final_logit_soft_cap=None,
        )
    with pytest.raises(CheckpointError, match="Gemma 2's"):
        dataclasses.replace(config, model_type="llama", hidden_activation="silu")


def test_gemma3_text_configs_read_the_local_layers_rope_and_query_key_norms():
    hf = {
        "model_type": "gemma3_text",
        "vocab_size": 64,
        "num_hidden_layers": 7,
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "intermediate_size": 48,
        "hidden_activation": "gelu_pytorch_tanh",
        "sliding_window": 8,
        "sliding_window_pattern": 6,
        "rope_theta": 1e6,
        "rope_local_base_freq": 1e4,
        "query_pre_attn_scalar": 16,
    }
    config = LlamaConfig.from_hf_config(hf)
    # Every sixth layer is global; the others local, with their own RoPE base.
    assert config.sliding_window_layers == (True,) * 5 + (False, True)
    assert (config.local_rope_max_wavelength, config.rope_max_wavelength) == (1e4, 1e6)
    assert config.qk_norm and config.post_norms and config.norm_offset == 1.0
    assert "model.layers.6.self_attn.k_norm.weight" in weight_shapes(config)
    assert LlamaConfig.from_hf_config(config.to_hf_config()) == config
    with pytest.raises(CheckpointError, match="local RoPE base is Gemma 3's"):
        dataclasses.replace(config, model_type="gemma2", qk_norm=False)


# A small decoder's sizes, for the config tests.
SMALL_DECODER = dict(
    vocabulary_size=64,
    num_layers=4,
    hidden_dim=32,
    num_query_heads=4,
    num_key_value_heads=2,
    intermediate_dim=48,
    head_dim=16,
)


def _transformers_5(hf: dict) -> dict:
    """`hf` as transformers 5 writes it: RoPE base and scaling in `rope_parameters`."""
    hf = dict(hf)
    parameters = {"rope_type": "default", **(hf.pop("rope_scaling", None) or {})}
    parameters["rope_theta"] = hf.pop("rope_theta")
    if "rope_local_base_freq" in hf:  # Gemma 3: one dict per layer type.
        local = {"rope_type": "default", "rope_theta": hf.pop("rope_local_base_freq")}
        parameters = {"full_attention": parameters, "sliding_attention": local}
    return {**hf, "rope_parameters": parameters}


def test_transformers_5_rope_parameters_read_as_transformers_4_keys():
    base = dict(SMALL_DECODER, num_layers=7)
    llama3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    gemma = dict(base, hidden_activation="gelu_pytorch_tanh", qk_norm=True)
    configs = [
        LlamaConfig(model_type="llama", rope_max_wavelength=5e5, rope_scaling=llama3, **base),
        LlamaConfig(model_type="qwen3", rope_max_wavelength=1e6, qk_norm=True, **base),
        LlamaConfig(
            model_type="gemma3_text",
            sliding_window=8,
            sliding_window_layers=[1, 1, 1, 1, 1, 0, 1],
            rope_max_wavelength=1e6,
            rope_scaling={"rope_type": "linear", "factor": 8.0},
            local_rope_max_wavelength=1e4,
            **gemma,
        ),
    ]
    for config in configs:
        hf = _transformers_5(config.to_hf_config())
        assert "rope_theta" not in hf and "rope_scaling" not in hf
        assert LlamaConfig.from_hf_config(hf) == config, config.model_type
    # Values inside rope_parameters come first (transformers 5's precedence).
    hf = {**_transformers_5(configs[0].to_hf_config()), "rope_theta": 1.0}
    assert LlamaConfig.from_hf_config(hf).rope_max_wavelength == 5e5
    # transformers 4's keys with a null rope_parameters read as before.
    hf = {**configs[0].to_hf_config(), "rope_parameters": None}
    assert LlamaConfig.from_hf_config(hf) == configs[0]
    gemma3 = _transformers_5(configs[2].to_hf_config())
    full = gemma3["rope_parameters"]["full_attention"]
    local = {"rope_type": "linear", "factor": 2.0}
    qwen = _transformers_5(configs[1].to_hf_config())
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    refused = [
        (gemma3, {"full_attention": {**full, "partial_rotary_factor": 0.5}}, "0.5 rotates part"),
        (gemma3, {"sliding_attention": {"partial_rotary_factor": 0.5}}, "0.5 rotates part"),
        (gemma3, {"sliding_attention": local}, "scales the local layers' RoPE"),
        (gemma3, {"full_attention": {**full, "rope_theta": None}}, "rope_theta must be a number"),
        (gemma3, {"sliding_attention": 1e4}, "rope_parameters.sliding_attention must be a dict"),
        (qwen, {"sliding_attention": {"rope_theta": 1e4}}, "'qwen3' takes one dict"),
    ]
    for hf, change, message in refused:
        bad = {**hf, "rope_parameters": {**hf["rope_parameters"], **change}}
        with pytest.raises(CheckpointError, match=message):
            LlamaConfig.from_hf_config(bad)
    # Transformers 5 ignores a flat dict for Gemma 3, and a config with both forms is read
    # differently by each version: both refused.
    flat = {**configs[2].to_hf_config(), "rope_parameters": {"rope_theta": 2e6}}
    del flat["rope_scaling"]
    with pytest.raises(CheckpointError, match="got one flat dict"):
        LlamaConfig.from_hf_config(flat)
    with pytest.raises(CheckpointError, match="its RoPE twice"):
        LlamaConfig.from_hf_config({**qwen, "rope_scaling": yarn})
    with pytest.raises(CheckpointError, match="rope_parameters must be a dict; got 10000"):
        LlamaConfig.from_hf_config({**qwen, "rope_parameters": 10000})


def test_gemma2_and_3_configs_round_trip_their_windows_and_refuse_what_hf_computes_otherwise():
    base = dict(SMALL_DECODER, hidden_activation="gelu_pytorch_tanh")
    for gemma2 in (
        LlamaConfig(model_type="gemma2", **base),  # No window.
        LlamaConfig(model_type="gemma2", sliding_window=8, **base),  # Every layer local.
        LlamaConfig(
            model_type="gemma2", sliding_window=8, sliding_window_layers=[1, 0, 1, 0], **base
        ),
    ):
        assert LlamaConfig.from_hf_config(gemma2.to_hf_config()) == gemma2
    every = LlamaConfig(model_type="gemma2", sliding_window=8, **base)
    assert every.sliding_window_layers == (True,) * 4
    # No local layer is no window.
    none = LlamaConfig(model_type="gemma2", sliding_window=8, sliding_window_layers=[0] * 4, **base)
    assert (none.sliding_window, none.sliding_window_layers) == (None, None)
    # Keys a config leaves out take transformers' defaults: Gemma 2's caps, Gemma 3's base.
    hf = {**LlamaConfig(model_type="gemma2", **base).to_hf_config()}
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        del hf[key]
    assert LlamaConfig.from_hf_config(hf).attention_logit_soft_cap == 50.0
    hf3 = LlamaConfig(model_type="gemma3_text", qk_norm=True, **base).to_hf_config()
    del hf3["rope_theta"]
    assert LlamaConfig.from_hf_config(hf3).rope_max_wavelength == 1e6
    with pytest.raises(CheckpointError, match="need their RoPE base"):
        LlamaConfig(model_type="gemma3_text", qk_norm=True, sliding_window=8, **base)
    for wrong in (
        dict(model_type="gemma2", qk_norm=True),
        dict(model_type="gemma3_text", qk_norm=False),
        dict(model_type="gemma2", attention_bias=True),
    ):
        with pytest.raises(CheckpointError, match="no attention biases"):
            LlamaConfig(**wrong, **base)
