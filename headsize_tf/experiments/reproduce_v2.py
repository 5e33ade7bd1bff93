"""Deprecated alias of `headsize_tf.experiments.reproduction` (removed after one release).

`python -m headsize_tf.experiments.reproduce_v2 ...` runs the same command as
`python -m headsize_tf.experiments.reproduction ...`; the names below are the
package modules' own.
"""

# Deprecated: import from headsize_tf.experiments.reproduction.<module> instead.
# (argparse, dataclasses, write_json and _override: names the old module's users read.)
import argparse as argparse
import dataclasses as dataclasses

from headsize_tf.core.io import write_json as write_json
from headsize_tf.experiments._devices import cpu_description, device_description
from headsize_tf.experiments.reproduction.__main__ import main
from headsize_tf.experiments.reproduction.plan import (
    Model,
    plan,
    run_name,
    standard,
    unique_models,
)
from headsize_tf.experiments.reproduction.presets import PRESETS, Preset
from headsize_tf.experiments.reproduction.report import (
    compare,
    markdown,
    plot,
    r1_pairs,
    verdicts,
)
from headsize_tf.experiments.reproduction.runners import (
    FRAMEWORKS,
    check_output,
    eval_batches,
    keras_backend,
    prepare_data,
    quiet_tensorflow,
    read_curve,
    run_dir,
    runner,
    train_one,
)
from headsize_tf.experiments.reproduction.runners import (
    _override as _override,
)
from headsize_tf.experiments.reproduction.scheduler import (
    SCHEDULING,
    claim,
    result_arguments,
    run_pending,
    run_workers,
)
from headsize_tf.experiments.reproduction.summary import (
    orderings,
    pairs,
    settled_from,
    summarize,
)
from headsize_tf.experiments.reproduction.sweep import (
    EDGE_EXTENSIONS,
    NOT_SHAPE,
    best_learning_rate,
    load_runs,
    model_grid,
    pending,
)

__all__ = [
    "EDGE_EXTENSIONS",
    "FRAMEWORKS",
    "NOT_SHAPE",
    "PRESETS",
    "SCHEDULING",
    "Model",
    "Preset",
    "best_learning_rate",
    "check_output",
    "claim",
    "compare",
    "cpu_description",
    "device_description",
    "eval_batches",
    "keras_backend",
    "load_runs",
    "main",
    "markdown",
    "model_grid",
    "orderings",
    "pairs",
    "pending",
    "plan",
    "plot",
    "prepare_data",
    "quiet_tensorflow",
    "r1_pairs",
    "read_curve",
    "result_arguments",
    "run_dir",
    "run_name",
    "run_pending",
    "run_workers",
    "runner",
    "settled_from",
    "standard",
    "summarize",
    "train_one",
    "unique_models",
    "verdicts",
]

if __name__ == "__main__":
    raise SystemExit(main())
