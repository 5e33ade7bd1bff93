"""Reading a latent-attention (MLA) GGUF file ("deepseek2") back as the library's layers.

`read_gguf_mla` is `write_gguf_mla`'s inverse
(`headsize_tf.data.gguf_mla_writer`): a dense "deepseek2" file whose latent
RMSNorm works in its linear range, as the writer makes it, becomes the Llama
checkpoint of everything outside attention and one `MlaLayer` per layer:

* the latent: `attn_kv_a_mqa`'s first `kv_lora_rank` rows times
  `attn_kv_a_norm / sqrt(epsilon)` (the norm's fixed scale there);
* the rotary key: the other rows, llama.cpp's adjacent pairs back to the
  library's half-split order, pair i at `freq_base^(-2 i / n_rot)` (frequency
  i of a grid of `n_rot` dimensions);
* the query, `attn_k_b`, `attn_v_b` and `attn_output` as they are (the
  query's rotary part back to half-split).

DeepSeek-V2's own files (MoE layers, a low-rank query, a latent norm that
normalises, YaRN) are not the library's `DecoderLM` and are refused in one
line, as is a latent whose norm the weights can push out of its linear range.
Needs the `gguf` package.

Example:

>>> checkpoint, layers = read_gguf_mla("smollm2-mla.gguf")
>>> lm = decoder_from_mla(checkpoint, layers)  # headsize_tf.keras3.modeling.llama_weights
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.extras import require
from headsize_tf.core.llama_checkpoint import LlamaCheckpoint, LlamaConfig, weight_shapes
from headsize_tf.core.mla_layer import MlaLayer
from headsize_tf.data.gguf_llama import (
    GLOBAL_TENSORS,
    LAYER_TENSORS,
    _add_bos_token,
    _Fields,
    _open_gguf,
    _tokenizer_json,
)
from headsize_tf.data.gguf_mla_writer import ARCHITECTURE

# How far below the norm's epsilon a latent's mean square must stay, at most, to be read as
# linear (the writer keeps it below 1e-8; at 1e-6 the norm moves a latent by 5e-7 at most).
LINEAR_RANGE = 1e-6
_ATTENTION = ("attn_q", "attn_kv_a_mqa", "attn_kv_a_norm", "attn_k_b", "attn_v_b", "attn_output")


def gguf_architecture(path: str | os.PathLike) -> str | None:
    """A GGUF file's `general.architecture`, or None if it is not a readable GGUF file."""
    gguf = require("gguf", purpose="reading GGUF files")
    try:
        reader, _ = _open_gguf(gguf, pathlib.Path(path))
    except CheckpointError:
        return None
    return _Fields(reader).get("general.architecture")


def read_gguf_mla(path: str | os.PathLike) -> tuple[LlamaCheckpoint, list[MlaLayer]]:
    """Reads a dense "deepseek2" GGUF file with a linear latent norm (`write_gguf_mla`'s).

    Returns:
      (the checkpoint outside attention: config, embeddings, norms,
      feed-forward, output and tokenizer; each layer's `MlaLayer`).

    Raises:
      CheckpointError: the file is not GGUF, not "deepseek2", or a DeepSeek
        model the library's `DecoderLM` does not compute, in one line.
    """
    gguf = require("gguf", purpose="reading GGUF files")
    path = pathlib.Path(path)
    reader, fields = _open_gguf(gguf, path)
    architecture = fields.get("general.architecture")
    if architecture != ARCHITECTURE:
        raise CheckpointError(
            f"{path} is a GGUF {architecture!r} file; read_gguf_mla reads 'deepseek2' ones."
        )
    tensors = {tensor.name: tensor for tensor in reader.tensors}

    def meta(key: str, default: Any = None) -> Any:
        value = fields.get(f"{ARCHITECTURE}.{key}", default)
        if value is None:
            raise CheckpointError(f"{path} lacks GGUF metadata '{ARCHITECTURE}.{key}'.")
        return value

    layers = int(meta("block_count"))
    unsupported = [
        (int(meta("leading_dense_block_count", 0)) < layers, "mixture-of-experts layers"),
        (int(meta("attention.q_lora_rank", 0)) > 0, "a low-rank query"),
        (f"{ARCHITECTURE}.rope.scaling.type" in fields, "scaled RoPE"),
        (float(meta("rope.scaling.yarn_log_multiplier", 0.0)) != 0, "YaRN"),
        (f"{ARCHITECTURE}.attention.key_length_mla" not in fields, "no absorbed MLA"),
    ]
    found = [why for bad, why in unsupported if bad]
    if found:
        raise CheckpointError(
            f"{path} has {', '.join(found)}; the library reads dense deepseek2 files with one "
            "query projection and unscaled RoPE (what write_gguf_mla writes)."
        )
    eps = float(meta("attention.layer_norm_rms_epsilon"))
    heads, rank = int(meta("attention.head_count")), int(meta("attention.kv_lora_rank"))
    rope_dims, key_length = int(meta("rope.dimension_count")), int(meta("attention.key_length_mla"))
    config = LlamaConfig(
        model_type="llama",
        vocabulary_size=int(tensors["token_embd.weight"].shape[-1]),
        num_layers=layers,
        hidden_dim=int(meta("embedding_length")),
        num_query_heads=heads,
        num_key_value_heads=heads,
        intermediate_dim=int(meta("feed_forward_length")),
        head_dim=key_length,
        rope_max_wavelength=float(meta("rope.freq_base")),
        rms_norm_epsilon=eps,
        tie_word_embeddings="output.weight" not in tensors,
        max_sequence_length=int(meta("context_length")),
        bos_token_id=fields.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=fields.get("tokenizer.ggml.eos_token_id"),
    )
    arrays = {name: _float32(gguf, tensor, path) for name, tensor in tensors.items()}
    checkpoint = LlamaCheckpoint(
        config=config,
        weights=_shared_weights(arrays, config, path),
        tokenizer_json=_tokenizer_json(fields, path),
        chat_template=fields.get("tokenizer.chat_template"),
        source=f"gguf:{path}",
        add_bos_token=_add_bos_token(fields),
    )
    mla = [_layer(arrays, i, config, rank, rope_dims, path) for i in range(layers)]
    return checkpoint, mla


def _float32(gguf: Any, tensor: Any, path: pathlib.Path) -> np.ndarray:
    try:
        array = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    except (NotImplementedError, ValueError) as error:
        raise CheckpointError(
            f"{path}: tensor {tensor.name!r} of type {tensor.tensor_type.name} cannot be read "
            f"({error or 'unsupported type'}); expected a type gguf dequantizes."
        ) from None
    return np.array(array, dtype=np.float32)


def _shared_weights(
    arrays: dict[str, np.ndarray], config: LlamaConfig, path: pathlib.Path
) -> dict[str, np.ndarray]:
    """Hugging Face-named weights outside attention; unknown tensors refused."""
    known = {f"blk.{i}.{name}.weight" for i in range(config.num_layers) for name in _ATTENTION}
    names = dict(GLOBAL_TENSORS)
    for i in range(config.num_layers):
        for gguf_name, hf_name in LAYER_TENSORS.items():
            if not hf_name.startswith("self_attn."):
                names[f"blk.{i}.{gguf_name}"] = f"model.layers.{i}.{hf_name}"
    unknown = sorted(set(arrays) - set(names) - known)
    if unknown:
        raise CheckpointError(
            f"{path}: tensor {unknown[0]!r} is not part of a dense deepseek2 model; expected "
            "token_embd, blk.N attention/feed-forward/norm tensors, output_norm and output."
        )
    expected = weight_shapes(config)
    weights = {}
    for gguf_name, hf_name in names.items():
        if gguf_name in arrays:
            if tuple(arrays[gguf_name].shape) != expected[hf_name]:
                raise CheckpointError(
                    f"{path}: tensor {gguf_name!r} has shape {arrays[gguf_name].shape}; "
                    f"expected {expected[hf_name]}."
                )
            weights[hf_name] = arrays[gguf_name]
    return weights


def _half_split(rows: np.ndarray) -> np.ndarray:
    """llama.cpp's adjacent rotary pairs (2i, 2i + 1) on the first axis -> halves (i, k + i)."""
    return np.concatenate([rows[0::2], rows[1::2]])


def _layer(
    arrays: dict[str, np.ndarray],
    index: int,
    config: LlamaConfig,
    rank: int,
    rope_dims: int,
    path: pathlib.Path,
) -> MlaLayer:
    b = f"blk.{index}."
    missing = [name for name in _ATTENTION if b + name + ".weight" not in arrays]
    if missing:
        raise CheckpointError(
            f"{path}: layer {index} lacks {b}{missing[0]}.weight; expected absorbed MLA tensors."
        )
    d, heads, width = config.hidden_dim, config.num_query_heads, config.head_dim
    nope = width - rope_dims
    query = arrays[b + "attn_q.weight"].reshape(heads, width, d)
    query = np.concatenate([query[:, :nope], _half_split_heads(query[:, nope:])], axis=1)
    kv = arrays[b + "attn_kv_a_mqa.weight"]  # [r + 2k, d]
    scale = arrays[b + "attn_kv_a_norm.weight"].astype(np.float64) / np.sqrt(
        config.rms_norm_epsilon
    )
    latent = kv[:rank].astype(np.float64)
    norm = arrays[b + "attn_norm.weight"]
    bound = np.linalg.norm(latent, 2) ** 2 * float(np.max(np.abs(norm))) ** 2 * d / rank
    if bound > LINEAR_RANGE * config.rms_norm_epsilon:
        raise CheckpointError(
            f"{path}: layer {index}'s latent norm normalises (the latent's mean square can reach "
            f"{bound:.3g} against epsilon {config.rms_norm_epsilon:g}); the library's latent has "
            "no norm, so it reads files whose latent stays in the norm's linear range "
            "(write_gguf_mla's)."
        )
    value_up = arrays[b + "attn_v_b.weight"]  # [h, v, r]
    return MlaLayer(
        query=np.ascontiguousarray(query.transpose(2, 0, 1)),
        latent=np.ascontiguousarray((latent * scale[:, None]).T.astype(np.float32)),
        rope_key=np.ascontiguousarray(_half_split(kv[rank:]).T),
        key_up=np.ascontiguousarray(arrays[b + "attn_k_b.weight"]),
        value_up=np.ascontiguousarray(value_up.transpose(0, 2, 1)),
        output=np.ascontiguousarray(
            arrays[b + "attn_output.weight"].T.reshape(heads, value_up.shape[1], d)
        ),
        frequencies=tuple(range(rope_dims // 2)),
        grid_size=rope_dims,
        query_scale=float(1 / np.sqrt(width)),
        norm_scale=norm,
    )


def _half_split_heads(rows: np.ndarray) -> np.ndarray:
    """`[h, 2k, d]` adjacent pairs -> half-split, per head."""
    return np.concatenate([rows[:, 0::2], rows[:, 1::2]], axis=1)
