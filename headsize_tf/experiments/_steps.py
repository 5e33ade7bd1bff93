"""Resumable study steps: each writes its record once, and a rerun reuses it."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from headsize_tf.core.io import cache_root, check_output_path, write_json


class MissingRun(FileNotFoundError):
    """A `--report-only` study met a step whose record is not there yet.

    An `OSError`, so a study's entry point (`_entry.run_main`) reports it as bad input:
    one line, exit status 2.
    """

    def __init__(self, path: pathlib.Path):
        super().__init__(
            f"--report-only: {path} is missing (or was made with other settings); "
            "run the study without --report-only first"
        )
        self.path = path


def default_work_dir(study: str) -> pathlib.Path:
    """Where a study keeps its checkpoints by default: `<cache root>/work/<study>`.

    The cache root (`headsize_tf.core.io.cache_root`, default `~/.cache/headsize_tf`)
    outlives a reboot, unlike `/tmp`, so an interrupted study resumes from its
    checkpoints.
    """
    return cache_root() / "work" / study


class _StudyDirectory(argparse.Action):
    """Stores a directory the study writes, once `core.io.check_output_path` accepts it.

    Refused with `check_output_path`'s `OSError`, naming the option (one line and exit 2 from
    `_entry.run_main`, before any work): a symbolic link (the study would write
    through it), an existing file, and a path where no directory can be created.
    """

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            check_output_path(values, "directory")
        except OSError as err:
            raise type(err)(f"{option_string}: {err}") from None
        setattr(namespace, self.dest, values)


def add_study_options(parser: argparse.ArgumentParser, work_dir: str | None = None) -> None:
    """Adds the options every study main shares: `--output`, `--report-only` and,
    for a study that keeps checkpoints, `--work-dir` (default `default_work_dir(work_dir)`).

    A given `--output` or `--work-dir` that is a symbolic link, a file, or a path where
    no directory can be created raises an `OSError` naming the option as it is parsed.
    """
    parser.add_argument(
        "--output",
        required=True,
        action=_StudyDirectory,
        help="the study's directory (written; reruns resume from it)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild the report from the finished runs' records, run nothing",
    )
    parser.add_argument(
        "--summarize-only", dest="report_only", action="store_true", help=argparse.SUPPRESS
    )
    if work_dir is not None:
        parser.add_argument(
            "--work-dir",
            action=_StudyDirectory,
            default=str(default_work_dir(work_dir)),
            help="checkpoints and logs (default: %(default)s)",
        )


class Steps:
    """Runs a study's steps, each recorded in `out/runs/NAME.json`, reusing finished ones.

    A step's record is reused when its file exists and, for a step given
    `settings`, when the file was written with the same settings. A record of
    other settings is a finished result: it is kept, and the step raises a
    `ValueError` naming the first setting that differs (use another output, or
    delete the record to redo it), unless `redo_changed` (the demo, whose
    reruns follow its flags) redoes the step. With `total`, progress lines are
    numbered "[i/total]"; otherwise they are labelled with the step's name.

    A step given `outputs` (files its work writes besides its record, such as a
    model) is redone when one of them is missing. A step given `derived` (globs,
    relative to `out`, of the records and files later steps make from its result)
    removes what they match before its work runs, printing one line, so a step
    redone (a base model retrained) never leaves results of its previous run to be
    reused; its own record and `outputs` are kept.

    With `report_only`, no step runs: a step without a reusable record raises
    `MissingRun`; `outputs` and `derived` are not looked at.

    Args:
      out: The study's output directory.
      total: The number of numbered steps (the demo's stages), or None.
      report_only: Reuse records only (a study's `--report-only`).
      redo_changed: Redo a step whose record has other settings.
    """

    def __init__(
        self,
        out: pathlib.Path,
        total: int | None = None,
        report_only: bool = False,
        redo_changed: bool = False,
    ):
        self.out = out
        self.total = total
        self.report_only = report_only
        self.redo_changed = redo_changed
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
        outputs: Iterable[pathlib.Path] = (),
        derived: Iterable[str] = (),
    ) -> dict[str, Any]:
        """`work()`'s record (with its name, settings and seconds), or the file's if reusable.

        Args:
          name: The record's name (`out/runs/NAME.json`).
          title: The step in the progress lines.
          work: Makes the record (a dict).
          settings: What the record depends on; a record of others is not reused.
          outputs: Files `work` writes besides the record; one missing redoes the step.
          derived: Globs (relative to `out`) of what later steps make from this one's
            result, removed before `work` runs.
        """
        self.index += 1
        label = self.label(name)
        path = self.out / "runs" / f"{name}.json"
        outputs = [pathlib.Path(p) for p in outputs]
        if path.exists():
            record = json.loads(path.read_text())
            if settings is None or record.get("settings") == settings:
                if self.report_only:
                    return record
                missing = next((p for p in outputs if not p.exists()), None)
                if missing is None:
                    print(f"{label} {title}: reusing {path}", flush=True)
                    return record
                print(f"{label} {title}: {missing} is missing, redoing the step", flush=True)
            elif not self.redo_changed:
                was = record.get("settings") or {}
                key = next(
                    k for k in sorted(set(was) | set(settings)) if was.get(k) != settings.get(k)
                )
                raise ValueError(
                    f"{path} was made with {key} {was.get(key)!r}, not {settings.get(key)!r}: "
                    "its results are kept; use another --output (or delete the file to redo "
                    "the step)."
                )
        if self.report_only:
            raise MissingRun(path)
        self._remove_derived(f"{label} {title}", derived, {path, *outputs})
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

    def _remove_derived(self, step: str, patterns: Iterable[str], kept: set[pathlib.Path]) -> None:
        """Removes the files `patterns` match under `out`, except `kept`; one line if any."""
        patterns = list(patterns)
        kept = {p.resolve() for p in kept}
        found = {p for pattern in patterns for p in self.out.glob(pattern) if p.is_file()}
        stale = sorted(p for p in found if p.resolve() not in kept)
        if not stale:
            return
        print(
            f"{step}: removing {len(stale)} file(s) made from its previous run "
            f"({', '.join(patterns)} in {self.out})",
            flush=True,
        )
        for p in stale:
            p.unlink()


def study_command(module: str, argv: Sequence[str] | None) -> str:
    """The command that reproduces a study, for its report (without `--report-only`)."""
    args = sys.argv[1:] if argv is None else list(argv)
    kept = [a for a in args if a not in ("--report-only", "--summarize-only")]
    return " ".join(["python -m", module, *kept])


def print_report(
    summarize: Callable[[pathlib.Path, str], Any], out: pathlib.Path, command: str
) -> int:
    """Runs a study's `summarize(out, command)` and prints its README; returns 0.

    Records missing raise a `FileNotFoundError` naming `out` (one line and exit status 2
    from `_entry.run_main`).
    """
    try:
        summarize(out, command)
    except (OSError, KeyError) as err:
        raise FileNotFoundError(f"--output {out} lacks the study's records ({err})") from None
    print((out / "README.md").read_text())
    return 0


def check_study_settings(out: pathlib.Path, settings: dict, report_only: bool = False) -> None:
    """Records in `out/settings.json` the settings that shape a study's records.

    The first run writes the file (a `report_only` run writes nothing); a later
    run with the same settings resumes. Raises `ValueError` naming each setting
    that differs from the recorded ones, since the records were made with those.
    """
    path = out / "settings.json"
    settings = json.loads(json.dumps(settings))
    if path.exists():
        recorded = json.loads(path.read_text())
        differ = [
            f"{key} {json.dumps(recorded.get(key))} there, {json.dumps(settings.get(key))} now"
            for key in sorted(settings.keys() | recorded.keys())
            if recorded.get(key) != settings.get(key)
        ]
        if differ:
            raise ValueError(
                f"--output {out} holds runs made with other settings ({'; '.join(differ)}); "
                "rerun with the recorded settings or use another --output"
            )
    elif not report_only:
        write_json(path, settings)


def check_trained_steps(out: pathlib.Path, steps: int) -> None:
    """Raises `ValueError` when `out`'s recorded model was trained other than `steps` steps."""
    path = out / "runs" / "train.json"
    if path.exists() and (recorded := json.loads(path.read_text()).get("steps")) != steps:
        raise ValueError(
            f"--output {out} holds a model trained {recorded} steps, not --steps {steps}; "
            "rerun with the recorded settings or use another --output"
        )
