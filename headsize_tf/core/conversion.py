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

from headsize_tf.core import convert, kv_sharing
from headsize_tf.core.spec import AttentionSpec, ResolvedAttention, SpecError, check_positive_int

TARGET_KINDS = ("grouped", "latent", "collaborative")
DEFAULT_METHODS = {"grouped": "svd", "latent": "joint_svd", "collaborative": "als"}
METHODS = {
    "grouped": kv_sharing.GROUPED_METHODS,
    "latent": ("joint_svd", "joint_svd_unbalanced"),
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
      method: grouped: "svd" (default, per-group operator subspaces) or
        "mean" (Ainslie et al.'s mean pooling); latent: "joint_svd" (default,
        keys balanced against values, TransMLA) or "joint_svd_unbalanced"
        (MHA2MLA); collaborative: "als" (default) or "tensorly".

    Example:

    >>> target = ConversionTarget("grouped", 2)
    >>> layer = AttentionSpec("standard", num_heads=8).resolve(64)
    >>> target.spec([layer, layer], width=64)
    AttentionSpec(kind='grouped', num_heads=8, head_size=8, ...)
    """

    kind: str
    size: int | tuple[int, ...]
    method: str | None = None

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
            if layer.kind not in ("standard", "fixed_head"):
                raise SpecError(
                    f"Layer {i} has {layer.kind} attention; only multi-head (standard or "
                    "fixed_head) attention converts."
                )
            size = self.layer_size(i)
            if self.kind == "grouped":
                kv_sharing.check_num_kv_heads(size, layer.num_heads)
            elif self.kind == "latent":
                full = layer.num_heads * (layer.head_size + layer.value_dim)
                kv_sharing.check_latent_rank(size, full if width is None else min(width, full))
        if self.kind == "collaborative":
            # Layers below D (e.g. pruned ones) convert exactly at their own full rank.
            full = max(layer.num_heads * layer.head_size for layer in layers)
            if max(self.layer_size(i) for i in range(len(layers))) > full:
                raise SpecError(
                    f"shared_key_dim={self.size} is above the full rank heads x head size = {full}."
                )

    def spec(self, layers: Sequence[ResolvedAttention], width: int | None = None) -> AttentionSpec:
        """The converted model's spec (per-layer lists where the layers differ)."""
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
        if self.kind == "grouped":
            return AttentionSpec("grouped", num_kv_heads=field(sizes), **common)
        if self.kind == "latent":
            return AttentionSpec("latent", kv_latent_dim=field(sizes), **common)
        if len(set(sizes)) > 1:
            raise SpecError(
                f"shared_key_dim must be one value for every layer; got {sizes} (collaborative "
                "specs have one shared key dim)."
            )
        return AttentionSpec("collaborative", shared_key_dim=sizes[0], **common)

    def convert_layer(
        self,
        weights: dict[str, np.ndarray | None],
        index: int,
        name: str = "attention",
        **kwargs: Any,
    ) -> tuple[dict[str, np.ndarray | None], dict[str, Any]]:
        """Layer `index`'s converted weights (core layout) and a JSON-able report."""
        size = self.layer_size(index)
        if self.kind == "grouped":
            out, report = kv_sharing.grouped_weights(weights, size, method=self.method, name=name)
            return out, {"layer": name, **report.to_dict()}
        if self.kind == "latent":
            out, report = kv_sharing.latent_weights(
                weights, size, balance=self.method == "joint_svd", name=name
            )
            return out, {"layer": name, **report.to_dict()}
        out, report = convert.convert_weights(
            weights, size, name=name, method=self.method, **kwargs
        )
        return out, report.to_dict()

    def to_dict(self) -> dict[str, Any]:
        size = list(self.size) if isinstance(self.size, tuple) else self.size
        return {"kind": self.kind, self.size_name: size, "method": self.method}
