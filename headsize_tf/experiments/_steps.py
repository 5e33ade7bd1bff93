"""Resumable study steps: each writes its record once, and a rerun reuses it."""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

from headsize_tf.core.io import write_json


def run_step(out: pathlib.Path, name: str, title: str, work: Callable[[], dict]) -> dict[str, Any]:
    """`work()`'s record in `out/runs/NAME.json` (with its seconds), or the file's if it exists."""
    path = out / "runs" / f"{name}.json"
    if path.exists():
        print(f"[{name}] reusing {path}", flush=True)
        return json.loads(path.read_text())
    print(f"[{name}] {title} ...", flush=True)
    start = time.perf_counter()
    record = {**work(), "seconds": time.perf_counter() - start}
    write_json(path, record)
    print(f"[{name}] done in {record['seconds']:.0f} s", flush=True)
    return record
