"""The `headsize-tf train` command of the tiny Austen LM, run in a subprocess by the tests
that need separate processes (SIGKILL and resume, two workers)."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY_LM = str(ROOT / "official_configs" / "headsize_lm_austen_tiny.yaml")


def train_lm_command(model_dir: str, data_dir: str, override: str, *extra: str) -> list[str]:
    """`python -m headsize_tf train` of the tiny LM config in `--mode train`; `extra` flags
    go before `--params_override`."""
    return [
        sys.executable,
        "-m",
        "headsize_tf",
        "train",
        "--experiment",
        "headsize_lm/language_modeling",
        "--config_file",
        TINY_LM,
        "--model_dir",
        model_dir,
        "--data-dir",
        data_dir,
        "--mode",
        "train",
        *extra,
        "--params_override",
        override,
    ]
