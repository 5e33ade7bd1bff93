"""Every head-sharing method at equal KV-cache size, on an LM trained here (Keras 3).

A causal LM (4 pre-LN layers, width 128, 8 heads of 16, sequence 128) is
trained on Jane Austen's novels (2000 steps of 16 x 128 tokens, the
results/lm_pruning model's shape and budget, on Keras 3's `lm_keras3`
runner), then its decoding cache is cut to 1/2, 1/4 and 1/8 by each method:

* grouped-query K/V heads, mean-pooled (Ainslie et al., 2023), G = 4, 2, 1;
* grouped-query K/V heads, per-group operator SVD (`core.kv_sharing`);
* a shared latent K/V by the balanced joint SVD (TransMLA / MHA2MLA),
  r = 128, 64, 32 (the cache holds h (p + v) = 256 numbers per token);
* head pruning at the same cache size (Michel et al.: importance
  E|dL/dxi_h| on training windows, recomputed after each 1/8 of the heads,
  every layer keeping a head), the pruned heads removed;
* collaborative keys (Cordonnier et al.), which cache a shared key of D plus
  every head's value: they cannot go below half the cache, so they are
  measured at the smallest D in the grid (D = 16: 0.59 of the cache).

Each converted model is measured training-free (validation perplexity) and
after uptraining on 5% of the original training tokens (100 steps, Ainslie's
recipe: the original loss and optimizer, warm-up and decay), 3 seeds; the
unconverted model uptrained the same way is the control. Each step writes its
own file under `runs/` (converted models under `models/`), so a rerun skips
finished steps; the table, plot and verdict are rebuilt from the files
(`kv_sharing_report`).

    python -m headsize_tf.experiments.kv_sharing_study --output results/kv_sharing
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from headsize_tf.core.io import write_atomic
from headsize_tf.experiments._entry import study_parser
from headsize_tf.experiments._steps import Steps, add_study_options, study_command
from headsize_tf.experiments.kv_sharing_report import LABELS, METHODS, markdown, plot, summarize

MODULE = "headsize_tf.experiments.kv_sharing_study"


@dataclasses.dataclass(frozen=True)
class Settings:
    """The study's shapes and budgets (`quick()` for tests)."""

    layers: int = 4
    width: int = 128
    heads: int = 8
    sequence_length: int = 128
    batch_size: int = 16
    steps: int = 2000
    learning_rate: float = 2e-3
    dropout: float = 0.1
    vocab_size: int = 4096
    uptrain_fraction: float = 0.05
    uptrain_learning_rates: tuple[float, ...] = (1e-4, 3e-4, 1e-3)
    seeds: tuple[int, ...] = (0, 1, 2)
    fractions: tuple[int, ...] = (2, 4, 8)  # The cache is cut to 1/f.
    collaborative_dims: tuple[int, ...] = (16,)
    importance_windows: int = 256
    methods: tuple[str, ...] = METHODS
    # Windows of the validation and test splits evaluated, from their start (None: the
    # whole splits, as in every recorded run; fewer for a smoke run).
    eval_windows: int | None = None

    @property
    def head_size(self) -> int:
        return self.width // self.heads

    @property
    def uptrain_steps(self) -> int:
        return max(1, round(self.uptrain_fraction * self.steps))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def base_settings(self) -> dict[str, Any]:
        """What the base model depends on (a changed entry retrains it)."""
        fields = ("layers", "width", "heads", "sequence_length", "batch_size", "steps")
        fields += ("learning_rate", "dropout", "vocab_size")
        if self.eval_windows is not None:  # Absent from the records of whole-split runs.
            fields += ("eval_windows",)
        return {name: getattr(self, name) for name in fields}

    def convert_settings(self) -> dict[str, Any]:
        """What a conversion depends on (the pruning importance data included)."""
        return {**self.base_settings(), "importance_windows": self.importance_windows}

    def uptrain_settings(self) -> dict[str, Any]:
        return {**self.convert_settings(), "uptrain_fraction": self.uptrain_fraction}


def quick() -> Settings:
    """Seconds-long settings for the tests (a 1-layer LM, 4 heads of 4)."""
    return Settings(
        uptrain_learning_rates=(1e-3, 3e-3),
        layers=1,
        width=16,
        heads=4,
        batch_size=4,
        steps=8,
        seeds=(0, 1),
        fractions=(2, 4),
        collaborative_dims=(2,),
        importance_windows=8,
        uptrain_fraction=0.25,
    )


def variants(settings: Settings) -> list[dict[str, Any]]:
    """(method, size, fraction) of every converted model."""
    out = []
    heads, p = settings.heads, settings.head_size
    for f in settings.fractions:
        if heads % f == 0:
            for method in ("grouped_mean", "grouped_svd"):
                out.append({"method": method, "size": heads // f, "fraction": 1 / f})
            out.append(
                {"method": "pruned", "size": settings.layers * heads // f, "fraction": 1 / f}
            )
        out.append({"method": "latent", "size": 2 * heads * p // f, "fraction": 1 / f})
    for d in settings.collaborative_dims:
        fraction = (d + heads + heads * p) / (2 * heads * p)
        out.append({"method": "collaborative", "size": d, "fraction": fraction})
    return [v for v in out if v["method"] in settings.methods]


def _slug(variant: dict[str, Any]) -> str:
    return f"{variant['method']}_{variant['size']}"


def _preset(settings: Settings):
    from headsize_tf.experiments.reproduction.presets import Preset

    return Preset(
        layers=settings.layers,
        sequence_length=settings.sequence_length,
        batch_size=settings.batch_size,
        width=settings.width,
        steps=settings.steps,
        learning_rates=(settings.learning_rate,),
        curve_points=4,
        dropout=settings.dropout,
        vocab_size=settings.vocab_size,
        eval_windows=settings.eval_windows,
    )


def _arrays(settings: Settings, corpus_dir: pathlib.Path) -> dict[str, np.ndarray]:
    from headsize_tf.experiments import lm_keras3

    arrays = {s: lm_keras3.load_lm_array(corpus_dir, s) for s in lm_keras3.SPLITS}
    lm_keras3.check_lm_arrays(arrays, settings.sequence_length, settings.vocab_size)
    if settings.eval_windows is not None:
        for split in ("valid", "test"):
            arrays[split] = arrays[split][: settings.eval_windows]
    return arrays


def _load(path: pathlib.Path):
    import keras

    import headsize_tf.keras3.modeling  # noqa: F401  (registers the classes a file names)

    return keras.saving.load_model(path, compile=False)


def _measure(lm, settings: Settings, valid: np.ndarray) -> dict[str, Any]:
    from headsize_tf.core import kv_cache
    from headsize_tf.experiments import lm_keras3

    lm_keras3.compile_lm(lm, 1e-3, settings.uptrain_steps)  # Evaluation only.
    ppl, loss = lm_keras3.perplexity(lm, valid)
    spec = lm.attention_spec
    return {
        "validation_perplexity": ppl,
        "validation_loss": loss,
        "cache_bytes_per_token": kv_cache.kv_cache_bytes_per_token(
            spec, settings.width, num_layers=settings.layers
        ),
        "params": int(lm.count_params()),
        "attention": spec.to_dict(),
    }


def _prune(base, settings: Settings, train: np.ndarray, keep: int):
    """Removes heads by iterative importance pruning down to `keep` heads in all."""
    import keras

    from headsize_tf.core.pruning_plan import iterative_pruning
    from headsize_tf.keras3.pruning import remove_heads
    from headsize_tf.keras3.pruning.importance import head_importance
    from headsize_tf.keras3.pruning.remove import set_head_mask

    windows = train[: settings.importance_windows]
    batches = [
        (windows[i : i + 16, :-1], windows[i : i + 16, 1:]) for i in range(0, len(windows), 16)
    ]
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    total = settings.layers * settings.heads

    def importance(mask: np.ndarray) -> np.ndarray:
        set_head_mask(base, mask)
        return head_importance(base, batches, loss)

    steps = iterative_pruning(
        (settings.layers, settings.heads),
        importance,
        lambda mask: 0.0,
        target_fraction=1 - keep / total,
        step=1 / settings.heads,
        recompute=True,
        min_heads_per_layer=1,
        progress=False,
    )
    mask = np.asarray(steps[-1].mask, np.float32)
    set_head_mask(base, np.ones_like(mask))
    if int(mask.sum()) != keep:
        raise RuntimeError(f"Pruning kept {int(mask.sum())} heads, not {keep}.")
    return remove_heads(base, mask)


def convert_variant(base, variant: dict[str, Any], settings: Settings, train: np.ndarray):
    """The converted model of one variant (training-free)."""
    from headsize_tf.core.conversion import ConversionTarget
    from headsize_tf.keras3.reparam import convert_model

    method, size = variant["method"], variant["size"]
    if method == "pruned":
        return _prune(base, settings, train, size)
    kind, how = {
        "grouped_mean": ("grouped", "mean"),
        "grouped_svd": ("grouped", "svd"),
        "latent": ("latent", "joint_svd"),
        "collaborative": ("collaborative", "als"),
    }[method]
    return convert_model(base, ConversionTarget(kind, size, how))[0]


def uptrain(
    lm, settings: Settings, arrays: dict[str, np.ndarray], seed: int, learning_rate: float
) -> dict[str, Any]:
    """Ainslie's uptraining: `uptrain_steps` more steps of the original loss and optimizer
    (warm-up and linear decay from `learning_rate`); validation and test perplexity."""
    import keras

    from headsize_tf.experiments import lm_keras3

    keras.utils.set_random_seed(seed)
    steps = settings.uptrain_steps
    lm_keras3.compile_lm(lm, learning_rate, steps)
    curve, _ = lm_keras3.fit_windows(
        lm,
        arrays["train"],
        steps,
        settings.batch_size,
        seed + 1000,  # Not the base run's data order.
        [steps],
        lambda: lm_keras3.perplexity(lm, arrays["valid"]),
    )
    return {
        "validation_perplexity": curve[-1]["perplexity"],
        "test_perplexity": lm_keras3.perplexity(lm, arrays["test"])[0],
        "steps": steps,
        "seed": seed,
        "learning_rate": learning_rate,
    }


def uptrain_runs(
    steps: Steps, slug: str, title: str, model_path: pathlib.Path, settings: Settings, arrays
) -> tuple[float, list[dict[str, Any]], dict[str, float]]:
    """The rate sweep on the first seed (best validation perplexity wins), then the other
    seeds at that rate: (rate, one run per seed, validation perplexity per swept rate)."""
    config = settings.uptrain_settings()
    first, *others = settings.seeds
    sweep = {
        rate: steps.run(
            f"{slug}_uptrained_lr{rate:g}_s{first}",
            f"{title}: uptrain at {rate:g} (seed {first})",
            lambda rate=rate: uptrain(_load(model_path), settings, arrays, first, rate),
            config,
        )
        for rate in settings.uptrain_learning_rates
    }
    rate = min(sweep, key=lambda r: sweep[r]["validation_perplexity"])
    runs = [sweep[rate]] + [
        steps.run(
            f"{slug}_uptrained_lr{rate:g}_s{seed}",
            f"{title}: uptrain at {rate:g} (seed {seed})",
            lambda seed=seed: uptrain(_load(model_path), settings, arrays, seed, rate),
            config,
        )
        for seed in others
    ]
    return rate, runs, {f"{r:g}": v["validation_perplexity"] for r, v in sweep.items()}


def run_study(
    output: str | pathlib.Path,
    corpus_dir: str | pathlib.Path,
    settings: Settings,
    report_only: bool = False,
    command: str | None = None,
) -> dict[str, Any]:
    """Runs (or resumes) the study; writes README.md, summary.json and kv_sharing.png.

    With `report_only`, rebuilds those from the runs' records and runs nothing (a
    missing record raises `MissingRun`). `command` is the report's command line
    (default: this process's arguments, `study_command(..., None)`).
    """
    from headsize_tf.core.io import atomic_path
    from headsize_tf.experiments import lm_keras3

    out = pathlib.Path(output)
    corpus_dir = pathlib.Path(corpus_dir)
    arrays = {} if report_only else _arrays(settings, corpus_dir)
    steps = Steps(out, report_only=report_only)
    base_path = out / "models" / "base.keras"

    def train_base() -> dict[str, Any]:
        attention = {"kind": "standard", "num_heads": settings.heads}
        record = lm_keras3.train_run(
            attention,
            settings.width,
            _preset(settings),
            settings.learning_rate,
            0,
            corpus_dir,
            progress=lambda line: print(f"  {line}", flush=True),
            model_path=base_path,
        )
        return {**record, **_measure(_load(base_path), settings, arrays["valid"])}

    # A record without its model retrains it; what was made from an earlier base goes.
    base = steps.run(
        "base",
        "train the multi-head LM",
        train_base,
        settings.base_settings(),
        outputs=[base_path],
        derived=["runs/*.json", "models/*.keras"],
    )
    rate, control, sweep = uptrain_runs(
        steps, "base", "the unconverted LM", base_path, settings, arrays
    )
    records: dict[str, Any] = {
        "base": base,
        "variants": {},
        "control": {"rate": rate, "runs": control, "sweep": sweep},
    }
    for variant in variants(settings):
        slug = _slug(variant)
        model_path = out / "models" / f"{slug}.keras"
        title = f"{LABELS[variant['method']]}, size {variant['size']}"

        def convert(variant=variant, model_path=model_path) -> dict[str, Any]:
            lm = convert_variant(_load(base_path), variant, settings, arrays["train"])
            with atomic_path(model_path) as tmp:
                lm.save(tmp)
            return {**variant, **_measure(lm, settings, arrays["valid"])}

        free = steps.run(
            slug,
            f"{title}: convert, training-free",
            convert,
            settings.convert_settings(),
            outputs=[model_path],
            derived=[f"runs/{slug}_uptrained_*.json"],
        )
        rate, uptrained, sweep = uptrain_runs(steps, slug, title, model_path, settings, arrays)
        records["variants"][slug] = {
            "free": free,
            "uptrained": uptrained,
            "rate": rate,
            "sweep": sweep,
        }
    summary = summarize(records, settings)
    summary["command"] = command or study_command(MODULE, None)
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    plot(summary, out / "kv_sharing.png")
    write_atomic(out / "README.md", markdown(summary, settings))
    return summary


def austen_study_main(
    argv: Sequence[str] | None,
    module: str,
    description: str,
    make_settings: Callable[[bool], Any],
    run: Callable[..., dict[str, Any]],
    report: Callable[[dict[str, Any], Any], str],
) -> int:
    """The command of a study on the Austen LM: `--output`, `--report-only`, `--data-dir`,
    `--quick` (`make_settings(quick)`, whose `sequence_length` and `vocab_size` prepare the
    corpus); runs `run(output, corpus_dir, settings, report_only, command)` and prints
    `report(summary, settings)`. `command` is `python -m MODULE` with the arguments parsed
    (`argv`, or the process's when None). A report with a missing run raises `MissingRun`."""
    parser = study_parser(module.rsplit(".", 1)[-1], description)
    add_study_options(parser)
    parser.add_argument("--data-dir", default=None, help="DATA_DIR (default: the cache's)")
    parser.add_argument(
        "--quick", action="store_true", help="small settings (tests; minutes on 2 CPU cores)"
    )
    args = parser.parse_args(argv)
    from headsize_tf.data import corpora

    settings = make_settings(args.quick)
    options = corpora.PrepareOptions(
        seq_length=settings.sequence_length, vocab_size=settings.vocab_size
    )
    data_dir = corpora.data_dir_for(options, args.data_dir)
    if not args.report_only:
        from headsize_tf.experiments import lm_keras3

        corpora.prepare("austen", data_dir, options)
        lm_keras3.export_lm_arrays(data_dir / "austen")
    command = study_command(module, argv)
    summary = run(args.output, data_dir / "austen", settings, args.report_only, command)
    print(report(summary, settings))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return austen_study_main(
        argv,
        MODULE,
        __doc__.splitlines()[0],
        lambda fast: quick() if fast else Settings(),
        run_study,
        markdown,
    )


if __name__ == "__main__":
    from headsize_tf.experiments._entry import run_main

    run_main(main, "kv_sharing_study")
