"""KV-cache size of every attention kind: what a decoder stores per token.

A decoder that generates token by token keeps, for every layer, the key-side
and value-side tensors of all earlier positions. Their size per token is a
function of the layer's `AttentionSpec` alone (`cache_entries`), and it is
what the layers' `init_cache` / `call_cached` allocate, entry for entry (the
cache test checks the arrays' bytes against this module):

* standard / fixed_head (h heads of key size p, value size v): keys h p and
  values h v;
* pruned (per-layer heads h_l): h_l (p + v) in layer l;
* collaborative (shared key dim D): the shared key D, the content term h
  (with biases) and values h v;
* grouped (G key/value heads): G p + G v;
* latent (latent size r): r, plus with RoPE the decoupled rotary keys,
  `num_rope_heads` x 2 x (rotating pairs), plus with per-head key norms
  (Qwen3, Gemma 3) each query head's inverse key RMS, h.

Rotary positions change nothing else: keys are cached after rotation.

Pure Python: shared by the tf_keras and Keras 3 fronts.
"""

from __future__ import annotations

from typing import Any

from headsize_tf.core.spec import AttentionSpec, ResolvedAttention, SpecError

# Bytes per element of the dtypes a cache can have.
DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int8": 1,
    "uint8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def dtype_bytes(dtype: Any) -> int:
    """Bytes per element of `dtype`.

    Args:
      dtype: A dtype name ("float32", "bfloat16", ...), a mixed-precision
        policy name ("mixed_float16", "mixed_bfloat16": the compute dtype,
        which is what a cache holds) or an object with a `name` (a numpy,
        TensorFlow or Keras dtype).

    Example:

    >>> dtype_bytes("mixed_bfloat16")
    2
    """
    name = str(getattr(dtype, "name", dtype))
    if name.startswith("mixed_"):
        name = name[len("mixed_") :]
    if name not in DTYPE_BYTES:
        raise SpecError(f"Unknown cache dtype {name!r}; expected one of {sorted(DTYPE_BYTES)}.")
    return DTYPE_BYTES[name]


def cache_entries(
    resolved: ResolvedAttention, use_bias: bool = True, query_key_norm: bool = False
) -> dict[str, int]:
    """Elements per token of each entry of one layer's decoding cache.

    Args:
      resolved: The layer's concrete sizes (`AttentionSpec.resolve`).
      use_bias: Whether the layer has biases (a collaborative layer caches
        its content term only then).
      query_key_norm: Whether keys get a per-head RMSNorm (Qwen3, Gemma 3): a
        latent then also caches each head's inverse key RMS (h values).

    Returns:
      Entry name -> elements per token and batch row; the names are the
      layers' cache dict keys.

    Example:

    >>> spec = AttentionSpec("grouped", num_heads=8, num_kv_heads=2)
    >>> cache_entries(spec.resolve(width=64))
    {'key': 16, 'value': 16}
    """
    h, p, v = resolved.num_heads, resolved.head_size, resolved.value_dim
    if resolved.kind == "grouped":
        return {"key": resolved.num_kv_heads * p, "value": resolved.num_kv_heads * v}
    if resolved.kind == "latent":
        # With RoPE one vector per token: the latent, then the decoupled rotary keys.
        rotary = resolved.num_rotary_heads * 2 * resolved.rope_pairs if resolved.uses_rope else 0
        return {"latent": resolved.kv_latent_dim + rotary + (h if query_key_norm else 0)}
    if resolved.kind == "collaborative":
        entries = {"key": resolved.shared_key_dim}
        if use_bias:
            entries["content"] = h
        entries["value"] = h * v
        return entries
    return {"key": h * p, "value": h * v}


def kv_cache_bytes_per_token(
    spec: AttentionSpec,
    width: int,
    num_layers: int = 1,
    dtype: Any = "float32",
    sequence_length: int | None = None,
    use_bias: bool = True,
    query_key_norm: bool = False,
) -> int:
    """KV-cache bytes one token adds to a decoder (all layers, one batch row).

    Args:
      spec: The decoder's attention spec (per-layer lists allowed: a pruned
        model's per-layer head counts, per-layer latent sizes, ...).
      width: Model width d.
      num_layers: Number of decoder layers (the length of per-layer lists).
      dtype: The cache's dtype or a mixed-precision policy (`dtype_bytes`).
      sequence_length: Resolves head_size="sequence_length".
      use_bias: Whether the layers have biases.
      query_key_norm: Whether keys get a per-head RMSNorm (`cache_entries`).

    Example:

    >>> kv_cache_bytes_per_token(AttentionSpec("standard", num_heads=8), 64, num_layers=2)
    1024
    >>> kv_cache_bytes_per_token(
    ...     AttentionSpec("latent", num_heads=8, kv_latent_dim=32), 64, num_layers=2)
    256
    """
    itemsize = dtype_bytes(dtype)
    total = 0
    for layer in spec.layers(num_layers):
        entries = cache_entries(layer.resolve(width, sequence_length), use_bias, query_key_norm)
        total += sum(entries.values())
    return total * itemsize


def full_cache_elements(resolved: ResolvedAttention) -> int:
    """Elements per token of the standard cache of the same heads: h (p + v)."""
    return resolved.num_heads * (resolved.head_size + resolved.value_dim)
