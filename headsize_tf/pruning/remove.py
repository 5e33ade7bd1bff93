"""Physical removal of pruned heads: smaller layers, fewer parameters and FLOPs.

Masking a head (gate 0) keeps its cost; removing it slices the per-head
weights: rows of the Q/K/V kernels (head axis) and of the output kernel; for
collaborative heads the rows of the mixing matrix and of the content bias
(the shared W_Q / W_K stay). The removed indices are recorded in the encoder
config (`pruned_heads`), so the pruned model rebuilds from its config,
restores from checkpoints and exports with the same outputs as the masked
model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from headsize_tf.core.pruning_plan import slice_heads, whole_groups
from headsize_tf.layers.head_attention import HeadAttentionBase
from headsize_tf.layers.roles import kind_of, weights_by_role
from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder
from headsize_tf.pruning.importance import attention_layers_of, head_columns


def copy_kept_heads(source: HeadAttentionBase, target: HeadAttentionBase, keep: Sequence[int]):
    """Copies the heads at positions `keep` of `source` into built `target`.

    The slicing follows the core's plan (`core.pruning_plan.slice_heads`);
    the head gates are sliced with the heads.
    """
    keep = list(keep)
    if kind_of(source) != kind_of(target):
        raise ValueError(f"Layers {source.name!r} and {target.name!r} differ in structure.")
    src, dst = weights_by_role(source), weights_by_role(target)
    if [k for k, v in src.items() if v is None] != [k for k, v in dst.items() if v is None]:
        raise ValueError(f"Layers {source.name!r} and {target.name!r} differ in structure.")
    sliced = slice_heads(
        kind_of(source), {k: None if v is None else v.numpy() for k, v in src.items()}, keep
    )
    sliced["gates"] = np.take(source.head_gates.numpy(), keep or [0])
    dst["gates"] = target.head_gates
    for role, value in sliced.items():
        d_var = dst[role]
        if value is None:
            continue
        if tuple(value.shape) != tuple(d_var.shape):
            raise ValueError(
                f"{d_var.name}: sliced shape {value.shape} does not match {tuple(d_var.shape)}."
            )
        d_var.assign(value)
    if not keep:
        target.set_head_mask([0.0])


def physical_keep(layer: HeadAttentionBase, keep: Sequence[int]) -> list[int]:
    """The head positions a layer keeps physically when `keep` survive pruning.

    Every kind removes single heads except grouped-query attention, which
    removes whole groups: it keeps every head of a group with a survivor (the
    others stay masked, gate 0). See `core.pruning_plan.whole_groups`.

    Args:
      layer: A built attention layer.
      keep: The surviving head positions.
    """
    if kind_of(layer) != "grouped":
        return list(keep)
    return whole_groups(keep, layer.num_heads, layer.num_kv_heads)


def mask_kept(source: HeadAttentionBase, target: HeadAttentionBase, keep, mask_row) -> None:
    """Sets `target`'s gates to `source`'s at `keep`, zero where `mask_row` pruned a head."""
    gates = source.head_gates.numpy()[list(keep)] * (np.asarray(mask_row)[list(keep)] != 0)
    target.set_head_mask(gates)


def original_heads(model) -> list[list[int]]:
    """Per attention layer, the original head number of each mask column (-1: no head)."""
    columns, width = head_columns(model)
    if isinstance(model, HeadsizeBertEncoder):
        return [list(range(width)) for _ in columns]
    return [cols + [-1] * (width - len(cols)) for cols in columns]


def head_mask(model) -> np.ndarray:
    """`[attention layers, columns]` gates of any model with our attention layers (an
    encoder: original head numbering, removed heads 0; an LM or a translation model:
    head positions, the missing heads of narrower layers 0)."""
    columns, width = head_columns(model)
    mask = np.zeros([len(columns), width], np.float32)
    for i, (layer, cols) in enumerate(zip(attention_layers_of(model), columns, strict=True)):
        if cols:
            mask[i, cols] = layer.head_gates.numpy()[: len(cols)]
    return mask


def set_head_mask(model, mask: np.ndarray | Sequence) -> None:
    """Sets every attention layer's gates from a mask of `head_mask(model)`'s shape."""
    columns, width = head_columns(model)
    mask = np.asarray(mask, np.float32)
    expected = (len(columns), width)
    if mask.shape != expected:
        raise ValueError(f"Head mask has shape {mask.shape}; expected {expected} (layers x heads).")
    for i, (layer, cols) in enumerate(zip(attention_layers_of(model), columns, strict=True)):
        removed = [h for h in range(width) if h not in set(cols) and mask[i, h] != 0]
        if removed and isinstance(model, HeadsizeBertEncoder):
            raise ValueError(
                f"Layer {i}: heads {removed} were removed; their mask entries must be 0."
            )
        layer.set_head_mask(mask[i, cols] if cols else [0.0])


def remove_heads(
    encoder: HeadsizeBertEncoder, mask: np.ndarray | None = None
) -> HeadsizeBertEncoder:
    """A new encoder without the heads whose mask entry is 0.

    Args:
      encoder: A `HeadsizeBertEncoder` (possibly already pruned).
      mask: `[layers, num_attention_heads]`, 0 = remove; default: the
        encoder's current gates (`head_mask`). Kept heads keep their gate
        values.

    Returns:
      The pruned encoder (`pruned_heads` in its config); the source is left
      unchanged.
    """
    kind = encoder.attention_spec.kind
    if kind in ("grouped", "latent"):  # Their heads share keys and values: not one by one.
        raise ValueError(
            f"remove_heads removes an encoder's heads one by one: standard, fixed_head or "
            f"collaborative heads, not {kind} ones (shared keys and values); prune those by "
            "masking (set_head_mask), or on the Keras 3 front, whose BertBackbone loses whole "
            "key/value groups."
        )
    current = head_mask(encoder)
    mask = current if mask is None else np.asarray(mask, np.float32)
    if mask.shape != current.shape:
        raise ValueError(
            f"Head mask has shape {mask.shape}; expected {current.shape} (layers x heads)."
        )
    config = dict(encoder.get_config())
    previous = config.get("pruned_heads") or [[] for _ in range(mask.shape[0])]
    pruned = []
    for i, row in enumerate(mask):
        gone = sorted(set(previous[i]) | {int(h) for h in np.flatnonzero(row == 0)})
        pruned.append(gone)
    config["pruned_heads"] = pruned
    new = HeadsizeBertEncoder.from_config(config).build_weights()
    new.copy_non_attention_weights(encoder)
    for old_block, new_block, row in zip(
        encoder.transformer_layers, new.transformer_layers, mask, strict=True
    ):
        positions = {head: p for p, head in enumerate(old_block.kept_heads)}
        keep = [positions[h] for h in new_block.kept_heads]
        copy_kept_heads(old_block.attention_layer, new_block.attention_layer, keep)
        if new_block.kept_heads:
            new_block.attention_layer.set_head_mask(row[new_block.kept_heads])
    return new


def copy_weights_outside(source, target, source_layers, target_layers) -> None:
    """Copies every weight of `source` outside `source_layers` to the weight of `target` outside
    `target_layers` at the same place in creation order (the same structure around the
    excluded layers, e.g. everything but the attention layers, or a classifier's head).

    Raises:
      ValueError: the two sides differ in their number of weights or in a shape.
    """

    def outside(model, layers):
        ids = {id(v) for layer in layers for v in layer.weights}
        return [v for v in model.weights if id(v) not in ids]

    old, fresh = outside(source, source_layers), outside(target, target_layers)
    if len(old) != len(fresh):
        raise ValueError(f"{len(old)} weights to copy into {len(fresh)}.")
    for a, b in zip(old, fresh, strict=True):
        if tuple(a.shape) != tuple(b.shape):
            raise ValueError(f"{a.name} and {b.name} differ in shape.")
        b.assign(a)
