"""Where does the head-size bottleneck bind? Trained models on tasks of controlled rank.

The command: trains the runs still missing under `--output` (unless `--report-only`),
then rebuilds `bottleneck.json`, README.md and `bottleneck.png` from the run files.

    python -m headsize_tf.experiments.bottleneck --output results/bottleneck
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

from headsize_tf.experiments._entry import study_parser
from headsize_tf.experiments._steps import add_study_options
from headsize_tf.experiments.bottleneck import runners
from headsize_tf.experiments.bottleneck.plan import load_runs
from headsize_tf.experiments.bottleneck.presets import PRESETS
from headsize_tf.experiments.bottleneck.report import verdict_lines, write_report


def main(argv: Sequence[str] | None = None) -> int:
    parser = study_parser("bottleneck", __doc__.splitlines()[0])
    add_study_options(parser)
    parser.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
    parser.add_argument(
        "--only",
        action="append",
        metavar="SETTING",
        help="train only this setting (e.g. preference_n64_K64; repeatable): two processes "
        "with different settings share the output directory",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up lines.
    out = pathlib.Path(args.output)
    preset = PRESETS[args.preset]
    names = [setting.name for setting in preset.all_settings]
    for name in args.only or []:
        if name not in names:
            raise ValueError(f"--only {name}: expected one of {', '.join(names)}")
    if args.only:
        preset = preset.only(args.only)
    if args.report_only:
        runs = load_runs(out)
        if not runs:
            raise ValueError(
                f"--report-only: {out} holds no finished runs; run the study first (without "
                "--report-only)."
            )
    else:
        runs = runners.run_all(preset, out, lambda line: print(line, flush=True))
    summary = write_report(args.preset, out, runs)
    print("\n".join(verdict_lines(summary)))
    return 0


if __name__ == "__main__":
    from headsize_tf.experiments._entry import run_main

    run_main(main, "bottleneck")
