"""The bottleneck study's report files: `bottleneck.json`, README.md and `bottleneck.png`
under the output, from `bottleneck_report`'s summary, verdict, table and plots."""

from __future__ import annotations

import pathlib
from typing import Any

from headsize_tf.core.io import atomic_path, write_json
from headsize_tf.experiments import bottleneck_report
from headsize_tf.experiments.bottleneck.plan import models
from headsize_tf.experiments.bottleneck.presets import PRESETS

COMMAND = "python -m headsize_tf.experiments.bottleneck"


def command(preset_name: str, out: pathlib.Path) -> str:
    """The command that makes (and resumes) the study at `out`."""
    preset = "" if preset_name == "cpu" else f" --preset {preset_name}"
    return f"{COMMAND}{preset} --output {out}"


def write_report(preset_name: str, out: pathlib.Path, runs: list[dict[str, Any]]) -> dict:
    """Writes `bottleneck.json`, `README.md` and `bottleneck.png` under `out`; returns the
    summary. The README links a `VERDICT.md` beside it, or in the directory above."""
    preset = PRESETS[preset_name]
    summary = {"preset": preset_name, **bottleneck_report.summarize(preset, runs, models)}
    write_json(out / "bottleneck.json", summary)
    with atomic_path(out / "README.md") as tmp:
        discussion = next(
            (f"../{name}" for name in ("VERDICT.md",) if (out.parent / name).exists()),
            "VERDICT.md" if (out / "VERDICT.md").exists() else None,
        )
        pathlib.Path(tmp).write_text(
            bottleneck_report.markdown(summary, preset, command(preset_name, out), discussion)
        )
    if summary["rows"]:
        with atomic_path(out / "bottleneck.png") as tmp:
            bottleneck_report.plot(summary, preset, tmp)
    return summary
