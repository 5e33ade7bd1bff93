"""data.gguf_llama: Gemma 1, 2 and 3 GGUF files read as their Hugging Face checkpoints.

Each tiny random Gemma is written the way llama.cpp's converter
(`conversion/gemma.py`) writes one: norms stored as 1 + offset, Gemma 2 and
3's four norms under llama.cpp's names, no `lm_head`, no q/k permutation,
the metadata keys it writes and no others (Gemma 2: no RoPE base, no window
pattern), a SentencePiece vocabulary without the space prefix. Read back, it
must equal what the Hugging Face config and weights give: the same
`LlamaConfig` and the same weights (to float32 rounding of the norms).
"""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("sentencepiece")

from headsize_tf.core.errors import CheckpointError  # noqa: E402
from headsize_tf.core.llama_checkpoint import LlamaConfig, weight_shapes  # noqa: E402
from headsize_tf.data.gguf_llama import (  # noqa: E402
    GLOBAL_TENSORS,
    LAYER_TENSORS,
    SANDWICH_LAYER_TENSORS,
    read_gguf_llama,
)
from tests.data.gguf_sentencepiece_test import _train  # noqa: E402

ARCH = {"gemma": "gemma", "gemma2": "gemma2", "gemma3_text": "gemma3"}


@pytest.fixture(scope="module")
def vocabulary():
    return _train(space_prefix=False)[1]


def hf_config(model_type: str, vocab: int, **overrides) -> dict:
    """A tiny Hugging Face Gemma config (Gemma's own bos 2 / eos 1)."""
    config = {
        "model_type": model_type,
        "vocab_size": vocab,
        "num_hidden_layers": 2,
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 48,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh",
        "bos_token_id": 2,
        "eos_token_id": 1,
    }
    if model_type == "gemma2":
        config.update(
            sliding_window=8,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
            query_pre_attn_scalar=16,
            num_hidden_layers=4,
        )
    if model_type == "gemma3_text":
        config.update(
            sliding_window=8,
            query_pre_attn_scalar=16,
            num_hidden_layers=7,  # Layer 5 is the global one.
            rope_theta=1_000_000.0,
            rope_local_base_freq=10_000.0,
            rope_scaling={"rope_type": "linear", "factor": 8.0},
            final_logit_softcapping=None,
            attn_logit_softcapping=None,
        )
    return {**config, **overrides}


def random_weights(config: LlamaConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        name: (0.2 * rng.standard_normal(shape)).astype(np.float32)
        for name, shape in weight_shapes(config).items()
    }


def write_like_llama_cpp(
    path, hf: dict, weights: dict, vocabulary, newer: bool = False, skip=(), extra=None
):
    """`hf` and `weights` as llama.cpp's Gemma converters write them (module docstring).

    `newer`: Gemma 3 as the newest converter writes it (the local RoPE base as
    `rope.freq_base_swa`, no final cap key when there is none); `skip`: GGUFWriter
    methods not called; `extra`: GGUFWriter method -> value, called too.
    """
    arch = ARCH[hf["model_type"]]
    writer = gguf.GGUFWriter(str(path), arch)
    for method in skip:
        setattr(writer, method, lambda *_: None)
    for method, value in (extra or {}).items():
        getattr(writer, method)(value)
    writer.add_context_length(hf["max_position_embeddings"])
    writer.add_embedding_length(hf["hidden_size"])
    writer.add_block_count(hf["num_hidden_layers"])
    writer.add_feed_forward_length(hf["intermediate_size"])
    writer.add_head_count(hf["num_attention_heads"])
    writer.add_head_count_kv(hf["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(hf["rms_norm_eps"])
    writer.add_key_length(hf["head_dim"])
    writer.add_value_length(hf["head_dim"])
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(hf["attn_logit_softcapping"])
        writer.add_final_logit_softcapping(hf["final_logit_softcapping"])
        writer.add_sliding_window(hf["sliding_window"])
    if arch == "gemma3":
        writer.add_rope_freq_base(hf["rope_theta"])
        writer.add_sliding_window(hf["sliding_window"])
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(hf["rope_scaling"]["factor"])
        if newer:
            writer.add_rope_freq_base_swa(hf["rope_local_base_freq"])
        else:
            writer.add_final_logit_softcapping(0.0)
    tokens, scores, types = vocabulary
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_add_space_prefix(False)
    writer.add_bos_token_id(hf["bos_token_id"])
    writer.add_eos_token_id(hf["eos_token_id"])
    sandwich = arch != "gemma"
    to_gguf = {v: k for k, v in (SANDWICH_LAYER_TENSORS if sandwich else LAYER_TENSORS).items()}
    global_names = {v: k for k, v in GLOBAL_TENSORS.items()}
    for name, array in weights.items():
        if name.endswith("norm.weight"):
            array = array + np.float32(1)
        if name in global_names:
            name = global_names[name]
        else:
            _, _, layer, rest = name.split(".", 3)
            name = f"blk.{layer}.{to_gguf[rest]}"
        writer.add_tensor(name, np.ascontiguousarray(array, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    "model_type, overrides, newer",
    [
        ("gemma", {}, False),
        ("gemma2", {}, False),
        # Gemma 2 27B (46 layers): queries scaled by width / heads (8), not the head size.
        ("gemma2", {"num_hidden_layers": 46, "query_pre_attn_scalar": 8}, False),
        ("gemma3_text", {}, False),
        ("gemma3_text", {"rope_local_base_freq": 20_000.0}, True),
        # Gemma 3 27B (62 layers): width / heads again.
        ("gemma3_text", {"num_hidden_layers": 62, "query_pre_attn_scalar": 8}, False),
    ],
    ids=["gemma", "gemma2", "gemma2_27b", "gemma3", "gemma3_newer_converter", "gemma3_27b"],
)
def test_gguf_gemma_reads_as_its_hugging_face_checkpoint(
    tmp_path, vocabulary, model_type, overrides, newer
):
    hf = hf_config(model_type, len(vocabulary[0]), **overrides)
    want = LlamaConfig.from_hf_config(hf)
    weights = random_weights(want)
    checkpoint = read_gguf_llama(
        write_like_llama_cpp(tmp_path / "gemma.gguf", hf, weights, vocabulary, newer)
    )

    assert checkpoint.config == want
    assert checkpoint.config.tie_word_embeddings and checkpoint.config.norm_offset == 1.0
    assert set(checkpoint.weights) == set(weights)
    for name, array in weights.items():
        np.testing.assert_allclose(checkpoint.weights[name], array, rtol=0, atol=1e-6, err_msg=name)
    assert checkpoint.tokenizer_json is not None


def test_gguf_gemma_defaults_and_refusals_follow_llama_cpp(tmp_path, vocabulary):
    hf = hf_config("gemma2", len(vocabulary[0]), num_hidden_layers=6)
    weights = random_weights(LlamaConfig.from_hf_config(hf))

    def read(name, **options):
        return read_gguf_llama(
            write_like_llama_cpp(tmp_path / name, hf, weights, vocabulary, **options)
        ).config

    # Without the window and caps, llama.cpp's defaults (Hugging Face's too).
    bare = read("bare.gguf", skip={"add_sliding_window", "add_attn_logit_softcapping"})
    assert (bare.sliding_window, bare.attention_logit_soft_cap) == (4096, 50.0)
    # A window pattern in the file: every third layer global, or one flag per layer.
    every_third = read("pattern.gguf", extra={"add_sliding_window_pattern": 3})
    assert every_third.sliding_window_layers == (True, True, False, True, True, False)
    flags = (False, True, True, False, True, True)
    per_layer = read("flags.gguf", extra={"add_sliding_window_pattern": list(flags)})
    assert per_layer.sliding_window_layers == flags
    for name, extra, message in [
        ("zero.gguf", {"add_sliding_window_pattern": 0}, "sliding_window_pattern=0; expected"),
        ("short.gguf", {"add_sliding_window_pattern": [True]}, "or one bool per layer (6)"),
        ("swa.gguf", {"add_rope_freq_base_swa": 5.0}, "rope.freq_base_swa=5.0 differs"),
    ]:
        with pytest.raises(CheckpointError) as error:
            read(name, extra=extra)
        assert message in str(error.value) and "\n" not in str(error.value)
    # A cap of 0 (Gemma 3's "no cap") would divide by zero in llama.cpp's Gemma 2.
    with pytest.raises(CheckpointError, match=r"final_logit_softcapping=0; llama\.cpp's Gemma 2"):
        read_gguf_llama(
            write_like_llama_cpp(
                tmp_path / "cap.gguf", {**hf, "final_logit_softcapping": 0.0}, weights, vocabulary
            )
        )


def test_gguf_gemma_windows_of_zero_follow_llama_cpp(tmp_path, vocabulary):
    """Gemma 3 with a zero window has no local layers (llama.cpp); Gemma 2's is refused."""
    gemma3 = hf_config("gemma3_text", len(vocabulary[0]), sliding_window=0)
    no_window = {**gemma3, "sliding_window": None}
    weights = random_weights(LlamaConfig.from_hf_config(no_window))
    path = write_like_llama_cpp(tmp_path / "g3.gguf", gemma3, weights, vocabulary)
    config = read_gguf_llama(path).config
    assert config == LlamaConfig.from_hf_config(no_window) and config.sliding_window is None
    gemma2 = hf_config("gemma2", len(vocabulary[0]))
    weights = random_weights(LlamaConfig.from_hf_config(gemma2))
    path = write_like_llama_cpp(
        tmp_path / "g2.gguf", {**gemma2, "sliding_window": 0}, weights, vocabulary
    )
    with pytest.raises(CheckpointError, match="sliding_window=0; expected Gemma 2's window"):
        read_gguf_llama(path)
    with pytest.raises(CheckpointError, match="sliding_window must be a number of tokens > 0"):
        LlamaConfig.from_hf_config({**gemma2, "sliding_window": 0})
