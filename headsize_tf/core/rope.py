"""Rotary position embeddings (RoPE): frequencies, scaling and partial sets, in numpy.

RoPE (Su et al., 2021) rotates each pair of query/key dimensions by an angle
proportional to the position, so a score `q_t . k_s` depends on the
positions only through `t - s`. The library uses the half-split convention
of Hugging Face and keras-hub: in a rotary vector of size `2n`, dimension
`j` pairs with `j + n` and turns with the inverse frequency
`theta_j = base^(-2j / 2n)`:

    rope(x, t)[j]     = x[j] cos(t theta_j) - x[j + n] sin(t theta_j)
    rope(x, t)[j + n] = x[j + n] cos(t theta_j) + x[j] sin(t theta_j)

A rotary set lists which frequency indices `j` (of the head's `n = p / 2`)
rotate; the others keep their values (theta 0: cos 1, sin 0). All
frequencies is ordinary RoPE; a subset is partial RoPE (MHA2MLA's kept
frequency pairs; GPT-NeoX's and Phi's leading fraction). Each rotary head
(a key/value head; the shared key of collaborative attention; a rotary-key
head of latent attention) may have its own set.

Scaling (`rope_scaling`, Hugging Face's dict; `None`: none):

* `{"rope_type": "linear", "factor": s}`: positions divided by s.
* `{"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
  "original_max_position_embeddings"}`: Llama 3.1's frequency-dependent
  interpolation.
* `{"rope_type": "yarn", "factor", "original_max_position_embeddings",
  "beta_fast" (32), "beta_slow" (1)}`: YaRN's ramp between interpolation and
  extrapolation, with cos and sin scaled by `0.1 ln s + 1`.

Pure numpy: both fronts and every converter use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from headsize_tf.core.errors import SpecError

SCALING_TYPES = ("linear", "llama3", "yarn")

# A rotary set: the frequency indices that rotate, sorted, without repeats.
FrequencySet = tuple[int, ...]


def check_max_wavelength(value: Any) -> float:
    """A RoPE base > 1 as float, or a `SpecError` naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise SpecError(f"`rope_max_wavelength` must be a number > 1; got {value!r}.")
    if not float(value) > 1.0:
        raise SpecError(f"`rope_max_wavelength` must be a number > 1; got {value!r}.")
    return float(value)


def check_scaling(scaling: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A RoPE scaling dict in canonical form (`rope_type` key), or a `SpecError`."""
    if scaling is None:
        return None
    if not isinstance(scaling, Mapping):
        raise SpecError(
            f"`rope_scaling` must be None or a dict with `rope_type` in {list(SCALING_TYPES)}; "
            f"got {scaling!r}."
        )
    out = dict(scaling)
    kind = out.pop("rope_type", out.pop("type", None))
    if kind in (None, "default"):
        return None
    if kind not in SCALING_TYPES:
        raise SpecError(
            f"Unknown rope_scaling type {kind!r}; expected one of {list(SCALING_TYPES)}."
        )
    factor = out.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor > 0:
        raise SpecError(f"rope_scaling {kind!r} needs a positive `factor`; got {factor!r}.")
    required = {
        "linear": (),
        "llama3": ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
        "yarn": ("original_max_position_embeddings",),
    }[kind]
    for key in required:
        if key not in out:
            raise SpecError(f"rope_scaling {kind!r} needs `{key}`; got keys {sorted(out)}.")
    if kind == "llama3" and not out["high_freq_factor"] > out["low_freq_factor"]:
        raise SpecError(
            "rope_scaling 'llama3' needs high_freq_factor > low_freq_factor; got "
            f"{out['high_freq_factor']!r} and {out['low_freq_factor']!r}."
        )
    known = {"factor", *required, "beta_fast", "beta_slow", "truncate", "attention_factor"}
    unknown = sorted(set(out) - known)
    if unknown:
        raise SpecError(f"rope_scaling {kind!r} got unknown keys {unknown}.")
    return {"rope_type": kind, **{k: out[k] for k in sorted(out)}}


def base_inverse_frequencies(dim: int, max_wavelength: float) -> np.ndarray:
    """`base^(-2j / dim)` for j in [0, dim / 2), float64."""
    return 1.0 / (float(max_wavelength) ** (np.arange(0, dim, 2, dtype=np.float64) / dim))


def inverse_frequencies(
    dim: int, max_wavelength: float, scaling: Mapping[str, Any] | None = None
) -> np.ndarray:
    """The `dim / 2` inverse frequencies of a rotary head of size `dim`, scaled (float64).

    Example:

    >>> inverse_frequencies(4, 10000.0)
    array([1.  , 0.01])
    """
    if dim % 2:
        raise SpecError(f"A rotary head needs an even size; got {dim}.")
    inverse = base_inverse_frequencies(dim, max_wavelength)
    scaling = check_scaling(scaling)
    if scaling is None:
        return inverse
    kind, factor = scaling["rope_type"], float(scaling["factor"])
    if kind == "linear":
        return inverse / factor
    if kind == "llama3":
        original = float(scaling["original_max_position_embeddings"])
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        wavelength = 2 * math.pi / inverse
        smooth = (original / wavelength - low) / (high - low)
        smoothed = (1 - smooth) * inverse / factor + smooth * inverse
        out = np.where(wavelength > original / low, inverse / factor, inverse)
        medium = (wavelength >= original / high) & (wavelength <= original / low)
        return np.where(medium, smoothed, out)
    # YaRN (Peng et al., 2023), as Hugging Face and keras-hub compute it.
    original = float(scaling["original_max_position_embeddings"])
    beta_fast = float(scaling.get("beta_fast", 32.0))
    beta_slow = float(scaling.get("beta_slow", 1.0))
    base = float(max_wavelength)

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0.0), min(high, dim - 1.0)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / max(high - low, 1e-3), 0, 1)
    extrapolation = 1 - ramp
    return (inverse / factor) * (1 - extrapolation) + inverse * extrapolation


def attention_factor(scaling: Mapping[str, Any] | None) -> float:
    """The factor on cos and sin (YaRN: `0.1 ln s + 1`, or its `attention_factor`; else 1)."""
    scaling = check_scaling(scaling)
    if scaling is None or scaling["rope_type"] != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = float(scaling["factor"])
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def _depth(value: Any) -> int:
    """Nesting depth of lists of ints (an int: 0; None: -1)."""
    if value is None:
        return -1
    if isinstance(value, Sequence) and not isinstance(value, str):
        depths = {_depth(v) for v in value}
        if not depths:
            return 1
        if len(depths) > 1:
            raise SpecError(f"`rope_frequencies` mixes nesting levels: {value!r}.")
        return 1 + depths.pop()
    return 0


def _check_set(name: str, values: Any, repeats: bool = False) -> FrequencySet:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
            raise SpecError(f"`{name}` holds frequency indices (ints >= 0); got {v!r}.")
        out.append(int(v))
    if not repeats and len(set(out)) != len(out):
        raise SpecError(f"`{name}` repeats a frequency index: {list(values)!r}.")
    return tuple(sorted(out))


def normalize_frequencies(value: Any, repeats: bool = False) -> Any:
    """`rope_frequencies` as tuples: None, a set, per-head sets, or a per-layer tuple of those.

    Nesting says what a value is: a list of ints is one set for every rotary
    head, a list of lists one set per rotary head, and a list whose entries
    are None or lists of lists one entry per layer. `repeats` allows a
    frequency more than once in a set (a latent's rotary key after rotated
    RoPE, where several components of one frequency rotate).
    """
    if value is None:
        return None
    has_none = (
        isinstance(value, Sequence) and not isinstance(value, str) and any(v is None for v in value)
    )
    depth = 3 if has_none else _depth(value)
    if depth == 1:
        return _check_set("rope_frequencies", value, repeats)
    if depth == 2:
        return tuple(_check_set(f"rope_frequencies[{i}]", s, repeats) for i, s in enumerate(value))
    if depth == 3:
        out = []
        for i, entry in enumerate(value):
            if entry is None:
                out.append(None)
            elif _depth(entry) != 2:
                raise SpecError(
                    f"`rope_frequencies[{i}]` must be None or one set per rotary head (a list "
                    f"of lists) in a per-layer list; got {entry!r}."
                )
            else:
                out.append(
                    tuple(
                        _check_set(f"rope_frequencies[{i}][{j}]", s, repeats)
                        for j, s in enumerate(entry)
                    )
                )
        return tuple(out)
    raise SpecError(
        f"`rope_frequencies` must be a list of frequency indices, one list per rotary head, or "
        f"one such entry per layer; got {value!r}."
    )


def is_per_layer(value: Any) -> bool:
    """Whether normalized `rope_frequencies` has one entry per layer."""
    return isinstance(value, tuple) and any(
        entry is None or (isinstance(entry, tuple) and entry and isinstance(entry[0], tuple))
        for entry in value
    )


def resolve_sets(
    value: Any, num_rotary_heads: int, pairs: int, owner: str = "rope_frequencies"
) -> tuple[FrequencySet, ...]:
    """One rotary set per rotary head, checked against the head's `pairs` frequencies.

    Args:
      value: A layer's normalized `rope_frequencies`: None (every
        frequency), one set, or one set per rotary head.
      num_rotary_heads: The rotary heads of the layer.
      pairs: Frequency pairs of a rotary head (its size / 2).
      owner: Name for messages.
    """
    if value is None:
        sets = (tuple(range(pairs)),) * num_rotary_heads
    elif value and isinstance(value[0], tuple) or value == ():
        sets = tuple(value)
        if len(sets) != num_rotary_heads:
            raise SpecError(
                f"`{owner}` has {len(sets)} sets; the layer has {num_rotary_heads} rotary heads "
                "(one set each, or one list for all)."
            )
    else:
        sets = (tuple(value),) * num_rotary_heads
    for i, chosen in enumerate(sets):
        if chosen and max(chosen) >= pairs:
            raise SpecError(
                f"`{owner}` set {i} asks for frequency {max(chosen)}, but a head of size "
                f"{2 * pairs} has {pairs} frequency pairs (indices 0..{pairs - 1})."
            )
    return sets


def frequency_table(
    sets: Sequence[FrequencySet],
    dim: int,
    max_wavelength: float,
    scaling: Mapping[str, Any] | None = None,
) -> np.ndarray:
    """`[rotary heads, dim / 2]` inverse frequencies, 0 where a pair does not rotate (float32).

    One row when every head has the same set (it broadcasts over heads).
    """
    inverse = inverse_frequencies(dim, max_wavelength, scaling)
    rows = list(dict.fromkeys(tuple(s) for s in sets))
    if len(rows) == 1:
        sets = rows
    table = np.zeros([len(sets), dim // 2], np.float64)
    for i, chosen in enumerate(sets):
        table[i, list(chosen)] = inverse[list(chosen)]
    return table.astype(np.float32)


def compact_table(
    sets: Sequence[FrequencySet],
    grid_dim: int,
    max_wavelength: float,
    scaling: Mapping[str, Any] | None = None,
) -> np.ndarray:
    """`[rotary heads, k]` inverse frequencies of exactly the chosen pairs (k per head), float32.

    The rotary keys of latent attention hold only their `2k` rotary
    dimensions; pair `i` of head `g` turns at frequency `sets[g][i]` of a
    head of size `grid_dim`.
    """
    sizes = {len(s) for s in sets}
    if len(sizes) != 1:
        raise SpecError(
            f"Every rotary head needs the same number of frequencies; got sizes {sorted(sizes)}."
        )
    inverse = inverse_frequencies(grid_dim, max_wavelength, scaling)
    rows = list(dict.fromkeys(tuple(s) for s in sets))
    if len(rows) == 1:
        sets = rows
    return np.stack([inverse[list(s)] for s in sets]).astype(np.float32)


def uniform_set(pairs: int, count: int) -> FrequencySet:
    """`count` frequency indices spread evenly over `pairs` (MHA2MLA's S_uniform)."""
    if not 1 <= count <= pairs:
        raise SpecError(f"A rotary set of {count} frequencies needs 1 <= count <= {pairs}.")
    step = pairs / count
    return tuple(int(math.floor(i * step)) for i in range(count))


def rotate_numpy(x: np.ndarray, positions: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    """Half-split RoPE of `x` `[..., T, heads, 2n]` at `positions` `[T]` (numpy oracle).

    `inverse` is `[n]` or `[heads, n]` (0: the pair does not rotate).
    """
    x = np.asarray(x, np.float64)
    n = x.shape[-1] // 2
    inverse = np.asarray(inverse, np.float64).reshape(-1, n)
    angles = np.asarray(positions, np.float64)[:, None, None] * inverse[None]  # [T, H|1, n]
    cos, sin = np.cos(angles), np.sin(angles)
    x1, x2 = x[..., :n], x[..., n:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rotation_weights(inverse: np.ndarray, context: int) -> np.ndarray:
    """Per frequency pair, how far its rotation moves over relative distances 1..`context`.

    The mean over distances d of `|e^(i theta d) - 1| = 2 |sin(theta d / 2)|`:
    dropping RoPE on a pair changes a score by at most `|q| |k|` times this,
    so a slow pair (theta d small over the context) loses little without its
    rotation, and a fast one up to 4 / pi. Multiplying a pair's 2-norm score by
    it ranks pairs by the score error their dropped rotation can cause.

    Example:

    >>> rotation_weights(np.array([np.pi, 0.0]), 2).round(3)
    array([1., 0.])
    """
    context = int(context)
    if context < 1:
        raise SpecError(f"A rotation weight needs a context of >= 1 tokens; got {context}.")
    distances = np.arange(1, context + 1, dtype=np.float64)
    angles = np.asarray(inverse, np.float64)[:, None] * distances[None]
    return np.mean(2 * np.abs(np.sin(angles / 2)), axis=1)


PAIR_STRATEGIES = ("high", "low", "uniform", "2norm")
# TransMLA's rotated RoPE (`headsize_tf.core.kv_sharing.rotated_rope`): pairs of a rotated basis,
# by score ("rotated") or the leading component of the fastest bands ("rotated_high": one rotary
# key of evenly spaced frequencies from the fastest, DeepSeek-V2's layout, which llama.cpp runs).
ROTATED = "rotated"
ROTATED_HIGH = "rotated_high"
ROTATED_STRATEGIES = (ROTATED, ROTATED_HIGH)
STRATEGIES = (*PAIR_STRATEGIES, *ROTATED_STRATEGIES)


def select_pairs(
    strategy: str, pairs: int, count: int, num_heads: int, scores: np.ndarray | None = None
) -> tuple[FrequencySet, ...]:
    """The `count` frequency pairs each of `num_heads` rotary heads keeps on RoPE (MHA2MLA).

    Strategies (Ji et al., 2025, Sec. 3.1): "high" keeps the highest
    frequencies (indices 0..count-1: the shortest wavelengths), "low" the
    lowest, "uniform" evenly spread ones, and "2norm" the pairs with the
    largest `scores[head, pair]` (the mean norm of the query pair times that
    of the key pair, measured on text: the pairs that contribute most to the
    scores).

    Example:

    >>> select_pairs("uniform", 32, 4, 3)[0]
    (0, 8, 16, 24)
    """
    if strategy not in PAIR_STRATEGIES:
        raise SpecError(
            f"Unknown rotary pair strategy {strategy!r}; expected one of {list(PAIR_STRATEGIES)}."
        )
    if (
        isinstance(count, bool)
        or not isinstance(count, int | np.integer)
        or not 1 <= count <= pairs
    ):
        raise SpecError(
            f"A head of {2 * pairs} dimensions has {pairs} frequency pairs; keeping {count!r} "
            f"needs 1 <= pairs kept <= {pairs}."
        )
    if strategy == "high":
        chosen = tuple(range(count))
    elif strategy == "low":
        chosen = tuple(range(pairs - count, pairs))
    elif strategy == "uniform":
        chosen = uniform_set(pairs, count)
    else:
        if scores is None:
            raise SpecError("The 2norm strategy needs pair scores measured on calibration text.")
        scores = np.asarray(scores, np.float64)
        if scores.shape != (num_heads, pairs):
            raise SpecError(
                f"2norm pair scores have shape {scores.shape}; expected {(num_heads, pairs)}."
            )
        return tuple(
            tuple(sorted(int(j) for j in np.argsort(-row, kind="stable")[:count])) for row in scores
        )
    return (chosen,) * num_heads
