"""The Keras 3 `DecoderLM` (Llama-shaped causal LM) against a numpy oracle, on every backend.

The oracle is a Llama block written from the equations in float64 (RMSNorm,
half-split RoPE, grouped-query attention, SwiGLU / GeGLU, Qwen2's q/k/v
biases, Qwen3's per-head q/k RMSNorm, Mistral's sliding window, Llama 3's RoPE
frequency scaling), reading the model's weights by role. Then: cached decoding
equals the uncached forward, `.keras` saving (with a byte-level BPE tokenizer),
`fit`, int8 quantization, LoRA, and the errors of bad arguments.
"""

from __future__ import annotations

import inspect
import math

import keras
import numpy as np
import pytest

from headsize_tf.core.spec import SpecError
from headsize_tf.keras3.modeling.decoder_lm import DecoderLM
from headsize_tf.keras3.pretrained.bpe_tokenizer import BytePairTokenizer

VOCAB, WIDTH, HEADS, KV_HEADS, FFN, BASE = 50, 24, 6, 2, 40, 500.0
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8,
}


def _np(x) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x), np.float64)


def tiny_lm(seed: int = 0, head_size: int | None = None, rope_scaling=None, **options):
    """A 2-layer `DecoderLM` with random weights (normal 0.1; norm scales 1 + normal 0.1)."""
    attention = {
        "kind": "grouped",
        "num_heads": HEADS,
        "num_kv_heads": KV_HEADS,
        "head_size": head_size,
        "rope_max_wavelength": BASE,
        "rope_scaling": rope_scaling,
    }
    settings = dict(
        vocabulary_size=VOCAB,
        num_layers=2,
        hidden_dim=WIDTH,
        attention=attention,
        intermediate_dim=FFN,
        max_sequence_length=16,
    )
    lm = DecoderLM(**{**settings, **options})
    rng = np.random.default_rng(seed)
    lm.set_weights(
        [
            rng.normal(0, 0.1, v.shape).astype("float32") + (1.0 if "norm" in v.path else 0.0)
            for v in lm.weights
        ]
    )
    group = HEADS // KV_HEADS
    for layer in lm.attention_layers:  # Qwen2's value bias: one per K/V head, shared by its group.
        if lm.attention_bias:
            per_kv_head = _np(layer.value_bias)[::group]
            layer.value_bias.assign(np.repeat(per_kv_head, group, axis=0).astype("float32"))
    return lm


def _ids(batch: int, length: int, seed: int = 1, vocab: int = VOCAB) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, (batch, length)).astype("int32")


# --------------------------------------------------------------------- the oracle
def rms_norm(x, scale, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def inverse_frequencies(p: int, base: float, scaling) -> np.ndarray:
    """RoPE's theta_j = base^(-2j / p), with Llama 3's frequency-dependent scaling if given."""
    theta = base ** (-np.arange(0, p, 2) / p)
    if scaling is None:
        return theta
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    out = []
    for t in theta:
        wavelength = 2 * math.pi / t
        if wavelength < original / high:  # High frequencies: kept.
            out.append(t)
        elif wavelength > original / low:  # Low frequencies: interpolated.
            out.append(t / factor)
        else:  # In between: a linear blend in original / wavelength.
            smooth = (original / wavelength - low) / (high - low)
            out.append((1 - smooth) * t / factor + smooth * t)
    return np.array(out)


def rope(x, theta):
    """Half-split RoPE of `x` `[B, T, heads, p]` at positions 0..T-1: pairs (j, j + p/2)."""
    angles = np.arange(x.shape[1])[:, None] * theta[None]  # [T, p/2]
    cos, sin = np.cos(angles)[None, :, None], np.sin(angles)[None, :, None]
    x1, x2 = np.split(x, 2, axis=-1)
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def activation(x, name):
    if name == "silu":
        return x / (1 + np.exp(-x))
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def llama_block(x, w, c):
    """One pre-norm Llama block on `x` `[B, T, d]` (float64), weights `w`, settings `c`."""
    h, g, p, eps = c["heads"], c["kv_heads"], c["head_size"], c["eps"]
    a = rms_norm(x, w["input_norm"] + c["offset"], eps)
    q = np.einsum("btd,dhp->bthp", a, w["q"]) + w.get("q_bias", 0)
    k = np.einsum("btd,dgp->btgp", a, w["k"]) + w.get("k_bias", 0)
    v = np.einsum("btd,dgp->btgp", a, w["v"]) + w.get("v_bias", 0)
    if "q_norm" in w:  # Qwen3: RMSNorm of each head's query and key, before RoPE.
        offset = c["offset"]  # Gemma 3's norms scale by 1 + w.
        q, k = rms_norm(q, w["q_norm"] + offset, eps), rms_norm(k, w["k_norm"] + offset, eps)
    theta = inverse_frequencies(p, c["base"], c["scaling"])
    q, k = rope(q, theta), rope(k, theta)
    t = x.shape[1]
    query_at, key_at = np.arange(t)[:, None], np.arange(t)[None, :]
    visible = key_at <= query_at
    if c["window"] is not None:
        visible &= query_at - key_at < c["window"]
    heads = []
    for head in range(h):
        kv = head // (h // g)  # Contiguous groups of query heads share a K/V head.
        scale = c["query_scale"] or 1 / np.sqrt(p)  # Gemma 2 and 3 27B: a scalar of their own.
        scores = np.einsum("btp,bsp->bts", q[:, :, head], k[:, :, kv]) * scale
        if c["attention_cap"] is not None:  # Gemma 2: c tanh(scores / c), before the mask.
            scores = c["attention_cap"] * np.tanh(scores / c["attention_cap"])
        scores = np.where(visible, scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        heads.append(np.einsum("bts,bsp->btp", probs, v[:, :, kv]))
    attended = np.concatenate(heads, axis=-1) @ w["o"].reshape(h * p, -1)
    if "post_attention_norm" in w:  # Gemma 2's sandwich norms.
        attended = rms_norm(attended, w["post_attention_norm"] + c["offset"], eps)
    x = x + attended
    b = rms_norm(x, w["post_norm"] + c["offset"], eps)
    gated = activation(b @ w["gate"], c["activation"]) * (b @ w["up"])
    out = gated @ w["down"]
    if "post_feedforward_norm" in w:
        out = rms_norm(out, w["post_feedforward_norm"] + c["offset"], eps)
    return x + out


def block_weights(lm: DecoderLM, i: int) -> dict[str, np.ndarray]:
    """Block i's weights by role (Keras layout: query `[d, h, p]`, output `[h, p, d]`)."""
    block = lm.transformer_layers[i]
    attention = block.attention_layer
    w = {
        "input_norm": _np(block._self_attention_layer_norm.scale),
        "q": _np(attention._query_dense.kernel),
        "k": _np(attention._key_dense.kernel),
        "v": _np(attention._value_dense.kernel),
        "o": _np(attention._output_dense.kernel),
        "post_norm": _np(block._feedforward_layer_norm.scale),
        "gate": _np(block._feedforward_gate_dense.kernel),
        "up": _np(block._feedforward_intermediate_dense.kernel),
        "down": _np(block._feedforward_output_dense.kernel),
    }
    if lm.attention_bias:
        w["q_bias"] = _np(attention._query_dense.bias)
        w["k_bias"] = _np(attention._key_dense.bias)
        w["v_bias"] = _np(attention.value_bias)[:: HEADS // KV_HEADS]  # [G, p]
    if lm.query_key_norm:
        w["q_norm"], w["k_norm"] = _np(attention.query_norm), _np(attention.key_norm)
    if lm.post_norms:
        w["post_attention_norm"] = _np(block._post_norms[0].scale)
        w["post_feedforward_norm"] = _np(block._post_norms[1].scale)
    return w


def oracle_logits(lm: DecoderLM, ids: np.ndarray) -> np.ndarray:
    spec = lm.attention_spec
    settings = {
        "heads": HEADS,
        "kv_heads": KV_HEADS,
        "head_size": spec.head_size or WIDTH // HEADS,
        "eps": lm.layer_norm_epsilon,
        "base": spec.rope_max_wavelength,
        "scaling": spec.rope_scaling,
        "activation": lm.activation,
        "offset": lm.norm_scale_offset,
        "attention_cap": lm.attention_logit_soft_cap,
        "query_scale": lm.query_scale,
    }
    embedding = _np(lm.token_embedding.embeddings)
    x = embedding[ids] * (lm.embedding_scale or 1.0)
    local = lm.sliding_window_layers or [True] * lm.num_layers
    for i in range(lm.num_layers):
        settings["window"] = lm.sliding_window if local[i] else None
        if local[i] and lm.local_rope_max_wavelength is not None:  # Gemma 3's local RoPE.
            settings["base"], settings["scaling"] = lm.local_rope_max_wavelength, None
        else:
            settings["base"], settings["scaling"] = spec.rope_max_wavelength, spec.rope_scaling
        x = llama_block(x, block_weights(lm, i), settings)
    x = rms_norm(x, _np(lm.final_norm.scale) + lm.norm_scale_offset, lm.layer_norm_epsilon)
    logits = x @ (embedding.T if lm.lm_head is None else _np(lm.lm_head.kernel))
    if lm.final_logit_soft_cap is not None:
        logits = lm.final_logit_soft_cap * np.tanh(logits / lm.final_logit_soft_cap)
    return logits


ORACLE_CASES = {
    "llama_tied": {},
    "llama_untied_llama3_scaling": dict(tie_word_embeddings=False, rope_scaling=LLAMA3_SCALING),
    "geglu": dict(activation="gelu_approximate"),
    "qwen2_biases": dict(attention_bias=True),
    # Head size 10 != 24 / 6, and an epsilon large enough to matter in both norms.
    "qwen3_qk_norm": dict(query_key_norm=True, head_size=10, layer_norm_epsilon=1e-2),
    "mistral_window": dict(sliding_window=3, tie_word_embeddings=False),
    # Gemma: GeGLU, embeddings times sqrt(width), norms scaling by 1 + w, heads of 10.
    "gemma": dict(
        activation="gelu_approximate", embedding_scale=24**0.5, norm_scale_offset=1.0, head_size=10
    ),
    # Gemma 2 besides: sandwich norms, soft caps that bind (the logits here are ~1), and a
    # window in the first layer only.
    "gemma2": dict(
        activation="gelu_approximate",
        embedding_scale=24**0.5,
        norm_scale_offset=1.0,
        post_norms=True,
        attention_logit_soft_cap=0.5,
        final_logit_soft_cap=1.0,
        sliding_window=3,
        sliding_window_layers=[True, False],
    ),
    # Gemma 3: query/key norms scaling by 1 + w, and the local layer's own RoPE base.
    "gemma3": dict(
        activation="gelu_approximate",
        embedding_scale=24**0.5,
        norm_scale_offset=1.0,
        post_norms=True,
        query_key_norm=True,
        head_size=10,
        sliding_window=3,
        sliding_window_layers=[True, False],
        local_rope_max_wavelength=3.0,
    ),
    # Gemma 2 and 3 27B: the softmax scale from query_pre_attn_scalar (width / heads = 4,
    # not the head size 10).
    "gemma_27b_query_scale": dict(
        embedding_scale=24**0.5, norm_scale_offset=1.0, head_size=10, query_scale=4**-0.5
    ),
}


@pytest.mark.parametrize("case", list(ORACLE_CASES))
def test_logits_equal_the_numpy_llama_oracle(case):
    lm = tiny_lm(**ORACLE_CASES[case])
    ids = _ids(2, 9)
    want = oracle_logits(lm, ids)
    got = _np(lm(ids))
    assert got.shape == (2, 9, VOCAB)
    assert np.abs(want).max() > 0.3  # Logits of a size where 1e-5 is a real bound.
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_the_oracle_sees_each_option():
    """Each option changes the oracle's logits, so the cases above test different functions."""
    ids = _ids(2, 9)
    plain = oracle_logits(tiny_lm(), ids)
    for case, options in ORACLE_CASES.items():
        if case != "llama_tied":
            assert np.abs(oracle_logits(tiny_lm(**options), ids) - plain).max() > 1e-3, case


# ------------------------------------------------------------ cached generation
@pytest.mark.parametrize("window", [None, 3])
def test_cached_decoding_and_compiled_greedy_equal_the_full_forward(window):
    lm = tiny_lm(attention_bias=True, query_key_norm=True, sliding_window=window)
    ids, prompt = _ids(2, 10), 4
    full = _np(lm(ids))
    logits, caches = lm.prefill(ids[:, :prompt], ids.shape[1])
    np.testing.assert_allclose(_np(logits), full[:, :prompt], atol=1e-5, rtol=0)
    for index in range(prompt, ids.shape[1]):
        logits, caches = lm.decode_step(ids[:, index : index + 1], caches, index)
        np.testing.assert_allclose(_np(logits)[:, 0], full[:, index], atol=1e-5, rtol=0)

    out = lm.generate(ids[:, :prompt], max_new_tokens=6, compile=True)
    assert out.shape == (2, 10) and out.dtype == np.int32
    np.testing.assert_array_equal(out[:, :prompt], ids[:, :prompt])
    # Causal: the full forward of the generated sequence reruns every step at once.
    rerun = _np(lm(out))[:, prompt - 1 : -1].argmax(-1)
    np.testing.assert_array_equal(out[:, prompt:], rerun)


# -------------------------------------------------------------------- saving
CORPUS = [
    "some text about the cat that sat on the mat",
    "the dog sat on the log and some more text",
    "a model reads text and writes some text back",
] * 3


def bpe_tokenizer() -> BytePairTokenizer:
    """A byte-level BPE (vocabulary 300) trained on CORPUS; <s> = 0, </s> = 1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return BytePairTokenizer(tokenizer.to_str(), start_token_id=0, end_token_id=1)


def test_keras_file_round_trip_keeps_config_logits_and_tokenizer(tmp_path, monkeypatch):
    tokenizer = bpe_tokenizer()
    assert tokenizer.detokenize(tokenizer.tokenize("some text")) == "some text"
    vocab = tokenizer.vocabulary_size
    assert 280 <= vocab <= 300
    keras.utils.set_random_seed(0)
    # Every option off its default, so the config round trip is checked.
    lm = DecoderLM(
        vocabulary_size=vocab,
        num_layers=2,
        hidden_dim=WIDTH,
        attention={
            "kind": "grouped",
            "num_heads": 6,
            "num_kv_heads": 2,
            "head_size": 6,
            "rope_max_wavelength": BASE,
        },
        intermediate_dim=FFN,
        max_sequence_length=24,
        layer_norm_epsilon=1e-5,
        activation="gelu_approximate",
        tie_word_embeddings=False,
        attention_bias=True,
        query_key_norm=True,
        sliding_window=5,
        dropout=0.1,
        initializer_range=0.2,
        tokenizer=tokenizer,
        name="tiny_decoder",
    )
    config = lm.get_config()
    arguments = set(inspect.signature(DecoderLM.__init__).parameters) - {"self", "kwargs"}
    assert arguments <= set(config), arguments - set(config)

    path = tmp_path / "decoder.keras"
    lm.save(path)
    again = keras.saving.load_model(path)
    assert isinstance(again, DecoderLM)
    assert again.get_config() == config
    ids = _ids(2, 12, vocab=vocab)
    np.testing.assert_allclose(_np(again(ids)), _np(lm(ids)), atol=1e-6, rtol=0)

    assert isinstance(again.tokenizer, BytePairTokenizer)
    assert again.tokenizer.tokenizer_json == tokenizer.tokenizer_json
    assert (again.tokenizer.start_token_id, again.tokenizer.end_token_id) == (0, 1)
    text = again.generate("some text", max_new_tokens=3)
    assert isinstance(text, str) and text.startswith("some text")
    assert text == lm.generate("some text", max_new_tokens=3)
    # The text is the token path's: <s> in front, stopping at </s>, special tokens dropped.
    prompt = np.array([[0, *tokenizer.tokenize("some text")]], "int32")
    tokens = again.generate(prompt, max_new_tokens=3, end_token_id=1)[0]
    assert text == tokenizer.detokenize([t for t in tokens if t not in (0, 1)])
    # A model file that adds no start token (SmolLM2's, Qwen's): the text path puts none.
    assert again.tokenizer.add_start_token
    again.tokenizer = BytePairTokenizer.from_config(
        {**tokenizer.get_config(), "add_start_token": False}
    )
    prompts, generate = [], DecoderLM.generate

    def spy(self, prompt, *args, **kwargs):
        prompts.append(prompt if isinstance(prompt, str) else np.asarray(prompt).tolist())
        return generate(self, prompt, *args, **kwargs)

    monkeypatch.setattr(DecoderLM, "generate", spy)
    again.generate("some text", max_new_tokens=3)
    assert prompts == ["some text", [tokenizer.tokenize("some text").tolist()]]


# ----------------------------------------------------------------- training
def test_fit_lowers_the_loss_on_a_memorisable_batch():
    keras.utils.set_random_seed(0)
    lm = DecoderLM(
        vocabulary_size=VOCAB,
        num_layers=2,
        hidden_dim=WIDTH,
        attention={
            "kind": "grouped",
            "num_heads": 4,
            "num_kv_heads": 2,
            "rope_max_wavelength": BASE,
        },
        intermediate_dim=FFN,
        max_sequence_length=16,
    )
    tokens = _ids(4, 17, seed=3)
    lm.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = lm.fit(
        tokens[:, :-1], tokens[:, 1:], batch_size=4, epochs=30, shuffle=False, verbose=0
    )
    losses = history.history["loss"]
    assert abs(losses[0] - math.log(VOCAB)) < 0.1  # Starts near uniform (small init).
    # About 3.9 -> 0.35 on x86 TensorFlow and JAX: a factor 2 leaves a wide margin.
    assert losses[-1] < losses[0] * 0.5, losses


# ------------------------------------------------------------ quantize and LoRA
def test_int8_quantized_logits_stay_close(tmp_path):
    lm = tiny_lm()  # Tied: the quantized embedding table is dequantized for the logits.
    ids = _ids(4, 12)
    want = _np(lm(ids))
    lm.quantize("int8")
    assert lm.token_embedding.quantization_mode == "int8"
    assert lm.transformer_layers[0]._feedforward_gate_dense.quantization_mode == "int8"
    got = _np(lm(ids))
    relative = np.linalg.norm(got - want) / np.linalg.norm(want)
    agreement = np.mean(got.argmax(-1) == want.argmax(-1))
    assert relative < 0.05 and agreement >= 0.9, (relative, agreement)
    assert relative > 0  # Quantized for real.
    lm.save(tmp_path / "int8.keras")  # Loads quantized: the same logits.
    again = keras.saving.load_model(tmp_path / "int8.keras")
    assert again.transformer_layers[0]._feedforward_gate_dense.quantization_mode == "int8"
    np.testing.assert_array_equal(_np(again(ids)), got)


def test_lora_keeps_the_output_until_its_factors_change():
    lm = tiny_lm(tie_word_embeddings=False)
    ids = _ids(2, 9)
    want = _np(lm(ids))
    denses = []
    for block in lm.transformer_layers:
        denses += [block.attention_layer._query_dense, block._feedforward_gate_dense]
    for dense in denses:
        dense.enable_lora(2)
    np.testing.assert_allclose(_np(lm(ids)), want, atol=1e-6, rtol=0)
    lora = [v for v in lm.trainable_weights if "lora" in v.path]
    assert len(lora) == 2 * len(denses)
    for dense in denses:
        assert not dense._kernel.trainable
    # The factors are live: a non-zero B changes the logits.
    rng = np.random.default_rng(0)
    for dense in denses:
        dense.lora_kernel_b.assign(rng.normal(0, 0.5, dense.lora_kernel_b.shape).astype("float32"))
    assert np.abs(_np(lm(ids)) - want).max() > 1e-2


# ---------------------------------------------------------------- bad inputs
def test_a_spec_without_rotary_positions_is_refused():
    with pytest.raises(SpecError, match="rope_max_wavelength"):
        DecoderLM(
            vocabulary_size=VOCAB,
            num_layers=1,
            hidden_dim=WIDTH,
            attention={"kind": "grouped", "num_heads": 4, "num_kv_heads": 2},
        )


def test_generate_past_max_sequence_length_is_a_one_line_error():
    lm = tiny_lm(max_sequence_length=8)
    with pytest.raises(ValueError, match="max_sequence_length 8") as error:
        lm.generate(_ids(1, 6), max_new_tokens=3)
    assert "\n" not in str(error.value)
    assert lm.generate(_ids(1, 6), max_new_tokens=2, compile=False).shape == (1, 8)


def test_each_gemma_option_binds_and_cached_greedy_equals_uncached():
    """Switching off any one of Gemma 2's options changes the logits (the oracle test covers
    each); cached decoding keeps the local and global layers' masks and both caps."""
    ids = _ids(2, 9)
    gemma2 = ORACLE_CASES["gemma2"]
    want = oracle_logits(tiny_lm(**gemma2), ids)
    for option, off in (
        ("attention_logit_soft_cap", None),
        ("final_logit_soft_cap", None),
        ("sliding_window_layers", None),  # Both layers local.
        ("post_norms", False),
    ):
        other = oracle_logits(tiny_lm(**{**gemma2, option: off}), ids)
        assert np.abs(other - want).max() > 0.1, option
    gemma3 = ORACLE_CASES["gemma3"]  # Its local layer's RoPE base binds too.
    without = oracle_logits(tiny_lm(**{**gemma3, "local_rope_max_wavelength": None}), ids)
    assert np.abs(without - oracle_logits(tiny_lm(**gemma3), ids)).max() > 0.1
    for options in (gemma2, gemma3):
        lm = tiny_lm(**options)
        generated = np.asarray(lm.generate(ids[:, :3], max_new_tokens=6))
        tokens = ids[:, :3]
        for _ in range(6):
            step = np.argmax(_np(lm(tokens))[:, -1], axis=-1).astype("int32")
            tokens = np.concatenate([tokens, step[:, None]], axis=1)
        np.testing.assert_array_equal(generated, tokens)
    with pytest.raises(ValueError, match="one bool per layer"):
        tiny_lm(**{**gemma2, "sliding_window_layers": [True]})
