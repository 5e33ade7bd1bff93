"""`AttentionSpec`: the one description of an attention layer's heads.

Every model, config, parameter formula and tool of the library describes its
attention by one frozen `AttentionSpec` (kind, heads, head size, value head
size, shared key dim, mixing initializer), validated once here and resolved
to concrete sizes by one rule, `AttentionSpec.resolve`. Pure Python: the
tf_keras and Keras 3 fronts both build their layers from it.

Head-size rules (the only place they are coded):

* ``standard``: head size = width // num_heads (width must be a multiple);
  `head_size` must be None (a stray value is an error, not silently ignored).
* ``fixed_head``: head size = `head_size`, an int or ``"sequence_length"``
  (Bhojanapalli et al.'s d_p = n), which a model resolves from its
  `max_sequence_length` and a bare layer from the key length at build.
* ``collaborative``: heads share a query/key space of `shared_key_dim` D;
  `head_size` (softmax scale and default value head size) defaults to
  width // num_heads.
* ``grouped``: grouped-query attention (Ainslie et al., 2023): the query
  heads fall into `num_kv_heads` contiguous groups of equal size, each group
  sharing one key/value head (`num_kv_heads=1` is multi-query attention);
  `head_size` defaults to width // num_heads.
* ``latent``: a shared latent key/value (DeepSeek-V2's MLA, without RoPE):
  every head's keys and values are up-projections of one `kv_latent_dim`-sized
  latent per position, the only thing a decoder caches; `head_size` defaults
  to width // num_heads.

`value_dim` sets the per-head value size independently (default: the head
size), as in `MultiHeadAttention(value_dim=...)`.

Rotary positions (RoPE, `headsize_tf.core.rope`), on every kind:
`rope_max_wavelength` (the base; None: no rotary positions, what configs
without these fields load as), `rope_scaling` (Hugging Face's dict: linear,
Llama 3's or YaRN) and `rope_frequencies`, the frequency indices that rotate
per rotary head (None: all of them; a subset is partial RoPE). The rotary
heads are the key/value heads (`num_heads` for standard and fixed_head,
`num_kv_heads` for grouped), the one shared key of collaborative attention,
and for latent attention the `num_rope_heads` decoupled rotary keys
(DeepSeek-V2's MLA: 1; MHA2MLA's conversion: one per original key/value
head), cached beside the latent. A latent head's query and key have
`head_size` dimensions: the rotary pairs last, the rest compared with the
latent's key up-projection. Its default set is p / 4 evenly spread
frequencies. A latent's rotary frequencies index the grid of a head of
`rope_grid_size` (default `head_size`): a rotated-RoPE conversion
(TransMLA's RoRoPE) keeps the source's grid while its heads grow, and its
one rotary key may repeat a frequency (several components of it rotate).

Per-layer settings: `num_heads`, `head_size`, `num_kv_heads` and
`kv_latent_dim` may be sequences with one entry per layer (`for_layer(i)` gives layer i's scalar spec), so a pruned
model or a spec with varying heads per layer is an ordinary spec.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from headsize_tf.core import rope
from headsize_tf.core.errors import SpecError

KINDS = ("standard", "fixed_head", "collaborative", "grouped", "latent")
# Kinds whose optional `head_size` is an int (default width // num_heads).
OPTIONAL_HEAD_SIZE_KINDS = ("collaborative", "grouped", "latent")
# Fields that may hold one entry per layer.
PER_LAYER_FIELDS = ("num_heads", "head_size", "num_kv_heads", "kv_latent_dim", "num_rope_heads")
SEQUENCE_LENGTH = "sequence_length"
MIXING_INITIALIZERS = ("concatenate", "ones", "uniform", "normal")

# Flat keys used before the spec existed, and where they live now.
LEGACY_KEYS = {
    "attention_type": "attention.kind",
    "num_attention_heads": "attention.num_heads",
    "head_size": "attention.head_size",
    "shared_key_dim": "attention.shared_key_dim",
    "mixing_initializer": "attention.mixing_initializer",
}


def is_positive_int(value: Any) -> bool:
    """Whether `value` is an integer (Python's or NumPy's, not a bool) above 0: the one test
    of the spec, the config fields (`configs.encoders.check_positive`) and search spaces."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0


def check_positive_int(name: str, value: Any, expected: str = "a positive integer") -> int:
    """Returns `value` as int or raises a `SpecError` naming it."""
    if not is_positive_int(value):
        raise SpecError(f"`{name}` must be {expected}; got {value!r}.")
    return int(value)


def check_head_size(value: Any, name: str = "head_size") -> int | str:
    """A head size: a positive int or "sequence_length"."""
    if isinstance(value, str):
        if value != SEQUENCE_LENGTH:
            raise SpecError(
                f'`{name}` must be a positive int or "{SEQUENCE_LENGTH}"; got {value!r}.'
            )
        return value
    return check_positive_int(name, value, expected=f'a positive int or "{SEQUENCE_LENGTH}"')


def _per_layer(name: str, value: Any, check) -> Any:
    if getattr(value, "ndim", None) == 1 and hasattr(value, "tolist"):
        value = value.tolist()  # A 1-D array (NumPy's), as a list: one entry per layer.
    if isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            raise SpecError(f"`{name}` per-layer list is empty; give one entry per layer.")
        return tuple(check(f"{name}[{i}]", v) for i, v in enumerate(value))
    return check(name, value)


@dataclasses.dataclass(frozen=True)
class ResolvedAttention:
    """Concrete sizes of one attention layer (no strings, no per-layer lists)."""

    kind: str
    num_heads: int
    head_size: int
    value_dim: int
    shared_key_dim: int | None = None
    num_kv_heads: int | None = None
    kv_latent_dim: int | None = None
    rope_max_wavelength: float | None = None
    rope_scaling: Any = None
    rope_sets: tuple[tuple[int, ...], ...] | None = None
    num_rope_heads: int | None = None
    rope_grid_size: int | None = None

    @property
    def uses_rope(self) -> bool:
        return self.rope_max_wavelength is not None

    @property
    def num_rotary_heads(self) -> int:
        """Heads whose keys rotate: key/value heads, the shared key, or latent rotary keys."""
        if self.kind == "grouped":
            return int(self.num_kv_heads)
        if self.kind == "collaborative":
            return 1
        if self.kind == "latent":
            return int(self.num_rope_heads or 1)
        return self.num_heads

    @property
    def rotary_dim(self) -> int:
        """The size whose frequency grid the rotary sets index (the head's, D, or a latent's
        `rope_grid_size`)."""
        if self.kind == "collaborative":
            return int(self.shared_key_dim)
        return int(self.rope_grid_size or self.head_size)

    @property
    def rope_pairs(self) -> int:
        """Rotating pairs per rotary head (0 without RoPE)."""
        return len(self.rope_sets[0]) if self.uses_rope else 0


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
    """Kind and sizes of an attention layer's heads.

    Args:
      kind: "standard", "fixed_head" or "collaborative".
      num_heads: Heads h (a positive int, or one per layer).
      head_size: fixed_head: d_p (int or "sequence_length"); collaborative:
        optional softmax-scale / value head size; standard: must be None.
        May be a per-layer list for fixed_head.
      value_dim: Optional per-head value size (default: the head size).
      shared_key_dim: collaborative only: the shared query/key size D.
      mixing_initializer: collaborative only: "concatenate", "ones",
        "uniform", "normal" or a Keras initializer name.
      num_kv_heads: grouped only: the number G of key/value heads (groups of
        query heads); must divide `num_heads`. May be a per-layer list.
      kv_latent_dim: latent only: the size r of the shared key/value latent.
        May be a per-layer list.
      rope_max_wavelength: The RoPE base (e.g. 10000); None: no rotary
        positions.
      rope_scaling: None or a Hugging Face `rope_scaling` dict ("linear",
        "llama3", "yarn" under `rope_type`).
      rope_frequencies: The rotating frequency indices: None (all; latent:
        p / 4 evenly spread), one list for every rotary head, one list per
        rotary head, or one such entry per layer (`headsize_tf.core.rope`).
      num_rope_heads: latent with RoPE only: the decoupled rotary keys (1 by
        default). May be a per-layer list.
      rope_grid_size: latent with RoPE only: the head size whose frequency
        grid `rope_frequencies` index (default: `head_size`; a rotated-RoPE
        conversion keeps its source's), where a set may repeat a frequency.

    Example:

    >>> spec = AttentionSpec("fixed_head", num_heads=8, head_size=32)
    >>> spec.resolve(width=64).head_size
    32
    >>> AttentionSpec("standard", num_heads=8).resolve(width=64).head_size
    8
    >>> AttentionSpec("grouped", num_heads=8, num_kv_heads=2).resolve(width=64).num_kv_heads
    2
    """

    kind: str = "standard"
    num_heads: int | tuple[int, ...] = 8
    head_size: int | str | None | tuple[int | str, ...] = None
    value_dim: int | None = None
    shared_key_dim: int | None = None
    mixing_initializer: str = "uniform"
    num_kv_heads: int | tuple[int, ...] | None = None
    kv_latent_dim: int | tuple[int, ...] | None = None
    rope_max_wavelength: float | None = None
    rope_scaling: Any = None
    rope_frequencies: Any = None
    num_rope_heads: int | tuple[int, ...] | None = None
    rope_grid_size: int | None = None

    def __hash__(self) -> int:
        # `rope_scaling` is a dict (Hugging Face's form): hashed by its items, so a spec is a
        # dict key or set member whatever its fields.
        return hash(tuple(_hashable(getattr(self, f.name)) for f in dataclasses.fields(self)))

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if self.kind not in KINDS:
            raise SpecError(f"Unknown attention kind {self.kind!r}; expected one of {list(KINDS)}.")
        set_(self, "num_heads", _per_layer("num_heads", self.num_heads, check_positive_int))
        if self.head_size is not None:
            if self.kind == "standard":
                raise SpecError(
                    f"standard attention uses head size = width // num_heads; head_size="
                    f"{self.head_size!r} is only for kind 'fixed_head' or 'collaborative'."
                )
            set_(
                self,
                "head_size",
                _per_layer("head_size", self.head_size, lambda n, v: check_head_size(v, n)),
            )
        elif self.kind == "fixed_head":
            raise SpecError("fixed_head attention needs `head_size` (an int or 'sequence_length').")
        if self.kind in OPTIONAL_HEAD_SIZE_KINDS and self.head_size is not None:
            sizes = self.head_size if isinstance(self.head_size, tuple) else (self.head_size,)
            if SEQUENCE_LENGTH in sizes:
                raise SpecError(
                    f'{self.kind} attention takes an int head_size; "{SEQUENCE_LENGTH}" is '
                    "for fixed_head."
                )
        if self.value_dim is not None:
            set_(self, "value_dim", check_positive_int("value_dim", self.value_dim))
        if self.kind == "collaborative":
            if self.shared_key_dim is None:
                raise SpecError("collaborative attention needs `shared_key_dim` (D); got None.")
            set_(self, "shared_key_dim", check_positive_int("shared_key_dim", self.shared_key_dim))
        elif self.shared_key_dim is not None:
            raise SpecError(
                f"shared_key_dim={self.shared_key_dim!r} is only for kind 'collaborative' "
                f"(kind is {self.kind!r})."
            )
        if not isinstance(self.mixing_initializer, str | Mapping):
            raise SpecError(
                f"`mixing_initializer` must be one of {list(MIXING_INITIALIZERS)} or a Keras "
                f"initializer name or config; got {self.mixing_initializer!r}."
            )
        self._check_kind_field("num_kv_heads", "grouped")
        self._check_kind_field("kv_latent_dim", "latent")
        self._check_rope()
        lists = {
            name: getattr(self, name)
            for name in PER_LAYER_FIELDS
            if isinstance(getattr(self, name), tuple)
        }
        if rope.is_per_layer(self.rope_frequencies):
            lists["rope_frequencies"] = self.rope_frequencies
        if len({len(v) for v in lists.values()}) > 1:
            raise SpecError(
                "Per-layer lists have different lengths: "
                + ", ".join(f"{name} {list(value)}" for name, value in lists.items())
                + "."
            )
        if self.kind == "grouped":
            self._check_groups()

    def _check_kind_field(self, name: str, kind: str) -> None:
        """`name` is required for `kind` (positive ints, per layer allowed) and an error elsewhere."""
        value = getattr(self, name)
        if self.kind == kind:
            if value is None:
                raise SpecError(f"{kind} attention needs `{name}`; got None.")
            object.__setattr__(self, name, _per_layer(name, value, check_positive_int))
        elif value is not None:
            raise SpecError(f"{name}={value!r} is only for kind {kind!r} (kind is {self.kind!r}).")

    def _check_rope(self) -> None:
        """RoPE fields: a base first; scaling, sets and rotary keys only with one."""
        set_ = object.__setattr__
        if self.rope_max_wavelength is None:
            for name in ("rope_scaling", "rope_frequencies", "num_rope_heads", "rope_grid_size"):
                if getattr(self, name) is not None:
                    raise SpecError(
                        f"{name}={getattr(self, name)!r} needs rotary positions: set "
                        "`rope_max_wavelength` (the RoPE base, e.g. 10000)."
                    )
            return
        set_(self, "rope_max_wavelength", rope.check_max_wavelength(self.rope_max_wavelength))
        set_(self, "rope_scaling", rope.check_scaling(self.rope_scaling))
        set_(
            self,
            "rope_frequencies",
            rope.normalize_frequencies(self.rope_frequencies, repeats=self.kind == "latent"),
        )
        if self.rope_grid_size is not None:
            if self.kind != "latent":
                raise SpecError(
                    f"rope_grid_size={self.rope_grid_size!r} is only for kind 'latent' (kind is "
                    f"{self.kind!r}): the other kinds rotate over their own head size."
                )
            size = check_positive_int("rope_grid_size", self.rope_grid_size)
            if size % 2:
                raise SpecError(f"rope_grid_size must be even (frequency pairs); got {size}.")
            set_(self, "rope_grid_size", size)
        if self.num_rope_heads is not None:
            if self.kind != "latent":
                raise SpecError(
                    f"num_rope_heads={self.num_rope_heads!r} is only for kind 'latent' (kind is "
                    f"{self.kind!r}): the other kinds rotate their own keys."
                )
            set_(
                self,
                "num_rope_heads",
                _per_layer("num_rope_heads", self.num_rope_heads, check_positive_int),
            )

    def _check_groups(self) -> None:
        """Every layer's `num_kv_heads` divides its `num_heads` (equal, contiguous groups)."""
        length = self.per_layer_length or 1
        for i in range(length):
            heads = self.num_heads[i] if isinstance(self.num_heads, tuple) else self.num_heads
            groups = (
                self.num_kv_heads[i] if isinstance(self.num_kv_heads, tuple) else self.num_kv_heads
            )
            if heads % groups:
                where = f" in layer {i}" if self.per_layer_length else ""
                raise SpecError(
                    f"num_kv_heads={groups}{where} does not divide num_heads={heads}; grouped "
                    "attention needs groups of equal size (a divisor of num_heads)."
                )

    # ------------------------------------------------------------ per layer
    @property
    def per_layer_length(self) -> int | None:
        """The number of layers the per-layer lists are for (None: no lists)."""
        for name in PER_LAYER_FIELDS:
            value = getattr(self, name)
            if isinstance(value, tuple):
                return len(value)
        if rope.is_per_layer(self.rope_frequencies):
            return len(self.rope_frequencies)
        return None

    def check_num_layers(self, num_layers: int) -> None:
        """Raises unless the per-layer lists (if any) have `num_layers` entries."""
        length = self.per_layer_length
        if length is not None and length != num_layers:
            raise SpecError(
                f"The attention spec has per-layer lists of {length} entries, but the model "
                f"has {num_layers} layers."
            )

    def for_layer(self, index: int) -> AttentionSpec:
        """Layer `index`'s spec (scalar entries for every per-layer field)."""

        def pick(value):
            return value[index] if isinstance(value, tuple) else value

        fields = {name: pick(getattr(self, name)) for name in PER_LAYER_FIELDS}
        if rope.is_per_layer(self.rope_frequencies):
            fields["rope_frequencies"] = self.rope_frequencies[index]
        return dataclasses.replace(self, **fields)

    def layers(self, num_layers: int) -> list[AttentionSpec]:
        """One scalar spec per layer."""
        self.check_num_layers(num_layers)
        return [self.for_layer(i) for i in range(num_layers)]

    # ------------------------------------------------------------ resolving
    def with_sequence_length(self, sequence_length: int | None) -> AttentionSpec:
        """The spec with "sequence_length" head sizes replaced by `sequence_length`.

        Models call this with their `max_sequence_length` (the one rule,
        the same in every model); None leaves the spec unchanged (a bare
        layer resolves from its key length at build).
        """
        if sequence_length is None:
            return self
        n = check_positive_int("sequence_length", sequence_length)

        def fix(value):
            if isinstance(value, tuple):
                return tuple(n if v == SEQUENCE_LENGTH else v for v in value)
            return n if value == SEQUENCE_LENGTH else value

        return dataclasses.replace(self, head_size=fix(self.head_size))

    def resolve(self, width: int, sequence_length: int | None = None) -> ResolvedAttention:
        """Concrete sizes of a (scalar) layer of this spec at `width`."""
        if self.per_layer_length is not None:
            raise SpecError("resolve() needs a per-layer spec: call for_layer(i) first.")
        width = check_positive_int("width", width)
        h = self.num_heads
        spec = self.with_sequence_length(sequence_length)
        if spec.head_size == SEQUENCE_LENGTH:
            raise SpecError(
                'head_size="sequence_length" needs a sequence length (a model\'s '
                "max_sequence_length, or a static key length)."
            )
        if spec.head_size is None:  # standard, or an optional head size left out.
            if width % h:
                raise SpecError(
                    f"width ({width}) is not a multiple of num_heads ({h}); {self.kind} "
                    "attention uses head size = width // num_heads"
                    + (
                        "; use kind 'fixed_head' for a head size independent of the width."
                        if self.kind == "standard"
                        else "; pass head_size explicitly."
                    )
                )
            head_size = width // h
        else:
            head_size = spec.head_size
        resolved = ResolvedAttention(
            kind=self.kind,
            num_heads=h,
            head_size=head_size,
            value_dim=self.value_dim or head_size,
            shared_key_dim=self.shared_key_dim,
            num_kv_heads=self.num_kv_heads,
            kv_latent_dim=self.kv_latent_dim,
            rope_grid_size=self.rope_grid_size,
        )
        if self.rope_max_wavelength is None:
            return resolved
        rotary_dim = resolved.rotary_dim
        if rotary_dim % 2:
            raise SpecError(
                f"Rotary positions need an even {'shared key dim' if self.kind == 'collaborative' else 'head size'}; "
                f"got {rotary_dim}."
            )
        pairs = rotary_dim // 2
        heads = dataclasses.replace(resolved, num_rope_heads=self.num_rope_heads or 1)
        frequencies = self.rope_frequencies
        if self.kind == "latent" and frequencies is None:
            frequencies = rope.uniform_set(pairs, max(1, pairs // 2))
        sets = rope.resolve_sets(frequencies, heads.num_rotary_heads, pairs)
        if self.kind == "latent":
            if len({len(s) for s in sets}) != 1 or not sets[0]:
                raise SpecError(
                    "Latent attention's rotary keys need the same number (>= 1) of frequencies "
                    f"per rotary head; got sizes {[len(s) for s in sets]}."
                )
            if h % heads.num_rotary_heads:
                raise SpecError(
                    f"num_rope_heads={heads.num_rotary_heads} does not divide num_heads={h}; "
                    "each rotary key serves an equal group of query heads."
                )
            if 2 * len(sets[0]) > resolved.head_size:
                raise SpecError(
                    f"Latent attention rotates {2 * len(sets[0])} dimensions per rotary key "
                    f"({len(sets[0])} frequencies) in heads of size {resolved.head_size}; the "
                    "rotary dimensions are part of the head."
                )
        return dataclasses.replace(
            heads,
            rope_max_wavelength=self.rope_max_wavelength,
            rope_scaling=self.rope_scaling,
            rope_sets=sets,
            num_rope_heads=heads.num_rotary_heads if self.kind == "latent" else None,
        )

    def layer_kwargs(self) -> dict[str, Any]:
        """Constructor arguments of the layer class of `kind` (scalar spec)."""
        if self.per_layer_length is not None:
            raise SpecError("layer_kwargs() needs a per-layer spec: call for_layer(i) first.")
        kwargs: dict[str, Any] = {"num_heads": self.num_heads}
        if self.kind == "fixed_head":
            kwargs["head_size"] = self.head_size
        elif self.kind == "collaborative":
            kwargs["shared_key_dim"] = self.shared_key_dim
            kwargs["head_size"] = self.head_size
            kwargs["mixing_initializer"] = self.mixing_initializer
        elif self.kind == "grouped":
            kwargs["num_kv_heads"] = self.num_kv_heads
            kwargs["head_size"] = self.head_size
        elif self.kind == "latent":
            kwargs["kv_latent_dim"] = self.kv_latent_dim
            kwargs["head_size"] = self.head_size
        if self.value_dim is not None:
            kwargs["value_dim"] = self.value_dim
        if self.rope_max_wavelength is not None:
            kwargs["rope_max_wavelength"] = self.rope_max_wavelength
            kwargs["rope_scaling"] = self.rope_scaling
            kwargs["rope_frequencies"] = _plain(self.rope_frequencies)
            if self.kind == "latent":
                kwargs["num_rope_heads"] = self.num_rope_heads or 1
                if self.rope_grid_size is not None:
                    kwargs["rope_grid_size"] = self.rope_grid_size
        return kwargs

    # ---------------------------------------------------------- conversion
    def to_dict(self) -> dict[str, Any]:
        """A plain dict (lists for per-layer entries), for configs and JSON."""
        out = dataclasses.asdict(self)
        for key in PER_LAYER_FIELDS:
            if isinstance(out[key], tuple):
                out[key] = list(out[key])
        out["rope_frequencies"] = _plain(self.rope_frequencies)
        if self.rope_scaling is not None:
            out["rope_scaling"] = dict(self.rope_scaling)
        if self.rope_max_wavelength is None:  # Configs without RoPE keep their old form.
            for key in (
                "rope_max_wavelength",
                "rope_scaling",
                "rope_frequencies",
                "num_rope_heads",
                "rope_grid_size",
            ):
                del out[key]
        elif self.rope_grid_size is None:  # Rotary configs without a grid keep their form.
            del out["rope_grid_size"]
        return out

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> AttentionSpec:
        """The spec of a dict; an old flat key is an error naming the new key."""
        fields = {f.name for f in dataclasses.fields(cls)}
        legacy = {"attention_type": "kind", "num_attention_heads": "num_heads"}
        for key in config:
            if key in legacy:
                raise SpecError(f"`{key}` is now `attention.{legacy[key]}` in the attention spec.")
            if key not in fields:
                raise SpecError(
                    f"Unknown attention setting {key!r}; expected some of {sorted(fields)}."
                )
        return cls(**dict(config))

    @classmethod
    def coerce(cls, value: AttentionSpec | Mapping[str, Any] | None) -> AttentionSpec:
        """A spec from a spec, a dict (e.g. from `get_config`) or None (the default)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        if hasattr(value, "as_dict"):  # A Model Garden `hyperparams.Config`.
            return cls.from_dict(value.as_dict())
        raise SpecError(f"Expected an AttentionSpec or a dict of its fields; got {value!r}.")


def _hashable(value: Any) -> Any:
    """`value` with its dicts as sorted item tuples and its lists as tuples."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, tuple | list):
        return tuple(_hashable(v) for v in value)
    return value


def _plain(value: Any) -> Any:
    """Nested tuples as nested lists (JSON- and Keras-config-friendly)."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def migrate_legacy_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A model config dict from before the spec (flat attention keys), in today's form.

    Saved models and checkpoints written by earlier versions stored
    `attention_type`, `num_attention_heads` (or `num_heads`), `head_size`,
    `shared_key_dim` and `mixing_initializer` side by side; today they are
    one `attention` dict. Configs already in today's form pass unchanged.
    """
    config = dict(config)
    if "attention" in config or "attention_type" not in config:
        return config
    kind = config.pop("attention_type")
    heads = config.pop("num_attention_heads", None) or config.pop("num_heads", None)
    head_size = config.pop("head_size", None)
    spec = AttentionSpec(
        kind=kind,
        num_heads=heads,
        head_size=None if kind == "standard" else head_size,
        shared_key_dim=config.pop("shared_key_dim", None),
        mixing_initializer=config.pop("mixing_initializer", "uniform"),
    )
    config["attention"] = spec.to_dict()
    return config


def check_no_legacy_keys(owner: str, kwargs: Mapping[str, Any]) -> None:
    """Raises a SpecError naming the new key if `kwargs` holds a flat attention key."""
    for key in ("num_heads", *LEGACY_KEYS):
        if key in kwargs:
            new = LEGACY_KEYS.get(key, "attention.num_heads")
            raise SpecError(
                f"{owner} got {key}={kwargs[key]!r}; it is now {new} "
                "(pass attention=AttentionSpec(...) or a dict of its fields)."
            )
