"""Builds an attention layer of a named kind (used by config-driven models)."""

from __future__ import annotations

from typing import Any

from headsize_tf.layers._head_attention import HeadAttentionBase
from headsize_tf.layers.collaborative_attention import CollaborativeAttention
from headsize_tf.layers.fixed_head_attention import FixedHeadAttention, validate_head_size
from headsize_tf.layers.standard_attention import StandardAttention

ATTENTION_CLASSES: dict[str, type[HeadAttentionBase]] = {
    "standard": StandardAttention,
    "fixed_head": FixedHeadAttention,
    "collaborative": CollaborativeAttention,
}


def check_attention_type(attention_type: str) -> str:
    if attention_type not in ATTENTION_CLASSES:
        raise ValueError(
            f"Unknown attention_type {attention_type!r}; expected one of "
            f"{sorted(ATTENTION_CLASSES)}."
        )
    return attention_type


def attention_kwargs(
    attention_type: str,
    num_heads: int,
    head_size: int | str | None = None,
    shared_key_dim: int | None = None,
    mixing_initializer: Any = "uniform",
) -> dict[str, Any]:
    """The type-specific constructor arguments of an attention layer.

    Args:
      attention_type: "standard", "fixed_head" or "collaborative".
      num_heads: Number of heads.
      head_size: fixed_head: the head size (int or "sequence_length");
        collaborative: optional value head size; standard: must be None or
        0 (ignored).
      shared_key_dim: collaborative only: the shared query/key size.
      mixing_initializer: collaborative only.
    """
    check_attention_type(attention_type)
    kwargs: dict[str, Any] = {"num_heads": num_heads}
    if attention_type == "fixed_head":
        kwargs["head_size"] = validate_head_size(head_size)
    elif attention_type == "collaborative":
        if shared_key_dim is None:
            raise ValueError("attention_type 'collaborative' needs `shared_key_dim`; got None.")
        kwargs["shared_key_dim"] = shared_key_dim
        kwargs["head_size"] = head_size or None
        kwargs["mixing_initializer"] = mixing_initializer
    return kwargs


def make_attention(attention_type: str, **kwargs: Any) -> HeadAttentionBase:
    """Instantiates `ATTENTION_CLASSES[attention_type](**kwargs)`."""
    return ATTENTION_CLASSES[check_attention_type(attention_type)](**kwargs)
