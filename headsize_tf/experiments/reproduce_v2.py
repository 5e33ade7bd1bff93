"""Bhojanapalli et al. (2020) R1 and R2 at a budget chosen from learning curves.

The successor of `reproduce` (2 layers, sequence 128, one learning rate, a
guessed budget). Here every model gets its own learning rate from a sweep,
the budget is checked against learning curves, and sequences are long
enough that every head is smaller than the sequence (Theorem 1's regime).

* R1 (their Fig. 1): standard baselines of width w, 1.5w and 2w (4 heads,
  head size = width / 4) vs width w with fixed head size 32 and the head
  count that matches each wider baseline's parameters.
* R2 (their Fig. 3a): width w, heads {2, 4, 8, 16}: baseline (head size =
  w / heads) vs fixed head size 32.

Protocol (the same for every model of a preset):

1. Sweep: seed 0 at the full budget for each learning rate of the grid
   (extended by doubling or halving while the best rate sits at its edge);
   the learning rate with the lowest final *validation* perplexity (Austen's
   held-out Northanger Abbey) is the model's.
2. Seeds: seeds 1 and 2 at that learning rate (seed 0 is the sweep's run).
3. Every run evaluates validation perplexity at `curve_points` checkpoints
   (the learning curve) and test perplexity (Persuasion) at the end; claims
   are judged on test perplexity, mean ± std over 3 seeds, with
   `reproduce`'s rule (a difference counts when the 1-std bars do not
   overlap). A compared pair's ordering is "settled" when its sign (on the
   seed-mean validation curves) holds from the middle checkpoint to the last;
   the report says which pairs are not, i.e. where the budget is still too
   short.

AdamW with linear warm-up (10% of steps) and linear decay to zero (the
T2T-style schedule of the paper's setting, with a linear in place of an
inverse-square-root decay so that every budget ends annealed), dropout 0.1,
pre-LN blocks, WordPiece vocabulary 4096. Each run writes its own file
(with the device it ran on), so runs from CPU and GPU sessions combine and a
rerun skips finished runs; the summary is rebuilt from the files.

    python -m headsize_tf.experiments.reproduce_v2 --preset cpu --output results/reproduction_v2

`--framework keras3` trains with the Keras 3 runner (`lm_keras3`) on
`KERAS_BACKEND`, so the grid also runs where only JAX is installed (a lent
GPU's image: `benchmarks/reproduce_v2_device.sh`); its runs are a grid of
their own (same protocol, another data order), never mixed with these.

Small models leave a machine idle: `--workers N` trains N runs at once (each
process claims its run in the work dir, so none is trained twice, and waits
when only claimed runs are left). On 2 CPU cores, 2 workers of 1 thread each
finished ~1.2x the runs per hour of one process with both cores; on a GPU,
several workers share it (memory grown on demand).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import shutil
import sys
import time
from collections.abc import Sequence
from contextlib import redirect_stdout
from typing import Any

import numpy as np

from headsize_tf.core.io import native_logs_to, save_figure, write_atomic, write_json
from headsize_tf.experiments import reproduce
from headsize_tf.experiments.reproduce import compare, r1_pairs, verdicts


@dataclasses.dataclass(frozen=True)
class Preset:
    """The shared shape and budget of every run."""

    layers: int
    sequence_length: int
    batch_size: int
    width: int
    steps: int
    learning_rates: tuple[float, ...]
    curve_points: int = 8
    head_size: int = 32
    dropout: float = 0.1
    vocab_size: int = 4096
    r2_heads: tuple[int, ...] = (2, 4, 8, 16)
    # How the grid came to be (printed in the report); not part of a run's shape.
    grid_note: str = ""

    @property
    def tokens(self) -> int:
        return self.steps * self.batch_size * self.sequence_length


PRESETS = {
    # 2 CPU cores: ~9 minutes a run (0.3 s a step). 4 layers, sequence 256 (every head
    # size < n); 1600 steps of 16 x 256 tokens = 8.9 epochs of Austen's 742k training tokens.
    "cpu": Preset(
        layers=4,
        sequence_length=256,
        batch_size=16,
        width=64,
        steps=1600,
        learning_rates=(2e-3, 4e-3, 8e-3),
        grid_note=(
            "The first model (std_w64_h4_p16) was swept from the grid 0.001, 0.002, 0.004; its "
            "best rate was 0.008 after the edge extension, so every later model starts from "
            "0.002, 0.004, 0.008 (its extra rates stay in the table)."
        ),
    ),
    # One GPU (`--framework keras3` on JAX: benchmarks/reproduce_v2_device.sh): the paper's
    # depth and sequence length at width 128 vs 256. 2000 steps of 32 x 256 tokens = 22
    # epochs of Austen (the CPU preset's curves still fall at 9 epochs).
    "gpu": Preset(
        layers=6,
        sequence_length=256,
        batch_size=32,
        width=128,
        steps=2000,
        learning_rates=(1e-3, 2e-3, 4e-3),
    ),
    # The test suite: seconds.
    "test": Preset(
        layers=1,
        sequence_length=128,
        batch_size=4,
        width=16,
        steps=4,
        learning_rates=(1e-3, 3e-3),
        curve_points=2,
        head_size=8,
        r2_heads=(2, 4),
    ),
}


@dataclasses.dataclass(frozen=True)
class Model:
    width: int
    heads: int
    kind: str  # "standard" or "fixed_head"
    head_size: int

    @property
    def key(self) -> str:
        standard = self.kind == "standard" or self.head_size * self.heads == self.width
        return f"{'std' if standard else 'fixed'}_w{self.width}_h{self.heads}_p{self.head_size}"

    def attention(self) -> dict[str, Any]:
        if self.kind == "standard":
            return {"kind": "standard", "num_heads": self.heads}
        return {"kind": "fixed_head", "num_heads": self.heads, "head_size": self.head_size}

    def params(self, preset: Preset) -> int:
        from headsize_tf import params

        spec = params.EncoderSpec(
            vocab_size=preset.vocab_size,
            width=self.width,
            num_layers=preset.layers,
            attention=self.attention(),
            intermediate_size=4 * self.width,
            max_sequence_length=preset.sequence_length,
        )
        return params.causal_lm_params(spec).trainable

    def row(self, preset: Preset) -> dict[str, Any]:
        """The fields `reproduce.verdicts` reads."""
        return {
            "key": self.key,
            "width": self.width,
            "heads": self.heads,
            "attention_type": self.kind,
            "head_size": self.head_size,
            "params": self.params(preset),
        }


def standard(width: int, heads: int) -> Model:
    return Model(width, heads, "standard", width // heads)


def plan(preset: Preset) -> dict[str, list[Model]]:
    """R1 as (baseline, fixed) pairs in order, R2 as both series."""
    from headsize_tf import params

    w, p = preset.width, preset.head_size
    r1 = []
    for width in (w, w * 3 // 2, 2 * w):
        baseline = standard(width, 4)
        heads = params.match_num_heads(
            baseline.params(preset),
            lambda h: Model(w, h, "fixed_head", p).params(preset),
            range(1, 129),
        )
        r1 += [baseline, Model(w, heads, "fixed_head", p)]
    r2 = []
    for heads in preset.r2_heads:
        r2 += [standard(w, heads), Model(w, heads, "fixed_head", p)]
    return {"R1": r1, "R2": r2}


def unique_models(experiments: dict[str, list[Model]]) -> dict[str, Model]:
    out: dict[str, Model] = {}
    for models in experiments.values():
        for model in models:
            out.setdefault(model.key, model)
    return out


def run_name(key: str, learning_rate: float, seed: int) -> str:
    return f"{key}_lr{learning_rate:g}_seed{seed}"


def cpu_description() -> str:
    """The processor's model name and core count."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU: {cpu} ({os.cpu_count()} cores)"


def device_description() -> str:
    """The accelerator (or CPU) a tf_keras run used, for its record."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return f"GPU: {details.get('device_name', gpus[0].name)}"
    return cpu_description()


def _override(
    model: Model, preset: Preset, learning_rate: float, split: str, eval_batches: int
) -> dict:
    """Training evaluates on "valid" (the curve); the final evaluation on "test" writes
    its summaries to `test/`, apart from the curve's `validation/`."""
    n = preset.sequence_length
    steps = preset.steps
    interval = max(1, steps // preset.curve_points)
    return {
        "task": {
            "model": {
                "vocab_size": preset.vocab_size,
                "hidden_size": model.width,
                "num_layers": preset.layers,
                "attention": model.attention(),
                "intermediate_size": 4 * model.width,
                "max_sequence_length": n,
                "dropout_rate": preset.dropout,
            },
            # The grid's runs were made with Model Garden's default shuffle buffer of 100
            # windows (batches from nearby text; the task's default is now 4096): kept,
            # so that every run of the grid shares one data order protocol.
            "train_data": {
                "input_path": "${DATA_DIR}/austen/lm_train.tfrecord",
                "global_batch_size": preset.batch_size,
                "seq_length": n,
                "shuffle_buffer_size": 100,
            },
            "validation_data": {
                "input_path": f"${{DATA_DIR}}/austen/lm_{split}.tfrecord",
                "global_batch_size": 32,
                "seq_length": n,
                "is_training": False,
                "drop_remainder": False,
            },
        },
        "trainer": {
            "train_steps": steps,
            "validation_steps": eval_batches,
            "steps_per_loop": interval,
            "validation_summary_subdir": "validation" if split == "valid" else split,
            "summary_interval": interval,
            "checkpoint_interval": interval,
            "validation_interval": interval,
            "optimizer_config": {
                "optimizer": {"type": "adamw", "adamw": {"weight_decay_rate": 0.01}},
                "learning_rate": {
                    "polynomial": {"initial_learning_rate": learning_rate, "decay_steps": steps}
                },
                "warmup": {"polynomial": {"warmup_steps": max(1, steps // 10)}},
            },
        },
    }


def read_curve(
    model_dir: str | pathlib.Path, subdir: str = "validation", loss_tag: str = "validation_loss"
) -> list[dict[str, float]]:
    """[{step, perplexity, loss}] from the trainer's summaries in `subdir`, by step.

    "validation" gives the learning curve; "train" with `loss_tag="training_loss"`
    the training loss and perplexity averaged over each loop (dropout on).
    """
    import tensorflow as tf

    points: dict[int, dict[str, float]] = {}
    for path in sorted(pathlib.Path(model_dir, subdir).glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag not in ("perplexity", loss_tag):
                    continue
                number = (
                    tf.make_ndarray(value.tensor).item()
                    if value.HasField("tensor")
                    else value.simple_value
                )
                name = "perplexity" if value.tag == "perplexity" else "loss"
                points.setdefault(int(event.step), {"step": int(event.step)})[name] = float(number)
    return [points[s] for s in sorted(points) if "perplexity" in points[s]]


def eval_batches(data_dir: str | pathlib.Path, split: str) -> int:
    """Batches of 32 that cover a split's LM windows once."""
    from headsize_tf.data import corpora

    manifest = corpora.load_manifest("austen", data_dir)
    return int(np.ceil(manifest["stats"]["splits"][split]["lm_examples"] / 32))


FRAMEWORKS = ("tf_keras", "keras3")


def run_dir(
    work_dir: pathlib.Path, preset: Preset, key: str, learning_rate: float, seed: int
) -> pathlib.Path:
    """The Model Garden model_dir (checkpoints, summaries) of a tf_keras run."""
    name = run_name(key, learning_rate, seed)
    return work_dir / f"{name}_steps{preset.steps}_l{preset.layers}_n{preset.sequence_length}"


def train_one(
    model: Model,
    preset: Preset,
    learning_rate: float,
    seed: int,
    data_dir: str,
    work_dir: pathlib.Path,
    framework: str = "tf_keras",
) -> dict[str, Any]:
    """Trains one run from step 0; returns its record (curve, test perplexity, device).

    `framework` "tf_keras" trains with Model Garden's trainer; "keras3" with
    `lm_keras3.train_run` on Keras 3's backend (no TensorFlow needed).
    """
    if framework == "keras3":
        from headsize_tf.experiments import lm_keras3

        result = lm_keras3.train_run(
            model.attention(),
            model.width,
            preset,
            learning_rate,
            seed,
            pathlib.Path(data_dir) / "austen",
        )
    else:
        result = _train_tf_keras(model, preset, learning_rate, seed, data_dir, work_dir)
    return {
        **model.row(preset),
        "kind": model.kind,
        "learning_rate": learning_rate,
        "seed": seed,
        "steps": preset.steps,
        "tokens": preset.tokens,
        "preset": dataclasses.asdict(preset),
        **result,
    }


def _train_tf_keras(
    model: Model,
    preset: Preset,
    learning_rate: float,
    seed: int,
    data_dir: str,
    work_dir: pathlib.Path,
) -> dict[str, Any]:
    import tensorflow as tf

    from headsize_tf.training import train

    model_dir = run_dir(work_dir, preset, model.key, learning_rate, seed)
    # A run without a result file was cut off: it starts again from step 0, because
    # resuming from its checkpoint would restart the input pipeline (the data order of an
    # uninterrupted run is lost), so every recorded run is one uninterrupted pass.
    shutil.rmtree(model_dir, ignore_errors=True)
    start = time.perf_counter()
    # Model Garden's trainer prints its step logs: they go to the run's log file.
    work_dir.mkdir(parents=True, exist_ok=True)
    with open(f"{model_dir}.log", "w", encoding="utf-8") as log, redirect_stdout(log):
        train.run(
            "headsize_lm/language_modeling",
            str(model_dir),
            params_override=_override(
                model, preset, learning_rate, "valid", eval_batches(data_dir, "valid")
            ),
            data_dir=data_dir,
            seed=seed,
        )
        seconds = time.perf_counter() - start
        test = train.run(
            "headsize_lm/language_modeling",
            str(model_dir),
            params_override=_override(
                model, preset, learning_rate, "test", eval_batches(data_dir, "test")
            ),
            mode="eval",
            data_dir=data_dir,
            seed=seed,
        )
    return {
        "curve": read_curve(model_dir),
        "train_curve": read_curve(model_dir, "train", "training_loss"),
        "test_perplexity": test.metrics["perplexity"],
        "test_loss": test.metrics["validation_loss"],
        "train_seconds": seconds,
        "device": device_description(),
        # 0: TensorFlow's default (every core); `--threads` sets it.
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
    }


# Preset fields that do not change what a run trains: a run stays valid when they change.
NOT_SHAPE = ("learning_rates", "grid_note")


def _shape(preset: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in preset.items() if k not in NOT_SHAPE}


def load_runs(
    out: pathlib.Path, preset: Preset, framework: str = "tf_keras"
) -> dict[tuple[str, float, int], dict]:
    """Finished runs of this preset's shape and `framework`: {(key, learning rate, seed):
    record}.

    The learning-rate grid is not part of the shape: a run at any rate counts. Runs
    of the two frameworks never mix (their data order differs); records without a
    framework are tf_keras runs.
    """
    runs = {}
    shape = _shape(json.loads(json.dumps(dataclasses.asdict(preset))))  # Lists, as stored.
    for path in sorted((out / "runs").glob("*.json")):
        record = json.loads(path.read_text())
        if (
            _shape(record.get("preset", {})) == shape
            and record.get("framework", "tf_keras") == framework
        ):
            runs[record["key"], record["learning_rate"], record["seed"]] = record
    return runs


EDGE_EXTENSIONS = 2  # Doublings (or halvings) added when the best rate is at the grid's edge.


def _final(runs: dict, key: str, lr: float) -> float | None:
    record = runs.get((key, lr, 0))
    if record is None:
        return None
    final = record["curve"][-1]["perplexity"] if record["curve"] else np.inf
    return final if np.isfinite(final) else np.inf  # A diverged (NaN) run is never the best.


def model_grid(key: str, preset: Preset, runs: dict) -> list[float]:
    """The learning rates swept for `key`: the preset's grid, extended by a doubling
    (halving) while the best finished rate is its largest (smallest), at most
    `EDGE_EXTENSIONS` times, so the chosen rate is an interior optimum when it can be."""
    grid = sorted(preset.learning_rates)
    for _ in range(EDGE_EXTENSIONS):
        finals = {lr: _final(runs, key, lr) for lr in grid}
        if any(v is None for v in finals.values()):
            break
        best = min(finals, key=lambda lr: (finals[lr], lr))
        if best == grid[-1]:
            grid.append(grid[-1] * 2)
        elif best == grid[0]:
            grid.insert(0, grid[0] / 2)
        else:
            break
    return grid


def best_learning_rate(key: str, preset: Preset, runs: dict) -> float | None:
    """The swept rate (`model_grid`) with the lowest final validation perplexity at seed 0.

    None until every rate of the model's grid has finished.
    """
    finals = {lr: _final(runs, key, lr) for lr in model_grid(key, preset, runs)}
    if any(v is None for v in finals.values()):
        return None
    return min(finals, key=lambda lr: (finals[lr], lr))


def pending(
    preset: Preset,
    experiments: dict[str, list[Model]],
    runs: dict,
    seeds: Sequence[int] = (0, 1, 2),
) -> list[tuple[Model, float, int]]:
    """Runs still to do, model by model: its sweep (seed 0 at every learning rate), then
    its other seeds at the chosen rate; so compared pairs complete early."""
    todo = []
    for model in unique_models(experiments).values():
        grid = model_grid(model.key, preset, runs)
        todo += [(model, lr, 0) for lr in grid if (model.key, lr, 0) not in runs]
        lr = best_learning_rate(model.key, preset, runs)
        if lr is not None:
            todo += [(model, lr, s) for s in seeds if s != 0 and (model.key, lr, s) not in runs]
    return todo


def settled_from(difference: Sequence[float]) -> int | None:
    """Index from which the sign of a pair's difference never changes (None if empty)."""
    signs = np.sign(np.asarray(difference, dtype=float))
    if not len(signs):
        return None
    start = len(signs) - 1
    while start > 0 and signs[start - 1] == signs[-1]:
        start -= 1
    return start


def summarize(
    preset: Preset,
    experiments: dict[str, list[Model]],
    runs: dict,
    seeds: Sequence[int] = (0, 1, 2),
) -> dict[str, Any]:
    """Per experiment rows at each model's chosen learning rate, with mean curves."""
    summary: dict[str, Any] = {"sweep": {}, "curves": {}}
    for key in unique_models(experiments):
        swept = set(model_grid(key, preset, runs)) | {
            lr for (k, lr, seed) in runs if k == key and seed == 0
        }
        summary["sweep"][key] = {f"{lr:g}": _final(runs, key, lr) for lr in sorted(swept)}
    for name, models in experiments.items():
        rows = []
        for model in models:
            lr = best_learning_rate(model.key, preset, runs)
            got = [
                runs[model.key, lr, s]
                for s in seeds
                if lr is not None and (model.key, lr, s) in runs
            ]
            test = [r["test_perplexity"] for r in got]
            # Final training perplexity (last loop, dropout on): runs recorded before the
            # train curve existed have none.
            trained = [r["train_curve"][-1]["perplexity"] for r in got if r.get("train_curve")]
            curves = {r["seed"]: r["curve"] for r in got if r["curve"]}
            steps = [[p["step"] for p in c] for c in curves.values()]
            if curves and all(s == steps[0] for s in steps):
                by_seed = {
                    str(seed): [p["perplexity"] for p in c] for seed, c in sorted(curves.items())
                }
                summary["curves"][model.key] = {
                    "steps": steps[0],
                    "perplexity": np.mean(list(by_seed.values()), axis=0).tolist(),
                    "seeds": by_seed,
                }
            unselected = [r["test_perplexity"] for r in got if r["seed"] != 0]
            rows.append(
                {
                    **model.row(preset),
                    "learning_rate": lr,
                    "seeds": sorted(r["seed"] for r in got),
                    "devices": sorted({r["device"] for r in got}),
                    "mean": float(np.mean(test)) if test else None,
                    # Sample std (n - 1): the bars of the verdict rule.
                    "std": float(np.std(test, ddof=1))
                    if len(test) > 1
                    else (0.0 if test else None),
                    # Seed 0 also chose the rate (best of the sweep): the other seeds
                    # alone show what that selection adds.
                    "mean_other_seeds": float(np.mean(unselected)) if unselected else None,
                    "train_perplexity": float(np.mean(trained)) if trained else None,
                    "train_seeds": len(trained),
                }
            )
        summary[name] = rows
    return summary


def pairs(summary: dict) -> list[tuple[str, str, str]]:
    """The compared pairs (experiment, fixed key, baseline key)."""
    out = [("R1", fixed["key"], base["key"]) for base, fixed in r1_pairs(summary.get("R1", []))]
    r2 = summary.get("R2", [])
    for base, fixed in zip(r2[0::2], r2[1::2], strict=True):
        if base["key"] != fixed["key"]:
            out.append(("R2", fixed["key"], base["key"]))
    return out


def orderings(summary: dict) -> list[dict[str, Any]]:
    """For each compared pair: which is ahead at each checkpoint, and since when.

    Over the seeds both models have: the difference of the seed means, and each seed's
    own. A pair is settled when, from the middle checkpoint to the last, the mean
    difference and every seed's difference keep one sign (one bad seed cannot settle it).
    """
    out = []
    for name, a, b in pairs(summary):
        ca, cb = summary["curves"].get(a), summary["curves"].get(b)
        if not ca or not cb or ca["steps"] != cb["steps"]:
            continue
        seeds = sorted(set(ca["seeds"]) & set(cb["seeds"]), key=int)
        if not seeds:
            continue
        per_seed = np.subtract([ca["seeds"][s] for s in seeds], [cb["seeds"][s] for s in seeds])
        diff = per_seed.mean(axis=0)
        middle = (len(diff) - 1) // 2
        start = settled_from(diff)
        agree = all((np.sign(row[middle:]) == np.sign(diff[-1])).all() for row in per_seed)
        out.append(
            {
                "experiment": name,
                "fixed": a,
                "baseline": b,
                "steps": ca["steps"],
                "seeds": [int(s) for s in seeds],
                "difference": diff.tolist(),
                "final_by_seed": per_seed[:, -1].tolist(),
                "settled_from_step": ca["steps"][start],
                "settled": start <= middle and agree,
            }
        )
    return out


def markdown(
    summary: dict,
    preset_name: str,
    preset: Preset,
    command: str,
    status: str,
    judged: Sequence[dict],
    ordered: Sequence[dict],
    runner_line: str = "",
) -> str:
    p = preset
    lines = [
        "# Bhojanapalli et al. (2020) R1 and R2: per-model learning rates, learning curves",
        "",
        f"Command: `{command}`",
        "",
        *([runner_line, ""] if runner_line else []),
        f"Preset `{preset_name}`: {p.layers} pre-LN layers, FFN 4 x width, vocab "
        f"{p.vocab_size}, sequence {p.sequence_length}, batch {p.batch_size}, {p.steps} "
        f"steps ({p.tokens:,} training tokens per run), dropout {p.dropout}, AdamW with 10% "
        f"warm-up and linear decay; learning rate per model from the grid "
        f"{', '.join(f'{lr:g}' for lr in p.learning_rates)} (seed 0, lowest final "
        "validation perplexity); test perplexity (Persuasion), mean ± sample std (n - 1) "
        "over seeds; seed 0 also chose the rate, so the mean of the other seeds is shown "
        "too; train perplexity: the last training loop's (dropout on), seed mean, where "
        "runs recorded it.",
        "",
        status,
        "",
    ]
    titles = {
        "R1": "R1 (Fig. 1): width w with fixed head size vs wider baselines at equal parameters",
        "R2": f"R2 (Fig. 3a): width {p.width}, more heads: baseline (head = width / "
        f"heads) vs fixed head {p.head_size}",
    }
    notes = {
        "R1": f"Pairs at equal parameters. The first pair (width {p.width}) has one width "
        "on both sides and is not judged: it is the narrow end of the baseline "
        "series.",
        "R2": "The baselines keep the parameters of width "
        f"{p.width}; the fixed-head models grow with their heads, as in the paper.",
    }
    for name in ("R1", "R2"):
        lines += [
            f"## {titles[name]}",
            "",
            notes[name],
            "",
            "| model | width | heads | head size | params | learning rate | "
            "test perplexity | seeds | other seeds' mean | train perplexity |",
            "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
        ]
        for i, r in enumerate(summary[name]):
            if i and r["key"] == summary[name][i - 1]["key"]:
                continue  # Baseline and fixed head coincide (width / heads = head size).
            ppl = "not run" if r["mean"] is None else f"{r['mean']:.2f} ± {r['std']:.2f}"
            lr = "sweep pending" if r["learning_rate"] is None else f"{r['learning_rate']:g}"
            trained = (
                "—"
                if r["train_perplexity"] is None
                else f"{r['train_perplexity']:.2f} ({r['train_seeds']} seeds)"
            )
            other = "—" if r["mean_other_seeds"] is None else f"{r['mean_other_seeds']:.2f}"
            lines.append(
                f"| {r['key']} | {r['width']} | {r['heads']} | {r['head_size']} | "
                f"{r['params']:,} | {lr} | {ppl} | "
                f"{','.join(map(str, r['seeds']))} | {other} | {trained} |"
            )
        lines.append("")
    rates = sorted({float(lr) for finals in summary["sweep"].values() for lr in finals})
    lines += [
        "## Learning-rate sweep (seed 0, final validation perplexity)",
        "",
        f"The grid {', '.join(f'{lr:g}' for lr in p.learning_rates)} gains a doubling "
        f"(halving) while a model's best rate is its largest (smallest), up to "
        f"{EDGE_EXTENSIONS} times; empty cells were not needed."
        + (f" {p.grid_note}" if p.grid_note else ""),
        "",
        "| model | " + " | ".join(f"lr {lr:g}" for lr in rates) + " |",
        "|---|" + "---:|" * len(rates),
    ]
    for key, finals in summary["sweep"].items():
        values = {float(lr): v for lr, v in finals.items()}
        cells = [
            "" if lr not in values else "—" if values[lr] is None else f"{values[lr]:.2f}"
            for lr in rates
        ]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines.append("")
    if ordered:
        lines += [
            "## Is the budget long enough? The ordering of each pair along training",
            "",
            "Validation perplexity, fixed minus baseline, over the seeds both have; a "
            "pair is settled when the seed-mean difference and every seed's own keep "
            "one sign from the middle checkpoint to the last.",
            "",
            "| experiment | fixed | baseline | seed-mean difference at each checkpoint | "
            "same sign since step | final, by seed | settled |",
            "|---|---|---|---|---:|---|---|",
        ]
        for o in ordered:
            diffs = ", ".join(f"{d:+.1f}" for d in o["difference"])
            finals = ", ".join(
                f"{s}: {d:+.1f}" for s, d in zip(o["seeds"], o["final_by_seed"], strict=True)
            )
            lines.append(
                f"| {o['experiment']} | {o['fixed']} | {o['baseline']} | {diffs} | "
                f"{o['settled_from_step']} | {finals} | "
                f"{'yes' if o['settled'] else 'no'} |"
            )
        lines.append("")
    if judged:
        lines += [
            "## Verdicts",
            "",
            "A difference counts only when the mean ± std bars do not overlap.",
            "",
            "| claim | here (test perplexity) | verdict |",
            "|---|---|---|",
        ]
        lines += [f"| {v['claim']} | {v['evidence']} | **{v['verdict']}** |" for v in judged]
        lines.append("")
    lines += [
        "![perplexity vs parameters and heads](reproduction.png)",
        "",
        "![learning curves](curves.png)",
        "",
    ]
    return "\n".join(lines)


def plot(summary: dict, out: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Fig. 1 plots perplexity against parameters for fixed-head models of several head
    # counts: R2's fixed-head models (width w, heads of the fixed size) join R1's there.
    r1_keys = {r["key"] for r in summary["R1"]}
    extra = [
        r for r in summary["R2"] if r["attention_type"] == "fixed_head" and r["key"] not in r1_keys
    ]
    reproduce.plot(
        {"R1": summary["R1"] + extra, "R2": summary["R2"]},
        out / "reproduction.png",
        titles={"R1": "R1 (Fig. 1 style; R2's fixed heads too)", "R2": "R2 (Fig. 3a style)"},
    )

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, curve in sorted(summary["curves"].items()):
        ax.plot(
            curve["steps"],
            curve["perplexity"],
            "--" if key.startswith("std") else "-",
            marker="o",
            markersize=3,
            label=key,
        )
    ax.set(
        xlabel="step",
        ylabel="validation perplexity (seed mean)",
        yscale="log",
        title="Learning curves at each model's learning rate",
    )
    if summary["curves"]:
        ax.legend(fontsize=6, ncol=2)
    save_figure(fig, out / "curves.png")


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
        "headsize_tf.experiments.reproduce_v2",
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


def quiet_tensorflow() -> None:
    """TensorFlow's and absl's Python logs to errors only (e.g. the eval-only restore's
    "Value in checkpoint could not be found" for the optimizer slots)."""
    import logging

    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:
        pass


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


def check_output(out: pathlib.Path, framework: str) -> None:
    """Refuses an output directory that holds the other framework's runs (its README,
    summary and plots would be rewritten from a grid that is not theirs)."""
    for path in sorted((out / "runs").glob("*.json")):
        other = json.loads(path.read_text()).get("framework", "tf_keras")
        if other != framework:
            raise ValueError(
                f"--output {out} holds {other} runs ({path.name}); use another --output for "
                f"--framework {framework} (e.g. {out}_{framework})."
            )


def keras_backend() -> str:
    """Keras 3's backend (`KERAS_BACKEND`, else ~/.keras/keras.json, else tensorflow)."""
    import keras

    return keras.backend.backend()


def prepare_data(data_dir: pathlib.Path, preset: Preset, framework: str) -> None:
    """The Austen corpus at the preset's sequence length; for the Keras 3 runner also its
    `lm_*.npy` arrays. A data dir that already has the arrays needs neither TensorFlow
    nor the network (copy it to a machine that has only JAX)."""
    from headsize_tf.data import corpora
    from headsize_tf.experiments import lm_keras3

    corpus = data_dir / "austen"
    if framework == "keras3" and all(
        lm_keras3.array_path(corpus, split).exists()
        and not (corpus / f"lm_{split}.tfrecord").exists()
        for split in lm_keras3.SPLITS
    ):
        return  # Arrays copied without their corpus (a machine without TensorFlow).
    corpora.prepare("austen", data_dir, corpora.PrepareOptions(seq_length=preset.sequence_length))
    if framework == "keras3":
        lm_keras3.export_lm_arrays(corpus)


def runner(framework: str, runs: dict) -> str:
    """One line naming the runner (and the backends the runs used)."""
    if framework == "tf_keras":
        return "Runner: Model Garden's trainer (tf_keras, `reproduce_v2.train_one`)."
    backends = sorted({r.get("backend", "?") for r in runs.values()})
    return (
        "Runner: Keras 3 (`lm_keras3.train_run`, backend "
        f"{', '.join(backends) or keras_backend()}), the same protocol with a numpy data "
        "order: a grid of its own, not mixed with the tf_keras runs."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--output", default="results/reproduction_v2")
    parser.add_argument("--work-dir", default="/tmp/headsize_reproduction_v2")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument(
        "--max-runs",
        type=int,
        default=None,
        help="stop after this many new runs (the rest resumes later); with --workers, per worker",
    )
    parser.add_argument("--keys", nargs="*", default=None, help="train only these models")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="TensorFlow intra- and inter-op threads (default: all cores; with --workers: 1)",
    )
    parser.add_argument(
        "--workers",
        type=int,
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
    parser.add_argument("--summarize-only", action="store_true")
    args = parser.parse_args(argv)
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
    try:
        check_output(out, args.framework)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    data_dir = pathlib.Path(args.data_dir) if args.data_dir else corpora.default_data_dir()
    if preset.sequence_length != corpora.PrepareOptions().seq_length:
        data_dir = data_dir / f"seq{preset.sequence_length}"
    if not args.summarize_only:
        prepare_data(data_dir, preset, args.framework)
        if args.workers and args.workers > 1:
            code = run_workers(args)
            if code:
                return code
        else:
            with native_logs_to(pathlib.Path(args.work_dir) / "native.log"):
                run_pending(args, preset, experiments, out, data_dir)
    runs = load_runs(out, preset, args.framework)
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
    command = "python -m headsize_tf.experiments.reproduce_v2 " + " ".join(
        result_arguments(sys.argv[1:] if argv is None else argv)
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


__all__ = ["PRESETS", "Preset", "compare", "main", "plan"]

if __name__ == "__main__":
    raise SystemExit(main())
