"""The demo's settings: the two small models, the training config, what a run takes."""

from __future__ import annotations

import dataclasses
from typing import Any

STEPS = 800
FINETUNE_STEPS = 160
QUICK = {"steps": 300, "finetune_steps": 60}
PRETRAINED = "minilm-l6"
SHARED_KEY_DIM = 192
PRUNE_FRACTION = 0.4
STAGES = 8
BASE = {
    "task": {
        "model": {
            "num_classes": 2,
            "encoder": {
                "type": "any",
                "any": {
                    "vocab_size": 4096,
                    "num_layers": 2,
                    "max_position_embeddings": 128,
                    "dropout_rate": 0.1,
                    "attention_dropout_rate": 0.0,
                },
            },
        },
        "metric_type": "accuracy",
        "train_data": {
            "input_path": "${DATA_DIR}/rotten_tomatoes/train.tfrecord",
            "global_batch_size": 32,
            "seq_length": 128,
        },
        "validation_data": {
            "input_path": "${DATA_DIR}/rotten_tomatoes/dev.tfrecord",
            "global_batch_size": 1307,
            "seq_length": 128,
            "is_training": False,
            "drop_remainder": False,
        },
    },
    "trainer": {
        "train_steps": STEPS,
        "validation_steps": 1,
        "steps_per_loop": 100,
        "summary_interval": 100,
        "checkpoint_interval": 200,
        "validation_interval": STEPS,
        "optimizer_config": {
            "learning_rate": {"polynomial": {"initial_learning_rate": 1e-3, "decay_steps": STEPS}},
            "warmup": {"polynomial": {"warmup_steps": 80}},
        },
    },
}


@dataclasses.dataclass(frozen=True)
class DemoModel:
    """One of the two small models trained from scratch (idea 1)."""

    name: str
    width: int
    heads: int
    attention_type: str
    head_size: int | None

    def encoder_fields(self) -> dict[str, Any]:
        return {
            "hidden_size": self.width,
            "attention": self.attention(),
            "intermediate_size": 4 * self.width,
        }

    def spec(self):
        from headsize_tf import params

        return params.EncoderSpec(
            vocab_size=4096,
            width=self.width,
            num_layers=2,
            attention=self.attention(),
            intermediate_size=4 * self.width,
            max_sequence_length=128,
        )

    def attention(self) -> dict[str, Any]:
        """The model's attention spec fields."""
        head_size = self.head_size if self.attention_type == "fixed_head" else None
        return {"kind": self.attention_type, "num_heads": self.heads, "head_size": head_size}


@dataclasses.dataclass(frozen=True)
class DemoSettings:
    """What the demo runs; every stage records the settings it depends on.

    Args:
      steps: Training steps of each small model (idea 1).
      finetune_steps: Fine-tuning steps (batch 32) of MiniLM and of its
        collaborative conversion (ideas 2 and 3).
      shared_key_dim: The collaborative shared key dimension D.
      prune_fraction: Fraction of MiniLM's 72 heads pruned and removed.
      importance_examples: Train examples the head importance is averaged over.
      speed_repeats: Timed passes over the dev set per model (the best counts).
      dev_examples: The first dev snippets every row's accuracy and the speeds use
        (None: all 1,307; fewer only for quick checks such as the tests).
      cp_max_iter: Iterations of the CP (None: its default).
      seed: Seeds training, fine-tuning and the CP.
    """

    steps: int = STEPS
    finetune_steps: int = FINETUNE_STEPS
    shared_key_dim: int = SHARED_KEY_DIM
    prune_fraction: float = PRUNE_FRACTION
    importance_examples: int = 512
    speed_repeats: int = 3
    dev_examples: int | None = None
    cp_max_iter: int | None = None
    seed: int = 0

    @classmethod
    def quick(cls, **overrides: Any) -> DemoSettings:
        """The `--quick` settings (fewer steps; the same models)."""
        return cls(**{**QUICK, **overrides})


def demo_models() -> list[DemoModel]:
    """The standard baseline and the fixed-head model matched to its parameters."""
    from headsize_tf import params

    baseline = DemoModel("standard (width 96, 4 heads of 24)", 96, 4, "standard", None)
    candidate = DemoModel("fixed head (width 64, heads of 32)", 64, 1, "fixed_head", 32)
    heads = params.match_encoder_heads(baseline.spec(), candidate.spec(), range(1, 65))
    candidate = dataclasses.replace(
        candidate, heads=heads, name=f"fixed head (width 64, {heads} heads of 32)"
    )
    return [baseline, candidate]
