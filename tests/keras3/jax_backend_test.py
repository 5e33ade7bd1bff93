"""Runs tests/keras3 again on the JAX backend, in a subprocess."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import keras
import pytest

GUARD = "HEADSIZE_KERAS3_SUBPROCESS"
# What must hold on every backend: the layers against the numpy oracles, the
# models, saving, fit / jit / bfloat16, the Hugging Face import and the tools.
# The MiniLM comparison, the tuner search and the CLI run on the TensorFlow
# backend only (they add minutes on JAX's per-shape compilation and test no
# backend-specific code beyond what the files below cover).
JAX_FILES = [
    f"tests/keras3/{name}_test.py"
    for name in (
        "layers",
        "validation",
        "training",
        "cross_framework",
        "modeling",
        "causal_lm",
        "hf_import",
        "tools",
        "quantize_lora",
        "per_head_mask",
        "property_oracle",
    )
]
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="this is the JAX run")
@pytest.mark.skipif(os.environ.get(GUARD) == "1", reason="inside the backend subprocess")
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_keras3_tests_pass_on_jax():
    env = dict(os.environ, KERAS_BACKEND="jax", **{GUARD: "1"})
    env.pop("PYTEST_XDIST_WORKER", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *JAX_FILES, "-q", "-p", "no:xdist"]
        # The suite's addopts run it with xdist: the subprocess runs serially.
        + ["-p", "no:cacheprovider", "-o", "addopts=", "-m", "not slow"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    passed = re.search(r"(\d+) passed", output)
    assert passed and int(passed.group(1)) > 0, output[-3000:]
