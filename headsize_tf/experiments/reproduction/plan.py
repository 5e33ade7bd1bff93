"""The reproduction's plan: the models of R1 and R2 at a preset, and the runs' names."""

from __future__ import annotations

import dataclasses
from typing import Any

from headsize_tf.experiments.reproduction.presets import Preset


@dataclasses.dataclass(frozen=True)
class Model:
    """One model of the plan: a causal LM of `width` with `heads` heads of `head_size`.

    Args:
      width: Hidden size (feed-forward 4 x width).
      heads: Attention heads per layer.
      kind: "standard" (head size = width / heads) or "fixed_head".
      head_size: The size of each head.

    Example:
      >>> standard(64, 4).key, Model(64, 14, "fixed_head", 32).key
      ('std_w64_h4_p16', 'fixed_w64_h14_p32')
    """

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

        return params.lm_trainable_params(
            preset.vocab_size, self.width, preset.layers, self.attention(), preset.sequence_length
        )

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
