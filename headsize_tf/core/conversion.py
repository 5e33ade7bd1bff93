"""One description of a head-sharing conversion, used by every model and both fronts.

A trained multi-head model converts into another attention kind layer by
layer: `ConversionTarget` says into what (grouped key/value heads, a shared
latent, or collaborative query/key heads) and at what size, validates that
size against each layer, builds the converted model's `AttentionSpec` and
converts one layer's numpy weights (`headsize_tf.core.kv_sharing`,
`headsize_tf.core.convert`). The fronts only read layers into the core
layout, rebuild the model with `target.spec(...)` and write the weights back,
so every conversion of every model goes through this one driver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from headsize_tf.core import convert, kv_sharing, rope
from headsize_tf.core.spec import AttentionSpec, ResolvedAttention, SpecError, check_positive_int

TARGET_KINDS = ("grouped", "latent", "collaborative")
DEFAULT_METHODS = {"grouped": "svd", "latent": "joint_svd", "collaborative": "als"}
METHODS = {
    "grouped": kv_sharing.GROUPED_METHODS,
    "latent": ("joint_svd", "joint_svd_unbalanced", "split_svd"),
    "collaborative": convert.METHODS,
}
# The flag naming each kind's size, for messages.
SIZE_NAMES = {
    "grouped": "num_kv_heads",
    "latent": "kv_latent_dim",
    "collaborative": "shared_key_dim",
}


@dataclasses.dataclass(frozen=True)
class ConversionTarget:
    """What a multi-head model converts into.

    Args:
      kind: "grouped" (G key/value heads), "latent" (a shared r-sized
        key/value latent) or "collaborative" (a shared D-sized query/key space).
      size: G, r or D; one int for every layer, or one per layer.
      method: grouped: "svd" (default, per-group operator subspaces; "mean"
        on rotary models, where "svd" is refused), "mean" (Ainslie et al.'s
        mean pooling) or "svd_values" (keys mean-pooled, values by their
        operator subspace; rotary models too); latent: "joint_svd" (default, keys balanced against
        values, TransMLA), "joint_svd_unbalanced" (MHA2MLA) or "split_svd"
        (MHA2MLA's split variant: keys and values each their own SVD);
        collaborative: "als" (default) or "tensorly".
      rope_frequencies: Latent targets of rotary models: the frequency pairs
        each source key/value head keeps on RoPE (its decoupled rotary key),
        one list per key/value head, or one such entry per layer; None keeps
        every pair (the exact limit: the latent then holds the values).
      rope_components: Latent targets of rotary models, rotated RoPE
        (TransMLA's RoRoPE, `kv_sharing.rotated_rope_latent_weights`): the
        (frequency, component) pairs of the per-frequency PCA across
        key/value heads that keep RoPE, one list per layer (or one for every
        layer). They form one rotary key shared by all query heads; the
        converted heads grow to `2 x (frequencies not wholly kept) + 2K`
        dimensions on the source's frequency grid. Exclusive with
        `rope_frequencies`.
      rope_fold: Rotated RoPE only: TransMLA's FreqFold, the PCA over bands
        of this many neighbouring frequencies (`kv_sharing.RotatedRope`);
        `rope_components` are then (band, component) pairs. 1 (default):
        one frequency per PCA, the exact RoRoPE.

    Sources are multi-head or grouped layers (Llama's GQA), with or without
    rotary positions (RoPE); the converted spec keeps the source's RoPE
    settings.

    Example:

    >>> target = ConversionTarget("grouped", 2)
    >>> layer = AttentionSpec("standard", num_heads=8).resolve(64)
    >>> target.spec([layer, layer], width=64)
    AttentionSpec(kind='grouped', num_heads=8, head_size=8, ...)
    """

    kind: str
    size: int | tuple[int, ...]
    method: str | None = None
    rope_frequencies: Any = None
    rope_components: Any = None
    rope_fold: int = 1

    def __post_init__(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise SpecError(
                f"Unknown conversion target {self.kind!r}; expected one of {list(TARGET_KINDS)}."
            )
        name = SIZE_NAMES[self.kind]
        if isinstance(self.size, Sequence) and not isinstance(self.size, str):
            if not self.size:
                raise SpecError(f"`{name}` per-layer list is empty.")
            size = tuple(check_positive_int(f"{name}[{i}]", s) for i, s in enumerate(self.size))
        else:
            size = check_positive_int(name, self.size)
        object.__setattr__(self, "size", size)
        if self.rope_frequencies is not None:
            if self.kind != "latent":
                raise SpecError(
                    "rope_frequencies (the rotary pairs kept) are for latent targets; grouped K/V "
                    "keeps every key's rotation."
                )
            object.__setattr__(
                self, "rope_frequencies", rope.normalize_frequencies(self.rope_frequencies)
            )
        if self.rope_components is not None:
            if self.kind != "latent" or self.rope_frequencies is not None:
                raise SpecError(
                    "rope_components (rotated RoPE) are for latent targets, instead of "
                    "rope_frequencies."
                )
            value = self.rope_components
            per_layer = bool(value) and all(
                isinstance(entry, Sequence) and entry and isinstance(entry[0], Sequence)
                for entry in value
            )
            layers = value if per_layer else [value]
            normalized = tuple(tuple(tuple(int(x) for x in pair) for pair in e) for e in layers)
            object.__setattr__(self, "rope_components", normalized if per_layer else normalized[0])
        fold = check_positive_int("rope_fold", self.rope_fold)
        if fold != 1 and self.rope_components is None:
            raise SpecError(
                f"rope_fold={fold} (FreqFold) folds the frequencies of rotated RoPE; give "
                "rope_components too."
            )
        object.__setattr__(self, "rope_fold", fold)
        method = self.method or DEFAULT_METHODS[self.kind]
        if method not in METHODS[self.kind]:
            raise SpecError(
                f"Unknown {self.kind} method {method!r}; expected one of {list(METHODS[self.kind])}."
            )
        object.__setattr__(self, "method", method)

    @property
    def size_name(self) -> str:
        return SIZE_NAMES[self.kind]

    def layer_size(self, index: int) -> int:
        """The size of layer `index`."""
        return self.size[index] if isinstance(self.size, tuple) else self.size

    def check_layers(self, layers: Sequence[ResolvedAttention], width: int | None = None) -> None:
        """Raises a `SpecError` naming the first layer the target cannot convert.

        Args:
          layers: The model's layers' concrete sizes.
          width: The key/value input width (bounds a latent's rank), if known.
        """
        if isinstance(self.size, tuple) and len(self.size) != len(layers):
            raise SpecError(
                f"`{self.size_name}` has {len(self.size)} entries; the model has {len(layers)} "
                "attention layers."
            )
        for i, layer in enumerate(layers):
            sources = ("standard", "fixed_head", "grouped")
            if layer.kind not in sources or (
                self.kind == "collaborative" and layer.kind == "grouped"
            ):
                raise SpecError(
                    f"Layer {i} has {layer.kind} attention; only multi-head (standard or "
                    "fixed_head) attention converts"
                    + ("" if self.kind == "collaborative" else " (or grouped K/V)")
                    + f" to {self.kind}."
                )
            if self.kind == "collaborative" and layer.uses_rope:
                raise SpecError(
                    "Collaborative heads share one query/key space mixed per head, which RoPE's "
                    "per-pair rotations do not commute with; a rotary model converts to grouped "
                    "or latent K/V."
                )
            size = self.layer_size(i)
            if self.kind == "grouped":
                kv_sharing.check_num_kv_heads(size, layer.num_heads)
                if layer.uses_rope and self.method == "svd":
                    raise SpecError(
                        "--method svd re-bases key dimensions, which RoPE rotates in fixed pairs "
                        "by position; a rotary model converts to grouped K/V with --method mean "
                        "or svd_values."
                    )
                if layer.uses_rope and len(set(layer.rope_sets)) > 1:
                    raise SpecError(
                        f"Layer {i}'s key/value heads rotate different frequency sets; pooling "
                        "them into shared key/value heads would mix rotations."
                    )
            elif self.kind == "latent" and self.rope_components is not None:
                if not layer.uses_rope:
                    raise SpecError(
                        "rope_components (rotated RoPE) were given, but the model has no rotary "
                        "positions (RoPE): there is no rotation to keep."
                    )
                if isinstance(self.rope_components[0][0], Sequence) and len(
                    self.rope_components
                ) != len(layers):
                    raise SpecError(
                        f"rope_components has {len(self.rope_components)} entries; the model has "
                        f"{len(layers)} attention layers."
                    )
                firsts, head_size = self._rotated_sizes(i, layer)
                nope = layer.num_heads * (head_size - 2 * len(firsts))
                kv_sharing.check_latent_rank(
                    size, self._latent_limit(nope, layer.num_heads * layer.value_dim, width)
                )
            elif self.kind == "latent":
                rotary = self.layer_rope_sets(i, layer) if layer.uses_rope else None
                kept = 0 if rotary is None else len(rotary[0])
                nope = layer.num_heads * (layer.head_size - 2 * kept)
                if not layer.uses_rope and self.rope_frequencies is not None:
                    raise SpecError(
                        "rope_frequencies were given, but the model has no rotary positions "
                        "(RoPE): there is no rotation to keep."
                    )
                kv_sharing.check_latent_rank(
                    size, self._latent_limit(nope, layer.num_heads * layer.value_dim, width)
                )
        if self.kind == "collaborative":
            # Layers below D (e.g. pruned ones) convert exactly at their own full rank.
            full = max(layer.num_heads * layer.head_size for layer in layers)
            if max(self.layer_size(i) for i in range(len(layers))) > full:
                raise SpecError(
                    f"shared_key_dim={self.size} is above the full rank heads x head size = {full}."
                )

    def _latent_limit(self, key_columns: int, value_columns: int, width: int | None) -> int:
        """The latent size at which this target's SVD is exact (`kv_sharing.latent_rank_limit`)."""
        if width is None:
            return key_columns + value_columns
        split = self.method == "split_svd"
        return kv_sharing.latent_rank_limit(key_columns, value_columns, width, split)

    def layer_rope_components(self, index: int, layer: ResolvedAttention) -> list:
        """A rotated-RoPE latent target's (frequency, component) pairs of layer `index`, checked."""
        value = self.rope_components
        if value and isinstance(value[0][0], Sequence):
            value = value[index]
        groups = layer.num_kv_heads or layer.num_heads
        return kv_sharing.check_rotated_components(
            value, layer.head_size // 2, groups, f"layer {index}", self.rope_fold
        )

    def _rotated_sizes(self, index: int, layer: ResolvedAttention) -> tuple[list[int], int]:
        """(the rotary key's frequencies, the converted head size) of a rotated-RoPE layer."""
        groups = layer.num_kv_heads or layer.num_heads
        firsts, nope = kv_sharing.rotated_layout(
            self.layer_rope_components(index, layer), layer.head_size // 2, groups, self.rope_fold
        )
        return firsts, 2 * len(nope) + 2 * len(firsts)

    def layer_rope_sets(self, index: int, layer: ResolvedAttention) -> tuple[tuple[int, ...], ...]:
        """The rotary pairs each key/value head of a rotary layer keeps (latent targets)."""
        groups = layer.num_kv_heads or layer.num_heads
        value = self.rope_frequencies
        if rope.is_per_layer(value):
            value = value[index]
        if value is None:
            return tuple(tuple(range(layer.head_size // 2)) for _ in range(groups))
        sets = rope.resolve_sets(value, groups, layer.head_size // 2, "rope_frequencies")
        if len({len(s) for s in sets}) != 1 or not sets[0]:
            raise SpecError(
                "rope_frequencies: every key/value head keeps the same number (>= 1) of "
                f"frequency pairs; got {[len(s) for s in sets]}."
            )
        return sets

    def spec(
        self,
        layers: Sequence[ResolvedAttention],
        width: int | None = None,
        rope: tuple[float, Any] | None = None,
    ) -> AttentionSpec:
        """The converted model's spec (per-layer lists where the layers differ).

        `rope`: the model's own (RoPE base, scaling), for a model whose layers
        differ in them (Gemma 3's local and global layers, which the model sets
        per layer itself); without it, such layers are an error.
        """
        self.check_layers(layers, width)

        def field(values: list[int]) -> int | tuple[int, ...]:
            return values[0] if len(set(values)) == 1 else tuple(values)

        sizes = [self.layer_size(i) for i in range(len(layers))]
        common = {
            "num_heads": field([layer.num_heads for layer in layers]),
            "head_size": field([layer.head_size for layer in layers]),
        }
        if any(layer.value_dim != layer.head_size for layer in layers):
            values = {layer.value_dim for layer in layers}
            if len(values) > 1:
                raise SpecError(
                    f"Layers with different value sizes {sorted(values)} convert only one by one "
                    "(a spec has one value_dim)."
                )
            common["value_dim"] = values.pop()
        rotary = {layer.uses_rope for layer in layers}
        if len(rotary) > 1:
            raise SpecError("Some layers rotate their keys (RoPE) and some do not.")
        if rotary.pop():
            settings = {
                (layer.rope_max_wavelength, repr(layer.rope_scaling)): layer for layer in layers
            }
            if rope is None and len(settings) > 1:
                raise SpecError(
                    "The layers' RoPE bases or scalings differ "
                    f"({sorted(base for base, _ in settings)}): give the model's own (`rope`)."
                )
            base, scaling = (
                rope
                if rope is not None
                else (layers[0].rope_max_wavelength, layers[0].rope_scaling)
            )
            common["rope_max_wavelength"] = base
            common["rope_scaling"] = scaling
        if self.kind == "grouped":
            if "rope_max_wavelength" in common:
                sets = [layer.rope_sets[0] for layer in layers]
                full = [tuple(range(layer.head_size // 2)) for layer in layers]
                if sets != full:
                    common["rope_frequencies"] = [[list(s)] for s in sets]
            return AttentionSpec("grouped", num_kv_heads=field(sizes), **common)
        if self.kind == "latent" and self.rope_components is not None:
            sizes_and_sets = [self._rotated_sizes(i, layer) for i, layer in enumerate(layers)]
            grids = {layer.head_size for layer in layers}
            if len(grids) > 1:
                raise SpecError(
                    f"Rotated RoPE keeps the source's frequency grid; its layers have head sizes "
                    f"{sorted(grids)} (one grid per spec)."
                )
            per_layer = [[firsts] for firsts, _ in sizes_and_sets]
            common["head_size"] = field([size for _, size in sizes_and_sets])
            # The heads grow; the values keep their size (one value_dim per spec, checked above).
            common["value_dim"] = layers[0].value_dim
            common["rope_frequencies"] = (
                per_layer
                if len(layers) > 1 and any(p != per_layer[0] for p in per_layer)
                else per_layer[0]
            )
            common["num_rope_heads"] = 1
            common["rope_grid_size"] = grids.pop()
            return AttentionSpec("latent", kv_latent_dim=field(sizes), **common)
        if self.kind == "latent":
            if "rope_max_wavelength" in common:
                per_layer = [
                    [list(s) for s in self.layer_rope_sets(i, layer)]
                    for i, layer in enumerate(layers)
                ]
                common["rope_frequencies"] = (
                    per_layer
                    if len(layers) > 1 and any(p != per_layer[0] for p in per_layer)
                    else per_layer[0]
                )
                common["num_rope_heads"] = field(
                    [layer.num_kv_heads or layer.num_heads for layer in layers]
                )
            return AttentionSpec("latent", kv_latent_dim=field(sizes), **common)
        if len(set(sizes)) > 1:
            raise SpecError(
                f"shared_key_dim must be one value for every layer; got {sizes} (collaborative "
                "specs have one shared key dim)."
            )
        return AttentionSpec("collaborative", shared_key_dim=sizes[0], **common)

    def check_query_key_norms(self, name: str) -> None:
        """Refuses what cannot hold a layer whose queries and keys get a per-head RMSNorm."""
        if self.kind == "collaborative":
            raise SpecError(
                f"Layer {name!r} normalises its queries and keys per head (Qwen3, Gemma 3), "
                "which shared collaborative keys cannot hold; convert its K/V (--to grouped "
                "or --to latent)."
            )
        if self.kind == "latent" and self.rope_components is not None:
            raise SpecError(
                f"Layer {name!r} normalises each key head (Qwen3, Gemma 3) before RoPE, which "
                "rotated RoPE would mix across heads; keep rotary pairs per key/value head "
                "(--rope-strategy 2norm, high, low or uniform)."
            )
        if self.kind == "grouped" and self.method == "svd":
            raise SpecError(
                f"Layer {name!r} normalises each key head with one scale per dimension, which "
                "method='svd' would re-base; use method='mean' or 'svd_values'."
            )

    def convert_layer(
        self,
        weights: dict[str, np.ndarray | None],
        index: int,
        name: str = "attention",
        source: ResolvedAttention | None = None,
        covariance: np.ndarray | None = None,
        **kwargs: Any,
    ) -> tuple[dict[str, np.ndarray | None], dict[str, Any]]:
        """Layer `index`'s converted weights (core layout) and a JSON-able report.

        `source` (the layer's resolved sizes) says whether it rotates its keys;
        `covariance` (its inputs' second moment, from calibration text) makes a
        latent's SVD, or a grouped "svd" / "svd_values" one, one of the
        activations (`kv_sharing.joint_basis`, `kv_sharing.grouped_weights`).
        """
        size = self.layer_size(index)
        rotary = source is not None and source.uses_rope
        norms = {role: weights.get(role) for role in ("query_norm", "key_norm")}
        norms = {role: norm for role, norm in norms.items() if norm is not None}
        weights = {k: v for k, v in weights.items() if k not in ("query_norm", "key_norm")}
        if norms:
            self.check_query_key_norms(name)
            if self.kind == "latent" and not rotary:
                raise SpecError(
                    f"Layer {name!r} normalises its keys per head without RoPE; a latent "
                    "holds such keys only beside rotary keys."
                )
        if self.kind == "grouped":
            out, report = kv_sharing.grouped_weights(
                weights, size, method=self.method, rope=rotary, covariance=covariance, name=name
            )
            # A group's key is the normalised mean of its heads' projections: the per-head
            # norms (one scale vector for every head) stay as they are.
            return {**out, **norms}, {"layer": name, **report.to_dict()}
        if self.kind == "latent":
            balance = self.method != "joint_svd_unbalanced"
            split = self.method == "split_svd"
            if rotary and self.rope_components is not None:
                out, report = kv_sharing.rotated_rope_latent_weights(
                    weights,
                    size,
                    self.layer_rope_components(index, source),
                    balance=balance,
                    covariance=covariance,
                    split=split,
                    fold=self.rope_fold,
                    name=name,
                )
            elif rotary:
                out, report = kv_sharing.rope_latent_weights(
                    {**weights, **norms},
                    size,
                    self.layer_rope_sets(index, source),
                    balance=balance,
                    covariance=covariance,
                    split=split,
                    name=name,
                )
            else:
                weights = {k: v for k, v in weights.items() if k != "key_bias"}
                out, report = kv_sharing.latent_weights(
                    weights, size, balance=balance, covariance=covariance, split=split, name=name
                )
            return out, {"layer": name, **report.to_dict()}
        out, report = convert.convert_weights(
            weights, size, name=name, method=self.method, **kwargs
        )
        return out, report.to_dict()

    def to_dict(self) -> dict[str, Any]:
        size = list(self.size) if isinstance(self.size, tuple) else self.size
        out = {"kind": self.kind, self.size_name: size, "method": self.method}
        if self.rope_frequencies is not None:
            out["rope_frequencies"] = _plain(self.rope_frequencies)
        if self.rope_components is not None:
            out["rope_components"] = _plain(self.rope_components)
        if self.rope_fold != 1:
            out["rope_fold"] = self.rope_fold
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value
