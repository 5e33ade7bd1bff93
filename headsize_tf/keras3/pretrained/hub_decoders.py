"""keras-hub's Llama-family decoders <-> the library's `DecoderLM`.

keras-hub ships Llama, Llama3 (SmolLM 1/2 load as Llama3), Mistral, Qwen
(2), Qwen3, Gemma (1 and, through its options, 2) and Gemma 3 as backbones whose attention is `EinsumDense` kernels
(query `[d, h, p]`, key / value `[d, G, p]`, output `[h, p, d]`; Gemma's query
and key / value head-first, `[h, d, p]` and `[G, d, p]`), not stock
`MultiHeadAttention`. Each family of `DECODER_FAMILIES` says how its config
and weights read into the framework-neutral
`headsize_tf.core.llama_checkpoint.LlamaCheckpoint`, which
`headsize_tf.keras3.modeling.llama_weights` turns into a `DecoderLM` (and back), so
every format shares one mapping onto the model. Families whose computation
the library does not build yet (Gemma 4, Phi-3, ...) are refused by name
with what is missing.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.llama_checkpoint import GEMMA_TYPES, LlamaCheckpoint, LlamaConfig
from headsize_tf.keras3.modeling.decoder_lm import DecoderLM
from headsize_tf.keras3.modeling.llama_weights import (
    checkpoint_from_decoder,
    decoder_from_checkpoint,
    default_model_type,
)
from headsize_tf.keras3.pretrained._keras_hub import require_keras_hub

# keras-hub decoders have no position limit of their own; a DecoderLM needs one.
DEFAULT_MAX_SEQUENCE_LENGTH = 8192


@dataclasses.dataclass(frozen=True)
class DecoderFamily:
    """A keras-hub decoder family the bridge reads and writes.

    Args:
      model_type: The Hugging Face `model_type` it corresponds to.
      backbone_class: keras-hub's backbone class name.
      causal_lm_class: keras-hub's causal LM task class name.
      attention_bias: Its query/key/value projections have biases (Qwen2).
      qk_norm: Its queries and keys get a per-head RMSNorm (Qwen3).
    """

    model_type: str
    backbone_class: str
    causal_lm_class: str
    attention_bias: bool = False
    qk_norm: bool = False


DECODER_FAMILIES: dict[str, DecoderFamily] = {
    family.backbone_class: family
    for family in (
        DecoderFamily("llama", "LlamaBackbone", "LlamaCausalLM"),
        DecoderFamily("llama", "Llama3Backbone", "Llama3CausalLM"),
        DecoderFamily("mistral", "MistralBackbone", "MistralCausalLM"),
        DecoderFamily("qwen2", "QwenBackbone", "QwenCausalLM", attention_bias=True),
        DecoderFamily("qwen3", "Qwen3Backbone", "Qwen3CausalLM", qk_norm=True),
        DecoderFamily("gemma", "GemmaBackbone", "GemmaCausalLM"),
        DecoderFamily("gemma3_text", "Gemma3Backbone", "Gemma3CausalLM", qk_norm=True),
    )
}
# Families the library cannot compute yet, and what they need.
REFUSED_FAMILIES = {
    "Gemma4Backbone": "per-layer embeddings beside Gemma 3's computation",
    "Phi3Backbone": "fused query/key/value and gate/up projections with LongRoPE scaling",
    "FalconBackbone": "parallel attention and feed-forward, LayerNorm and ALiBi positions",
    "SmolLM3Backbone": "layers without RoPE (NoPE every fourth layer)",
}


def supported_decoders() -> str:
    """The supported keras-hub decoder backbones, for messages."""
    return ", ".join(DECODER_FAMILIES)


def family_of(backbone: Any) -> DecoderFamily:
    """The `DecoderFamily` of a keras-hub backbone, or a `CheckpointError` naming what is missing."""
    name = type(backbone).__name__
    return family_of_class(name)


def family_of_class(name: str) -> DecoderFamily:
    """The `DecoderFamily` of a keras-hub backbone class name (`CheckpointError` if unsupported)."""
    if name in DECODER_FAMILIES:
        return DECODER_FAMILIES[name]
    if name in REFUSED_FAMILIES:
        raise CheckpointError(
            f"keras-hub's {name} is not supported yet: it needs {REFUSED_FAMILIES[name]}; "
            f"supported decoders: {supported_decoders()}."
        )
    raise CheckpointError(
        f"keras-hub's {name} is not a supported decoder; supported: {supported_decoders()}."
    )


def _rope_scaling(family: DecoderFamily, config: Mapping[str, Any]) -> dict[str, Any] | None:
    if family.backbone_class in ("LlamaBackbone", "Llama3Backbone"):
        if float(config.get("rope_position_scaling_factor", 1.0)) != 1.0:
            raise CheckpointError(
                "keras-hub's Llama rope_position_scaling_factor="
                f"{config['rope_position_scaling_factor']} is not applied by keras-hub's own "
                "rotary layer; the bridge refuses it rather than compute another function."
            )
        if config.get("rope_frequency_adjustment_factor") is None:
            return None
        return {
            "rope_type": "llama3",
            "factor": float(config["rope_frequency_adjustment_factor"]),
            "low_freq_factor": float(config["rope_low_freq_factor"]),
            "high_freq_factor": float(config["rope_high_freq_factor"]),
            "original_max_position_embeddings": int(config["rope_pretraining_sequence_length"]),
        }
    factor = float(config.get("rope_scaling_factor", 1.0))
    return None if factor == 1.0 else {"rope_type": "linear", "factor": factor}


def _gemma_config(config: Mapping[str, Any], tie: bool, max_sequence_length: int) -> LlamaConfig:
    """A keras-hub GemmaBackbone config as Gemma 1 or, with Gemma 2's options, Gemma 2."""
    heads, hidden, head_dim = (
        int(config["num_query_heads"]),
        int(config["hidden_dim"]),
        int(config["head_dim"]),
    )
    post = (bool(config.get("use_post_attention_norm")), bool(config.get("use_post_ffw_norm")))
    needs = []
    if post[0] != post[1]:
        needs.append(
            f"only one kind of post-norm (use_post_attention_norm, use_post_ffw_norm: {post})"
        )
    scalar = _query_scalar(config, heads, hidden, head_dim)
    gemma2_options = [
        key
        for key in (
            "attention_logit_soft_cap",
            "final_logit_soft_cap",
            "use_sliding_window_attention",
        )
        if config.get(key)
    ]
    if gemma2_options and not post[0]:
        needs.append(f"Gemma 2's {', '.join(gemma2_options)} without its post-norms")
    if scalar is not None and not post[0]:
        needs.append(
            f"queries scaled by width / heads = {scalar:g}, not the head size {head_dim}, "
            "without Gemma 2's post-norms (query_head_dim_normalize=False)"
        )
    if needs:
        raise CheckpointError(
            f"keras-hub's GemmaBackbone with {'; '.join(needs)} is not supported yet."
        )
    gemma2 = (
        post[0]
        or any(config.get(key) for key in ("attention_logit_soft_cap", "final_logit_soft_cap"))
        or bool(config.get("use_sliding_window_attention"))
    )
    local = None
    window = None
    if config.get("use_sliding_window_attention"):
        window = int(config["sliding_window_size"])
        local = tuple(i % 2 == 0 for i in range(int(config["num_layers"])))  # keras-hub's
    return LlamaConfig(
        model_type="gemma2" if gemma2 else "gemma",
        vocabulary_size=int(config["vocabulary_size"]),
        num_layers=int(config["num_layers"]),
        hidden_dim=hidden,
        num_query_heads=heads,
        num_key_value_heads=int(config["num_key_value_heads"]),
        # keras-hub's Gemma counts both gated halves of the feed-forward.
        intermediate_dim=int(config["intermediate_dim"]) // 2,
        head_dim=head_dim,
        rope_max_wavelength=10000.0,  # GemmaAttention's fixed base.
        rms_norm_epsilon=float(config.get("layer_norm_epsilon", 1e-6)),
        tie_word_embeddings=tie,
        max_sequence_length=int(max_sequence_length),
        sliding_window=window,
        hidden_activation="gelu_pytorch_tanh",
        sliding_window_layers=local,
        attention_logit_soft_cap=config.get("attention_logit_soft_cap"),
        final_logit_soft_cap=config.get("final_logit_soft_cap"),
        query_pre_attn_scalar=scalar,
    )


def _query_scalar(
    config: Mapping[str, Any], heads: int, hidden: int, head_dim: int
) -> float | None:
    """keras-hub's `query_head_dim_normalize=False` (Gemma 2 and 3 27B) as Hugging Face's
    `query_pre_attn_scalar`: queries scaled by (width / heads) ** -0.5; None: by the head size."""
    if config.get("query_head_dim_normalize", True) or hidden // heads == head_dim:
        return None
    return float(hidden // heads)


# Gemma3Backbone's fixed RoPE bases (its local and global layers) and layer pattern.
GEMMA3_LOCAL_BASE, GEMMA3_GLOBAL_BASE, GEMMA3_PATTERN = 10_000.0, 1_000_000.0, 6


def _gemma3_config(config: Mapping[str, Any], max_sequence_length: int) -> LlamaConfig:
    """A keras-hub Gemma3Backbone config (its text decoder; a vision encoder is left out)."""
    heads, hidden, head_dim = (
        int(config["num_query_heads"]),
        int(config["hidden_dim"]),
        int(config["head_dim"]),
    )
    needs = [
        what
        for key, wanted, what in (
            ("use_query_key_norm", True, "no query/key norms"),
            ("use_post_attention_norm", True, "no post-attention norms"),
            ("use_post_ffw_norm", True, "no post-feed-forward norms"),
            ("use_bidirectional_attention", False, "bidirectional attention"),
            ("is_embedding_model", False, "an embedding model's pooling"),
            ("local_rope_scaling_factor", 1.0, "scaled RoPE in the local layers"),
        )
        if config.get(key, wanted) != wanted
    ]
    if needs:
        raise CheckpointError(
            f"keras-hub's Gemma3Backbone with {', '.join(needs)} is not supported yet."
        )
    layers = int(config["num_layers"])
    local = window = local_base = None
    if config.get("use_sliding_window_attention"):
        window = int(config["sliding_window_size"])
        local = tuple(i % GEMMA3_PATTERN < GEMMA3_PATTERN - 1 for i in range(layers))
        local_base = GEMMA3_LOCAL_BASE
    factor = float(config.get("global_rope_scaling_factor", 1.0))
    return LlamaConfig(
        model_type="gemma3_text",
        vocabulary_size=int(config["vocabulary_size"]),
        num_layers=layers,
        hidden_dim=hidden,
        num_query_heads=heads,
        num_key_value_heads=int(config["num_key_value_heads"]),
        intermediate_dim=int(config["intermediate_dim"]),
        head_dim=head_dim,
        rope_max_wavelength=GEMMA3_GLOBAL_BASE,
        rope_scaling=None if factor == 1.0 else {"rope_type": "linear", "factor": factor},
        rms_norm_epsilon=float(config.get("layer_norm_epsilon", 1e-6)),
        tie_word_embeddings=True,
        max_sequence_length=int(max_sequence_length),
        sliding_window=window,
        qk_norm=True,
        hidden_activation="gelu_pytorch_tanh",
        sliding_window_layers=local,
        attention_logit_soft_cap=config.get("attention_logit_soft_cap"),
        final_logit_soft_cap=config.get("final_logit_soft_cap"),
        local_rope_max_wavelength=local_base,
        query_pre_attn_scalar=_query_scalar(config, heads, hidden, head_dim),
    )


def llama_config_of(
    backbone: Any, max_sequence_length: int = DEFAULT_MAX_SEQUENCE_LENGTH
) -> LlamaConfig:
    """The `LlamaConfig` of a keras-hub decoder backbone."""
    family = family_of(backbone)
    config = backbone.get_config()
    # keras-hub's Llama configs omit `tie_word_embeddings`: read the embedding layer.
    tie = getattr(backbone.token_embedding, "tie_weights", False)
    if family.model_type == "gemma":  # Gemma 1 or, with its options, Gemma 2.
        return _gemma_config(config, bool(tie), max_sequence_length)
    if family.model_type == "gemma3_text":
        return _gemma3_config(config, max_sequence_length)
    heads = int(config["num_query_heads"])
    window = None
    if family.backbone_class == "MistralBackbone":
        window = config.get("sliding_window")
    elif family.backbone_class == "QwenBackbone" and config.get("use_sliding_window_attention"):
        window = config.get("sliding_window_size")
    elif family.backbone_class == "Qwen3Backbone":
        window = config.get("sliding_window_size")
    if window is not None and int(window) >= max_sequence_length:
        window = None  # A window as long as every sequence masks nothing.
    return LlamaConfig(
        model_type=family.model_type,
        vocabulary_size=int(config["vocabulary_size"]),
        num_layers=int(config["num_layers"]),
        hidden_dim=int(config["hidden_dim"]),
        num_query_heads=heads,
        num_key_value_heads=int(config["num_key_value_heads"]),
        intermediate_dim=int(config["intermediate_dim"]),
        head_dim=config.get("head_dim") or int(config["hidden_dim"]) // heads,
        rope_max_wavelength=float(config.get("rope_max_wavelength", 10000)),
        rope_scaling=_rope_scaling(family, config),
        rms_norm_epsilon=float(config.get("layer_norm_epsilon", 1e-6)),
        tie_word_embeddings=bool(tie),
        max_sequence_length=int(max_sequence_length),
        attention_bias=family.attention_bias,
        sliding_window=None if window is None else int(window),
        qk_norm=family.qk_norm,
    )


def _np(variable: Any) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(variable), np.float32)


def _hub_blocks(backbone: Any):
    for block in backbone.transformer_layers:
        yield block, block._self_attention_layer


def _llama_block_weights(block: Any, config: LlamaConfig) -> dict[str, np.ndarray]:
    """One Llama-family keras-hub block's weights under Hugging Face's names (no prefix)."""
    d, attention = config.hidden_dim, block._self_attention_layer
    w: dict[str, np.ndarray] = {}
    for role, name in (("q", "_query_dense"), ("k", "_key_dense"), ("v", "_value_dense")):
        dense = getattr(attention, name)
        w[f"self_attn.{role}_proj.weight"] = _np(dense.kernel).reshape(d, -1).T
        if config.attention_bias:
            w[f"self_attn.{role}_proj.bias"] = _np(dense.bias).reshape(-1)
    w["self_attn.o_proj.weight"] = _np(attention._output_dense.kernel).reshape(-1, d).T
    if config.qk_norm:
        w["self_attn.q_norm.weight"] = _np(attention._query_dense_layer_norm.scale)
        w["self_attn.k_norm.weight"] = _np(attention._key_dense_layer_norm.scale)
    w["input_layernorm.weight"] = _np(block._self_attention_layernorm.scale)
    w["post_attention_layernorm.weight"] = _np(block._feedforward_layernorm.scale)
    w["mlp.gate_proj.weight"] = _np(block._feedforward_gate_dense.kernel).T
    w["mlp.up_proj.weight"] = _np(block._feedforward_intermediate_dense.kernel).T
    w["mlp.down_proj.weight"] = _np(block._feedforward_output_dense.kernel).T
    return w


def _gemma_block_weights(block: Any, config: LlamaConfig) -> dict[str, np.ndarray]:
    """One keras-hub Gemma block's weights under Hugging Face's names (norms stay offsets)."""
    d, attention = config.hidden_dim, block.attention
    w: dict[str, np.ndarray] = {}
    for role, dense in (
        ("q", attention.query_dense),
        ("k", attention.key_dense),
        ("v", attention.value_dense),
    ):
        # Head-first [heads, d, p] -> [heads * p, d].
        w[f"self_attn.{role}_proj.weight"] = _np(dense.kernel).transpose(0, 2, 1).reshape(-1, d)
    w["self_attn.o_proj.weight"] = _np(attention.output_dense.kernel).reshape(-1, d).T
    if config.qk_norm:  # Gemma 3's (offsets, as every Gemma norm).
        w["self_attn.q_norm.weight"] = _np(attention.query_norm.scale)
        w["self_attn.k_norm.weight"] = _np(attention.key_norm.scale)
    w["input_layernorm.weight"] = _np(block.pre_attention_norm.scale)
    if config.post_norms:  # Gemma 2's names: post_attention_layernorm follows attention.
        w["post_attention_layernorm.weight"] = _np(block.post_attention_norm.scale)
        w["pre_feedforward_layernorm.weight"] = _np(block.pre_ffw_norm.scale)
        w["post_feedforward_layernorm.weight"] = _np(block.post_ffw_norm.scale)
    else:
        w["post_attention_layernorm.weight"] = _np(block.pre_ffw_norm.scale)
    w["mlp.gate_proj.weight"] = _np(block.gating_ffw.kernel).T
    w["mlp.up_proj.weight"] = _np(block.gating_ffw_2.kernel).T
    w["mlp.down_proj.weight"] = _np(block.ffw_linear.kernel).T
    return w


def checkpoint_from_hub(
    backbone: Any, max_sequence_length: int = DEFAULT_MAX_SEQUENCE_LENGTH
) -> LlamaCheckpoint:
    """A keras-hub decoder backbone's weights as a `LlamaCheckpoint` (Hugging Face names)."""
    config = llama_config_of(backbone, max_sequence_length)
    read = _gemma_block_weights if config.model_type in GEMMA_TYPES else _llama_block_weights
    w: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": _np(backbone.token_embedding.embeddings)
    }
    for i, block in enumerate(backbone.transformer_layers):
        w.update({f"model.layers.{i}.{name}": v for name, v in read(block, config).items()})
    w["model.norm.weight"] = _np(backbone.layer_norm.scale)
    if not config.tie_word_embeddings:
        w["lm_head.weight"] = _np(backbone.token_embedding.reverse_embeddings).T
    checkpoint = LlamaCheckpoint(
        config,
        {name: np.ascontiguousarray(value) for name, value in w.items()},
        source=f"keras-hub {type(backbone).__name__}",
    )
    checkpoint.check()
    return checkpoint


def hub_backbone_from_checkpoint(checkpoint: LlamaCheckpoint, backbone_class: str) -> Any:
    """A keras-hub decoder backbone of `backbone_class` holding `checkpoint`'s weights."""
    keras_hub = require_keras_hub()
    family = family_of_class(backbone_class)
    config = checkpoint.config
    if config.layer_heads is not None:
        raise CheckpointError(
            f"keras-hub's {backbone_class} has one head count for every layer; this model's "
            "layers differ in heads: write a GGUF file or .keras instead."
        )
    if (config.attention_bias, config.qk_norm) != (family.attention_bias, family.qk_norm):
        raise CheckpointError(
            f"keras-hub's {backbone_class} has attention_bias={family.attention_bias} and "
            f"qk_norm={family.qk_norm}; the model has {config.attention_bias} and {config.qk_norm}."
        )
    if family.model_type in GEMMA_TYPES:
        return _gemma_backbone(checkpoint, backbone_class)
    d, h = config.hidden_dim, config.num_query_heads
    kwargs: dict[str, Any] = {
        "vocabulary_size": config.vocabulary_size,
        "num_layers": config.num_layers,
        "num_query_heads": h,
        "num_key_value_heads": config.num_key_value_heads,
        "hidden_dim": d,
        "intermediate_dim": config.intermediate_dim,
        "rope_max_wavelength": config.rope_max_wavelength,
        "layer_norm_epsilon": config.rms_norm_epsilon,
    }
    scaling = config.rope_scaling
    # These backbones have no head_dim argument: theirs is width / heads.
    if backbone_class in ("LlamaBackbone", "Llama3Backbone", "QwenBackbone") and (
        config.head_dim * h != d
    ):
        raise CheckpointError(
            f"keras-hub's {backbone_class} needs head_dim = width / heads ({d} / {h}); this "
            f"model's heads are of {config.head_dim} (MistralBackbone and Qwen3Backbone take "
            "their own)."
        )
    if backbone_class in ("LlamaBackbone", "Llama3Backbone"):
        if config.sliding_window is not None:
            raise CheckpointError(
                f"keras-hub's {backbone_class} has no sliding window; the model attends within "
                f"{config.sliding_window} positions (MistralBackbone or QwenBackbone have one)."
            )
        # Untied, always: keras-hub's Llama configs do not record tying, so a tied preset
        # reloads untied and fails; an output matrix equal to the embedding is the same model.
        kwargs["tie_word_embeddings"] = False
        if scaling is not None:
            if scaling["rope_type"] != "llama3":
                raise CheckpointError(f"keras-hub's {backbone_class} takes no {scaling} scaling.")
            kwargs.update(
                rope_frequency_adjustment_factor=scaling["factor"],
                rope_low_freq_factor=scaling["low_freq_factor"],
                rope_high_freq_factor=scaling["high_freq_factor"],
                rope_pretraining_sequence_length=scaling["original_max_position_embeddings"],
            )
    else:
        if scaling is not None and scaling["rope_type"] != "linear":
            raise CheckpointError(f"keras-hub's {backbone_class} takes linear RoPE scaling only.")
        kwargs["rope_scaling_factor"] = 1.0 if scaling is None else scaling["factor"]
        if backbone_class == "MistralBackbone":
            if config.tie_word_embeddings:
                raise CheckpointError("keras-hub's MistralBackbone has untied embeddings only.")
            kwargs["sliding_window"] = config.sliding_window
            kwargs["head_dim"] = config.head_dim
        elif backbone_class == "QwenBackbone":
            kwargs["tie_word_embeddings"] = config.tie_word_embeddings
            kwargs["use_sliding_window_attention"] = config.sliding_window is not None
            if config.sliding_window is not None:
                kwargs["sliding_window_size"] = config.sliding_window
        else:  # Qwen3: keras-hub applies its window (32768 by default) on some backends.
            kwargs["tie_word_embeddings"] = config.tie_word_embeddings
            kwargs["head_dim"] = config.head_dim
            kwargs["sliding_window_size"] = config.sliding_window or max(
                config.max_sequence_length, 32768
            )
    backbone = getattr(keras_hub.models, backbone_class)(**kwargs)
    w = checkpoint.weights
    backbone.token_embedding.embeddings.assign(w["model.embed_tokens.weight"])
    g = config.num_key_value_heads
    for i, (block, attention) in enumerate(_hub_blocks(backbone)):
        prefix = f"model.layers.{i}."
        for role, name, heads in (
            ("q", "_query_dense", h),
            ("k", "_key_dense", g),
            ("v", "_value_dense", g),
        ):
            dense = getattr(attention, name)
            matrix = w[prefix + f"self_attn.{role}_proj.weight"]
            dense.kernel.assign(matrix.T.reshape(d, heads, -1))
            if config.attention_bias:
                dense.bias.assign(w[prefix + f"self_attn.{role}_proj.bias"].reshape(heads, -1))
        attention._output_dense.kernel.assign(
            w[prefix + "self_attn.o_proj.weight"].T.reshape(h, -1, d)
        )
        if config.qk_norm:
            attention._query_dense_layer_norm.scale.assign(w[prefix + "self_attn.q_norm.weight"])
            attention._key_dense_layer_norm.scale.assign(w[prefix + "self_attn.k_norm.weight"])
        block._self_attention_layernorm.scale.assign(w[prefix + "input_layernorm.weight"])
        block._feedforward_layernorm.scale.assign(w[prefix + "post_attention_layernorm.weight"])
        block._feedforward_gate_dense.kernel.assign(w[prefix + "mlp.gate_proj.weight"].T)
        block._feedforward_intermediate_dense.kernel.assign(w[prefix + "mlp.up_proj.weight"].T)
        block._feedforward_output_dense.kernel.assign(w[prefix + "mlp.down_proj.weight"].T)
    backbone.layer_norm.scale.assign(w["model.norm.weight"])
    if not backbone.token_embedding.tie_weights:
        head = w["model.embed_tokens.weight"] if config.tie_word_embeddings else w["lm_head.weight"]
        backbone.token_embedding.reverse_embeddings.assign(head.T)
    return backbone


def _gemma2_options(config: LlamaConfig) -> dict[str, Any]:
    """GemmaBackbone's Gemma 2 arguments of a checkpoint's config (none for Gemma 1)."""
    if config.model_type != "gemma2":
        return {}
    local = config.sliding_window_layers
    if local is not None and local != tuple(i % 2 == 0 for i in range(config.num_layers)):
        raise CheckpointError(
            "keras-hub's GemmaBackbone makes every even layer local; the model's local layers "
            f"are {[i for i, flag in enumerate(local) if flag]}."
        )
    return {
        "use_post_attention_norm": True,
        "use_post_ffw_norm": True,
        "attention_logit_soft_cap": config.attention_logit_soft_cap,
        "final_logit_soft_cap": config.final_logit_soft_cap,
        "use_sliding_window_attention": local is not None,
        "sliding_window_size": config.sliding_window or 4096,
    }


def _gemma3_options(config: LlamaConfig) -> dict[str, Any]:
    """Gemma3Backbone's arguments of a Gemma 3 checkpoint's config (text only)."""
    local = config.sliding_window_layers
    pattern = tuple(i % GEMMA3_PATTERN < GEMMA3_PATTERN - 1 for i in range(config.num_layers))
    scaling = config.rope_scaling
    why = None
    if config.rope_max_wavelength != GEMMA3_GLOBAL_BASE:
        why = f"a global RoPE base of {config.rope_max_wavelength:g} (it has 1,000,000)"
    elif scaling is not None and scaling.get("rope_type") != "linear":
        why = f"RoPE scaling {scaling} (it has linear scaling only)"
    elif local is not None and (
        local != pattern or config.local_rope_max_wavelength != GEMMA3_LOCAL_BASE
    ):
        why = "local layers other than five of every six with RoPE base 10,000"
    if why:
        raise CheckpointError(f"keras-hub's Gemma3Backbone cannot hold {why}.")
    return {
        "image_size": 896,  # Gemma 3's; no vision encoder is built.
        "intermediate_dim": config.intermediate_dim,
        "use_query_key_norm": True,
        "use_post_attention_norm": True,
        "use_post_ffw_norm": True,
        "attention_logit_soft_cap": config.attention_logit_soft_cap,
        "final_logit_soft_cap": config.final_logit_soft_cap,
        "use_sliding_window_attention": local is not None,
        "sliding_window_size": config.sliding_window or 1024,
        "global_rope_scaling_factor": 1.0 if scaling is None else float(scaling["factor"]),
    }


def _gemma_backbone(checkpoint: LlamaCheckpoint, backbone_class: str) -> Any:
    """A keras-hub `GemmaBackbone` (Gemma 1 or 2) or `Gemma3Backbone` (text only) holding a
    Gemma checkpoint's weights."""
    keras_hub = require_keras_hub()
    config = checkpoint.config
    gemma3 = config.model_type == "gemma3_text"
    if gemma3 != (backbone_class == "Gemma3Backbone"):
        raise CheckpointError(
            f"keras-hub's {backbone_class} does not hold model_type {config.model_type!r} "
            f"({'Gemma3Backbone' if gemma3 else 'GemmaBackbone'} does)."
        )
    if not config.tie_word_embeddings:
        raise CheckpointError(f"keras-hub's {backbone_class} cannot hold untied output embeddings.")
    if not gemma3 and (config.rope_max_wavelength != 10000.0 or config.rope_scaling is not None):
        raise CheckpointError(
            f"keras-hub's GemmaBackbone (RoPE base 10000) cannot hold RoPE base "
            f"{config.rope_max_wavelength:g} with scaling {config.rope_scaling}."
        )
    h, g = config.num_query_heads, config.num_key_value_heads
    options = (
        _gemma3_options(config)
        if gemma3
        else {"intermediate_dim": 2 * config.intermediate_dim, **_gemma2_options(config)}
    )
    scalar = config.query_pre_attn_scalar
    if scalar is not None:  # keras-hub's one alternative to the head size: width / heads.
        if scalar != config.hidden_dim // h:
            raise CheckpointError(
                f"keras-hub's {backbone_class} scales queries by the head size or by width / "
                f"heads = {config.hidden_dim // h}; the model's query_pre_attn_scalar is "
                f"{scalar:g}."
            )
        options["query_head_dim_normalize"] = False
    backbone = getattr(keras_hub.models, backbone_class)(
        vocabulary_size=config.vocabulary_size,
        num_layers=config.num_layers,
        num_query_heads=h,
        num_key_value_heads=g,
        hidden_dim=config.hidden_dim,
        head_dim=config.head_dim,
        layer_norm_epsilon=config.rms_norm_epsilon,
        **options,
    )
    w = checkpoint.weights
    backbone.token_embedding.embeddings.assign(w["model.embed_tokens.weight"])
    for i, block in enumerate(backbone.transformer_layers):
        prefix, attention = f"model.layers.{i}.", block.attention
        for role, dense, heads in (
            ("q", attention.query_dense, h),
            ("k", attention.key_dense, g),
            ("v", attention.value_dense, g),
        ):
            matrix = w[prefix + f"self_attn.{role}_proj.weight"]  # [heads * p, d]
            dense.kernel.assign(matrix.reshape(heads, -1, config.hidden_dim).transpose(0, 2, 1))
        output = w[prefix + "self_attn.o_proj.weight"]  # [d, h p]
        attention.output_dense.kernel.assign(output.T.reshape(h, -1, config.hidden_dim))
        if config.qk_norm:
            attention.query_norm.scale.assign(w[prefix + "self_attn.q_norm.weight"])
            attention.key_norm.scale.assign(w[prefix + "self_attn.k_norm.weight"])
        block.pre_attention_norm.scale.assign(w[prefix + "input_layernorm.weight"])
        if config.post_norms:
            block.post_attention_norm.scale.assign(w[prefix + "post_attention_layernorm.weight"])
            block.pre_ffw_norm.scale.assign(w[prefix + "pre_feedforward_layernorm.weight"])
            block.post_ffw_norm.scale.assign(w[prefix + "post_feedforward_layernorm.weight"])
        else:
            block.pre_ffw_norm.scale.assign(w[prefix + "post_attention_layernorm.weight"])
        block.gating_ffw.kernel.assign(w[prefix + "mlp.gate_proj.weight"].T)
        block.gating_ffw_2.kernel.assign(w[prefix + "mlp.up_proj.weight"].T)
        block.ffw_linear.kernel.assign(w[prefix + "mlp.down_proj.weight"].T)
    backbone.layer_norm.scale.assign(w["model.norm.weight"])
    return backbone


def _split(model: Any) -> tuple[Any, Any]:
    """(backbone, tokenizer or None) of a keras-hub backbone or causal LM."""
    backbone = getattr(model, "backbone", model)
    preprocessor = getattr(model, "preprocessor", None)
    tokenizer = getattr(preprocessor, "tokenizer", None)
    return backbone, tokenizer


def import_hub_decoder(
    model: Any, max_sequence_length: int = DEFAULT_MAX_SEQUENCE_LENGTH, dtype: Any = None
) -> DecoderLM:
    """A `DecoderLM` computing what a keras-hub decoder (backbone or causal LM) computes.

    A causal LM's keras-hub tokenizer is attached, so `generate` takes text.

    Example:

    >>> lm = import_hub_decoder(keras_hub.models.Llama3CausalLM.from_preset(DIR))
    """
    backbone, tokenizer = _split(model)
    checkpoint = checkpoint_from_hub(backbone, max_sequence_length)
    return decoder_from_checkpoint(checkpoint, tokenizer=tokenizer, dtype=dtype)


def load_hub_decoder(
    preset: str | os.PathLike, max_sequence_length: int = DEFAULT_MAX_SEQUENCE_LENGTH
) -> DecoderLM:
    """A keras-hub decoder preset (a local directory or, online, a name) as a `DecoderLM`.

    A preset written with a causal LM task keeps its tokenizer; a bare
    backbone preset loads without one.
    """
    keras_hub = require_keras_hub()
    preset = str(preset)
    directory = pathlib.Path(preset).expanduser()
    if directory.is_dir() and not (directory / "config.json").is_file():
        raise CheckpointError(f"{preset} is not a keras-hub preset (it has no config.json).")
    if (directory / "task.json").is_file():
        model = keras_hub.models.CausalLM.from_preset(preset)
    else:
        model = keras_hub.models.Backbone.from_preset(preset)
    family_of(getattr(model, "backbone", model))
    return import_hub_decoder(model, max_sequence_length)


def save_hub_decoder(
    lm: DecoderLM, directory: str | os.PathLike, backbone_class: str = "Llama3Backbone"
) -> Any:
    """Writes `lm` as a keras-hub preset of `backbone_class` (`save_to_preset`); returns the backbone.

    Only models a Llama-family checkpoint can hold are written (see
    `checkpoint_from_decoder`): grouped or multi-head attention with full
    RoPE, the same heads in every layer. A model that carries keras-hub's
    tokenizer of the family (a task preset's, as `load_hub_decoder` attaches
    it) is written as that causal LM task, tokenizer and preprocessor
    included, so the preset loads as the task again (`CausalLM.from_preset`,
    `load_hub_decoder` with its tokenizer); otherwise as a bare backbone.
    """
    family = family_of_class(backbone_class)
    model_type = family.model_type
    if model_type == "gemma" and default_model_type(lm) == "gemma2":
        model_type = "gemma2"  # One keras-hub backbone holds both.
    checkpoint = checkpoint_from_decoder(lm, model_type)
    backbone = hub_backbone_from_checkpoint(checkpoint, backbone_class)
    task_class = getattr(require_keras_hub().models, family.causal_lm_class)
    preprocessor_class = task_class.preprocessor_cls
    if isinstance(getattr(lm, "tokenizer", None), preprocessor_class.tokenizer_cls):
        preprocessor = preprocessor_class(tokenizer=lm.tokenizer)
        task_class(backbone=backbone, preprocessor=preprocessor).save_to_preset(str(directory))
    else:
        backbone.save_to_preset(str(directory))
    return backbone
