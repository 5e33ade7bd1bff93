"""Bhojanapalli et al. (2020) R1 and R2 at a budget chosen from learning curves.

The command: trains the pending runs (unless `--report-only`), then rebuilds
`reproduction.json`, README.md and the plots in `--output` from the run files.

    python -m headsize_tf.experiments.reproduction --preset cpu --output results/reproduction_v2
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Sequence

from headsize_tf.core.arguments import positive_int
from headsize_tf.core.io import native_logs_to, write_atomic, write_json
from headsize_tf.experiments._entry import study_parser
from headsize_tf.experiments._steps import add_study_options
from headsize_tf.experiments.reproduction.plan import plan, unique_models
from headsize_tf.experiments.reproduction.presets import PRESETS
from headsize_tf.experiments.reproduction.report import markdown, plot, verdicts
from headsize_tf.experiments.reproduction.runners import (
    FRAMEWORKS,
    check_output,
    keras_backend,
    prepare_data,
    quiet_tensorflow,
    runner,
)
from headsize_tf.experiments.reproduction.scheduler import (
    result_arguments,
    run_pending,
    run_workers,
)
from headsize_tf.experiments.reproduction.summary import orderings, summarize
from headsize_tf.experiments.reproduction.sweep import load_runs, pending


def main(argv: Sequence[str] | None = None) -> int:
    parser = study_parser("reproduction", __doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    add_study_options(parser, work_dir="reproduction")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument(
        "--max-runs",
        type=positive_int,
        default=None,
        help="stop after this many new runs (the rest resumes later); with --workers, per worker",
    )
    parser.add_argument("--keys", nargs="*", default=None, help="train only these models")
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="TensorFlow intra- and inter-op threads (default: all cores; with --workers: 1)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="train with this many processes at once (each with --threads, "
        "default 1; runs are claimed, so none is trained twice)",
    )
    parser.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        default="tf_keras",
        help="tf_keras: Model Garden's trainer (default); keras3: the Keras 3 "
        "runner on KERAS_BACKEND (e.g. jax, where TensorFlow is absent); "
        "its runs form a grid of their own",
    )
    args = parser.parse_args(argv)
    if args.keys is not None:
        known = unique_models(plan(PRESETS[args.preset]))
        unknown = sorted(set(args.keys) - set(known))
        if unknown:
            raise ValueError(
                f"--keys {' '.join(unknown)}: not a model of preset {args.preset!r}; expected "
                f"some of {' '.join(sorted(known))}"
            )
    # TensorFlow's load-time notices (CUDA stubs, oneDNN, CPU features) stay off the
    # console; workers inherit this, and later native logs go to work_dir/native.log.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from headsize_tf.data import corpora

    quiet_tensorflow()
    if args.threads and (args.framework == "tf_keras" or keras_backend() == "tensorflow"):
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    preset = PRESETS[args.preset]
    experiments = plan(preset)
    out = pathlib.Path(args.output)
    check_output(out, args.framework)
    options = corpora.PrepareOptions(seq_length=preset.sequence_length)
    data_dir = corpora.data_dir_for(options, args.data_dir)
    if not args.report_only:
        prepare_data(data_dir, preset, args.framework)
        if args.workers and args.workers > 1:
            code = run_workers(args)
            if code:
                return code
        else:
            with native_logs_to(pathlib.Path(args.work_dir) / "native.log"):
                run_pending(args, preset, experiments, out, data_dir)
    runs = load_runs(out, preset, args.framework)
    if args.report_only and not runs:
        raise ValueError(
            f"--report-only: {out} holds no finished runs; run the study first (without "
            "--report-only)."
        )
    summary = summarize(preset, experiments, runs)
    left = pending(preset, experiments, runs)
    complete = not left
    # An experiment is judged once none of its models has a run left (a finished sweep
    # lists its seeds, a moved grid its new rate, so nothing hides behind an empty list).
    busy = {model.key for model, _, _ in left}
    finished = [k for k in ("R1", "R2") if not busy & {m.key for m in experiments[k]}]
    status = (
        f"Status: {len(runs)} run{'' if len(runs) == 1 else 's'} finished on "
        f"{', '.join(sorted({r['device'] for r in runs.values()})) or 'no device yet'}; "
        + (
            "all planned runs are in."
            if complete
            else f"at least {len(left)} to go (more follow once each sweep is complete): rerun "
            "the command to continue; no claim is judged before all its experiment's "
            "runs are in" + (f" ({', '.join(finished)}: complete, judged)." if finished else ".")
        )
    )
    judged = verdicts({k: summary[k] for k in finished})
    ordered = orderings(summary)
    command = "python -m headsize_tf.experiments.reproduction " + " ".join(
        result_arguments(
            [a for a in (sys.argv[1:] if argv is None else argv) if a != "--report-only"]
        )
    )
    write_json(
        out / "reproduction.json",
        {
            "command": command,
            "preset": args.preset,
            **summary,
            "orderings": ordered,
            "verdicts": judged,
            "complete": complete,
            "judged": finished,
        },
    )
    write_atomic(
        out / "README.md",
        markdown(
            summary,
            args.preset,
            preset,
            command,
            status,
            judged,
            ordered,
            runner(args.framework, runs),
        ),
    )
    plot(summary, out)
    print(status)
    return 0


if __name__ == "__main__":
    from headsize_tf.experiments._entry import run_main

    run_main(main, "reproduction")
