"""Physical removal of pruned heads from a Keras 3 `BertBackbone`, `CausalLM` or `DecoderLM`.

Masking a head (gate 0) keeps its cost; removing it slices the per-head
weights with the core's plan (`headsize_tf.core.pruning_plan.slice_heads`:
rows of Q/K/V and of the output kernel; for collaborative heads, rows of the
mixing matrix and columns of the content bias; for latent heads, rows of the
up-projections; a grouped layer loses whole groups, and so does a latent layer
with several rotary keys, see `core.pruning_plan.whole_groups`). The result is an ordinary
backbone whose spec has per-layer head counts, so it saves, loads and
exports as any other (the same for a `CausalLM`). The gate value of every kept head is folded into its
rows of the output kernel, so the pruned backbone needs no gates (Keras 3
files do not store them); a layer with no head left keeps one head whose
output rows are zero, which is what the masked layer computes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import keras
import numpy as np

from headsize_tf.core.pruning_plan import slice_heads, whole_groups
from headsize_tf.keras3.layers.roles import assign_weights, kind_of, numpy_weights
from headsize_tf.keras3.modeling.surgery import AttentionModel, with_attention


def head_mask(backbone: AttentionModel) -> np.ndarray:
    """`[layers, max heads]` current gates (NaN beyond a layer's head count).

    A head whose output rows are all zero adds nothing whatever its gate: it is 0
    here, as pruned. Removal leaves such heads (the masked heads of a kept key/value
    group, the one head of a layer left without any; their gates folded into the
    output rows), and a model saved and loaded again has its gates back at one.
    """
    layers = backbone.attention_layers
    width = max(layer.num_heads for layer in layers)
    mask = np.full([len(layers), width], np.nan, np.float32)
    for i, layer in enumerate(layers):
        gates = keras.ops.convert_to_numpy(layer.head_gates)
        output = np.asarray(keras.ops.convert_to_numpy(layer._output_dense.kernel))
        live = np.any(output.reshape(layer.num_heads, -1) != 0, axis=1)
        mask[i, : layer.num_heads] = np.where(live, gates, 0.0)
    return mask


def set_head_mask(backbone: AttentionModel, mask: np.ndarray | Sequence) -> None:
    """Sets every layer's gates from a `[layers, max heads]` mask."""
    layers = backbone.attention_layers
    mask = np.asarray(mask, np.float32)
    width = max(layer.num_heads for layer in layers)
    if mask.shape != (len(layers), width):
        raise ValueError(
            f"Head mask has shape {mask.shape}; expected {(len(layers), width)} (layers x heads)."
        )
    for i, layer in enumerate(layers):
        layer.set_head_mask(mask[i, : layer.num_heads])


def _groups_of(layer) -> int | None:
    """The head groups removal keeps whole: a grouped layer's key/value heads, a latent
    layer's rotary keys when it has several; None for a layer whose heads go one by one."""
    kind = kind_of(layer)
    if kind == "grouped":
        return layer.num_kv_heads
    if kind == "latent" and layer.uses_rope and layer.num_rope_heads > 1:
        return layer.num_rope_heads
    return None


def _kept_weights(layer, row: np.ndarray) -> tuple[dict, int, int | None]:
    """(sliced weights, heads kept, groups kept: layers with head groups only)."""
    row = row[: layer.num_heads]
    keep = [int(h) for h in np.flatnonzero(row != 0)]
    weights = numpy_weights(layer)
    gates = weights.pop("head_gates")
    kind = kind_of(layer)
    groups = _groups_of(layer)
    if groups is not None:
        # Whole groups go; a kept group's pruned heads stay with gate 0 (no head left:
        # group 0 stays, all gates 0).
        keep = whole_groups(keep or [0], layer.num_heads, groups)
        gates = np.where(row != 0, gates, 0.0)
        folded, groups = np.take(gates, keep), len(keep) // (layer.num_heads // groups)
    else:
        folded = np.take(gates, keep) if keep else np.zeros([1], np.float32)
    sliced = slice_heads(kind, weights, keep)
    # Fold the kept gates (all zero when no head is left) into the output rows.
    sliced["output_kernel"] = sliced["output_kernel"] * folded[:, None, None]
    return sliced, len(folded), groups


def remove_heads(backbone: AttentionModel, mask: np.ndarray | None = None) -> AttentionModel:
    """A new backbone (or LM) without the heads whose mask entry is 0.

    Args:
      backbone: A Keras 3 `BertBackbone` or `CausalLM` (possibly already pruned).
      mask: `[layers, max heads]`, 0 = remove (entries beyond a layer's head
        count are ignored); default: the backbone's current gates.

    Returns:
      The pruned model, of `backbone`'s class: its `attention.num_heads` is the per-layer list of
      kept heads (at least 1), its outputs equal the masked `backbone`'s, and
      its gates are all ones. `backbone` is left unchanged.

    Example:

    >>> mask = np.ones([2, 4]); mask[0, :2] = 0
    >>> smaller = remove_heads(backbone, mask)
    >>> smaller.attention_spec.num_heads
    (2, 4)
    """
    current = head_mask(backbone)
    mask = current if mask is None else np.asarray(mask, np.float32)
    if mask.shape != current.shape:
        raise ValueError(
            f"Head mask has shape {mask.shape}; expected {current.shape} (layers x heads)."
        )
    layers = backbone.attention_layers
    kept = [_kept_weights(layer, row) for layer, row in zip(layers, mask, strict=True)]
    spec = backbone.attention_spec
    head_sizes = [layer.head_size for layer in layers]
    changes = {
        "num_heads": tuple(count for _, count, _ in kept),
        "head_size": None if spec.kind == "standard" else tuple(head_sizes),
    }
    if spec.kind == "grouped":
        changes["num_kv_heads"] = tuple(g for _, _, g in kept)
    if spec.kind == "latent" and any(g is not None for _, _, g in kept):
        changes["num_rope_heads"] = tuple(
            layer.num_rope_heads if g is None else g
            for layer, (_, _, g) in zip(layers, kept, strict=True)
        )
    new_spec = dataclasses.replace(spec, **changes)
    if spec.kind == "standard":
        # Fewer heads of the same size: the head size no longer is width // heads. Rotary
        # sets per head (partial RoPE) follow the kept heads.
        rope_sets = None
        if spec.rope_frequencies is not None:
            rope_sets = [
                [layer.rope_sets[h] for h in np.flatnonzero(row[: layer.num_heads] != 0)]
                or [layer.rope_sets[0]]
                for layer, row in zip(layers, mask, strict=True)
            ]
        new_spec = dataclasses.replace(
            spec,
            kind="fixed_head",
            num_heads=new_spec.num_heads,
            head_size=tuple(head_sizes),
            rope_frequencies=rope_sets,
        )
    elif "num_kv_heads" in changes or "num_rope_heads" in changes:
        # Rotary sets per key/value head (per rotary key) follow the kept groups.
        rope_sets = []
        for layer, row in zip(layers, mask, strict=True):
            groups = _groups_of(layer)
            if groups is None or not layer.uses_rope:
                rope_sets.append(layer.rope_sets)
                continue
            keep = whole_groups(
                [int(h) for h in np.flatnonzero(row[: layer.num_heads] != 0)] or [0],
                layer.num_heads,
                groups,
            )
            size = layer.num_heads // groups
            rope_sets.append([layer.rope_sets[g] for g in sorted({h // size for h in keep})])
        if spec.rope_frequencies is not None or "num_rope_heads" in changes:
            new_spec = dataclasses.replace(new_spec, rope_frequencies=rope_sets)
    new = with_attention(backbone, new_spec)
    for target, (weights, _, _) in zip(new.attention_layers, kept, strict=True):
        assign_weights(target, weights)
    return new
