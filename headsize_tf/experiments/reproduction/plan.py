"""The reproduction's plan: presets (shape and budget), models, and the runs' names."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Preset:
    """The shared shape and budget of every run."""

    layers: int
    sequence_length: int
    batch_size: int
    width: int
    steps: int
    learning_rates: tuple[float, ...]
    curve_points: int = 8
    head_size: int = 32
    dropout: float = 0.1
    vocab_size: int = 4096
    r2_heads: tuple[int, ...] = (2, 4, 8, 16)
    # How the grid came to be (printed in the report); not part of a run's shape.
    grid_note: str = ""

    @property
    def tokens(self) -> int:
        return self.steps * self.batch_size * self.sequence_length


PRESETS = {
    # 2 CPU cores: ~9 minutes a run (0.3 s a step). 4 layers, sequence 256 (every head
    # size < n); 1600 steps of 16 x 256 tokens = 8.9 epochs of Austen's 742k training tokens.
    "cpu": Preset(
        layers=4,
        sequence_length=256,
        batch_size=16,
        width=64,
        steps=1600,
        learning_rates=(2e-3, 4e-3, 8e-3),
        grid_note=(
            "The first model (std_w64_h4_p16) was swept from the grid 0.001, 0.002, 0.004; its "
            "best rate was 0.008 after the edge extension, so every later model starts from "
            "0.002, 0.004, 0.008 (its extra rates stay in the table)."
        ),
    ),
    # One GPU (`--framework keras3` on JAX: benchmarks/reproduce_v2_device.sh): the paper's
    # depth and sequence length at width 128 vs 256. 2000 steps of 32 x 256 tokens = 22
    # epochs of Austen (the CPU preset's curves still fall at 9 epochs).
    "gpu": Preset(
        layers=6,
        sequence_length=256,
        batch_size=32,
        width=128,
        steps=2000,
        learning_rates=(1e-3, 2e-3, 4e-3),
    ),
    # The test suite: seconds.
    "test": Preset(
        layers=1,
        sequence_length=128,
        batch_size=4,
        width=16,
        steps=4,
        learning_rates=(1e-3, 3e-3),
        curve_points=2,
        head_size=8,
        r2_heads=(2, 4),
    ),
}


@dataclasses.dataclass(frozen=True)
class Model:
    width: int
    heads: int
    kind: str  # "standard" or "fixed_head"
    head_size: int

    @property
    def key(self) -> str:
        standard = self.kind == "standard" or self.head_size * self.heads == self.width
        return f"{'std' if standard else 'fixed'}_w{self.width}_h{self.heads}_p{self.head_size}"

    def attention(self) -> dict[str, Any]:
        if self.kind == "standard":
            return {"kind": "standard", "num_heads": self.heads}
        return {"kind": "fixed_head", "num_heads": self.heads, "head_size": self.head_size}

    def params(self, preset: Preset) -> int:
        from headsize_tf import params

        spec = params.EncoderSpec(
            vocab_size=preset.vocab_size,
            width=self.width,
            num_layers=preset.layers,
            attention=self.attention(),
            intermediate_size=4 * self.width,
            max_sequence_length=preset.sequence_length,
        )
        return params.causal_lm_params(spec).trainable

    def row(self, preset: Preset) -> dict[str, Any]:
        """The fields `reproduce.verdicts` reads."""
        return {
            "key": self.key,
            "width": self.width,
            "heads": self.heads,
            "attention_type": self.kind,
            "head_size": self.head_size,
            "params": self.params(preset),
        }


def standard(width: int, heads: int) -> Model:
    return Model(width, heads, "standard", width // heads)


def plan(preset: Preset) -> dict[str, list[Model]]:
    """R1 as (baseline, fixed) pairs in order, R2 as both series."""
    from headsize_tf import params

    w, p = preset.width, preset.head_size
    r1 = []
    for width in (w, w * 3 // 2, 2 * w):
        baseline = standard(width, 4)
        heads = params.match_num_heads(
            baseline.params(preset),
            lambda h: Model(w, h, "fixed_head", p).params(preset),
            range(1, 129),
        )
        r1 += [baseline, Model(w, heads, "fixed_head", p)]
    r2 = []
    for heads in preset.r2_heads:
        r2 += [standard(w, heads), Model(w, heads, "fixed_head", p)]
    return {"R1": r1, "R2": r2}


def unique_models(experiments: dict[str, list[Model]]) -> dict[str, Model]:
    out: dict[str, Model] = {}
    for models in experiments.values():
        for model in models:
            out.setdefault(model.key, model)
    return out


def run_name(key: str, learning_rate: float, seed: int) -> str:
    return f"{key}_lr{learning_rate:g}_seed{seed}"
