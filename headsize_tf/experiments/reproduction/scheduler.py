"""Which process trains which run: the pending runs in order, claimed so that several
workers (`--workers`, or processes started by hand) never train one run twice.

`claim` and `run_claimed` are the experiments' one scheduler (the reproduction's
`run_pending`, and the bottleneck study's). Small models leave a machine idle: on 2 CPU
cores, 2 workers of 1 thread each finished ~1.2x the runs per hour of one process with
both cores; on a GPU, several workers share it (memory grown on demand).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from headsize_tf.core.io import write_json
from headsize_tf.experiments.reproduction.plan import Model, run_name
from headsize_tf.experiments.reproduction.presets import Preset
from headsize_tf.experiments.reproduction.runners import train_one
from headsize_tf.experiments.reproduction.sweep import load_runs, pending

Run = TypeVar("Run")


def claim(claims: pathlib.Path, name: str):
    """Takes the run `name` for this process: an exclusive `flock` on its claim file, held
    until the returned file is closed (or the process dies: the kernel then releases it, so
    a cut-off worker leaves no stale claim). None: another process trains it.

    A claim file removed (`release(..., remove=True)`) between this process opening and
    locking it is no claim any more: the lock is taken again on the file now at its path.
    """
    import fcntl

    claims.mkdir(parents=True, exist_ok=True)
    path = claims / f"{name}.claim"
    while True:
        handle = open(path, "a+")  # noqa: SIM115 (held while training)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(current, os.fstat(handle.fileno())):
            break
        handle.close()
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def release(handle, remove: bool = False) -> None:
    """Releases a claim; `remove`: deletes its file first, still locked, so that a claim
    leaves nothing behind (`claim` then never takes the removed file's lock for a claim)."""
    if remove:
        pathlib.Path(handle.name).unlink(missing_ok=True)
    handle.close()


def run_claimed(
    todo: Callable[[], Sequence[Run]],
    claim_of: Callable[[Run], tuple[pathlib.Path, str]],
    train: Callable[[Run, int, int], bool],
    poll_seconds: float,
    max_runs: int | None = None,
    remove_claims: bool = False,
) -> int:
    """Trains the runs `todo()` lists, in order, one claimed run at a time, until it lists
    none or `max_runs` were trained; returns how many were.

    `claim_of(run)`: the claims directory and name of `run` (`claim`); `train(run, done,
    left)` trains it unless it was finished meanwhile (False), with `done` runs trained so
    far and `left` listed. `todo` is read again after each run, so a finished sweep lists
    its seeds; a process whose listed runs are all claimed waits `poll_seconds` for them.
    `remove_claims`: each claim's file goes when released (`release`).
    """
    done, waiting = 0, False
    while max_runs is None or done < max_runs:
        runs = todo()
        if not runs:
            break
        mine, held = None, None
        for run in runs:
            held = claim(*claim_of(run))
            if held is not None:
                mine = run
                break
        if mine is None:
            if not waiting:
                print(
                    f"[wait] {len(runs)} runs left, all being trained by other workers", flush=True
                )
            waiting = True
            time.sleep(poll_seconds)
            continue
        waiting = False
        try:
            done += bool(train(mine, done, len(runs)))
        finally:
            release(held, remove_claims)
    return done


def run_pending(
    args,
    preset: Preset,
    experiments: dict[str, list[Model]],
    out: pathlib.Path,
    data_dir: pathlib.Path,
    poll_seconds: float = 20.0,
) -> None:
    """Trains pending runs in order (sweep first) until none is left or `--max-runs`.

    Runs are claimed (`claim`) in the work dir, so several workers (`--workers`, or
    processes started by hand on one machine) share the plan without training a run
    twice; a worker whose remaining runs are all claimed waits for them, because a
    finished sweep releases that model's seeds.
    """
    claims = pathlib.Path(args.work_dir) / "claims"
    prefix = "" if args.framework == "tf_keras" else f"{args.framework}-"

    def todo() -> list[tuple[Model, float, int]]:
        runs = load_runs(out, preset, args.framework)
        return [
            t for t in pending(preset, experiments, runs) if not args.keys or t[0].key in args.keys
        ]

    def train(run: tuple[Model, float, int], done: int, left: int) -> bool:
        model, lr, seed = run
        name = run_name(model.key, lr, seed)
        path = out / "runs" / f"{name}.json"
        if path.exists():
            if (model.key, lr, seed) not in load_runs(out, preset, args.framework):
                raise ValueError(
                    f"{path} is a run of another preset shape or framework: move it "
                    "away or use another --output."
                )
            return False  # Finished by another worker since `todo` was read.
        print(
            f"[run {done + 1}; {left} pending, this one included] {name} "
            f"({model.params(preset):,} params)",
            flush=True,
        )
        record = train_one(
            model, preset, lr, seed, str(data_dir), pathlib.Path(args.work_dir), args.framework
        )
        write_json(path, record)
        print(
            f"[done] {name}: test perplexity {record['test_perplexity']:.2f} in "
            f"{record['train_seconds']:.0f} s",
            flush=True,
        )
        return True

    run_claimed(
        todo,
        lambda run: (claims, prefix + run_name(run[0].key, run[1], run[2])),
        train,
        poll_seconds,
        args.max_runs,
    )


def run_workers(args: argparse.Namespace) -> int:
    """Runs `args.workers` copies of this command side by side (each claims its runs), each
    with `args.threads` TensorFlow threads (default 1) and GPU memory grown on demand, so
    small models share one machine: 2 CPU cores, or one GPU with several runs at once."""
    import subprocess

    command = [
        sys.executable,
        "-m",
        "headsize_tf.experiments.reproduction",
        "--preset",
        args.preset,
        "--output",
        args.output,
        "--work-dir",
        args.work_dir,
        "--threads",
        str(args.threads or 1),
        "--framework",
        args.framework,
    ]
    if args.data_dir:
        command += ["--data-dir", args.data_dir]
    if args.max_runs is not None:
        command += ["--max-runs", str(args.max_runs)]
    if args.keys:
        command += ["--keys", *args.keys]
    # GPU memory on demand, so the workers share one GPU (TensorFlow, and JAX, which
    # would otherwise take 75% of it per process).
    env = {
        **os.environ,
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    procs = [subprocess.Popen(command, env=env) for _ in range(args.workers)]
    codes = [p.wait() for p in procs]
    return next((abs(c) or 1 for c in codes if c), 0)  # A worker killed by a signal fails.


# Options that change how runs are scheduled, not what they compute.
SCHEDULING = ("--max-runs", "--threads", "--keys", "--workers", "--summarize-only", "--work-dir")


def result_arguments(argv: Sequence[str]) -> list[str]:
    """`argv` without the scheduling options and their values: the command that makes
    the results, whichever chunks and processes made them."""
    out, skipping = [], False
    for a in argv:
        if a.startswith("--"):
            skipping = a.split("=")[0] in SCHEDULING
        if not skipping:
            out.append(a)
    return out
