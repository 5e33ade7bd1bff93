"""Writing a latent-attention (MLA) decoder as a GGUF file llama.cpp runs ("deepseek2").

A Llama-shaped decoder converted to a shared latent K/V
(`headsize_tf.keras3.reparam.compress_kv`, `headsize-tf convert --to latent`)
is DeepSeek-V2's multi-head latent attention without its MoE, and llama.cpp's
"deepseek2" architecture computes it with its MLA cache: per token and layer
the latent and one rotary key, `kv_lora_rank + rope dims` values
(`write_gguf_mla`). Its graph (llama.cpp `src/models/deepseek2.cpp`, the
absorbed path) is the library's absorbed decoding:

* query `attn_q` `[h (n + 2k), d]`: per head n dimensions against the latent
  (`attn_k_b` `[h, r, n]` folds into the query) and 2k rotary ones;
* `attn_kv_a_mqa` `[r + 2k, d]`: the latent, then the one rotary key;
* `attn_v_b` `[h, v, r]` and `attn_output` `[d, h v]`;
* softmax scale `1 / sqrt(n + 2k)` (`key_length_mla`); the query kernel
  absorbs any other scale.

Three things differ from the library's model, and the writer maps each
exactly or refuses:

* **Rotary frequencies.** llama.cpp turns rotary pair i at
  `freq_base^(-2 i / n_rot)`, no frequency factors: the rotary key's pairs must
  turn at evenly spaced frequencies of the source grid from the fastest
  (`0, s, 2s, ...` of a grid of G, the "rotated_high" strategy's). The file's
  `freq_base` is then `base^(2 s k / G)`, and the pairs are stored in
  llama.cpp's adjacent order, fastest first.
* **The latent's RMSNorm.** llama.cpp normalises the latent
  (`attn_kv_a_norm`); the library's latent has no norm. The written latent
  is scaled down (`attn_kv_a_mqa`'s latent rows times `s`) so far that its
  mean square stays below 1e-8 of the norm's epsilon for any input the
  layer can see (bounded from the weights: the attention norm's largest
  scale, the latent kernel's largest singular value); the norm then divides
  by `sqrt(epsilon)` alone in float32, and its weight `sqrt(epsilon) / s`
  restores the latent. `attn_kv_a_mqa` stays float32 at every tensor type
  (its latent rows are about `s` ~ 1e-8 small: half precision would lose them).
* **One latent size, head size and rotary key.** `kv_lora_rank` and the
  rotary dimensions are per model: an allocated budget (latent sizes per
  layer), several rotary keys per layer (MHA2MLA's partial RoPE: one per
  original key/value head) or a latent holding every key dimension (no
  dimension left against the latent) are refused in one line.

The rest (embeddings, norms, gated feed-forward, tokenizer) is written as
`write_gguf_llama` writes a Llama ("leading_dense_block_count" = every
layer: no expert layers). Needs the `gguf` package.

Example:

>>> checkpoint, layers = mla_checkpoint_from_decoder(latent_lm)  # keras3.modeling
>>> write_gguf_mla(checkpoint, layers, "smollm2-mla.gguf", "q8_0")
>>> # llama-cli -m smollm2-mla.gguf -p "The capital of France is"

References:
  DeepSeek-AI, "DeepSeek-V2", 2024. https://arxiv.org/abs/2405.04434
  llama.cpp, `src/models/deepseek2.cpp` and `convert_hf_to_gguf.py`'s
  DeepseekV2Model.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.extras import require
from headsize_tf.core.llama_checkpoint import LlamaCheckpoint, weight_shapes
from headsize_tf.core.mla_layer import MlaLayer
from headsize_tf.data.gguf_llama import GLOBAL_TENSORS, LAYER_TENSORS
from headsize_tf.data.gguf_llama_writer import TENSOR_TYPES, _tokenizer_metadata, write_file

ARCHITECTURE = "deepseek2"
# The latent's mean square, at most, as a fraction of the norm's epsilon: below float32's
# resolution (2^-24), so llama.cpp's `mean + eps` is `eps` and its RMSNorm a fixed scale.
LATENT_HEADROOM = 1e-8


def write_gguf_mla(
    checkpoint: LlamaCheckpoint,
    layers: Sequence[MlaLayer],
    path: str | os.PathLike,
    tensor_type: str = "f32",
    name: str | None = None,
) -> pathlib.Path:
    """Writes a latent-attention decoder as llama.cpp's "deepseek2" GGUF file, atomically.

    Args:
      checkpoint: Everything outside attention (config, embeddings, norms,
        feed-forward, output, tokenizer) as Hugging Face Llama weights; its
        attention weights, if any, are ignored.
      layers: Each layer's latent attention.
      path: The `.gguf` file to write.
      tensor_type: "f32", "f16", "bf16" or "q8_0" for the matrices
        (`attn_kv_a_mqa` stays float32).
      name: `general.name` (default: the file's stem).

    Returns:
      `path` as a path.

    Raises:
      CheckpointError: llama.cpp's "deepseek2" cannot compute the model (see
        the module's docstring), in one line.
    """
    require("gguf", purpose="writing GGUF files")
    if tensor_type not in TENSOR_TYPES:
        raise CheckpointError(
            f"Unknown GGUF tensor type {tensor_type!r}; expected one of {list(TENSOR_TYPES)}."
        )
    if checkpoint.tokenizer_json is None:
        raise CheckpointError(
            f"{checkpoint.source or 'checkpoint'} has no tokenizer; a GGUF file carries one."
        )
    config = checkpoint.config
    if len(layers) != config.num_layers:
        raise CheckpointError(
            f"{len(layers)} latent attention layers for a model of {config.num_layers}."
        )
    _check_llama(checkpoint)
    sizes, base = _check_layers(layers, config.rope_max_wavelength)
    h, r, n, k, v = sizes
    keys: dict[str, Any] = {
        "context_length": int(config.max_sequence_length),
        "embedding_length": int(config.hidden_dim),
        "block_count": int(config.num_layers),
        "feed_forward_length": int(config.intermediate_dim),
        "leading_dense_block_count": int(config.num_layers),
        "attention.head_count": h,
        "attention.head_count_kv": 1,  # Absorbed MLA is multi-query attention over the latent.
        "attention.key_length": r + 2 * k,
        "attention.value_length": r,
        "attention.key_length_mla": n + 2 * k,
        "attention.value_length_mla": v,
        "attention.q_lora_rank": 0,
        "attention.kv_lora_rank": r,
        "attention.layer_norm_rms_epsilon": float(config.rms_norm_epsilon),
        "rope.dimension_count": 2 * k,
        "rope.freq_base": float(base),
        "expert_count": 0,
        "expert_used_count": 0,
        "expert_feed_forward_length": 0,
        "expert_shared_count": 0,
        "vocab_size": int(config.vocabulary_size),
    }
    metadata = {f"{ARCHITECTURE}.{key}": value for key, value in keys.items()}
    metadata.update(_tokenizer_metadata(checkpoint))
    tensors = _shared_tensors(checkpoint)
    float32 = set()
    for i, layer in enumerate(layers):
        tensors.update(_layer_tensors(i, layer, float(config.rms_norm_epsilon)))
        float32.add(f"blk.{i}.attn_kv_a_mqa.weight")
    return write_file(
        pathlib.Path(path), ARCHITECTURE, metadata, tensors, tensor_type, name, frozenset(float32)
    )


def _check_llama(checkpoint: LlamaCheckpoint) -> None:
    """Refuses what llama.cpp's deepseek2 computes otherwise outside attention."""
    config = checkpoint.config
    problems = [
        (config.model_type not in ("llama", "mistral"), f"model_type {config.model_type!r}"),
        (config.hidden_activation != "silu", f"a {config.hidden_activation} feed-forward"),
        (config.attention_bias, "attention biases"),
        (config.qk_norm, "query/key norms"),
        (config.post_norms, "post-norms"),
        (config.rope_scaling is not None, "scaled RoPE"),
        (
            config.sliding_window is not None
            and config.sliding_window < config.max_sequence_length,
            "a sliding window",
        ),
        (config.final_logit_soft_cap is not None, "a logit cap"),
    ]
    found = [why for bad, why in problems if bad]
    if found:
        raise CheckpointError(
            f"llama.cpp's deepseek2 is a Llama with latent attention (SwiGLU, no biases, norms "
            f"or caps beyond Llama's, unscaled RoPE); this model has {', '.join(found)}."
        )


def _check_layers(
    layers: Sequence[MlaLayer], base: float
) -> tuple[tuple[int, int, int, int, int], float]:
    """((h, r, n, k, v), the file's freq_base)."""
    shapes, steps = set(), set()
    for i, layer in enumerate(layers):
        h, r, n = layer.key_up.shape
        k = len(layer.frequencies)
        if layer.rope_key.shape[1] != 2 * k:
            raise CheckpointError(
                f"Layer {i} has {layer.rope_key.shape[1] // 2} rotary keys' worth of "
                f"dimensions for {k} pairs; llama.cpp's deepseek2 has one rotary key per layer "
                "(convert with --rope-strategy rotated_high)."
            )
        kept = sorted(layer.frequencies)
        step = kept[1] - kept[0] if k > 1 else 1
        if kept != [step * j for j in range(k)] or step < 1:
            raise CheckpointError(
                f"llama.cpp turns rotary pair i at base^(-2 i / n_rot): a rotary key's "
                f"frequencies must be evenly spaced from the fastest (0, s, 2s, ...); layer {i}'s "
                f"are {kept} (convert with --rope-strategy rotated_high)."
            )
        if n < 1:
            raise CheckpointError(
                "llama.cpp's deepseek2 needs query/key dimensions against the latent; every key "
                f"dimension of layer {i} is rotary ({2 * k})."
            )
        shapes.add((h, r, n, k, layer.value_up.shape[2]))
        steps.add((step, layer.grid_size))
    if len(shapes) > 1 or len(steps) > 1:
        ranks = sorted({shape[1] for shape in shapes})
        why = (
            f"latent sizes {ranks}: an allocated budget needs --allocation uniform"
            if len(ranks) > 1
            else "heads, head or value sizes, or rotary frequencies"
        )
        raise CheckpointError(
            "llama.cpp's deepseek2 has one latent size, head size and rotary key for every "
            f"layer; these layers differ ({why})."
        )
    (h, r, n, k, v), ((step, grid),) = shapes.pop(), steps
    return (h, r, n, k, v), float(base) ** (2.0 * step * k / grid)


def _shared_tensors(checkpoint: LlamaCheckpoint) -> dict[str, np.ndarray]:
    """Embeddings, norms, feed-forward and output under llama.cpp's names."""
    to_gguf = {hf: name for name, hf in GLOBAL_TENSORS.items()}
    to_layer = {hf: name for name, hf in LAYER_TENSORS.items()}
    tensors = {}
    for hf_name in weight_shapes(checkpoint.config):
        if ".self_attn." in hf_name:
            continue
        array = np.asarray(checkpoint.weights[hf_name], np.float32)
        if hf_name.startswith("model.layers."):
            _, _, index, rest = hf_name.split(".", 3)
            tensors[f"blk.{index}.{to_layer[rest]}"] = np.ascontiguousarray(array)
        else:
            tensors[to_gguf[hf_name]] = np.ascontiguousarray(array)
    return tensors


def _interleaved(order: list[int]) -> list[int]:
    """Half-split rotary rows -> llama.cpp's adjacent pairs, in `order` (fastest first)."""
    k = len(order)
    return [row for i in order for row in (i, k + i)]


def latent_scale(layer: MlaLayer, epsilon: float) -> float:
    """The factor `s` keeping the written latent's mean square below
    `LATENT_HEADROOM x epsilon` for every input: the attention norm's output has
    squared norm <= width x max scale^2, the latent <= that x sigma_max(latent)^2."""
    width, rank = layer.latent.shape
    sigma = float(np.linalg.norm(np.asarray(layer.latent, np.float64), 2))
    largest = float(np.max(np.abs(layer.norm_scale))) if layer.norm_scale.size else 1.0
    bound = sigma**2 * largest**2 * width / rank  # The latent's mean square, at most.
    return float(np.sqrt(LATENT_HEADROOM * epsilon / max(bound, 1e-30)))


def _layer_tensors(index: int, layer: MlaLayer, epsilon: float) -> dict[str, np.ndarray]:
    d, h, width = layer.query.shape
    order = sorted(range(len(layer.frequencies)), key=lambda j: layer.frequencies[j])
    n = layer.key_up.shape[2]
    rotary = [n + row for row in _interleaved(order)]
    # llama.cpp scales the scores by 1 / sqrt(n + 2k); the query absorbs the model's own scale.
    query = np.asarray(layer.query, np.float64) * (layer.query_scale * np.sqrt(width))
    query = query[:, :, list(range(n)) + rotary]
    scale = latent_scale(layer, epsilon)
    latent_rows = np.asarray(layer.latent, np.float64).T * scale
    rope_rows = np.asarray(layer.rope_key, np.float64).T[_interleaved(order)]
    b = f"blk.{index}."
    tensors = {
        b + "attn_q.weight": query.reshape(d, h * width).T,
        b + "attn_kv_a_mqa.weight": np.concatenate([latent_rows, rope_rows]),
        b + "attn_kv_a_norm.weight": np.full(
            [layer.latent.shape[1]], np.sqrt(epsilon) / scale, np.float64
        ),
        b + "attn_k_b.weight": np.asarray(layer.key_up),
        b + "attn_v_b.weight": np.asarray(layer.value_up).transpose(0, 2, 1),
        b + "attn_output.weight": np.asarray(layer.output).reshape(-1, d).T,
    }
    return {name: np.ascontiguousarray(a, np.float32) for name, a in tensors.items()}
