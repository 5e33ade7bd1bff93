"""Llama-family checkpoints <-> the Keras 3 `DecoderLM`'s weights (one mapping, every format).

`decoder_from_checkpoint` builds a `DecoderLM` from a framework-neutral
`headsize_tf.core.llama_checkpoint.LlamaCheckpoint` (GGUF files, Hugging Face
directories and keras-hub presets all read into one), and
`checkpoint_from_decoder` writes one back while the model is still
expressible as a Llama-family checkpoint (multi-head or grouped K/V with
full RoPE; a latent or collaborative model is `.keras` or SavedModel only).

Weight layout: Hugging Face's `[out, in]` matrices become Keras kernels
`[in, out]`, reshaped per head: query `[d, h, p]`, key / value `[d, G, p]`
(grouped) or `[d, h, p]` (multi-head), output `[h, p, d]`. A grouped value
bias `[G, p]` becomes the layer's per-query-head `[h, p]`. Gemma's RMSNorm
weights are offsets (`LlamaConfig.norm_offset`), which the model's norms
keep as they are (`norm_scale_offset=1`: they scale by `1 + w`); its
embeddings are scaled by `LlamaConfig.embedding_scale`.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.llama_checkpoint import GEMMA_TYPES, LlamaCheckpoint, LlamaConfig
from headsize_tf.core.mla_layer import MlaLayer
from headsize_tf.keras3.layers import GroupedAttention
from headsize_tf.keras3.modeling.decoder_lm import DecoderLM


def decoder_config(config: LlamaConfig) -> dict[str, Any]:
    """`DecoderLM` arguments computing the function of a Llama-family `config`."""
    h, g, p = config.num_query_heads, config.num_key_value_heads, config.head_dim
    if config.layer_heads is not None:  # Pruned layer by layer: per-layer lists.
        queries = [q for q, _ in config.layer_heads]
        groups = [kv for _, kv in config.layer_heads]
        attention = {"kind": "fixed_head", "num_heads": queries, "head_size": p}
        if groups != queries:
            attention.update(kind="grouped", num_kv_heads=groups)
    elif g < h:
        attention = {"kind": "grouped", "num_heads": h, "num_kv_heads": g, "head_size": p}
    elif p * h == config.hidden_dim:
        attention = {"kind": "standard", "num_heads": h}
    else:
        attention = {"kind": "fixed_head", "num_heads": h, "head_size": p}
    attention["rope_max_wavelength"] = config.rope_max_wavelength
    if config.rope_scaling is not None:
        attention["rope_scaling"] = dict(config.rope_scaling)
    return {
        "vocabulary_size": config.vocabulary_size,
        "num_layers": config.num_layers,
        "hidden_dim": config.hidden_dim,
        "attention": attention,
        "intermediate_dim": config.intermediate_dim,
        "max_sequence_length": config.max_sequence_length,
        "layer_norm_epsilon": config.rms_norm_epsilon,
        "norm_scale_offset": config.norm_offset,
        "activation": "silu" if config.hidden_activation == "silu" else "gelu_approximate",
        "tie_word_embeddings": config.tie_word_embeddings,
        "attention_bias": config.attention_bias,
        "query_key_norm": config.qk_norm,
        "sliding_window": config.sliding_window,
        "embedding_scale": config.embedding_scale,
        "sliding_window_layers": None
        if config.sliding_window_layers is None
        else list(config.sliding_window_layers),
        "post_norms": config.post_norms,
        "attention_logit_soft_cap": config.attention_logit_soft_cap,
        "final_logit_soft_cap": config.final_logit_soft_cap,
        "local_rope_max_wavelength": config.local_rope_max_wavelength,
        "query_scale": config.query_scale,
    }


def _per_head(matrix: np.ndarray, heads: int) -> np.ndarray:
    """HF `[heads * p, d]` -> Keras `[d, heads, p]`."""
    return np.ascontiguousarray(matrix.T.reshape(matrix.shape[1], heads, -1))


def decoder_from_checkpoint(
    checkpoint: LlamaCheckpoint, tokenizer: Any = None, dtype: Any = None
) -> DecoderLM:
    """A `DecoderLM` holding `checkpoint`'s weights.

    Args:
      checkpoint: A Llama-family checkpoint (`read_gguf_llama`,
        `read_hf_llama_dir`, the keras-hub bridge).
      tokenizer: The tokenizer to attach (`generate` on text), or None.
      dtype: The model's dtype policy (None: Keras' default).

    Example:

    >>> lm = decoder_from_checkpoint(read_hf_llama_dir("SmolLM2-135M"))
    """
    checkpoint.check()
    config = checkpoint.config
    lm = DecoderLM(**decoder_config(config), tokenizer=tokenizer, dtype=dtype)
    w = checkpoint.weights
    _assign_shared(lm, config, w)
    for i, block in enumerate(lm.transformer_layers):
        h, g = config.heads(i)
        prefix = f"model.layers.{i}."
        attention = block.attention_layer
        attention._query_dense.kernel.assign(_per_head(w[prefix + "self_attn.q_proj.weight"], h))
        attention._key_dense.kernel.assign(_per_head(w[prefix + "self_attn.k_proj.weight"], g))
        attention._value_dense.kernel.assign(_per_head(w[prefix + "self_attn.v_proj.weight"], g))
        output = w[prefix + "self_attn.o_proj.weight"]  # [d, h p]
        attention._output_dense.kernel.assign(output.T.reshape(h, -1, output.shape[0]))
        if config.attention_bias:
            attention._query_dense.bias.assign(w[prefix + "self_attn.q_proj.bias"].reshape(h, -1))
            attention._key_dense.bias.assign(w[prefix + "self_attn.k_proj.bias"].reshape(g, -1))
            value_bias = w[prefix + "self_attn.v_proj.bias"].reshape(g, -1)
            if isinstance(attention, GroupedAttention):  # Kept per query head.
                attention.value_bias.assign(np.repeat(value_bias, h // g, axis=0))
            else:
                attention._value_dense.bias.assign(value_bias)
        if config.qk_norm:
            attention.query_norm.assign(w[prefix + "self_attn.q_norm.weight"])
            attention.key_norm.assign(w[prefix + "self_attn.k_norm.weight"])
    return lm


def _assign_shared(lm: DecoderLM, config: LlamaConfig, w: dict[str, np.ndarray]) -> None:
    """Sets `lm`'s weights outside attention from Hugging Face-named `w`."""
    lm.token_embedding.embeddings.assign(w["model.embed_tokens.weight"])
    for i, block in enumerate(lm.transformer_layers):
        prefix = f"model.layers.{i}."
        for norm, name in _block_norms(block, config):
            norm.scale.assign(w[prefix + name])
        block._feedforward_gate_dense.kernel.assign(w[prefix + "mlp.gate_proj.weight"].T)
        block._feedforward_intermediate_dense.kernel.assign(w[prefix + "mlp.up_proj.weight"].T)
        block._feedforward_output_dense.kernel.assign(w[prefix + "mlp.down_proj.weight"].T)
    lm.final_norm.scale.assign(w["model.norm.weight"])
    if lm.lm_head is not None:
        lm.lm_head.kernel.assign(w["lm_head.weight"].T)


def decoder_from_mla(
    checkpoint: LlamaCheckpoint, layers: list[MlaLayer], tokenizer: Any = None, dtype: Any = None
) -> DecoderLM:
    """A latent-attention `DecoderLM` of a Llama checkpoint outside attention and `layers`
    (`headsize_tf.data.gguf_mla.read_gguf_mla`: llama.cpp's "deepseek2" files).

    Every layer has one rotary key turning at frequencies `layers[0].frequencies` of a grid
    of `layers[0].grid_size` (`rope_grid_size`), and the softmax scale 1 / sqrt(head size).
    """
    config = checkpoint.config
    first = layers[0]
    heads, rank, nope = first.key_up.shape
    arguments = decoder_config(config)
    arguments["attention"] = {
        "kind": "latent",
        "num_heads": heads,
        "kv_latent_dim": rank,
        "head_size": first.query.shape[2],
        "value_dim": first.value_up.shape[2],
        "num_rope_heads": 1,
        "rope_grid_size": first.grid_size,
        "rope_frequencies": list(first.frequencies),
        "rope_max_wavelength": config.rope_max_wavelength,
    }
    lm = DecoderLM(**arguments, tokenizer=tokenizer, dtype=dtype)
    _assign_shared(lm, config, checkpoint.weights)
    for attention, layer in zip(lm.attention_layers, layers, strict=True):
        attention._query_dense.kernel.assign(layer.query)
        attention._latent_dense.kernel.assign(layer.latent)
        attention._rope_key_dense.kernel.assign(layer.rope_key[:, None])
        attention._key_up_dense.kernel.assign(layer.key_up)
        attention._value_up_dense.kernel.assign(layer.value_up)
        attention._output_dense.kernel.assign(layer.output)
    return lm


def _block_norms(block: Any, config: LlamaConfig) -> list[tuple[Any, str]]:
    """A block's RMSNorms and their Hugging Face names (Gemma 2's four, or Llama's two)."""
    if config.post_norms:
        return [
            (block._self_attention_layer_norm, "input_layernorm.weight"),
            (block._post_norms[0], "post_attention_layernorm.weight"),
            (block._feedforward_layer_norm, "pre_feedforward_layernorm.weight"),
            (block._post_norms[1], "post_feedforward_layernorm.weight"),
        ]
    return [
        (block._self_attention_layer_norm, "input_layernorm.weight"),
        (block._feedforward_layer_norm, "post_attention_layernorm.weight"),
    ]


def _np(variable: Any) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(variable), np.float32)


def default_model_type(lm: DecoderLM) -> str:
    """The Hugging Face `model_type` `lm`'s computation implies: a Gemma's by its options
    (an embedding scale; post-norms: Gemma 2; query/key norms too: Gemma 3), else "qwen3"
    with query/key norms, "qwen2" with attention biases, else "llama"."""
    if lm.embedding_scale is None:
        if lm.query_key_norm:
            return "qwen3"
        return "qwen2" if lm.attention_bias else "llama"
    if lm.post_norms:
        return "gemma3_text" if lm.query_key_norm else "gemma2"
    return "gemma"


def _query_pre_attn_scalar(query_scale: float | None) -> float | None:
    """Hugging Face's `query_pre_attn_scalar` of a softmax scale (an int where it rounds to one)."""
    if query_scale is None:
        return None
    scalar = 1.0 / float(query_scale) ** 2
    return float(round(scalar)) if np.isclose(scalar, round(scalar), rtol=1e-6) else scalar


def _not_expressible(why: str) -> CheckpointError:
    return CheckpointError(
        f"This DecoderLM is not a Llama-family checkpoint any more ({why}); save it as .keras "
        "(model.save) or export a SavedModel instead."
    )


def checkpoint_from_decoder(lm: DecoderLM, model_type: str = "llama") -> LlamaCheckpoint:
    """The Llama-family checkpoint of `lm` (Hugging Face names and layout).

    Args:
      lm: A `DecoderLM` with multi-head or grouped attention, full RoPE and
        one head size (latent and collaborative attention have no
        Llama-family form). A pruned model's per-layer heads become
        `LlamaConfig.layer_heads` (GGUF files hold them; Hugging Face
        directories and keras-hub presets do not).
      model_type: The Hugging Face `model_type` to write ("llama",
        "mistral", "qwen2", "qwen3", "gemma", "gemma2" or "gemma3_text"; it
        must agree with the model's options: biases for qwen2, query-key norm
        for qwen3, an embedding scale of sqrt(width), norms of 1 + w and GeGLU
        for the Gemmas, post-norms for gemma2 and gemma3_text).

    Raises:
      CheckpointError: naming what the checkpoint format cannot hold.
    """
    spec = lm.attention_spec
    if spec.kind not in ("standard", "fixed_head", "grouped"):
        raise _not_expressible(f"{spec.kind} attention")
    if spec.rope_frequencies is not None:
        raise _not_expressible("partial RoPE")
    layers = lm.attention_layers
    pairs = [(layer.num_heads, getattr(layer, "num_kv_heads", layer.num_heads)) for layer in layers]
    sizes = {layer.head_size for layer in layers}
    if len(sizes) > 1:
        raise _not_expressible(f"its layers differ in head size ({sorted(sizes)})")
    config, w = _llama_parts(lm, model_type, tuple(pairs), sizes.pop())
    d = lm.hidden_dim
    for i, attention in enumerate(layers):
        gates = _np(attention.head_gates)
        if not np.all(gates == 1):
            raise _not_expressible(f"layer {i} has masked heads (gates {gates.tolist()})")
        prefix = f"model.layers.{i}."
        w[prefix + "self_attn.q_proj.weight"] = _np(attention._query_dense.kernel).reshape(d, -1).T
        w[prefix + "self_attn.k_proj.weight"] = _np(attention._key_dense.kernel).reshape(d, -1).T
        w[prefix + "self_attn.v_proj.weight"] = _np(attention._value_dense.kernel).reshape(d, -1).T
        w[prefix + "self_attn.o_proj.weight"] = _np(attention._output_dense.kernel).reshape(-1, d).T
        if lm.attention_bias:
            w[prefix + "self_attn.q_proj.bias"] = _np(attention._query_dense.bias).reshape(-1)
            w[prefix + "self_attn.k_proj.bias"] = _np(attention._key_dense.bias).reshape(-1)
            if isinstance(attention, GroupedAttention):
                h, g = pairs[i]
                per_query = _np(attention.value_bias).reshape(g, h // g, -1)
                if not np.allclose(per_query, per_query[:, :1]):
                    raise _not_expressible(f"layer {i}'s value biases differ within a group")
                w[prefix + "self_attn.v_proj.bias"] = per_query[:, 0].reshape(-1)
            else:
                w[prefix + "self_attn.v_proj.bias"] = _np(attention._value_dense.bias).reshape(-1)
        if lm.query_key_norm:
            w[prefix + "self_attn.q_norm.weight"] = _np(attention.query_norm)
            w[prefix + "self_attn.k_norm.weight"] = _np(attention.key_norm)
    checkpoint = _checkpoint(lm, config, w)
    checkpoint.check()
    return checkpoint


def _checkpoint(lm: DecoderLM, config: LlamaConfig, w: dict[str, np.ndarray]) -> LlamaCheckpoint:
    tokenizer = lm.tokenizer
    return LlamaCheckpoint(
        config,
        {name: np.ascontiguousarray(value) for name, value in w.items()},
        tokenizer_json=getattr(tokenizer, "tokenizer_json", None),
        chat_template=getattr(tokenizer, "chat_template", None),
        source="DecoderLM",
        add_bos_token=getattr(tokenizer, "add_start_token", True),
    )


def _llama_parts(
    lm: DecoderLM, model_type: str, pairs: tuple[tuple[int, int], ...], p: int
) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """`lm`'s Llama-family config (with `pairs` (query, key/value) heads per layer of size
    `p`) and its weights outside attention: embeddings, norms, feed-forward, output."""
    spec = lm.attention_spec
    tokenizer = lm.tokenizer
    wanted_scale = float(np.sqrt(lm.hidden_dim)) if model_type in GEMMA_TYPES else None
    scale = lm.embedding_scale
    if (scale is None) != (wanted_scale is None) or (
        scale is not None and not np.isclose(scale, wanted_scale)
    ):
        hint = "" if model_type in GEMMA_TYPES else "; a Gemma model is written as a Gemma one"
        raise CheckpointError(
            f"model_type {model_type!r} scales the token embeddings by {wanted_scale}; this "
            f"DecoderLM scales them by {scale}{hint}."
        )
    config = LlamaConfig(
        model_type=model_type,
        vocabulary_size=lm.vocabulary_size,
        num_layers=lm.num_layers,
        hidden_dim=lm.hidden_dim,
        num_query_heads=max(q for q, _ in pairs),
        num_key_value_heads=max(kv for _, kv in pairs),
        intermediate_dim=lm.intermediate_dim,
        head_dim=p,
        rope_max_wavelength=spec.rope_max_wavelength,
        rope_scaling=spec.rope_scaling,
        rms_norm_epsilon=lm.layer_norm_epsilon,
        tie_word_embeddings=lm.tie_word_embeddings,
        max_sequence_length=lm.max_sequence_length,
        attention_bias=lm.attention_bias,
        sliding_window=lm.sliding_window,
        qk_norm=lm.query_key_norm,
        hidden_activation="silu" if lm.activation == "silu" else "gelu_pytorch_tanh",
        sliding_window_layers=lm.sliding_window_layers,
        attention_logit_soft_cap=lm.attention_logit_soft_cap,
        final_logit_soft_cap=lm.final_logit_soft_cap,
        local_rope_max_wavelength=lm.local_rope_max_wavelength,
        query_pre_attn_scalar=_query_pre_attn_scalar(lm.query_scale),
        layer_heads=pairs,
        bos_token_id=getattr(tokenizer, "start_token_id", None),
        eos_token_id=getattr(tokenizer, "end_token_id", None),
    )
    if lm.norm_scale_offset != config.norm_offset:
        raise CheckpointError(
            f"model_type {model_type!r} stores RMSNorm scales with offset {config.norm_offset:g}; "
            f"this DecoderLM's norms have offset {lm.norm_scale_offset:g}."
        )
    if lm.local_rope_scaling is not None:
        raise _not_expressible("its local layers' RoPE is scaled")
    if lm.post_norms != config.post_norms:
        raise CheckpointError(
            f"model_type {model_type!r} {'has' if config.post_norms else 'has no'} post-norms; "
            f"this DecoderLM {'has them' if lm.post_norms else 'has none'}."
        )
    w: dict[str, np.ndarray] = {"model.embed_tokens.weight": _np(lm.token_embedding.embeddings)}
    for i, block in enumerate(lm.transformer_layers):
        prefix = f"model.layers.{i}."
        for norm, name in _block_norms(block, config):
            w[prefix + name] = _np(norm.scale)
        w[prefix + "mlp.gate_proj.weight"] = _np(block._feedforward_gate_dense.kernel).T
        w[prefix + "mlp.up_proj.weight"] = _np(block._feedforward_intermediate_dense.kernel).T
        w[prefix + "mlp.down_proj.weight"] = _np(block._feedforward_output_dense.kernel).T
    w["model.norm.weight"] = _np(lm.final_norm.scale)
    if lm.lm_head is not None:
        w["lm_head.weight"] = _np(lm.lm_head.kernel).T
    return config, w


def mla_checkpoint_from_decoder(lm: DecoderLM) -> tuple[LlamaCheckpoint, list[MlaLayer]]:
    """A latent-attention `DecoderLM`'s parts for llama.cpp's "deepseek2" GGUF file.

    Returns the Llama checkpoint of everything outside attention (its
    attention weights left out: `write_gguf_mla` reads only the rest) and
    each layer's `MlaLayer` (`headsize_tf.data.gguf_mla_writer`).

    Raises:
      CheckpointError: the model is not a latent one with one rotary key per
        layer, has masked heads, biases or quantized weights, in one line.
    """
    spec = lm.attention_spec
    if spec.kind != "latent" or not spec.rope_max_wavelength:
        raise CheckpointError(
            f"llama.cpp's deepseek2 runs latent attention with rotary positions; this DecoderLM "
            f"has {spec.kind} attention{'' if spec.rope_max_wavelength else ' without RoPE'}."
        )
    layers = lm.attention_layers
    heads = tuple((a.num_heads, a.num_heads) for a in layers)
    config, shared = _llama_parts(lm, "llama", heads, layers[0].head_size)
    mla = []
    for i, (block, attention) in enumerate(zip(lm.transformer_layers, layers, strict=True)):
        gates = _np(attention.head_gates)
        problem = (
            f"{attention.num_rope_heads} rotary keys (MHA2MLA's partial RoPE: one per original "
            "key/value head; convert with --rope-strategy rotated_high)"
            if attention.num_rope_heads != 1
            else "masked heads"
            if not np.all(gates == 1)
            else "attention biases"
            if attention._use_bias
            else "query/key norms"
            if attention.key_norm is not None
            else "quantized weights"
            if attention._query_dense.quantization_mode is not None
            else None
        )
        if problem:
            raise CheckpointError(
                f"llama.cpp's deepseek2 computes one rotary key per layer, without masks, "
                f"biases, query/key norms or Keras quantization; layer {i} has {problem}."
            )
        mla.append(
            MlaLayer(
                query=_np(attention._query_dense.kernel),
                latent=_np(attention._latent_dense.kernel),
                rope_key=_np(attention._rope_key_dense.kernel)[:, 0],
                key_up=_np(attention._key_up_dense.kernel),
                value_up=_np(attention._value_up_dense.kernel),
                output=_np(attention._output_dense.kernel),
                frequencies=tuple(int(f) for f in attention.rope_sets[0]),
                grid_size=attention._rope_grid(),
                query_scale=float(attention._inverse_sqrt_key_dim),
                norm_scale=_np(block._self_attention_layer_norm.scale) + lm.norm_scale_offset,
            )
        )
    return _checkpoint(lm, config, shared), mla
