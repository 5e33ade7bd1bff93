"""KV-cache conversion of a real pretrained decoder at equal cache: SmolLM2-135M-Instruct (4-bit).

The study of `results/kv_sharing_smollm2/`: the rotary decoder's 384 cached
values per token and layer (3 key/value heads x (64 + 64)) cut by every
head-sharing method the library has, training-free, and measured on text
not used for calibration.

* Latent K/V with decoupled rotary keys (`keras3.reparam.kv_compress`): the
  rotary pairs each key/value head keeps (MHA2MLA's S_high, S_low,
  S_uniform, S_2-norm), the latent's SVD of the weights or of the
  activations (calibrated on Austen's four training novels), uniform or
  energy-allocated latent sizes, at 18.75% of the cache (the full grid), and
  the best of each at 50%, 31.25% and 12.5%; three calibration samples for
  the best at 18.75%.
* MHA2MLA's split SVD (keys and values each their own) against the joint
  one, at 18.75%.
* Grouped K/V, 3 -> 1 key/value heads by mean pooling (33%), 1 or 3 heads
  per layer at 50% (`kv_compress.grouped_budget`: the layers whose pooling
  moves their activations most keep 3), and pruning whole key/value groups
  by importance to one per layer (33%).

Metrics on two held-out texts (Austen's Northanger Abbey, Melville's Moby
Dick; `--eval-windows` windows of 256 tokens each): perplexity, top-1
next-token agreement with the original model, and agreement of greedy
continuations of fixed prompts. Each run writes `runs/NAME.json` when it
ends; a rerun skips finished runs. `report` writes `README.md`'s table,
`perplexity_vs_cache.png` and `summary.json`.

Usage:
  python -m headsize_tf.experiments.kv_sharing_smollm2 --output OUT [--runs NAME,...]
      [--report-only] [--eval-windows 32]
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from headsize_tf.core.rope import ROTATED, ROTATED_HIGH
from headsize_tf.experiments._entry import study_parser
from headsize_tf.experiments._steps import add_study_options

MODEL = "smollm2-135m-instruct-q4"
WINDOW = 257  # The start token and 256 text tokens.
EVAL_TEXTS = ("austen", "moby_dick")
PROMPTS = (
    "The capital of France is Paris, and the capital of Germany is",
    "It is a truth universally acknowledged, that",
    "Call me Ishmael. Some years ago,",
    "def add(a, b):",
    "The three primary colours are",
    "Water boils at a temperature of",
)
NEW_TOKENS = 12
FRACTIONS = {"50%": 0.5, "31.25%": 0.3125, "18.75%": 0.1875, "12.5%": 0.125}


@dataclasses.dataclass(frozen=True)
class Run:
    """One converted model of the study.

    Args:
      name: The run's name (its result file).
      method: "original", "latent", "grouped", "pruned", "partial_rope" (rotary pairs
        kept, the latent at full rank: what dropping RoPE alone costs), "exact" (a
        conversion at its exact limit, its logits compared with the original's; strategy
        "svd_values": grouped K/V with SmolLM2's own 3 key/value heads) or "file" (a model
        saved elsewhere, e.g. by `convert --uptrain-steps`, measured like the others).
      fraction: The cache fraction (latent), for the table.
      strategy: Rotary pairs kept (latent): high, low, uniform, 2norm, or rotated
        (TransMLA's RoRoPE: the same number of pairs in all, of the rotated basis);
        grouped: "svd_values" pools the keys by mean and gives the values the SVD of
        their activations (any other: mean pooling of both).
      pairs: Pairs per key/value head (latent; rotated: 3 x pairs in all).
      calibrated: The latent's SVD of activations (else weights).
      allocation: uniform, energy or sensitivity (`allocate_by_sensitivity` on the
        calibration windows).
      seed: The calibration sample's seed.
      heal_steps: Adam steps per layer of layer-wise distillation after the
        conversion (`keras3.reparam.heal`; 0: training-free).
      rope_context: 2norm / rotated: the pair scores weighted by how far each
        pair's rotation turns over distances up to this many tokens
        (`core.rope.rotation_weights`); None: unweighted.
      svd: latent: "joint" (one SVD of keys and values) or "split" (MHA2MLA's
        ablation: each its own SVD and half the latent).
      fold: rotated: TransMLA's FreqFold, one PCA per band of this many
        neighbouring frequencies (1: per frequency, exact).
    """

    name: str
    method: str
    fraction: float = 1.0
    strategy: str = "2norm"
    pairs: int = 4
    calibrated: bool = True
    allocation: str = "uniform"
    seed: int = 0
    heal_steps: int = 0
    rope_context: int | None = None
    svd: str = "joint"
    path: str | None = None
    fold: int = 1


HEAL_STEPS = 200


def _best_rotated(
    tag: str,
    pairs: int,
    heal_steps: int = 0,
    fold: int = 1,
    allocation: str = "energy",
    seed: int = 0,
) -> Run:
    """The best rotated conversion's run at a budget: rotation-weighted pair scores over the
    256-token windows, calibrated SVD, energy allocation (or another); optionally healed or
    folded."""
    name = f"latent-{tag}-rotated-act-{allocation}{'' if pairs == 4 else f'-p{pairs}'}-ctx256"
    name += f"-fold{fold}" if fold != 1 else ""
    if heal_steps:
        name += "-healed" if heal_steps == HEAL_STEPS else f"-healed{heal_steps}"
    name += f"-seed{seed}" if seed else ""
    return Run(
        name,
        "latent",
        FRACTIONS[f"{tag}%"],
        ROTATED,
        pairs,
        True,
        allocation,
        seed,
        heal_steps=heal_steps,
        rope_context=WINDOW - 1,
        fold=fold,
    )


EXACT_WINDOWS = 8  # Per held-out text: the windows whose logits the exact runs compare.


def exact_runs() -> list[Run]:
    """Each conversion at its exact limit: every rotary frequency kept (partial RoPE with
    all 32 pairs of each key/value head, or rotated RoPE with every component) and the
    latent at full rank, weight or calibrated SVD; grouped K/V with SmolLM2's own 3 key/value
    heads, its values re-based by their calibrated SVD (the keys mean-pooled)."""
    return [
        Run("exact-partial-rope-w", "exact", 1.0, "high", 32, False),
        Run("exact-partial-rope-act", "exact", 1.0, "high", 32, True),
        Run("exact-rotated-act", "exact", 1.0, ROTATED, 32, True),
        Run("exact-grouped-3-svd-values", "exact", 1.0, "svd_values", calibrated=True),
    ]


def plan() -> list[Run]:
    """Every run of the study, in the order it runs."""
    runs = [Run("original", "original"), *exact_runs()]
    for strategy in ("2norm", "uniform", "high", "low"):
        for calibrated in (True, False):
            for allocation in ("uniform", "energy"):
                label = f"{'act' if calibrated else 'w'}-{allocation}"
                runs.append(
                    Run(
                        f"latent-18.75-{strategy}-{label}",
                        "latent",
                        0.1875,
                        strategy,
                        4,
                        calibrated,
                        allocation,
                    )
                )
    for fraction in ("50%", "31.25%", "12.5%"):
        value = FRACTIONS[fraction]
        tag = fraction.rstrip("%")
        runs.append(
            Run(f"latent-{tag}-2norm-act-energy", "latent", value, "2norm", 4, True, "energy")
        )
        runs.append(Run(f"latent-{tag}-uniform-w-uniform", "latent", value, "uniform", 4, False))
    runs.append(Run("grouped-33-mean", "grouped", 1 / 3))
    runs.append(Run("pruned-33-groups", "pruned", 1 / 3))
    for fraction in ("31.25%", "18.75%"):
        tag = fraction.rstrip("%")
        runs.append(
            Run(
                f"latent-{tag}-2norm-act-energy-healed",
                "latent",
                FRACTIONS[fraction],
                "2norm",
                4,
                True,
                "energy",
                heal_steps=HEAL_STEPS,
            )
        )
    runs.append(Run("grouped-33-mean-healed", "grouped", 1 / 3, heal_steps=HEAL_STEPS))
    # More rotary pairs where the budget allows (the latent keeps the rest of it).
    for fraction, pairs in (("50%", 16), ("31.25%", 8), ("50%", 8), ("31.25%", 12)):
        tag = fraction.rstrip("%")
        for strategy in ("high", "2norm"):
            runs.append(
                Run(
                    f"latent-{tag}-{strategy}-act-energy-p{pairs}",
                    "latent",
                    FRACTIONS[fraction],
                    strategy,
                    pairs,
                    True,
                    "energy",
                )
            )
    # Half the pairs keep RoPE at 31.25% and 18.75% (high frequencies: partial RoPE alone then
    # costs nothing measurable), then healed.
    runs.append(Run("latent-31.25-high-act-energy-p16", "latent", 0.3125, "high", 16))
    runs[-1] = dataclasses.replace(runs[-1], allocation="energy")
    runs.append(Run("latent-18.75-high-act-energy-p8", "latent", 0.1875, "high", 8))
    runs[-1] = dataclasses.replace(runs[-1], allocation="energy")
    runs.append(
        Run(
            "latent-31.25-high-act-energy-p16-healed",
            "latent",
            0.3125,
            "high",
            16,
            True,
            "energy",
            heal_steps=HEAL_STEPS,
        )
    )
    # What partial RoPE alone costs: 4 pairs per key/value head rotate, the latent at full rank.
    for strategy, pairs in (("2norm", 4), ("high", 4), ("high", 8), ("high", 16)):
        runs.append(
            Run(f"partial-rope-only-{strategy}-p{pairs}", "partial_rope", 1.0, strategy, pairs)
        )
    # Rotated RoPE (TransMLA's RoRoPE) at the same rotary cache: the 18.75% grid, more pairs
    # where the budget allows, and what the rotation with dropped RoPE alone costs.
    for calibrated in (True, False):
        for allocation in ("uniform", "energy"):
            label = f"{'act' if calibrated else 'w'}-{allocation}"
            runs.append(
                Run(f"latent-18.75-rotated-{label}", "latent", 0.1875, ROTATED, 4, calibrated)
            )
            runs[-1] = dataclasses.replace(runs[-1], allocation=allocation)
    for fraction, pairs in (("18.75%", 8), ("31.25%", 12), ("31.25%", 16), ("50%", 16)):
        tag = fraction.rstrip("%")
        runs.append(
            Run(
                f"latent-{tag}-rotated-act-energy-p{pairs}",
                "latent",
                FRACTIONS[fraction],
                ROTATED,
                pairs,
                True,
                "energy",
            )
        )
    for pairs in (4, 8):
        runs.append(Run(f"partial-rope-only-rotated-p{pairs}", "partial_rope", 1.0, ROTATED, pairs))
    # Pair scores weighted by how far each pair turns over the 256-token windows.
    for tag, strategy, pairs in (
        ("18.75", ROTATED, 4),
        ("18.75", ROTATED, 8),
        ("18.75", "2norm", 4),
        ("31.25", ROTATED, 12),
        ("50", ROTATED, 16),
        ("31.25", ROTATED, 4),
        ("31.25", ROTATED, 8),
        ("18.75", ROTATED, 2),
        ("12.5", ROTATED, 2),
    ):
        suffix = "" if pairs == 4 else f"-p{pairs}"
        runs.append(
            Run(
                f"latent-{tag}-{strategy}-act-energy{suffix}-ctx256",
                "latent",
                FRACTIONS[f"{tag}%"],
                strategy,
                pairs,
                True,
                "energy",
                rope_context=WINDOW - 1,
            )
        )
    # The best weighted conversions at 31.25% and 18.75%, healed.
    for tag, pairs in (("31.25", 8), ("18.75", 4)):
        runs.append(_best_rotated(tag, pairs, heal_steps=HEAL_STEPS))
    for seed in (1, 2):
        runs.append(
            Run(
                f"latent-18.75-2norm-act-energy-seed{seed}",
                "latent",
                0.1875,
                "2norm",
                4,
                True,
                "energy",
                seed,
            )
        )
    # MHA2MLA's split SVD against the joint one, for the best method and for S_2-norm.
    for strategy, context in ((ROTATED, WINDOW - 1), ("2norm", None)):
        suffix = "-ctx256" if context else ""
        runs.append(
            Run(
                f"latent-18.75-{strategy}-act-energy{suffix}-split",
                "latent",
                0.1875,
                strategy,
                4,
                True,
                "energy",
                rope_context=context,
                svd="split",
            )
        )
    # Grouped K/V at 50%: 1 or 3 key/value heads per layer, where pooling costs most.
    runs.append(Run("grouped-50-mean-allocated", "grouped", 0.5))
    runs.append(Run("grouped-50-mean-allocated-healed", "grouped", 0.5, heal_steps=HEAL_STEPS))
    # TransMLA's FreqFold on the best rotated conversions: one PCA per band of 2 or 4
    # neighbouring frequencies; and what folding with dropped RoPE alone costs.
    for fold in (2, 4):
        for tag, pairs in (("31.25", 8), ("18.75", 4)):
            runs.append(_best_rotated(tag, pairs, fold=fold))
        runs.append(
            Run(f"partial-rope-only-rotated-p4-fold{fold}", "partial_rope", 1.0, ROTATED, 4)
        )
        runs[-1] = dataclasses.replace(runs[-1], fold=fold)
    # Folding by 2 was the best: healed at both budgets.
    for tag, pairs in (("31.25", 8), ("18.75", 4)):
        runs.append(_best_rotated(tag, pairs, heal_steps=HEAL_STEPS, fold=2))
    # Twice the healing steps for the best 31.25% conversion.
    runs.append(_best_rotated("31.25", 8, heal_steps=2 * HEAL_STEPS))
    # Latent sizes by the loss they give on the calibration text (allocate_by_sensitivity)
    # against uniform ones, for the best folded conversions and for S_2-norm.
    for tag, pairs in (("18.75", 4), ("31.25", 8)):
        for allocation in ("uniform", "sensitivity"):
            runs.append(_best_rotated(tag, pairs, fold=2, allocation=allocation))
    runs.append(
        Run("latent-18.75-2norm-act-sensitivity", "latent", 0.1875, "2norm", 4, True, "sensitivity")
    )
    # The calibration sample's spread for both allocations of the best 18.75% conversion.
    for seed in (1, 2):
        for allocation in ("uniform", "sensitivity"):
            runs.append(_best_rotated("18.75", 4, fold=2, allocation=allocation, seed=seed))
    # The sensitivity-allocated conversions, healed.
    for tag, pairs in (("31.25", 8), ("18.75", 4)):
        runs.append(
            _best_rotated(tag, pairs, fold=2, allocation="sensitivity", heal_steps=HEAL_STEPS)
        )
    # Grouped K/V with the values' calibrated SVD (the keys mean-pooled, as RoPE requires),
    # at 33% and at 50% by per-layer heads, training-free and healed.
    for fraction, tag in ((1 / 3, "33"), (0.5, "50")):
        suffix = "-allocated" if fraction > 1 / 3 else ""
        for heal in (0, HEAL_STEPS):
            runs.append(
                Run(
                    f"grouped-{tag}-svd-values{suffix}{'-healed' if heal else ''}",
                    "grouped",
                    fraction,
                    "svd_values",
                    heal_steps=heal,
                )
            )
    # The best weight-only conversion at 18.75% (S_low, energy) at the other budgets too, and
    # the pruned model healed like the others.
    for fraction in ("50%", "31.25%", "12.5%"):
        tag = fraction.rstrip("%")
        runs.append(
            Run(
                f"latent-{tag}-low-w-energy",
                "latent",
                FRACTIONS[fraction],
                "low",
                4,
                False,
                "energy",
            )
        )
    runs.append(Run("pruned-33-groups-healed", "pruned", 1 / 3, heal_steps=HEAL_STEPS))
    # DeepSeek-V2's rotary key, which llama.cpp's "deepseek2" runs (`rotated_high`: the
    # leading rotated pair of the 12 fastest bands of 2 frequencies), uniform sizes.
    for heal_steps in (0, HEAL_STEPS):
        name = "latent-31.25-rotated_high-act-uniform-p4-fold2"
        runs.append(
            Run(
                name + ("-healed" if heal_steps else ""),
                "latent",
                0.3125,
                ROTATED_HIGH,
                4,
                True,
                "uniform",
                heal_steps=heal_steps,
                fold=2,
            )
        )
    return runs


class Study:
    """The loaded model, its texts and the original's reference outputs (computed once)."""

    def __init__(self, output: pathlib.Path, eval_windows: int, calibration_windows: int):
        from headsize_tf.keras3.pretrained.decoder_text import decoder_lm_text
        from headsize_tf.keras3.pretrained.decoders import load_decoder

        self.output = output
        self.lm = load_decoder(MODEL)
        # The study's protocol: every window and prompt starts with SmolLM2's BOS
        # (<|im_start|>, id 1), although the file adds none (the library's default).
        self.eval = {
            name: decoder_lm_text(
                self.lm,
                WINDOW,
                corpus=name,
                max_held_out_windows=eval_windows,
                train=False,
                start_token=True,
            ).held_out
            for name in EVAL_TEXTS
        }
        train = decoder_lm_text(
            self.lm, WINDOW, corpus="austen", max_train_windows=None, start_token=True
        ).train
        self.calibration_pool = train
        self.calibration_windows = calibration_windows
        self.prompts = [
            np.array([[self.lm.tokenizer.start_token_id, *self.lm.tokenizer.tokenize(p)]], "int32")
            for p in PROMPTS
        ]
        self._stats: dict[int, Any] = {}
        self._reference: dict[str, Any] | None = None

    def calibration_sample(self, seed: int) -> np.ndarray:
        """The calibration windows of a seed: a sample of the training novels' windows."""
        rng = np.random.default_rng(seed)
        pick = rng.choice(len(self.calibration_pool), self.calibration_windows, False)
        return self.calibration_pool[np.sort(pick)]

    def calibration(self, seed: int):
        """Calibration statistics on a seeded sample of the training novels (cached on disk)."""
        from headsize_tf.keras3.reparam.calibration import CalibrationStats, calibration_stats

        if seed not in self._stats:
            from headsize_tf.core.io import cache_root

            # 80 MB of second moments: the cache, not the results.
            name = f"kv_sharing_smollm2_{self.calibration_windows}_seed{seed}.npz"
            path = cache_root() / "calibration" / name
            if path.exists():
                self._stats[seed] = CalibrationStats.load(path)
            else:
                windows = self.calibration_sample(seed)
                source = (
                    f"austen train (four novels), {len(windows)} windows of {WINDOW - 1} tokens "
                    f"after the start token, sampled with seed {seed}"
                )
                stats = calibration_stats(self.lm, windows, source=source)
                stats.save(path)
                self._stats[seed] = stats
        return self._stats[seed]

    def outputs(self, model) -> dict[str, Any]:
        """Per text: perplexity and argmax tokens; greedy continuations of the prompts."""
        import keras

        out: dict[str, Any] = {}
        for name, windows in self.eval.items():
            total, count, argmax = 0.0, 0, []
            for start in range(0, len(windows), 4):
                batch = windows[start : start + 4]
                logits = np.asarray(keras.ops.convert_to_numpy(model(batch[:, :-1])), np.float64)
                top = logits.max(-1, keepdims=True)
                log_z = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
                picked = np.take_along_axis(logits, batch[:, 1:, None], -1)[..., 0]
                total += float((log_z - picked).sum())
                count += picked.size
                argmax.append(logits.argmax(-1))
            out[name] = {
                "perplexity": float(np.exp(total / count)),
                "argmax": np.concatenate(argmax),
            }
        out["greedy"] = [model.generate(p, NEW_TOKENS)[0, p.shape[1] :] for p in self.prompts]
        return out

    def reference(self) -> dict[str, Any]:
        if self._reference is None:
            self._reference = self.outputs(self.lm)
        return self._reference


def _convert(study: Study, run: Run):
    from headsize_tf.core import rope
    from headsize_tf.core.conversion import ConversionTarget
    from headsize_tf.keras3.reparam import KVPlan, compress_kv, convert_model

    lm = study.lm
    if run.method == "original":
        return lm, {}
    if run.method == "file":
        from headsize_tf.keras3.pretrained.decoders import load_decoder

        return load_decoder(run.path), {"model_file": run.path}
    if run.method == "exact" and run.strategy == "svd_values":
        covariances = study.calibration(run.seed).covariances
        target = ConversionTarget("grouped", 3, "svd_values")
        return convert_model(lm, target, covariances=covariances)[0], {}
    if run.method == "exact":
        stats = study.calibration(run.seed) if run.calibrated else None
        model, report = compress_kv(lm, KVPlan(1.0, run.strategy, run.pairs, run.calibrated), stats)
        report.pop("layers")
        return model, report
    if run.method == "latent":
        stats = study.calibration(run.seed) if (run.calibrated or run.strategy == "2norm") else None
        kv_plan = KVPlan(
            run.fraction,
            run.strategy,
            run.pairs,
            run.calibrated,
            run.allocation,
            rope_context=run.rope_context,
            split=run.svd == "split",
            rope_fold=run.fold,
        )
        sizes = None
        if run.allocation == "sensitivity":
            from headsize_tf.keras3.reparam import allocate_by_sensitivity

            windows = study.calibration_sample(run.seed)
            sizes = allocate_by_sensitivity(lm, kv_plan, stats, windows, progress=print)
        model, report = compress_kv(lm, kv_plan, stats, sizes)
        report.pop("layers")
        return model, report
    if run.method == "partial_rope":
        stats = study.calibration(run.seed)
        layer = lm.attention_layers[0]
        if run.strategy == ROTATED:
            from headsize_tf.core import kv_sharing
            from headsize_tf.keras3.layers.roles import numpy_weights

            components, fulls = [], []
            for i, source in enumerate(lm.attention_layers):
                weights = numpy_weights(source)
                basis = kv_sharing.rotated_rope(weights, stats.covariances[i], run.fold)
                components.append([list(c) for c in basis.components(3 * run.pairs)])
                spectrum = kv_sharing.rotated_rope_spectrum(weights, components[-1], fold=run.fold)
                fulls.append(len(spectrum))
            target = ConversionTarget(
                "latent", tuple(fulls), rope_components=components, rope_fold=run.fold
            )
            model, _ = convert_model(lm, target)
            return model, {"latent_per_layer": fulls, "rope_components_per_layer": components}
        sets = [
            [list(s) for s in rope.select_pairs(run.strategy, 32, run.pairs, 3, scores)]
            for scores in stats.pair_scores
        ]
        full = min(
            lm.hidden_dim, layer.num_heads * (layer.head_size - 2 * run.pairs + layer.value_dim)
        )
        target = ConversionTarget("latent", full, rope_frequencies=sets)
        model, _ = convert_model(lm, target)
        return model, {"latent": full, "rope_sets_per_layer": sets}
    pooling = "svd_values" if run.strategy == "svd_values" else "mean"
    covariances = None if pooling == "mean" else study.calibration(run.seed).covariances
    if run.method == "grouped" and run.fraction > 1 / 3 + 1e-9:
        from headsize_tf.keras3.reparam.kv_compress import grouped_budget

        target, report = grouped_budget(lm, run.fraction, study.calibration(run.seed), pooling)
        model, _ = convert_model(lm, target, covariances=covariances)
        return model, report
    if run.method == "grouped":
        model, _ = convert_model(lm, ConversionTarget("grouped", 1, pooling), covariances)
        return model, {}
    # Pruned: whole key/value groups by importance, to one group per layer.
    import keras

    from headsize_tf.keras3.pruning import head_importance, remove_heads

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    stats_windows = study.calibration_pool[: study.calibration_windows]
    batches = [
        (b[:, :-1], b[:, 1:])
        for b in np.array_split(stats_windows, max(1, len(stats_windows) // 4))
    ]
    scores = head_importance(lm, batches, loss)  # [layers, 9]
    groups = scores.reshape(len(scores), 3, 3).sum(-1)
    mask = np.zeros_like(scores)
    for layer, best in enumerate(groups.argmax(-1)):
        mask[layer, 3 * best : 3 * best + 3] = 1.0
    return remove_heads(lm, mask), {"kept_group_per_layer": groups.argmax(-1).tolist()}


def run_one(study: Study, run: Run) -> dict[str, Any]:
    """Converts (heals), measures and writes `runs/NAME.json`; returns the record."""
    from headsize_tf.core import kv_cache
    from headsize_tf.core.io import write_json
    from headsize_tf.keras3.reparam.heal import layerwise_distill

    start = time.perf_counter()
    model, details = _convert(study, run)
    if run.heal_steps:
        windows = study.calibration_pool[: study.calibration_windows]
        heal = layerwise_distill(study.lm, model, windows, run.heal_steps, progress=None)
        details["heal"] = {k: v for k, v in heal.items() if k != "layers"}
        details["heal"]["relative_error_mean"] = {
            stage: float(np.mean([layer[f"relative_error_{stage}"] for layer in heal["layers"]]))
            for stage in ("before", "after")
        }
    convert_s = time.perf_counter() - start
    if run.method == "exact":
        details["exactness"] = logit_match(
            study.lm, model, [w[:EXACT_WINDOWS] for w in study.eval.values()]
        )
    reference = study.reference()
    outputs = reference if run.method == "original" else study.outputs(model)
    record: dict[str, Any] = {
        "run": dataclasses.asdict(run),
        "cache_bytes_per_token": kv_cache.kv_cache_bytes_per_token(
            model.attention_spec, model.hidden_dim, model.num_layers
        ),
        "params": int(model.count_params()),
        "convert_seconds": round(convert_s, 1),
        "details": details,
    }
    for name in EVAL_TEXTS:
        record[name] = {
            "perplexity": outputs[name]["perplexity"],
            "top1_agreement": float(np.mean(outputs[name]["argmax"] == reference[name]["argmax"])),
        }
    same = [
        float(np.mean(a == b)) for a, b in zip(outputs["greedy"], reference["greedy"], strict=True)
    ]
    record["greedy_agreement"] = float(np.mean(same))
    record["seconds"] = round(time.perf_counter() - start, 1)
    write_json(study.output / "runs" / f"{run.name}.json", record)
    return record


def logit_match(original, model, texts: list[np.ndarray]) -> dict[str, Any]:
    """The largest per-position `max |logit diff| / max |logit|` and the share of positions
    with the same argmax, `model` against `original` on windows of each text."""
    import keras

    worst, same, count = 0.0, 0, 0
    for windows in texts:
        for start in range(0, len(windows), 4):
            batch = windows[start : start + 4, :-1]
            want = np.asarray(keras.ops.convert_to_numpy(original(batch)), np.float64)
            got = np.asarray(keras.ops.convert_to_numpy(model(batch)), np.float64)
            relative = np.abs(got - want).max(-1) / np.abs(want).max(-1)
            worst = max(worst, float(relative.max()))
            same += int((got.argmax(-1) == want.argmax(-1)).sum())
            count += relative.size
    return {"max_relative_logit_diff": worst, "argmax_equal": same / count, "positions": count}


def report(output: pathlib.Path) -> str:
    """README table, plot and summary.json of the finished runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from headsize_tf.core.io import save_figure, write_json

    records = [json.loads(p.read_text()) for p in sorted((output / "runs").glob("*.json"))]
    if not records:
        raise ValueError(f"{output}/runs holds no finished run.")
    original = next((r for r in records if r["run"]["method"] == "original"), None)
    base = (
        original["cache_bytes_per_token"]
        if original
        else max(r["cache_bytes_per_token"] for r in records)
    )
    order = {run.name: i for i, run in enumerate(plan())}
    records.sort(key=lambda r: order.get(r["run"]["name"], 1e9))
    lines = [
        "| run | cache | austen ppl | moby dick ppl | top-1 agree (austen) | greedy agree | params |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        lines.append(
            f"| {r['run']['name']} | {r['cache_bytes_per_token'] / base:.4f} | "
            f"{r['austen']['perplexity']:.2f} | {r['moby_dick']['perplexity']:.2f} | "
            f"{r['austen']['top1_agreement']:.3f} | {r['greedy_agreement']:.3f} | {r['params']:,} |"
        )
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    styles = {
        "original": ("original", "k", "*"),
        "latent_act": ("latent, calibrated SVD", "tab:blue", "o"),
        "latent_w": ("latent, weight SVD", "tab:orange", "o"),
        "latent_rotated": ("latent, rotated RoPE, calibrated", "tab:cyan", "P"),
        "latent_healed": ("latent, calibrated, healed", "tab:green", "D"),
        "latent_split": ("latent, split SVD, calibrated", "tab:olive", "v"),
        "grouped": ("grouped K/V 3 -> 1 (mean)", "tab:red", "s"),
        "grouped_mixed": ("grouped K/V, 1 or 3 heads per layer", "tab:brown", "s"),
        "grouped_healed": ("grouped K/V 3 -> 1, healed", "tab:pink", "s"),
        "grouped_svd_values": ("grouped K/V, values by calibrated SVD", "tab:gray", "s"),
        "grouped_svd_values_healed": ("grouped K/V, values by SVD, healed", "k", "s"),
        "pruned": ("K/V groups pruned to 1", "tab:purple", "^"),
        "pruned_healed": ("K/V groups pruned to 1, healed", "violet", "^"),
        "partial_rope": ("partial RoPE only (full latent)", "0.5", "x"),
        "file": ("latent, healed and uptrained (--model-file)", "darkgreen", "P"),
    }
    seen = set()
    for r in records:
        run = r["run"]
        key = run["method"]
        if key == "exact":  # The original's point: its logits up to rounding.
            continue
        if key == "latent":
            key = (
                "latent_healed"
                if run.get("heal_steps", 0)
                else ("latent_act" if run["calibrated"] else "latent_w")
            )
            if key == "latent_act" and run.get("strategy") == ROTATED:
                key = "latent_rotated"
            if key == "latent_act" or key == "latent_rotated":
                key = "latent_split" if run.get("svd") == "split" else key
        elif key == "grouped" and run.get("strategy") == "svd_values":
            key = "grouped_svd_values_healed" if run.get("heal_steps", 0) else "grouped_svd_values"
        elif key == "grouped" and run.get("heal_steps", 0):
            key = "grouped_healed"
        elif key == "pruned" and run.get("heal_steps", 0):
            key = "pruned_healed"
        elif key == "grouped" and run["fraction"] > 1 / 3 + 1e-9:
            key = "grouped_mixed"
        label, color, marker = styles[key]
        ax.scatter(
            r["cache_bytes_per_token"] / base,
            r["austen"]["perplexity"],
            marker=marker,
            color=color,
            s=36,
            label=None if key in seen else label,
        )
        seen.add(key)
    ax.set(
        xlabel="KV cache kept (fraction of SmolLM2's)",
        ylabel="Northanger Abbey perplexity (log)",
        yscale="log",
        title="SmolLM2-135M-Instruct (4-bit): KV conversion at equal cache",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    save_figure(fig, output / "perplexity_vs_cache.png")
    plt.close(fig)
    write_json(output / "summary.json", {"runs": records})
    exact = [r for r in records if r["run"]["method"] == "exact"]
    if exact:
        lines += [
            "",
            "| exact limit | max abs logit diff / max abs logit | argmax equal | positions |",
            "|---|---:|---:|---:|",
        ]
        for r in exact:
            match = r["details"]["exactness"]
            lines.append(
                f"| {r['run']['name']} | {match['max_relative_logit_diff']:.1e} | "
                f"{match['argmax_equal']:.2%} | {match['positions']:,} |"
            )
    table = "\n".join(lines)
    (output / "table.md").write_text(table + "\n")
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = study_parser("kv_sharing_smollm2", __doc__.splitlines()[0])
    add_study_options(parser)
    parser.add_argument("--runs", default="", help="comma-separated run names (default: all)")
    parser.add_argument("--eval-windows", type=int, default=32)
    parser.add_argument("--calibration-windows", type=int, default=32)
    parser.add_argument(
        "--model-file",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="also measure a converted model saved as .keras (e.g. by convert --uptrain-steps) "
        "as run NAME",
    )
    args = parser.parse_args(argv)
    output = pathlib.Path(args.output)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up lines.
    from headsize_tf.experiments.reproduction.runners import quiet_tensorflow

    quiet_tensorflow()
    if not args.report_only:
        wanted = [name for name in args.runs.split(",") if name]
        runs = [run for run in plan() if not wanted or run.name in wanted]
        files = []
        for entry in args.model_file:
            name, _, path = entry.partition("=")
            if not name or not path or not pathlib.Path(path).is_file():
                what = f"{path} is not a file; " if name and path else ""
                raise ValueError(
                    f"--model-file {entry}: {what}expected NAME=PATH of a saved .keras model"
                )
            files.append(Run(name, "file", path=path))
        if files:
            runs = files if not wanted else runs + files
        unknown = set(wanted) - {run.name for run in plan()}
        if unknown:
            names = ", ".join(run.name for run in plan())
            raise ValueError(f"--runs {','.join(sorted(unknown))}: expected names from {names}")
        todo = [run for run in runs if not (output / "runs" / f"{run.name}.json").exists()]
        print(
            f"{len(runs) - len(todo)} of {len(runs)} runs finished; {len(todo)} to go", flush=True
        )
        if todo:
            study = Study(output, args.eval_windows, args.calibration_windows)
            for i, run in enumerate(todo, 1):
                record = run_one(study, run)
                print(
                    f"[{i}/{len(todo)}] {run.name}: austen {record['austen']['perplexity']:.2f}, "
                    f"moby dick {record['moby_dick']['perplexity']:.2f}, greedy agreement "
                    f"{record['greedy_agreement']:.2f} ({record['seconds']} s)",
                    flush=True,
                )
    print(report(output))
    return 0


if __name__ == "__main__":
    from headsize_tf.experiments._entry import run_main

    run_main(main, "kv_sharing_smollm2")
