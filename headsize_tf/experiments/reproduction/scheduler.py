"""Which process trains which run: the pending runs in order, claimed in the work dir so
that several workers (`--workers`, or processes started by hand) never train one run twice.

Small models leave a machine idle: on 2 CPU cores, 2 workers of 1 thread each
finished ~1.2x the runs per hour of one process with both cores; on a GPU,
several workers share it (memory grown on demand).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from collections.abc import Sequence

from headsize_tf.core.io import write_json
from headsize_tf.experiments.reproduction.plan import Model, run_name
from headsize_tf.experiments.reproduction.presets import Preset
from headsize_tf.experiments.reproduction.runners import train_one
from headsize_tf.experiments.reproduction.sweep import load_runs, pending


def claim(claims: pathlib.Path, name: str):
    """Takes the run `name` for this process: an exclusive `flock` on its claim file, held
    until the returned file is closed (or the process dies: the kernel then releases it, so
    a cut-off worker leaves no stale claim). None: another process trains it."""
    import fcntl

    claims.mkdir(parents=True, exist_ok=True)
    handle = open(claims / f"{name}.claim", "a+")  # noqa: SIM115 (held while training)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


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
    done, waiting = 0, False
    claims = pathlib.Path(args.work_dir) / "claims"
    while args.max_runs is None or done < args.max_runs:
        runs = load_runs(out, preset, args.framework)
        todo = [
            t for t in pending(preset, experiments, runs) if not args.keys or t[0].key in args.keys
        ]
        if not todo:
            break
        mine, held = None, None
        for t in todo:
            prefix = "" if args.framework == "tf_keras" else f"{args.framework}-"
            held = claim(claims, prefix + run_name(t[0].key, t[1], t[2]))
            if held is not None:
                mine = t
                break
        if mine is None:
            if not waiting:
                print(
                    f"[wait] {len(todo)} runs left, all being trained by other workers", flush=True
                )
            waiting = True
            time.sleep(poll_seconds)
            continue
        waiting = False
        model, lr, seed = mine
        name = run_name(model.key, lr, seed)
        try:
            path = out / "runs" / f"{name}.json"
            if path.exists():
                if (model.key, lr, seed) not in load_runs(out, preset, args.framework):
                    raise ValueError(
                        f"{path} is a run of another preset shape or framework: move it "
                        "away or use another --output."
                    )
                continue  # Finished by another worker since `todo` was read.
            print(
                f"[run {done + 1}, {len(todo)} to go] {name} ({model.params(preset):,} params)",
                flush=True,
            )
            record = train_one(
                model, preset, lr, seed, str(data_dir), pathlib.Path(args.work_dir), args.framework
            )
            write_json(out / "runs" / f"{name}.json", record)
            print(
                f"[done] {name}: test perplexity {record['test_perplexity']:.2f} in "
                f"{record['train_seconds']:.0f} s",
                flush=True,
            )
            done += 1
        finally:
            held.close()  # Releases the claim (the file stays: unlinking a locked file races).


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
