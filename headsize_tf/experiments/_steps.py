"""Resumable study steps: each writes its record once, and a rerun reuses it."""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

from headsize_tf.core.io import write_json


class Steps:
    """Runs a study's steps, each recorded in `out/runs/NAME.json`, reusing finished ones.

    A step's record is reused when its file exists and, for a step given
    `settings`, when the file was written with the same settings (a changed
    setting redoes the step). With `total`, progress lines are numbered
    "[i/total]"; otherwise they are labelled with the step's name.

    Args:
      out: The study's output directory.
      total: The number of numbered steps (the demo's stages), or None.
    """

    def __init__(self, out: pathlib.Path, total: int | None = None):
        self.out = out
        self.total = total
        self.index = 0
        self.redone: list[str] = []

    def label(self, name: str) -> str:
        return f"[{self.index}/{self.total}]" if self.total else f"[{name}]"

    def announce(self, title: str) -> None:
        """Counts and prints a numbered step that is not recorded (e.g. data preparation)."""
        self.index += 1
        print(f"{self.label(title)} {title}", flush=True)

    def run(
        self,
        name: str,
        title: str,
        work: Callable[[], dict[str, Any]],
        settings: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """`work()`'s record (with its name, settings and seconds), or the file's if reusable."""
        self.index += 1
        label = self.label(name)
        path = self.out / "runs" / f"{name}.json"
        if path.exists():
            record = json.loads(path.read_text())
            if settings is None or record.get("settings") == settings:
                print(f"{label} {title}: reusing {path}", flush=True)
                return record
        print(f"{label} {title} ...", flush=True)
        start = time.perf_counter()
        record = {**work(), "slug": name}
        if settings is not None:
            record["settings"] = settings
        record["seconds"] = time.perf_counter() - start
        write_json(path, record)
        self.redone.append(name)
        indent = " " * len(label) if self.total else label
        print(f"{indent} done in {record['seconds']:.0f} s", flush=True)
        return record
