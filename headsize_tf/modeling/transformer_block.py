"""A Model Garden Transformer encoder block with a configurable attention kind."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import tensorflow as tf
import tf_keras
from official.modeling import tf_utils
from official.nlp.modeling import layers as nlp_layers

from headsize_tf.core.spec import KINDS, LEGACY_KEYS, AttentionSpec
from headsize_tf.layers.autograph import without_autograph
from headsize_tf.layers.factory import make_attention
from headsize_tf.modeling._tracking import replace_sublayer

_HEAD_COUNT_WARNING = "is not a multiple of the number of attention heads"
# The stock block's block-sparse attention arguments (its `block_sparse_attention` layer).
_BLOCK_SPARSE = ("src_block_size", "tgt_block_size", "use_sigmoid_attn", "sigmoid_attn_bias")


@contextlib.contextmanager
def _without_log(logger: logging.Logger, text: str) -> Iterator[None]:
    """Drops `logger`'s records whose message contains `text` (other records pass)."""

    def keep(record: logging.LogRecord) -> bool:
        return text not in record.getMessage()

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


@tf_keras.utils.register_keras_serializable(package="headsize_tf")
@without_autograph
class HeadsizeTransformerBlock(nlp_layers.TransformerEncoderBlock):
    """`TransformerEncoderBlock` whose self-attention is one of our layers.

    Model Garden's block has no attention hook and builds a stock
    `MultiHeadAttention` with head size width // heads. This block calls the
    stock `build`, then replaces the (not yet built, weightless) stock layer by
    the layer of its `AttentionSpec` (`StandardAttention`,
    `FixedHeadAttention` or `CollaborativeAttention`) with the same dropout,
    initializers, regularizers and name, so checkpoints keep the stock
    variable layout for everything else.

    Args:
      attention: The block's `AttentionSpec` (or a dict of its fields), with
        one head count and head size. "sequence_length" head sizes resolve
        from the key length at build (models resolve them from their
        `max_sequence_length` before building blocks).
      pruned_heads: Indices (among the spec's heads) of heads removed by
        pruning. The layer holds only the kept heads, each of the unpruned
        head size; a layer with every head pruned keeps one head whose gate
        is 0 (its output is the output bias, as for the masked layer).
      **kwargs: `TransformerEncoderBlock` arguments (`inner_dim`,
        `inner_activation`, dropouts, `norm_first`, `use_rms_norm`,
        `return_attention_scores`, `linformer_dim`, ...). The head counts and
        sizes come from `attention` only: `num_attention_heads` must agree
        with it if given, as must `num_kv_heads` (grouped K/V: a "grouped"
        spec with that `num_kv_heads`); `key_dim` / `value_dim` are refused
        (use `attention.head_size` / `attention.value_dim`), and so is the
        stock block's block-sparse attention (`src_block_size`,
        `tgt_block_size`, `use_sigmoid_attn`), which is not an attention kind
        of the spec.

    Example:

    >>> block = HeadsizeTransformerBlock(
    ...     attention=AttentionSpec("fixed_head", num_heads=8, head_size=32),
    ...     inner_dim=256, inner_activation="gelu")

    References:
      Bhojanapalli et al. 2020, https://arxiv.org/abs/2002.07028;
      Cordonnier et al. 2020, https://arxiv.org/abs/2006.16362.
    """

    def __init__(
        self,
        attention: AttentionSpec | Mapping[str, Any] | None = None,
        pruned_heads: Sequence[int] = (),
        **kwargs: Any,
    ):
        for stray in ("key_dim", "value_dim"):
            if kwargs.get(stray) is not None:
                where = "head_size" if stray == "key_dim" else "value_dim"
                raise ValueError(
                    f"HeadsizeTransformerBlock got {stray}={kwargs[stray]!r}; the head sizes come "
                    f"from the attention spec: set attention.{where} instead."
                )
            kwargs.pop(stray, None)
        legacy = [k for k in LEGACY_KEYS if k in kwargs and k != "num_attention_heads"]
        if legacy:
            raise ValueError(
                f"HeadsizeTransformerBlock got {legacy[0]}=...; it is now "
                f"{LEGACY_KEYS[legacy[0]]} (pass attention=AttentionSpec(...))."
            )
        spec = AttentionSpec.coerce(attention)
        if spec.per_layer_length is not None:
            raise ValueError(
                "HeadsizeTransformerBlock needs a one-layer attention spec; got per-layer lists "
                f"{spec.to_dict()} (use spec.for_layer(i))."
            )
        for stray in _BLOCK_SPARSE:
            if kwargs.pop(stray, None) not in (None, False):
                raise ValueError(
                    f"HeadsizeTransformerBlock got {stray}=...; Model Garden's block-sparse "
                    f"attention is not an attention kind of the spec (expected one of {KINDS})."
                )
        kv_heads = kwargs.pop("num_kv_heads", None)
        if kv_heads is not None and (spec.kind, spec.num_kv_heads) != ("grouped", kv_heads):
            raise ValueError(
                f"num_kv_heads={kv_heads!r} disagrees with the attention spec ({spec.kind!r}, "
                f"num_kv_heads={spec.num_kv_heads}); give grouped K/V in the spec only: "
                f"AttentionSpec('grouped', num_heads={spec.num_heads}, num_kv_heads={kv_heads})."
            )
        heads = kwargs.pop("num_attention_heads", spec.num_heads)
        if heads != spec.num_heads:
            raise ValueError(
                f"num_attention_heads={heads!r} disagrees with attention.num_heads="
                f"{spec.num_heads}; give the head count in the attention spec only."
            )
        super().__init__(num_attention_heads=spec.num_heads, **kwargs)
        pruned = sorted({int(h) for h in pruned_heads})
        if pruned and (pruned[0] < 0 or pruned[-1] >= self._num_heads):
            raise ValueError(
                f"pruned_heads {list(pruned_heads)} must be indices in [0, {self._num_heads})."
            )
        if pruned and spec.kind in ("grouped", "latent"):
            # Their heads share keys and values: a pruned block would regroup them.
            raise ValueError(
                f"pruned_heads {pruned}: heads are removed one by one from standard, "
                f"fixed_head or collaborative attention, not {spec.kind} (shared keys and "
                "values); mask those heads instead (set_head_mask)."
            )
        self._pruned_heads = pruned
        self._spec = spec

    @property
    def attention_spec(self) -> AttentionSpec:
        return self._spec

    @property
    def pruned_heads(self) -> list[int]:
        return list(self._pruned_heads)

    @property
    def kept_heads(self) -> list[int]:
        """Original indices of the heads this block holds (in order)."""
        return [h for h in range(self._num_heads) if h not in set(self._pruned_heads)]

    def build(self, input_shape):
        if self._spec.kind == "standard":
            super().build(input_shape)
        else:
            # The stock build warns when the width is not a multiple of the head count; other
            # kinds set their head size independently of the width, so that warning is wrong.
            with _without_log(logging.getLogger("absl"), _HEAD_COUNT_WARNING):
                super().build(input_shape)
        spec = self._spec
        if self._pruned_heads:
            # As the stock build reads it: a shape, or a list [input, mask(, key)].
            if isinstance(input_shape, tf.TensorShape):
                width = input_shape[-1]
            else:
                width = tf.TensorShape(input_shape[0])[-1]
            head_size = (
                spec.resolve(width).head_size if spec.head_size != "sequence_length" else None
            )
            if spec.kind == "standard":
                # Kept heads keep their size width // heads: fixed-head attention.
                spec = dataclasses.replace(spec, kind="fixed_head", head_size=head_size)
            elif spec.kind == "collaborative" and spec.head_size is None:
                spec = dataclasses.replace(spec, head_size=head_size)
            spec = dataclasses.replace(spec, num_heads=max(len(self.kept_heads), 1))
        attention = make_attention(
            spec,
            dropout=self._attention_dropout_rate,
            use_bias=self._use_bias,
            kernel_initializer=self._attention_initializer,
            bias_initializer=tf_utils.clone_initializer(self._bias_initializer),
            attention_axes=self._attention_axes,
            output_shape=self._output_last_dim,
            bias_regularizer=self._bias_regularizer,
            activity_regularizer=self._activity_regularizer,
            kernel_constraint=self._kernel_constraint,
            bias_constraint=self._bias_constraint,
            name="self_attention",
        )
        replace_sublayer(self, "_attention_layer", attention)  # Weights in stock order.
        if self._pruned_heads and not self.kept_heads:
            # Every head pruned: one placeholder head, gated off for good.
            shape = tf.TensorShape([None, None, width])
            self._attention_layer._build_from_signature(shape, shape)
            self._attention_layer.set_head_mask([0.0])

    @property
    def attention_layer(self):
        return self._attention_layer

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        for key in ("num_attention_heads", "key_dim", "value_dim", "num_kv_heads", *_BLOCK_SPARSE):
            config.pop(key, None)
        config.update(
            {
                "attention": self._spec.to_dict(),
                "pruned_heads": list(self._pruned_heads),
                # The stock block's get_config leaves these two out.
                "use_rms_norm": self._use_rms_norm,
                "return_attention_scores": self._return_attention_scores,
            }
        )
        return config
