"""The decoding benchmarks that the GPU scripts run, at toy sizes on the CPU (JAX).

`benchmarks/decoder_gpu.sh` runs them where a GPU is lent, with minutes to spare: a
benchmark that breaks (a donated cache read twice, a table that does not add up) should
break here first.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,  # JAX compiles every model's decode step: about a minute in all.
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed"),
]


def _run(script: str, *args: str) -> None:
    env = dict(os.environ, KERAS_BACKEND="jax")
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", "--backends", "jax", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_kv_cache_benchmark_times_every_kind_and_counts_its_cache(tmp_path):
    _run(
        "kv_cache.py",
        *("--repeats", "2", "--steps", "2", "--batch", "2", "--contexts", "32"),
        *("--output", str(tmp_path)),
    )
    rows = json.loads((tmp_path / "kv_cache.json").read_text())["rows"]
    fraction = {r["config"]: r["cache_fraction"] for r in rows}
    assert fraction["multi-head (8 K/V heads)"] == 1.0
    assert fraction["grouped, G=1"] == fraction["latent, r=64, absorbed"] == 0.125
    assert fraction["pruned to 4 heads"] == fraction["grouped, G=4"] == 0.5
    assert len(rows) == 14 and all(r["tokens_per_s"] > 0 and len(r["all_s"]) == 2 for r in rows)
    assert (tmp_path / "kv_cache.png").stat().st_size > 0


def test_decoder_speed_kv_part_reports_ratios_and_the_bytes_ideal(tmp_path):
    _run(
        "decoder_speed.py",
        *("--part", "kv", "--contexts", "32,512", "--batches", "2", "--steps", "2"),
        *("--repeats", "2", "--layers", "1", "--latents", "31.25%"),
        *("--output", str(tmp_path)),
    )
    rows = json.loads((tmp_path / "decoder_speed_kv.json").read_text())["rows"]
    assert not (tmp_path / "decoder_speed_kv.partial.jsonl").exists()
    for context in (32, 512):
        by = {r["config"]: r for r in rows if r["context"] == context}
        assert set(by) == {"original (G=3)", "grouped G=1", "latent 31.25%"}
        assert by["original (G=3)"]["ratio"] == by["original (G=3)"]["ideal_ratio"] == 1.0
        assert by["grouped G=1"]["cache_fraction"] == pytest.approx(1 / 3, abs=1e-3)
        assert by["latent 31.25%"]["cache_fraction"] == 0.3125
        # Fewer bytes a step: the ideal is above 1, and grows with the context.
        assert all(r["ideal_ratio"] > 1.0 for name, r in by.items() if name != "original (G=3)")
    ideal = {(r["config"], r["context"]): r["ideal_ratio"] for r in rows}
    assert ideal[("grouped G=1", 512)] > ideal[("grouped G=1", 32)]
    table = (tmp_path / "decoder_speed_kv.md").read_text()
    assert table.count("| jax |") == len(rows) == 6
