"""keras-hub's Llama-family decoders <-> `DecoderLM` (`headsize_tf.keras3.pretrained.hub_decoders`).

Each supported family is built tiny with random weights, saved as a local
preset and loaded as a `DecoderLM`, whose logits must equal keras-hub's; the
model is then written back as a preset that keras-hub reloads with the same
logits. Families the library cannot compute, and models a Llama-family
checkpoint cannot hold (pruned, latent, head-masked), are refused by name.
"""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from headsize_tf.core.errors import CheckpointError  # noqa: E402
from headsize_tf.data.hf_llama_dir import read_hf_llama_dir  # noqa: E402
from headsize_tf.keras3.modeling.decoder_lm import DecoderLM  # noqa: E402
from headsize_tf.keras3.modeling.llama_weights import (  # noqa: E402
    checkpoint_from_decoder,
    decoder_from_checkpoint,
)
from headsize_tf.keras3.pretrained.decoders import (  # noqa: E402
    load_decoder,
    save_decoder,
    tokenizer_of,
)
from headsize_tf.keras3.pretrained.hub_decoders import (  # noqa: E402
    REFUSED_FAMILIES,
    checkpoint_from_hub,
    family_of_class,
    import_hub_decoder,
    llama_config_of,
    load_hub_decoder,
    save_hub_decoder,
)
from headsize_tf.keras3.reparam.kv_compress import KVPlan, compress_kv  # noqa: E402
from tests.data.llama_files_test import tokenizer_json as tokenizer_json_fixture  # noqa: E402
from tests.data.llama_files_test import vocab_and_merges  # noqa: E402

tokenizer_json = tokenizer_json_fixture  # A tiny byte-level BPE (for Hugging Face directories).
VOCAB = 97
SIZE = dict(
    vocabulary_size=VOCAB,
    num_layers=2,
    num_query_heads=6,
    num_key_value_heads=2,
    hidden_dim=48,
    intermediate_dim=64,
    rope_max_wavelength=500,
)
LLAMA3_SCALING = dict(
    rope_frequency_adjustment_factor=8.0,
    rope_low_freq_factor=1.0,
    rope_high_freq_factor=4.0,
    rope_pretraining_sequence_length=8,
)
# Gemma 2's sandwich norms and caps that bind at these logits (~5).
GEMMA2 = dict(
    head_dim=16,
    num_key_value_heads=2,
    use_post_attention_norm=True,
    use_post_ffw_norm=True,
    attention_logit_soft_cap=1.0,
    final_logit_soft_cap=3.0,
)
# case -> (backbone class, its extra arguments, what the loaded DecoderLM must have)
FAMILIES = {
    "llama3_untied": ("Llama3Backbone", dict(tie_word_embeddings=False), {}),
    "llama3_tied": ("Llama3Backbone", dict(tie_word_embeddings=True), {}),
    "llama3_rope_scaling": (
        "Llama3Backbone",
        LLAMA3_SCALING,
        {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
    ),
    "llama": ("LlamaBackbone", {}, {}),
    "mistral_window": ("MistralBackbone", dict(sliding_window=4), {"sliding_window": 4}),
    "qwen2": ("QwenBackbone", {}, {"attention_bias": True}),
    "qwen3_head_dim": ("Qwen3Backbone", dict(head_dim=10), {"query_key_norm": True, "head": 10}),
    # Gemma 1: heads of 16 at width 48 (Gemma 7B's heads are wider than width / heads too),
    # and multi-query attention (Gemma 2B's one key/value head).
    "gemma": ("GemmaBackbone", dict(head_dim=16, num_key_value_heads=6), {"head": 16}),
    "gemma_mqa": ("GemmaBackbone", dict(head_dim=16, num_key_value_heads=1), {"head": 16}),
    # Gemma 2: sandwich norms, caps that bind at these logits (~5), every even layer local.
    "gemma2": (
        "GemmaBackbone",
        dict(**GEMMA2, use_sliding_window_attention=True, sliding_window_size=4),
        {"head": 16, "sliding_window": 4, "gemma2": True},
    ),
    # Gemma 2 27B: queries scaled by (width / heads) ** -0.5 = 8 ** -0.5, not by the head size.
    "gemma2_27b": (
        "GemmaBackbone",
        dict(**GEMMA2, query_head_dim_normalize=False),
        {"head": 16, "query_scale": 8**-0.5},
    ),
    # Gemma 3's text decoder: six layers, so that the sixth is global (RoPE base 1e6, scaled
    # by 2) and the first five local (base 1e4); query/key norms scaling by 1 + w.
    "gemma3": (
        "Gemma3Backbone",
        dict(
            image_size=896,
            num_layers=6,
            head_dim=16,
            num_key_value_heads=2,
            use_post_attention_norm=True,
            use_post_ffw_norm=True,
            use_sliding_window_attention=True,
            sliding_window_size=4,
            global_rope_scaling_factor=2.0,
        ),
        {
            "head": 16,
            "sliding_window": 4,
            "query_key_norm": True,
            "gemma3": True,
            "rope_scaling": {"rope_type": "linear", "factor": 2.0},
        },
    ),
}
# Logits agree to float32 rounding: max |diff| <= TOLERANCE * max(1, max |logit|) (measured:
# 5.3e-6 at a largest logit of 5.2, i.e. 0.1 of the bound, on TensorFlow and JAX).
TOLERANCE = 1e-5
# Qwen3 measured 4.6e-5 (TensorFlow) and 4.3e-5 (JAX) at a largest logit of 5.7, i.e. 8.1e-6
# relative: keras-hub 0.32's Qwen3Decoder does not pass layer_norm_epsilon to Qwen3Attention,
# whose per-head query/key norms keep epsilon 1e-5, while the DecoderLM uses the model's
# epsilon (1e-6 here) as Hugging Face's Qwen3 does; with 1e-5 in both the difference is 3.9e-6.
# The bound is the measured relative difference times 3.
QWEN3_TOLERANCE = 2.5e-5


def _size(backbone_class: str) -> dict:
    """SIZE, less what a family sets itself (Gemma: its RoPE bases are fixed)."""
    if backbone_class.startswith("Gemma"):
        return {
            k: v for k, v in SIZE.items() if k not in ("rope_max_wavelength", "num_key_value_heads")
        }
    return SIZE


def _np(x) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x), np.float64)


def honour_query_scale(backbone) -> None:
    """keras-hub 0.32's Gemma decoder blocks build their attention with
    `query_head_dim_normalize=True` whatever the backbone says, so its Gemma 2 and 3 27B
    scale queries by the head size, not by width / heads as the models were trained (Hugging
    Face's `query_pre_attn_scalar`): the oracle is keras-hub's attention with the backbone's
    own setting."""
    flag = backbone.get_config().get("query_head_dim_normalize", True)
    for block in getattr(backbone, "transformer_layers", []):
        attention = getattr(block, "attention", None)
        if hasattr(attention, "query_head_dim_normalize"):
            attention.query_head_dim_normalize = flag


def hub_logits(backbone, ids: np.ndarray) -> np.ndarray:
    hidden = backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})
    return _np(backbone.token_embedding(hidden, reverse=True))


@pytest.mark.parametrize("case", list(FAMILIES))
def test_hub_decoder_loads_with_equal_logits_and_saves_back(case, tmp_path):
    backbone_class, options, expected = FAMILIES[case]
    backbone = getattr(keras_hub.models, backbone_class)(**{**_size(backbone_class), **options})
    honour_query_scale(backbone)
    rng = np.random.default_rng(0)
    for v in backbone.weights:
        noise = rng.normal(0, 0.2, v.shape).astype("float32")
        v.assign(noise + (1.0 if "scale" in v.path else 0.0))
    ids = rng.integers(0, VOCAB, (2, 11)).astype("int32")  # Longer than Mistral's window.
    theirs = hub_logits(backbone, ids)
    if options.get("tie_word_embeddings") and backbone_class.startswith("Llama"):
        # keras-hub 0.32's LlamaBackbone.get_config omits tie_word_embeddings: its own tied
        # preset reloads untied and fails in keras-hub. Import the backbone object instead.
        lm = import_hub_decoder(backbone)
    else:
        backbone.save_to_preset(str(tmp_path / "hub"))
        lm = load_hub_decoder(tmp_path / "hub")
    assert isinstance(lm, DecoderLM)
    gemma = backbone_class.startswith("Gemma")
    assert lm.tie_word_embeddings == options.get(
        "tie_word_embeddings", backbone_class.startswith("Qwen") or gemma
    )
    # Gemma scales its token embeddings by sqrt(width) on the way in.
    assert lm.embedding_scale == (np.sqrt(48.0) if gemma else None)
    if expected.get("gemma2"):
        assert lm.post_norms and lm.sliding_window_layers == [True, False]
        assert (lm.attention_logit_soft_cap, lm.final_logit_soft_cap) == (1.0, 3.0)
    if expected.get("gemma3"):
        assert lm.sliding_window_layers == [True] * 5 + [False]
        assert (lm.local_rope_max_wavelength, lm.attention_spec.rope_max_wavelength) == (1e4, 1e6)
    if "sliding_window" in expected:
        assert lm.sliding_window == expected["sliding_window"]
    else:  # None, or a window no narrower than every sequence the model serves.
        assert lm.sliding_window is None or lm.sliding_window >= lm.max_sequence_length
    assert lm.attention_bias == expected.get("attention_bias", False)
    assert lm.query_key_norm == expected.get("query_key_norm", False)
    assert lm.query_scale == expected.get("query_scale")
    assert lm.attention_layers[0].head_size == expected.get("head", 8)
    scaling = lm.attention_spec.rope_scaling
    want_scaling = expected.get("rope_scaling")
    assert (scaling is None) == (want_scaling is None)
    if want_scaling is not None:
        assert {k: scaling[k] for k in want_scaling} == want_scaling
    ours = _np(lm(ids))
    largest = np.abs(theirs).max()
    assert largest > 1.0  # Random weights: logits large enough to compare.
    bound = QWEN3_TOLERANCE if backbone_class == "Qwen3Backbone" else TOLERANCE
    assert np.abs(ours - theirs).max() <= bound * max(1.0, largest)

    save_hub_decoder(lm, tmp_path / "back", backbone_class)
    back = keras_hub.models.Backbone.from_preset(str(tmp_path / "back"))
    assert type(back).__name__ == backbone_class
    honour_query_scale(back)
    np.testing.assert_allclose(hub_logits(back, ids), theirs, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "name, missing",
    [
        ("FalconBackbone", "ALiBi"),
        ("Gemma4Backbone", "per-layer embeddings"),
        ("Phi3Backbone", "LongRoPE"),
    ],
)
def test_unsupported_families_are_refused_with_what_they_need(name, missing):
    assert name in REFUSED_FAMILIES
    with pytest.raises(CheckpointError, match=missing) as error:
        family_of_class(name)
    message = str(error.value)
    assert name in message and "Llama3Backbone" in message and "\n" not in message
    with pytest.raises(CheckpointError, match="not a supported decoder"):
        family_of_class("BertBackbone")


def test_gemma_options_without_a_form_are_refused_and_gemma_writes_only_as_gemma(tmp_path):
    """One kind of post-norm alone, or Gemma 2 27B's query scale without Gemma 2, is refused by
    name; a Gemma DecoderLM is no Llama, and Gemma 1 is no Gemma 2."""
    for options, need in (
        (dict(use_post_ffw_norm=True), "only one kind of post-norm"),
        (dict(query_head_dim_normalize=False, head_dim=16), "without Gemma 2's post-norms"),
        (dict(final_logit_soft_cap=30.0), "final_logit_soft_cap without its post-norms"),
    ):
        backbone = keras_hub.models.GemmaBackbone(
            **{**_size("GemmaBackbone"), "num_key_value_heads": 2, "head_dim": 8, **options}
        )
        with pytest.raises(CheckpointError, match=need) as error:
            import_hub_decoder(backbone)
        assert "\n" not in str(error.value)
    gemma = keras_hub.models.GemmaBackbone(
        **_size("GemmaBackbone"), num_key_value_heads=2, head_dim=8
    )
    lm = import_hub_decoder(gemma)
    with pytest.raises(CheckpointError, match="a Gemma model is written as a Gemma one"):
        checkpoint_from_decoder(lm, "llama")
    with pytest.raises(CheckpointError, match="scales the token embeddings by"):
        save_hub_decoder(lm, tmp_path / "llama", "Llama3Backbone")
    with pytest.raises(CheckpointError, match="'gemma2' has post-norms; this DecoderLM has none"):
        checkpoint_from_decoder(lm, "gemma2")


@pytest.mark.parametrize("case", ["gemma_mqa", "gemma2", "gemma2_27b", "gemma3"])
def test_gemma_round_trips_through_a_hugging_face_directory(case, tmp_path, tokenizer_json):
    """Written as model_type "gemma" or "gemma2" (norms as offsets, GeGLU named; Gemma 2's
    caps, local layers, four norms and 27B query scale), read back with keras-hub's logits."""
    vocab = len(vocab_and_merges(tokenizer_json)[0])
    size = {**_size("GemmaBackbone"), "vocabulary_size": vocab}
    backbone_class, options, _ = FAMILIES[case]
    backbone = getattr(keras_hub.models, backbone_class)(**{**size, **options})
    honour_query_scale(backbone)
    rng = np.random.default_rng(3)
    for v in backbone.weights:
        v.assign(rng.normal(0, 0.2, v.shape).astype("float32"))
    checkpoint = checkpoint_from_hub(backbone)
    checkpoint.tokenizer_json = tokenizer_json  # A Hugging Face directory holds a tokenizer.
    lm = decoder_from_checkpoint(checkpoint, tokenizer=tokenizer_of(checkpoint))
    ids = rng.integers(0, vocab, (2, 7)).astype("int32")
    save_decoder(lm, tmp_path / "hf", "hf")  # model_type inferred from the embedding scale
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    if case == "gemma2":
        assert config["model_type"] == "gemma2" and config["architectures"] == ["Gemma2ForCausalLM"]
        assert config["layer_types"] == ["sliding_attention", "full_attention"]
        assert (config["sliding_window"], config["query_pre_attn_scalar"]) == (4, 16)
        assert (config["attn_logit_softcapping"], config["final_logit_softcapping"]) == (1, 3)
    elif case == "gemma2_27b":  # Queries scaled by (width / heads) ** -0.5, as Gemma 2 27B.
        assert (config["query_pre_attn_scalar"], config["head_dim"]) == (8, 16)
    elif case == "gemma3":
        assert config["model_type"] == "gemma3_text"
        assert config["architectures"] == ["Gemma3ForCausalLM"]
        assert config["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
        assert (config["rope_local_base_freq"], config["rope_theta"]) == (1e4, 1e6)
        assert config["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
    else:
        assert config["model_type"] == "gemma" and config["architectures"] == ["GemmaForCausalLM"]
    assert config["hidden_activation"] == "gelu_pytorch_tanh" and config["tie_word_embeddings"]
    checkpoint = read_hf_llama_dir(tmp_path / "hf")
    # Hugging Face's Gemma norms hold the offset w of the scale 1 + w, as keras-hub's do.
    np.testing.assert_array_equal(
        checkpoint.weights["model.layers.1.input_layernorm.weight"],
        _np(backbone.transformer_layers[1].pre_attention_norm.scale).astype("float32"),
    )
    again = load_decoder(tmp_path / "hf")
    same = ("name", "tokenizer")  # The same model but for its name and tokenizer object.
    assert {k: v for k, v in again.get_config().items() if k not in same} == {
        k: v for k, v in lm.get_config().items() if k not in same
    }
    np.testing.assert_allclose(_np(again(ids)), hub_logits(backbone, ids), atol=1e-5, rtol=0)


def _decoder(attention, **options) -> DecoderLM:
    base = {"rope_max_wavelength": 500.0}
    return DecoderLM(
        vocabulary_size=VOCAB,
        num_layers=2,
        hidden_dim=48,
        attention={**attention, **base},
        intermediate_dim=64,
        max_sequence_length=32,
        **options,
    )


def _masked():
    lm = _decoder({"kind": "grouped", "num_heads": 6, "num_kv_heads": 2})
    lm.attention_layers[1].set_head_mask([1, 1, 0, 1, 1, 1])
    return lm


NOT_LLAMA = {
    "latent": (
        lambda: _decoder({"kind": "latent", "num_heads": 6, "kv_latent_dim": 16}),
        "latent attention",
    ),
    "masked_heads": (_masked, "masked heads"),
}


@pytest.mark.parametrize("case", list(NOT_LLAMA))
def test_models_a_llama_checkpoint_cannot_hold_are_refused(case, tmp_path):
    make, why = NOT_LLAMA[case]
    lm = make()
    with pytest.raises(CheckpointError, match=why) as error:
        checkpoint_from_decoder(lm)
    assert ".keras" in str(error.value)
    with pytest.raises(CheckpointError, match=r"\.keras"):
        save_hub_decoder(lm, tmp_path / "preset", "Llama3Backbone")
    assert not (tmp_path / "preset").exists()  # Refused before anything is written.


def test_a_model_pruned_layer_by_layer_is_a_checkpoint_keras_hub_cannot_hold(tmp_path):
    lm = _decoder({"kind": "grouped", "num_heads": [6, 4], "num_kv_heads": [2, 2], "head_size": 8})
    checkpoint = checkpoint_from_decoder(lm)  # Per-layer heads: GGUF's "deci" holds them.
    assert checkpoint.config.layer_heads == ((6, 2), (4, 2))
    with pytest.raises(CheckpointError, match=r"differ in heads.*GGUF file or \.keras"):
        save_hub_decoder(lm, tmp_path / "preset", "Llama3Backbone")
    assert not (tmp_path / "preset").exists()


@pytest.mark.parametrize("backbone_class", ["Llama3Backbone", "QwenBackbone"])
def test_heads_other_than_width_over_heads_are_refused_where_a_backbone_has_no_head_dim(
    backbone_class, tmp_path
):
    # 4 heads of 8 in a width of 48 (a model that lost a key/value group of its 6 heads).
    bias = backbone_class == "QwenBackbone"  # Qwen2's attention has biases.
    attention = {"kind": "grouped", "num_heads": 4, "num_kv_heads": 2, "head_size": 8}
    lm = _decoder(attention, attention_bias=bias)
    with pytest.raises(CheckpointError, match=rf"{backbone_class} needs head_dim = width / heads"):
        save_hub_decoder(lm, tmp_path / "preset", backbone_class)
    assert not (tmp_path / "preset").exists()


@pytest.mark.parametrize("backbone_class", ["Llama3Backbone", "Qwen3Backbone"])
def test_a_sliding_window_is_written_or_refused(backbone_class, tmp_path):
    qwen3 = backbone_class == "Qwen3Backbone"
    lm = _decoder(
        {"kind": "grouped", "num_heads": 6, "num_kv_heads": 2},
        sliding_window=4,
        query_key_norm=qwen3,
        tie_word_embeddings=qwen3,
    )
    try:
        backbone = save_hub_decoder(lm, tmp_path / "preset", backbone_class)
    except CheckpointError as error:
        assert "window" in str(error)
        return
    # Written: keras-hub must hold the window (on TensorFlow a reload without it changes the
    # logits of 11 tokens by about 5).
    assert backbone.get_config().get("sliding_window_size") == 4


def test_gemma3_27b_query_scale_is_read_and_written():
    """Gemma3Backbone's query_head_dim_normalize=False (Gemma 3 27B: width / heads = 8, not
    the head size 16) is Hugging Face's query_pre_attn_scalar and the DecoderLM's query_scale,
    and is written back to the preset."""
    size = {**_size("Gemma3Backbone"), "num_layers": 1}
    options = {**FAMILIES["gemma3"][1], "num_layers": 1, "query_head_dim_normalize": False}
    backbone = keras_hub.models.Gemma3Backbone(**{**size, **options})
    lm = import_hub_decoder(backbone)
    assert lm.query_scale == 8**-0.5
    assert checkpoint_from_decoder(lm, "gemma3_text").config.query_pre_attn_scalar == 8.0
    assert llama_config_of(backbone).to_hf_config()["query_pre_attn_scalar"] == 8


def test_qwen3_sliding_window_size_is_read():
    backbone = keras_hub.models.Qwen3Backbone(**SIZE, head_dim=10, sliding_window_size=4)
    # keras-hub's Qwen3 on TensorFlow attends within the window (11 random tokens: logits 6.9
    # away from the windowless model's): the imported DecoderLM keeps it.
    assert import_hub_decoder(backbone).sliding_window == 4


@pytest.mark.parametrize("case", ["gemma_mqa", "gemma2"])
def test_a_gemma_model_reloads_decodes_cached_and_converts_to_a_latent_exactly(case, tmp_path):
    """Gemma's embedding scale and offset norms (Gemma 2's caps, post-norms and local layers
    too) survive `.keras`, cached decoding and conversion to a latent cache."""
    options = FAMILIES[case][1]
    backbone = keras_hub.models.GemmaBackbone(**_size("GemmaBackbone"), **options)
    rng = np.random.default_rng(4)
    for v in backbone.weights:
        v.assign(rng.normal(0, 0.2, v.shape).astype("float32"))
    lm = import_hub_decoder(backbone)
    ids = rng.integers(0, VOCAB, (2, 7)).astype("int32")  # Longer than Gemma 2's window.
    logits = _np(lm(ids))
    save_decoder(lm, tmp_path / "gemma.keras")
    again = load_decoder(tmp_path / "gemma.keras")
    assert (again.embedding_scale, again.norm_scale_offset) == (np.sqrt(48.0), 1.0)
    np.testing.assert_array_equal(_np(again(ids)), logits)
    # Cached greedy equals greedy on the full forward pass.
    generated = np.asarray(lm.generate(ids[:, :3], max_new_tokens=3))
    tokens = ids[:, :3]
    for _ in range(3):
        step = np.argmax(_np(lm(tokens))[:, -1], axis=-1).astype("int32")
        tokens = np.concatenate([tokens, step[:, None]], axis=1)
    np.testing.assert_array_equal(generated, tokens)
    # Its K/V heads (of 16, rotary) as a latent with every rotary pair kept: exact.
    plan = KVPlan(1.0, rope_strategy="high", rope_pairs=8, calibrated=False)
    latent, _ = compress_kv(lm, plan)
    assert latent.attention_spec.kind == "latent"
    assert latent.attention_layers[0].logit_soft_cap == options.get("attention_logit_soft_cap")
    np.testing.assert_allclose(_np(latent(ids)), logits, atol=1e-5 * max(1.0, np.abs(logits).max()))


@pytest.mark.parametrize("case", ["qwen3_head_dim", "gemma3"])
def test_a_query_key_normed_model_pools_its_key_value_heads_and_saves_back(case, tmp_path):
    """keras-hub's Qwen3 and Gemma 3 -> one key/value head by mean pooling (their query/key
    norms kept) -> a preset of the same family that keras-hub runs with the pooled model's
    logits."""
    from headsize_tf.core.conversion import ConversionTarget
    from headsize_tf.keras3.reparam import convert_model

    backbone_class, options, _ = FAMILIES[case]
    backbone = getattr(keras_hub.models, backbone_class)(**{**_size(backbone_class), **options})
    rng = np.random.default_rng(2)
    for v in backbone.weights:
        v.assign(rng.normal(0, 0.2, v.shape).astype("float32"))
    lm = import_hub_decoder(backbone)
    pooled, _ = convert_model(lm, ConversionTarget("grouped", 1, "mean"))
    ids = rng.integers(0, VOCAB, (2, 9)).astype("int32")
    ours = _np(pooled(ids))
    assert np.abs(ours - _np(lm(ids))).max() > 1e-2  # Pooling changed the model.
    save_hub_decoder(pooled, tmp_path / "pooled", backbone_class)
    back = keras_hub.models.Backbone.from_preset(str(tmp_path / "pooled"))
    assert back.num_key_value_heads == 1
    bound = QWEN3_TOLERANCE if backbone_class == "Qwen3Backbone" else TOLERANCE
    assert np.abs(hub_logits(back, ids) - ours).max() <= bound * max(1.0, np.abs(ours).max())


def test_a_task_preset_saves_back_as_the_task_with_its_tokenizer(tmp_path):
    """load -> pool the key/value heads -> save: keras-hub loads the written preset as its
    causal LM, tokenizer and preprocessor included, generating what the library's model does."""
    from headsize_tf.core.conversion import ConversionTarget
    from headsize_tf.keras3.reparam import convert_model

    vocabulary = {"a": 0, "b": 1, "Ġ": 2, "Ġa": 3, "Ġb": 4, "ab": 5}
    vocabulary.update({f"x{i}": i for i in range(6, 30)})
    vocabulary.update({"<|begin_of_text|>": 30, "<|end_of_text|>": 31})
    vocabulary.update({"<|start_header_id|>": 32, "<|end_header_id|>": 33, "<|eot_id|>": 34})
    tokenizer = keras_hub.models.Llama3Tokenizer(
        vocabulary=vocabulary, merges=["Ġ a", "a b", "Ġ b"]
    )
    backbone = keras_hub.models.Llama3Backbone(
        vocabulary_size=35,
        num_layers=2,
        num_query_heads=4,
        num_key_value_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
    )
    rng = np.random.default_rng(0)
    backbone.set_weights([rng.normal(0, 0.3, w.shape) for w in backbone.get_weights()])
    preprocessor = keras_hub.models.Llama3CausalLMPreprocessor(tokenizer=tokenizer)
    task = keras_hub.models.Llama3CausalLM(backbone=backbone, preprocessor=preprocessor)
    task.save_to_preset(str(tmp_path / "task"))
    lm = load_hub_decoder(tmp_path / "task")
    pruned, _ = convert_model(lm, ConversionTarget("grouped", 1, "mean"))  # Multi-query.
    save_hub_decoder(pruned, tmp_path / "back", "Llama3Backbone")
    again = keras_hub.models.Llama3CausalLM.from_preset(str(tmp_path / "back"))
    assert again.backbone.num_key_value_heads == 1
    reloaded = load_hub_decoder(tmp_path / "back")
    assert isinstance(reloaded.tokenizer, keras_hub.models.Llama3Tokenizer)
    assert reloaded.generate("a b", max_new_tokens=4) == pruned.generate("a b", max_new_tokens=4)
