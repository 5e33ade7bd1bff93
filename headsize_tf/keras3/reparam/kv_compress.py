"""A decoder's KV cache cut to a budget: MHA2MLA's partial RoPE, calibrated, allocated.

`compress_kv(lm, plan, stats)` converts every attention layer of a rotary
`DecoderLM` (multi-head or grouped K/V) into a shared latent with decoupled
rotary keys at a given fraction of the cache; a model without RoPE (a
`CausalLM` with learned positions, GPT-2) takes `rope_strategy=None`, skips
step 1 and gives the latent the whole budget:

1. **Which pairs keep RoPE** (`KVPlan.rope_strategy`, MHA2MLA's S_high,
   S_low, S_uniform or S_2-norm, `headsize_tf.core.rope.select_pairs`): each
   key/value head keeps `rope_pairs` frequency pairs as its rotary key,
   cached as they are; the other key dimensions lose their rotation. Or
   "rotated" (TransMLA's RoRoPE, `kv_sharing.rotated_rope_latent_weights`):
   per frequency (or per band of `rope_fold` neighbouring frequencies,
   TransMLA's FreqFold), a PCA across the key/value heads (of the activations
   when calibration statistics are given), and the same number of pairs in all
   (key/value heads x `rope_pairs`) goes to the rotated components of
   highest score, as one rotary key shared by every query head;
   "rotated_high" keeps the leading component of the fastest bands instead
   (evenly spaced frequencies: DeepSeek-V2's rotary key, so the converted
   model is also a llama.cpp "deepseek2" GGUF file, `save_decoder`).
2. **The latent** of the non-rotary keys and the values: their joint SVD
   (`headsize_tf.core.kv_sharing.rope_latent_weights`), of the weights or,
   calibrated, of the activations (the inputs' second moments from
   `calibration.calibration_stats`), keys balanced against values; or their
   split SVD (`KVPlan.split`: keys and values each their own SVD, MHA2MLA's
   ablation).
3. **Its size per layer**: the cache budget less the rotary keys, the same
   in every layer ("uniform") or allocated across layers at the same total
   (`kv_sharing.allocate_ranks`): by spectral energy ("energy") or by the
   least loss on calibration text ("sensitivity": `allocate_by_sensitivity`,
   rounds of a second-order estimate in each latent dimension's mask, each
   proposal measured).

The cache a token adds per layer is `latent + key/value heads x 2 x
rope_pairs` values, against `2 x key/value heads x head size` before.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from headsize_tf.core import kv_sharing, rope
from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.errors import SpecError
from headsize_tf.keras3.layers.roles import numpy_weights
from headsize_tf.keras3.reparam.calibration import CalibrationStats
from headsize_tf.keras3.reparam.convert import convert_model

ALLOCATIONS = ("uniform", "energy", "sensitivity")


@dataclasses.dataclass(frozen=True)
class KVPlan:
    """How `compress_kv` cuts the cache.

    Args:
      cache_fraction: The fraction of the original KV cache kept, in (0, 1].
      rope_strategy: "high", "low", "uniform", "2norm" (needs calibration),
        "rotated" (TransMLA's RoRoPE, the rotated pairs of highest score) or
        "rotated_high" (the leading rotated pair of the fastest frequencies:
        one rotary key of evenly spaced frequencies, DeepSeek-V2's layout,
        which llama.cpp's "deepseek2" runs); None for a model without RoPE (a
        `CausalLM`, GPT-2): the latent is the whole cache.
      rope_pairs: Frequency pairs each key/value head keeps on RoPE (rotated:
        key/value heads x `rope_pairs` rotated pairs in all, the same cache);
        0 when `rope_strategy` is None.
      calibrated: Take the latent's SVD of the activations (needs
        calibration statistics) instead of the weights.
      allocation: "uniform" (the same latent in every layer), "energy" (by
        each layer's spectrum) or "sensitivity" (by the loss measured on
        calibration text, `allocate_by_sensitivity`; joint SVD only).
      balance: Scale keys to the values' norm before the SVD (TransMLA).
      split: MHA2MLA's split SVD (keys and values each their own SVD and
        their own part of the latent, `kv_sharing.joint_basis`) instead of the
        joint one.
      rope_context: "2norm" and "rotated" only: weigh each pair's score by how
        far its rotation moves over relative distances up to this many tokens
        (`rope.rotation_weights`: slow pairs lose little without RoPE); None:
        the scores as they are.
      rope_fold: Rotated strategies only: TransMLA's FreqFold, one PCA per band of this
        many neighbouring frequencies (more energy in the leading components;
        each turns at one of its band's frequencies, so only 1, the default,
        is exact).

    Example:

    >>> KVPlan(0.1875, rope_strategy="2norm", rope_pairs=4, allocation="energy")
    >>> KVPlan(0.25, rope_strategy=None, allocation="energy")  # A GPT-2's cache.
    """

    cache_fraction: float
    rope_strategy: str | None = "2norm"
    rope_pairs: int = 4
    calibrated: bool = True
    allocation: str = "uniform"
    balance: bool = True
    rope_context: int | None = None
    split: bool = False
    rope_fold: int = 1

    def __post_init__(self) -> None:
        fraction = self.cache_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise SpecError(f"cache_fraction must be a number in (0, 1]; got {fraction!r}.")
        if not 0 < fraction <= 1:
            raise SpecError(f"cache_fraction must be in (0, 1]; got {fraction!r}.")
        if self.rope_strategy is None:
            object.__setattr__(self, "rope_pairs", 0)  # No rotary keys.
        elif self.rope_strategy not in rope.STRATEGIES:
            raise SpecError(
                f"Unknown rope_strategy {self.rope_strategy!r}; expected one of "
                f"{list(rope.STRATEGIES)} (None for a model without RoPE)."
            )
        if self.rope_context is not None and (
            isinstance(self.rope_context, bool)
            or not isinstance(self.rope_context, int)
            or self.rope_context < 1
            or self.rope_strategy not in ("2norm", rope.ROTATED)
        ):
            raise SpecError(
                f"rope_context must be None or an int >= 1 with the 2norm or rotated strategy; "
                f"got {self.rope_context!r} with {self.rope_strategy!r}."
            )
        fold = self.rope_fold
        if (
            isinstance(fold, bool)
            or not isinstance(fold, int)
            or fold < 1
            or (fold != 1 and self.rope_strategy not in rope.ROTATED_STRATEGIES)
        ):
            raise SpecError(
                f"rope_fold must be an int >= 1, above 1 only with the rotated strategy (or "
                f"rotated_high); got "
                f"{fold!r} with {self.rope_strategy!r}."
            )
        if self.allocation not in ALLOCATIONS:
            raise SpecError(
                f"Unknown allocation {self.allocation!r}; expected one of {list(ALLOCATIONS)}."
            )
        if self.allocation == "sensitivity" and self.split:
            raise SpecError(
                "allocation='sensitivity' needs the joint SVD (its latents are nested: one "
                "measurement prices every size); the split SVD's are not."
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _kv_heads(layer: Any) -> int:
    """A source layer's key/value heads (its query heads when it is multi-head)."""
    return int(getattr(layer, "num_kv_heads", None) or layer.num_heads)


def _key_scales(layer: Any) -> int:
    """Cache values per token a latent adds for keys normalised per head (Qwen3, Gemma 3):
    each query head's inverse key RMS."""
    return int(layer.num_heads) if getattr(layer, "key_norm", None) is not None else 0


def _layer_plan(layer: Any, plan: KVPlan) -> tuple[int, int, int]:
    """(key/value heads, head size, latent size under a uniform budget) of a source layer."""
    rotary_layer = bool(getattr(layer, "uses_rope", False))
    if plan.rope_strategy is not None and not rotary_layer:
        raise SpecError(
            f"Layer {layer.name!r} has no rotary positions: rope_strategy="
            f"{plan.rope_strategy!r} needs a RoPE model (a model without RoPE takes "
            "rope_strategy=None: convert --cache-fraction without --rope-strategy)."
        )
    if plan.rope_strategy is None and rotary_layer:
        raise SpecError(
            f"Layer {layer.name!r} rotates its keys (RoPE): a latent cannot carry the rotation, "
            "so a RoPE model needs a rope_strategy ('2norm', 'high', 'low', 'uniform', "
            "'rotated' or 'rotated_high')."
        )
    groups = _kv_heads(layer)
    head_size = int(layer.head_size)
    if plan.rope_strategy is None:
        original = groups * (head_size + int(layer.value_dim))
        budget = int(round(plan.cache_fraction * original))
        if budget < 1:
            raise SpecError(
                f"A cache of {plan.cache_fraction:.4g} x {original} values per token and layer "
                "keeps no latent dimension: keep more of the cache."
            )
        return groups, head_size, budget
    pairs = head_size // 2
    if plan.rope_pairs > pairs:
        raise SpecError(
            f"rope_pairs={plan.rope_pairs}: a head of size {head_size} has {pairs} frequency pairs."
        )
    if pairs % plan.rope_fold:
        divisors = [m for m in range(1, pairs + 1) if pairs % m == 0]
        raise SpecError(
            f"rope_fold={plan.rope_fold}: a fold must divide a head's {pairs} frequency pairs "
            f"(one of {divisors})."
        )
    original = groups * (head_size + int(layer.value_dim))
    rotary = groups * 2 * plan.rope_pairs
    scales = _key_scales(layer)
    budget = int(round(plan.cache_fraction * original))
    if budget <= rotary + scales:
        also = f" and the {scales} key scales of its normalised key heads" if scales else ""
        raise SpecError(
            f"A cache of {plan.cache_fraction:.4g} x {original} = {budget} values per token and "
            f"layer is no more than the rotary keys' own {rotary} ({groups} key/value heads x 2 x "
            f"{plan.rope_pairs} pairs){also}: keep fewer rotary pairs or more of the cache."
        )
    return groups, head_size, budget - rotary - scales


def check_plan(lm: Any, plan: KVPlan) -> None:
    """Refuses a plan `lm` cannot take (no RoPE, more pairs than a head has, a fold not
    dividing them, a budget within the rotary keys' own) before anything is measured."""
    for layer in lm.attention_layers:
        _layer_plan(layer, plan)


@dataclasses.dataclass(frozen=True)
class _Layers:
    """What `compress_kv` fixes per layer before the latent sizes: the rotary sets (rotated:
    components), the uniform budget's latent sizes, the cache values beside the latent (rotary
    keys; normalised keys' scales), the latent's spectrum and full rank."""

    rotated: bool
    sets: list[list[list[int]]]
    ranks: list[int]
    rotary_values: list[int]
    spectra: list[np.ndarray]
    fulls: list[int]


def _check_stats(lm: Any, plan: KVPlan, stats: CalibrationStats | None) -> None:
    needs_stats = plan.calibrated or plan.rope_strategy == "2norm"
    if needs_stats and stats is None:
        raise SpecError(
            f"The plan ({'2norm pairs' if plan.rope_strategy == '2norm' else 'calibrated SVD'}) "
            "needs calibration statistics of the model (calibration_stats on text)."
        )
    layers = lm.attention_layers
    if stats is not None and len(stats.covariances) != len(layers):
        raise SpecError(
            f"Calibration statistics of {len(stats.covariances)} layers for a model of "
            f"{len(layers)}."
        )


def _plan_layers(lm: Any, plan: KVPlan, stats: CalibrationStats | None) -> _Layers:
    """The rotary sets and the latent's spectra of every layer (`compress_kv`'s steps 1-2)."""
    _check_stats(lm, plan, stats)
    layers = lm.attention_layers
    rotated = plan.rope_strategy in rope.ROTATED_STRATEGIES
    sets, ranks, rotary_values = [], [], []
    for i, layer in enumerate(layers):
        groups, head_size, rank = _layer_plan(layer, plan)
        weights = None
        if plan.rope_context is not None:
            spec = lm.attention_spec
            inverse = rope.inverse_frequencies(
                head_size, spec.rope_max_wavelength, spec.rope_scaling
            )
            weights = rope.rotation_weights(inverse, plan.rope_context)
        if plan.rope_strategy is None:  # No RoPE: the latent holds every key dimension.
            chosen = [[] for _ in range(groups)]
        elif rotated:
            basis = kv_sharing.rotated_rope(
                numpy_weights(layer),
                None if stats is None else stats.covariances[i],
                plan.rope_fold,
            )
            if plan.rope_strategy == rope.ROTATED_HIGH:
                chosen = basis.leading(groups * plan.rope_pairs)
            else:
                chosen = basis.components(groups * plan.rope_pairs, weights)
        else:
            scores = None if stats is None else stats.pair_scores[i]
            if scores is not None and weights is not None:
                scores = np.asarray(scores) * weights[None]
            chosen = rope.select_pairs(
                plan.rope_strategy, head_size // 2, plan.rope_pairs, groups, scores
            )
        sets.append([list(s) for s in chosen])
        ranks.append(rank)
        rotary_values.append(groups * 2 * plan.rope_pairs + _key_scales(layer))
    spectrum_of = (
        functools.partial(kv_sharing.rotated_rope_spectrum, fold=plan.rope_fold)
        if rotated
        else kv_sharing.rope_latent_spectrum
    )
    covariances = _covariances(plan, stats)
    spectra = [
        spectrum_of(
            numpy_weights(layer),
            sets[i],
            balance=plan.balance,
            covariance=None if covariances is None else covariances[i],
            split=plan.split,
        )
        for i, layer in enumerate(layers)
    ]
    fulls = [len(spectrum) for spectrum in spectra]
    return _Layers(rotated, sets, ranks, rotary_values, spectra, fulls)


def _covariances(plan: KVPlan, stats: CalibrationStats | None) -> list[np.ndarray] | None:
    return stats.covariances if (plan.calibrated and stats is not None) else None


def _target(plan: KVPlan, planned: _Layers, ranks: list[int]) -> ConversionTarget:
    return ConversionTarget(
        "latent",
        tuple(ranks),
        "split_svd" if plan.split else "joint_svd" if plan.balance else "joint_svd_unbalanced",
        rope_frequencies=None if planned.rotated or plan.rope_strategy is None else planned.sets,
        rope_components=planned.sets if planned.rotated else None,
        rope_fold=plan.rope_fold,
    )


def allocate_by_sensitivity(
    lm: Any,
    plan: KVPlan,
    stats: CalibrationStats | None,
    windows: np.ndarray,
    *,
    rounds: int = 6,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Latent sizes per layer chosen by the loss they give on calibration text, at the uniform
    budget's total.

    The plan's conversion is made once at full latent rank; its joint SVD is
    nested, so a latent of r dimensions is that layer's down-projection with
    its columns `j >= r` zeroed, and any allocation is measured without
    converting again. Starting from the uniform sizes, each round:

    1. gives every latent dimension j of layer l a mask `m_lj` (1 kept, 0
       dropped) and takes, over one backward pass per window, the mean and
       the second moment (Fisher information) of `dL/dm_lj = sum_e W[e, j]
       dL/dW[e, j]` (W the full-rank down-projection, L a window's summed
       next-token loss);
    2. estimates each layer's loss at each size within `step` of its own by
       the second-order Taylor expansion in its masks (dropping j: `-g + F / 2`,
       adding j: `g + F / 2`, per token; the optimal-brain-damage estimate
       Kwon et al. 2022 allocate transformer pruning with, here at the point
       the other layers are already cut);
    3. takes the sizes of least estimated loss at the same total
       (`kv_sharing.allocate_by_cost`), measures their loss and keeps them if
       it is lower; otherwise halves `step`.

    The result's loss on `windows` is never above the uniform sizes'.

    Args:
      lm: A `DecoderLM` or `CausalLM` (`plan.rope_strategy` None: without RoPE).
      plan: The conversion whose latent sizes are allocated (joint SVD).
      stats: Calibration statistics of `lm`, as `compress_kv` needs them.
      windows: Calibration token windows `[N, T + 1]` (not the evaluation
        text).
      rounds: Rounds of step 2-3 at most (step 1, N backward passes, after each
        change of sizes; step 3, N forward passes).
      progress: Called with a line after each round, or None.

    Returns:
      A JSON-able dict: `latent_per_layer`, `loss` and `loss_uniform` (token-
      mean, on `windows`), `rounds` (each proposal's sizes, measured loss and
      whether it was kept), `windows`, `tokens`; `compress_kv` takes it with
      `allocation="sensitivity"`.

    Example:

    >>> sizes = allocate_by_sensitivity(lm, plan, stats, windows)  # doctest: +SKIP
    >>> model, report = compress_kv(lm, plan, stats, sizes)  # doctest: +SKIP
    """
    from headsize_tf.keras3.layers.roles import weights_by_role
    from headsize_tf.keras3.lm_training import variable_gradients, windows_perplexity

    windows = np.asarray(windows)
    if windows.ndim != 2 or windows.shape[0] < 1 or windows.shape[1] < 2:
        raise SpecError(
            f"Sensitivity windows must be token windows [N >= 1, T + 1 >= 2]; got shape "
            f"{windows.shape}."
        )
    planned = _plan_layers(lm, plan, stats)
    fulls = planned.fulls
    model, _ = convert_model(
        lm, _target(plan, planned, fulls), covariances=_covariances(plan, stats)
    )
    kernels = [weights_by_role(layer)["latent_kernel"] for layer in model.attention_layers]
    values = [np.asarray(keras.ops.convert_to_numpy(k)) for k in kernels]

    def cut_to(sizes: list[int]) -> None:
        for kernel, value, size in zip(kernels, values, sizes, strict=True):
            cut = value.copy()
            cut[:, size:] = 0.0
            kernel.assign(cut)

    def loss_at(sizes: list[int]) -> float:
        cut_to(sizes)
        return float(np.log(windows_perplexity(model, windows)))

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    grads_of = variable_gradients(model, loss_fn, kernels)
    tokens = windows.shape[0] * (windows.shape[1] - 1)
    sizes = [min(rank, full) for rank, full in zip(planned.ranks, fulls, strict=True)]
    total = sum(sizes)
    loss = loss_at(sizes)
    history: list[dict[str, Any]] = [{"latent_per_layer": sizes, "loss": loss, "kept": True}]
    step = max(1, int(round(np.mean(sizes) / 4)))
    first: list[np.ndarray] = []
    second: list[np.ndarray] = []
    for index in range(rounds):
        if not first:  # The masks' gradients at these sizes (kept until the sizes change).
            cut_to(sizes)
            first = [np.zeros(v.shape[1]) for v in values]
            second = [np.zeros(v.shape[1]) for v in values]
            for window in windows:
                grads = grads_of(window[None, :-1], window[None, 1:])
                for mean, square, value, grad in zip(first, second, values, grads, strict=True):
                    g = np.sum(value.astype(np.float64) * np.asarray(grad, np.float64), axis=0)
                    mean += g / tokens
                    square += g**2 / tokens
        costs = []
        for size, full, g, f in zip(sizes, fulls, first, second, strict=True):
            drop = np.concatenate([[0.0], np.cumsum((-g + f / 2)[:size][::-1])])  # drop[k]: k fewer
            add = np.concatenate([[0.0], np.cumsum((g + f / 2)[size:])])  # add[k]: k more
            cost = np.full(full + 1, np.inf)
            for new in range(max(1, size - step), min(full, size + step) + 1):
                cost[new] = drop[size - new] if new <= size else add[new - size]
            costs.append(cost)
        proposal = kv_sharing.allocate_by_cost(costs, total)
        if proposal == sizes:
            step //= 2
        else:
            measured = loss_at(proposal)
            kept = measured < loss
            history.append({"latent_per_layer": proposal, "loss": measured, "kept": kept})
            if kept:
                sizes, loss, first = proposal, measured, []
            else:
                step //= 2
        if progress is not None:
            progress(f"allocation round {index + 1}: loss {loss:.4f}, step {step}")
        if step < 1:
            break
    return {
        "latent_per_layer": sizes,
        "loss": loss,
        "loss_uniform": history[0]["loss"],
        "rounds": history,
        "windows": int(windows.shape[0]),
        "tokens": int(tokens),
    }


def compress_kv(
    lm: Any,
    plan: KVPlan,
    stats: CalibrationStats | None = None,
    sensitivity: dict[str, Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """`lm` with a latent KV cache of `plan.cache_fraction` (see the module docstring).

    Args:
      lm: A rotary `DecoderLM` (multi-head or grouped K/V), or a model
        without RoPE with `plan.rope_strategy` None (a `CausalLM`).
      plan: The budget and the method.
      stats: Calibration statistics of `lm` (needed for "2norm" and
        `calibrated`).
      sensitivity: `allocate_by_sensitivity(lm, plan, stats, windows)` (needed for
        `allocation="sensitivity"`).

    Returns:
      (the converted `DecoderLM`, a report: the plan, rotary sets and latent
      sizes per layer, cache values per token and layer, the per-layer
      conversion reports).

    Raises:
      SpecError: a rotary strategy on a model without RoPE (or none on a RoPE
        model), more rotary pairs than a head has, a budget at or below the
        rotary keys' own size, or a method that needs
        calibration or measured sensitivity without it.
    """
    layers = lm.attention_layers
    if plan.allocation == "sensitivity" and sensitivity is None:
        raise SpecError(
            "allocation='sensitivity' needs the sizes measured on calibration text "
            "(allocate_by_sensitivity)."
        )
    planned = _plan_layers(lm, plan, stats)
    ranks = list(planned.ranks)
    total = min(sum(ranks), sum(planned.fulls))
    if plan.allocation == "energy":
        ranks = kv_sharing.allocate_ranks(planned.spectra, total, 1, planned.fulls)
    elif plan.allocation == "sensitivity":
        ranks = list(sensitivity["latent_per_layer"])
        if len(ranks) != len(layers) or any(
            not 1 <= r <= f for r, f in zip(ranks, planned.fulls, strict=True)
        ):
            raise SpecError(
                f"The measured allocation {ranks} is not of this conversion (latent sizes 1 .. "
                f"{planned.fulls} per layer)."
            )
    ranks = [min(rank, full) for rank, full in zip(ranks, planned.fulls, strict=True)]
    converted, reports = convert_model(
        lm, _target(plan, planned, ranks), covariances=_covariances(plan, stats)
    )
    original = [
        _kv_heads(layer) * (int(layer.head_size) + int(layer.value_dim)) for layer in layers
    ]
    kept = [rank + rotary for rank, rotary in zip(ranks, planned.rotary_values, strict=True)]
    report = {
        "plan": plan.to_dict(),
        "calibration": None
        if stats is None
        else {"tokens": int(stats.tokens), "source": stats.source},
        "latent_per_layer": ranks,
        **(
            {}
            if plan.rope_strategy is None
            else {
                (
                    "rope_components_per_layer" if planned.rotated else "rope_sets_per_layer"
                ): planned.sets
            }
        ),
        "cache_values_per_token_per_layer": {"original": original, "converted": kept},
        "cache_fraction": float(np.sum(kept) / np.sum(original)),
        "layers": reports,
    }
    if plan.allocation == "sensitivity":
        report["sensitivity"] = {key: value for key, value in sensitivity.items()}
    return converted, report


def grouped_budget(
    lm: Any, cache_fraction: float, stats: CalibrationStats | None = None, method: str = "mean"
) -> tuple[ConversionTarget, dict[str, Any]]:
    """Grouped K/V at a cache fraction, by a per-layer choice of key/value heads.

    Each layer may keep any divisor of its key/value heads (SmolLM2's 3: 1 or
    3); `kv_sharing.allocate_kv_heads` spends the budget on the layers whose
    pooling moves their keys and values most (`kv_sharing.pooling_error`, of
    the activations when `stats` are given, else of the weights).

    Args:
      lm: A `DecoderLM` (multi-head or grouped K/V) or a `CausalLM`.
      cache_fraction: The fraction of the cache kept, in (0, 1]; at least
        the fewest heads' own (1 / key/value heads).
      stats: Calibration statistics of `lm`, or None.
      method: How the target pools: "mean" (Ainslie et al.), "svd_values"
        (keys by mean, values by their output-operator subspace) or, in a
        model without RoPE, "svd" (keys by their attention operators' subspace
        too); pass `stats.covariances` to `convert_model` for the SVDs of the
        activations. The heads per layer follow mean pooling's error whatever
        the method.

    Returns:
      (the grouped `ConversionTarget` with one G per layer, a report: the
      errors, G per layer and the fraction reached).
    """
    KVPlan(cache_fraction)  # Checks the fraction.
    layers = lm.attention_layers
    rotary = any(getattr(layer, "uses_rope", False) for layer in layers)
    if method not in (("mean", "svd_values") if rotary else kv_sharing.GROUPED_METHODS):
        raise SpecError(
            "Grouped K/V at a budget pools by "
            + (
                "'mean' or 'svd_values' (rotary keys allow no re-basing)"
                if rotary
                else "'mean', 'svd_values' or 'svd'"
            )
            + f"; got method={method!r}."
        )
    errors, values, original = [], [], []
    for i, layer in enumerate(layers):
        groups = _kv_heads(layer)
        covariance = None if stats is None else stats.covariances[i]
        weights = numpy_weights(layer)
        errors.append(
            {
                g: kv_sharing.pooling_error(weights, g, covariance)
                for g in range(1, groups + 1)
                if groups % g == 0
            }
        )
        values.append(int(layer.head_size) + int(layer.value_dim))
        original.append(groups * values[-1])
    budget = int(np.floor(cache_fraction * sum(original) + 1e-9))
    fewest = sum(values)
    if budget < fewest:
        raise SpecError(
            f"A cache of {cache_fraction:.4g} of the original is below grouped K/V's smallest, "
            f"one key/value head per layer ({fewest / sum(original):.4g}); use --to latent for "
            "smaller caches."
        )
    heads = kv_sharing.allocate_kv_heads(errors, values, budget)
    kept = [g * v for g, v in zip(heads, values, strict=True)]
    report = {
        "cache_fraction_asked": float(cache_fraction),
        "cache_fraction": float(sum(kept) / sum(original)),
        "kv_heads_per_layer": heads,
        "pooling_error_per_layer": [
            {str(g): round(e, 6) for g, e in layer.items()} for layer in errors
        ],
        "calibration": None
        if stats is None
        else {"tokens": int(stats.tokens), "source": stats.source},
    }
    return ConversionTarget("grouped", tuple(heads), method), report
