"""The bottleneck study's plan: the models of a setting, the runs' names and files, the
runs of a preset in order, and each model's rate (chosen from its seed-0 sweep)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

from headsize_tf.experiments.bottleneck.presets import Preset, Setting


@dataclasses.dataclass(frozen=True)
class Model:
    """One model: `heads` heads at `width`, of `kind` "standard", "fixed_head" or
    "collaborative" (`size`: the fixed head size p, or the shared key size D).

    Example:
      >>> Model("fixed_head", 64, 8, 16).key, Model("collaborative", 64, 8, 64).rank_bound
      ('fixed_w64_h8_p16', 64)
    """

    kind: str
    width: int
    heads: int
    size: int | None = None

    @property
    def key(self) -> str:
        if self.kind == "standard":
            return f"std_w{self.width}_h{self.heads}"
        if self.kind == "fixed_head":
            return f"fixed_w{self.width}_h{self.heads}_p{self.size}"
        return f"collab_w{self.width}_h{self.heads}_D{self.size}"

    @property
    def rank_bound(self) -> int:
        """The rank one head's logits can reach: d/h, p or D."""
        return self.width // self.heads if self.kind == "standard" else int(self.size)

    def attention(self) -> dict[str, Any]:
        if self.kind == "standard":
            return {"kind": "standard", "num_heads": self.heads}
        if self.kind == "fixed_head":
            return {"kind": "fixed_head", "num_heads": self.heads, "head_size": self.size}
        return {
            "kind": "collaborative",
            "num_heads": self.heads,
            "shared_key_dim": self.size,
            "mixing_initializer": "concatenate",
        }

    def params(self, preset: Preset, setting: Setting) -> int:
        from headsize_tf import params

        return params.lm_trainable_params(
            setting.vocab_size, self.width, preset.layers, self.attention(), setting.sequence_length
        )


def models(preset: Preset, setting: Setting) -> list[Model]:
    """The compared models of a setting (the package docstring): the standard model; per
    fixed head size, the fixed model and the standard model of its parameters; the
    collaborative model."""
    from headsize_tf import params

    d, h = preset.width, preset.heads
    n = setting.sequence_length
    fixed_sizes = sorted({2 * d // h, max(min(n, preset.large_head), 2 * d // h)})
    out = [Model("standard", d, h)]
    for p in fixed_sizes:
        fixed = Model("fixed_head", d, h, p)
        target = fixed.params(preset, setting)
        # The standard model (width a multiple of h) whose parameters are closest.
        width = params.match_num_heads(
            target, lambda w: Model("standard", w * h, h).params(preset, setting), range(1, 257)
        )
        out += [fixed, Model("standard", width * h, h)]
    out.append(Model("collaborative", d, h, d))
    return list(dict.fromkeys(out))


def plan(preset: Preset) -> list[tuple[Setting, Model]]:
    return [(s, m) for s in preset.settings for m in models(preset, s)]


def run_name(key: str, learning_rate: float, seed: int) -> str:
    return f"{key}_lr{learning_rate:g}_seed{seed}"


def run_path(out: pathlib.Path, setting: Setting, name: str) -> pathlib.Path:
    return out / "runs" / setting.name / f"{name}.json"


def load_runs(out: pathlib.Path) -> list[dict[str, Any]]:
    """Every finished run under `out`, in file order."""
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/*.json"))]


def chosen_rate(preset: Preset, out: pathlib.Path, setting: Setting, key: str) -> float | None:
    """The grid's rate with the best seed-0 final accuracy (None until all ran)."""
    results = []
    for lr in preset.learning_rates:
        path = run_path(out, setting, run_name(key, lr, preset.seeds[0]))
        if not path.exists():
            return None
        run = json.loads(path.read_text())
        results.append((run["accuracy"], -run["curve"][-1]["train_loss"], lr))
    return max(results)[2]


def todo_list(preset: Preset) -> list[tuple[Setting, Model, float | None, int]]:
    """Every run of the preset in order: per setting, each model's rate sweep on the first
    seed, then the other seeds (rate None: the one the sweep chooses); the
    `sweep_only` settings' sweeps last."""
    todo: list[tuple[Setting, Model, float | None, int]] = []
    for setting in preset.all_settings:
        combos = [(setting, m) for m in models(preset, setting)]
        todo += [(s, m, lr, preset.seeds[0]) for s, m in combos for lr in preset.learning_rates]
        if setting not in preset.sweep_only:
            todo += [  # Seed by seed: a cut-off grid leaves whole seeds.
                (s, m, None, seed)
                for seed in preset.seeds[1:]
                for s, m in combos
                if preset.seed_models is None or m.key in preset.seed_models
            ]
    return todo


@dataclasses.dataclass(frozen=True)
class Run:
    """One run still to train: the `index`-th of `total` in `todo_list`'s order."""

    setting: Setting
    model: Model
    learning_rate: float
    seed: int
    index: int
    total: int

    @property
    def name(self) -> str:
        return run_name(self.model.key, self.learning_rate, self.seed)

    def path(self, out: pathlib.Path) -> pathlib.Path:
        return run_path(out, self.setting, self.name)


def pending(
    preset: Preset,
    out: pathlib.Path,
    todo: list[tuple[Setting, Model, float | None, int]] | None = None,
) -> list[Run]:
    """The runs of `todo` (default: `todo_list(preset)`) not finished under `out` whose
    rate is known: a model's other seeds follow once its sweep is complete (until then
    its sweep is pending)."""
    todo = todo_list(preset) if todo is None else todo
    out_runs = []
    for index, (setting, model, lr, seed) in enumerate(todo, 1):
        lr = chosen_rate(preset, out, setting, model.key) if lr is None else lr
        if lr is None:
            continue
        run = Run(setting, model, lr, seed, index, len(todo))
        if not run.path(out).exists():
            out_runs.append(run)
    return out_runs
