"""Constants shared by the re-parametrisation tests (tiny training runs)."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "official_configs"
FOUR_STEPS = (
    "trainer.train_steps=4,trainer.validation_steps=1,trainer.steps_per_loop=4,"
    "trainer.summary_interval=4,trainer.checkpoint_interval=4,trainer.validation_interval=4,"
    "task.train_data.global_batch_size=8,task.validation_data.global_batch_size=8"
)
LETTERS = list("abcdefghij")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + LETTERS + [f"##{c}" for c in LETTERS]
