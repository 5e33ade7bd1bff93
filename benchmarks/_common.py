"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from headsize_tf.core.io import save_figure, write_atomic, write_json


def rows_per_backend(script: str, backends: str, child_args: list[str]) -> list[dict] | int:
    """Runs `script --child CHILD_ARGS` once per Keras backend in `backends` (comma-separated;
    Keras fixes its backend at import, so each gets its own process) and returns the rows
    each prints as JSON on its last line, or a failing child's exit status (its stderr's
    tail printed)."""
    rows: list[dict] = []
    for backend in backends.split(","):
        print(f"timing the {backend} backend ...", flush=True)
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
        done = subprocess.run(
            [sys.executable, script, "--child", *child_args],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return done.returncode
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    return rows


def llama_cpp_version(python: str) -> str:
    """The `llama-cpp-python` version of the interpreter `python` (its own environment)."""
    return subprocess.run(
        [python, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


__all__ = ["llama_cpp_version", "rows_per_backend", "save_figure", "write_atomic", "write_json"]
