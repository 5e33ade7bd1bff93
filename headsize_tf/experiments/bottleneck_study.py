"""Where does the head-size bottleneck bind? Trained models on tasks of controlled rank.

Theorem 1 of Bhojanapalli et al. (2020): a head of size p has logits of rank at
most p, so when a task's solving attention needs rank r > p one head cannot
express it, and a fixed head size p independent of the width should win at
equal parameters. The reproduction (results/reproduction_v2) and the attention
rank study (results/attention_rank) found the opposite on text: trained heads
use rank 4 to 6, so the bound never binds. This study trains small causal LMs
on the tasks of `data.rank_tasks`: three copy tasks (associative recall, gather
by position, sorting) whose solving pattern has rank m = the number of answers,
which grows with n, and `preference`, whose logits must reproduce a fixed random
K x K preference matrix (a logit rank of K, set apart from n). At each setting
(task, n, K) it compares:

* `std`: standard heads, h heads of d/h at width d;
* `fixed p`: h heads of size p at width d (p = 2 d/h, and p = min(n, 64): p = n at n = 64);
* `std wide`: standard heads at the width whose parameters match each fixed model
  (widening is what a fixed head size competes with, as in R1);
* `collab D`: collaborative heads sharing a query/key space of D (each head's
  logits have rank up to D, with the standard model's parameters).

Protocol (as the reproduction): AdamW with warm-up and linear decay
(`keras3.lm_training`), fresh seeded batches each step (no epoch, no overfitting),
a learning rate chosen per model on seed 0 from the preset's grid, then the other
seeds at that rate; the learning curve is the answer accuracy on a fixed held-out
set at evenly spaced steps. After training, each head's logits on held-out
examples are read (`attention_rank.recorded_logits`) for the attention rank the
model uses and the attention mass it puts on the answer's source.

Every run writes `runs/<setting>/<model>_lr<lr>_seed<s>.json` under `--output`;
a rerun skips finished runs, then writes `bottleneck.json`, `README.md` (table and
verdict) and `bottleneck.png`.

    python -m headsize_tf.experiments.bottleneck_study --output results/bottleneck

References:
  Bhojanapalli et al. (2020), "Low-Rank Bottleneck in Multi-head Attention Models".
  Cordonnier, Loukas & Jaggi (2020), "Multi-Head Attention: Collaborate Instead of
  Concatenate".
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from headsize_tf.core.io import write_json
from headsize_tf.data import rank_tasks


@dataclasses.dataclass(frozen=True)
class Setting:
    """One task at one sequence length (and, for `preference`, one needed rank K).

    Example:
      >>> Setting("preference", 64, 32).name, Setting("recall", 64).needed_rank
      ('preference_n64_K32', 16)
    """

    task: str
    sequence_length: int
    rank: int | None = None

    @property
    def name(self) -> str:
        suffix = f"_K{self.rank}" if self.rank is not None else ""
        return f"{self.task}_n{self.sequence_length}{suffix}"

    @property
    def needed_rank(self) -> int:
        return rank_tasks.needed_rank(self.task, self.sequence_length, self.rank)

    @property
    def vocab_size(self) -> int:
        return rank_tasks.vocab_size(self.task, self.sequence_length, self.rank)

    def batch(self, size: int, seed: int) -> rank_tasks.TaskBatch:
        return rank_tasks.make_batch(self.task, size, self.sequence_length, seed, self.rank)


@dataclasses.dataclass(frozen=True)
class Preset:
    """The shape and budget every run of the study shares.

    Args:
      settings: The (task, n, rank) settings, in the order they run.
      sweep_only: Settings that run only the first seed's rate sweep (a task that no
        model learns within the budget, or that every model solves: its sweep shows it,
        seeds would add nothing).
      seed_models: The models (keys) that run the other seeds (None: all).
      layers: Pre-LN decoder blocks.
      width: The narrow width d.
      heads: Heads h of every model.
      steps: Training steps of every run.
      batch_size: Sequences per step.
      learning_rates: The grid each model's rate is chosen from (on seed 0).
      seeds: Seeds; the first also chooses the rate.
      curve_points: Held-out evaluations along training.
      eval_examples: Held-out sequences (the same for every model).
      rank_examples: Held-out sequences whose logits are read for the rank.
      large_head: The larger fixed head size (min(n, large_head); the smaller is 2 d/h).

    Example:
      >>> [s.name for s in PRESETS["cpu"].settings][:2]
      ['preference_n64_K64', 'pairwise_n64_K128']
    """

    settings: tuple[Setting, ...]
    sweep_only: tuple[Setting, ...] = ()
    seed_models: tuple[str, ...] | None = None
    layers: int = 2
    width: int = 64
    heads: int = 8
    steps: int = 1000
    batch_size: int = 32
    learning_rates: tuple[float, ...] = (1e-3, 3e-3)
    seeds: tuple[int, ...] = (0, 1, 2)
    curve_points: int = 5
    eval_examples: int = 256
    rank_examples: int = 4
    large_head: int = 64


PRESETS = {
    # About 3 CPU hours (JAX; two processes share the output on 2 cores); d = 64, h = 8,
    # so d/h = 8. preference at K = 64 (n = 64) and pairwise (two candidates: every
    # order of S counts) at K = 128 > d (no layer of 8 heads of 8 holds S's rank). The
    # sweeps only: sorting (m = 31; the three models swept answered 99.9% or more),
    # associative recall (no model passed 31% of the answers in 1000 steps: the induction
    # mechanism had not formed) and preference at K = 128 with 64 candidates (n = 128;
    # the standard model reached 99.2%). Gather and pairwise at K = 32 are in `full`.
    "cpu": Preset(
        settings=(
            Setting("preference", 64, 64),
            Setting("pairwise", 64, 128),
        ),
        sweep_only=(
            Setting("sorting", 64),
            Setting("recall", 64),
            Setting("preference", 128, 128),
        ),
    ),
    # pairwise at K = 128 six times longer, at the rate the cpu sweep chose for most
    # models: at 1000 steps every model was still learning S (a capacity limit cannot
    # show before the models near it). Seed 0 for all; seeds 1 and 2 for the pair that
    # decides it (fixed heads of 64 and the standard model of equal parameters).
    # Output: results/bottleneck/long_budget.
    "long": Preset(
        settings=(Setting("pairwise", 64, 128),),
        steps=6000,
        learning_rates=(3e-3,),
        seeds=(0, 1, 2),
        seed_models=("fixed_w64_h8_p64", "std_w112_h8"),
        curve_points=6,
    ),
    # The control of `long`: pairwise at K = 32, below d = 64 (every layer holds S's
    # rank, heads of 8 do not), with the same budget and rate. Seed 0 only: every model
    # answered 100% of the held-out pairs. Output: results/bottleneck/below_d.
    "below_d": Preset(
        settings=(Setting("pairwise", 64, 32),),
        steps=6000,
        learning_rates=(3e-3,),
        seeds=(0,),
        curve_points=6,
    ),
    # Every task at n = 64 to 512 (K = n / 4), three rates, 3000 steps: hundreds of CPU
    # hours, a grid for a GPU (Keras 3 on JAX: KERAS_BACKEND=jax, the same command).
    "full": Preset(
        settings=(
            *(
                Setting(task, n, n // 4 if task in rank_tasks.SIZED else None)
                for task in ("preference", "pairwise", "recall", "sorting", "gather")
                for n in (64, 128, 256, 512)
            ),
            Setting("pairwise", 64, 32),
        ),
        steps=3000,
        learning_rates=(3e-4, 1e-3, 3e-3),
    ),
    # The tests' size: seconds a run.
    "smoke": Preset(
        settings=(Setting("gather", 16),),
        layers=1,
        width=16,
        heads=2,
        steps=40,
        batch_size=16,
        learning_rates=(3e-3,),
        seeds=(0,),
        curve_points=2,
        eval_examples=32,
        rank_examples=2,
        large_head=16,
    ),
}


@dataclasses.dataclass(frozen=True)
class Model:
    """One model: `heads` heads at `width`, of `kind` "standard", "fixed_head" or
    "collaborative" (`size`: the fixed head size p, or the shared key size D).

    Example:
      >>> Model("fixed_head", 64, 8, 16).key, Model("collaborative", 64, 8, 64).rank_bound
      ('fixed_w64_h8_p16', 64)
    """

    kind: str
    width: int
    heads: int
    size: int | None = None

    @property
    def key(self) -> str:
        if self.kind == "standard":
            return f"std_w{self.width}_h{self.heads}"
        if self.kind == "fixed_head":
            return f"fixed_w{self.width}_h{self.heads}_p{self.size}"
        return f"collab_w{self.width}_h{self.heads}_D{self.size}"

    @property
    def rank_bound(self) -> int:
        """The rank one head's logits can reach: d/h, p or D."""
        return self.width // self.heads if self.kind == "standard" else int(self.size)

    def attention(self) -> dict[str, Any]:
        if self.kind == "standard":
            return {"kind": "standard", "num_heads": self.heads}
        if self.kind == "fixed_head":
            return {"kind": "fixed_head", "num_heads": self.heads, "head_size": self.size}
        return {
            "kind": "collaborative",
            "num_heads": self.heads,
            "shared_key_dim": self.size,
            "mixing_initializer": "concatenate",
        }

    def params(self, preset: Preset, setting: Setting) -> int:
        from headsize_tf import params

        return params.lm_trainable_params(
            setting.vocab_size, self.width, preset.layers, self.attention(), setting.sequence_length
        )


def models(preset: Preset, setting: Setting) -> list[Model]:
    """The compared models of a setting: see the module docstring."""
    from headsize_tf import params

    d, h = preset.width, preset.heads
    n = setting.sequence_length
    fixed_sizes = sorted({2 * d // h, max(min(n, preset.large_head), 2 * d // h)})
    out = [Model("standard", d, h)]
    for p in fixed_sizes:
        fixed = Model("fixed_head", d, h, p)
        target = fixed.params(preset, setting)
        # The standard model (width a multiple of h) whose parameters are closest.
        width = params.match_num_heads(
            target, lambda w: Model("standard", w * h, h).params(preset, setting), range(1, 257)
        )
        out += [fixed, Model("standard", width * h, h)]
    out.append(Model("collaborative", d, h, d))
    return list(dict.fromkeys(out))


def run_name(key: str, learning_rate: float, seed: int) -> str:
    return f"{key}_lr{learning_rate:g}_seed{seed}"


def _batches(setting: Setting, preset: Preset, seed: int, steps: int) -> Iterator[Any]:
    # Seeds of their own per run seed and step: never the held-out set's (`held_out`).
    for chunk in range(steps):
        yield setting.batch(preset.batch_size, 1_000_003 * (seed + 1) + chunk)


def held_out(setting: Setting, count: int) -> rank_tasks.TaskBatch:
    return setting.batch(count, seed=7)


def answer_accuracy(lm: Any, batch: rank_tasks.TaskBatch, chunk: int = 64) -> float:
    """Fraction of the answers whose argmax prediction is right."""
    hits = total = 0.0
    for start in range(0, len(batch.inputs), chunk):
        logits = np.asarray(lm.predict_on_batch(batch.inputs[start : start + chunk]))
        w = batch.weights[start : start + chunk]
        hits += float(((logits.argmax(-1) == batch.targets[start : start + chunk]) * w).sum())
        total += float(w.sum())
    return hits / total


def attention_use(lm: Any, batch: rank_tasks.TaskBatch) -> dict[str, Any]:
    """The attention rank each layer's heads use, and the most attention mass one head
    of each layer puts on the answers' sources (mean over answers and examples)."""
    from headsize_tf.experiments import attention_rank

    logits = attention_rank.recorded_logits(
        lm, batch.inputs, batch_size=len(batch.inputs), layers=lm.attention_layers
    )
    rank = attention_rank.measure(logits, head_size=0)
    source_mass = []
    for values in logits:  # [examples, heads, n, n]
        weights = attention_rank.causal_softmax(values)
        rows = [np.flatnonzero(s >= 0) for s in batch.sources]
        mass = [
            weights[i][:, r, batch.sources[i, r]].mean(-1) for i, r in enumerate(rows)
        ]  # [heads] per example
        source_mass.append(float(np.max(np.mean(mass, axis=0))))
    return {
        "attention_rank": rank["attention_rank"],
        "energy_rank_90": rank["energy_rank_90"],
        "attention_rank_by_layer": [row["attention_rank"] for row in rank["layers"]],
        "source_mass_by_layer": source_mass,
    }


def train_one(
    preset: Preset,
    setting: Setting,
    model: Model,
    learning_rate: float,
    seed: int,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Trains one model from scratch on fresh batches; returns its curve and measures."""
    import keras

    from headsize_tf.experiments.lm_keras3 import device_description
    from headsize_tf.keras3.lm_training import build_optimizer, compile_lm
    from headsize_tf.keras3.modeling import CausalLM

    keras.utils.set_random_seed(seed)
    lm = CausalLM(
        vocabulary_size=setting.vocab_size,
        num_layers=preset.layers,
        hidden_dim=model.width,
        attention=model.attention(),
        intermediate_dim=4 * model.width,
        max_sequence_length=setting.sequence_length,
        dropout=0.0,
    )
    compile_lm(lm, learning_rate, preset.steps)
    build_optimizer(lm)
    evaluation = held_out(setting, preset.eval_examples)
    interval = max(1, preset.steps // preset.curve_points)
    checkpoints = sorted({*range(interval, preset.steps + 1, interval), preset.steps})
    batches = _batches(setting, preset, seed, preset.steps)
    curve, done, start = [], 0, time.perf_counter()
    for step in checkpoints:
        chunk = [next(batches) for _ in range(step - done)]
        history = lm.fit(
            np.concatenate([b.inputs for b in chunk]),
            np.concatenate([b.targets for b in chunk]),
            sample_weight=np.concatenate([b.weights for b in chunk]),
            batch_size=preset.batch_size,
            epochs=1,
            shuffle=False,
            verbose=0,
        ).history
        done = step
        accuracy = answer_accuracy(lm, evaluation)
        curve.append({"step": step, "accuracy": accuracy, "train_loss": history["loss"][-1]})
        if progress:
            progress(f"step {step}/{preset.steps}: answer accuracy {accuracy:.3f}")
    seconds = time.perf_counter() - start
    use = attention_use(lm, held_out(setting, preset.rank_examples))
    return {
        "setting": setting.name,
        **dataclasses.asdict(setting),
        "needed_rank": setting.needed_rank,
        "model": model.key,
        **dataclasses.asdict(model),
        "rank_bound": model.rank_bound,
        "params": model.params(preset, setting),
        "params_built": int(lm.count_params()),
        "learning_rate": learning_rate,
        "seed": seed,
        "curve": curve,
        "accuracy": curve[-1]["accuracy"],
        **use,
        "train_seconds": seconds,
        "backend": keras.backend.backend(),
        "device": device_description(),
    }


def run_path(out: pathlib.Path, setting: Setting, name: str) -> pathlib.Path:
    return out / "runs" / setting.name / f"{name}.json"


def chosen_rate(preset: Preset, out: pathlib.Path, setting: Setting, key: str) -> float | None:
    """The grid's rate with the best seed-0 final accuracy (None until all ran)."""
    results = []
    for lr in preset.learning_rates:
        path = run_path(out, setting, run_name(key, lr, preset.seeds[0]))
        if not path.exists():
            return None
        run = json.loads(path.read_text())
        results.append((run["accuracy"], -run["curve"][-1]["train_loss"], lr))
    return max(results)[2]


def plan(preset: Preset) -> list[tuple[Setting, Model]]:
    return [(s, m) for s in preset.settings for m in models(preset, s)]


def todo_list(preset: Preset) -> list[tuple[Setting, Model, float | None, int]]:
    """Every run of the preset in order: per setting, each model's rate sweep on the first
    seed, then the other seeds (rate None: the one the sweep chooses); the
    `sweep_only` settings' sweeps last."""
    todo: list[tuple[Setting, Model, float | None, int]] = []
    for setting in (*preset.settings, *preset.sweep_only):
        combos = [(setting, m) for m in models(preset, setting)]
        todo += [(s, m, lr, preset.seeds[0]) for s, m in combos for lr in preset.learning_rates]
        if setting not in preset.sweep_only:
            todo += [  # Seed by seed: a cut-off grid leaves whole seeds.
                (s, m, None, seed)
                for seed in preset.seeds[1:]
                for s, m in combos
                if preset.seed_models is None or m.key in preset.seed_models
            ]
    return todo


def _claim(path: pathlib.Path) -> pathlib.Path | None:
    """A claim on a run (its file's name + `.claim`, holding the pid), so that several
    processes share one output directory without training a run twice; a claim whose
    process is gone (killed) is taken over. None: another live process has it."""
    import os

    claim = path.with_name(path.name + ".claim")
    claim.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                os.kill(int(claim.read_text() or 0), 0)
                return None  # Alive: its run.
            except (ProcessLookupError, ValueError):
                claim.unlink(missing_ok=True)  # A dead process's claim.
            except PermissionError:
                return None
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return claim
    return None


def run_all(
    preset: Preset,
    out: pathlib.Path,
    progress: Callable[[str], None] = print,
    wait_seconds: float = 30.0,
) -> list[dict[str, Any]]:
    """Runs what is missing (`todo_list`); returns every finished run.

    Any number of processes may run it on one `out` at once: each claims a run before
    training it. A run whose rate waits on a sweep that another process is still running
    is left for a later pass; the process waits (`wait_seconds`) only when nothing else
    is left to do.
    """
    import time as _time

    todo = todo_list(preset)
    while True:
        waiting = trained = 0
        for index, (setting, model, lr, seed) in enumerate(todo, 1):
            lr = chosen_rate(preset, out, setting, model.key) if lr is None else lr
            if lr is None:
                waiting += 1
                continue
            path = run_path(out, setting, run_name(model.key, lr, seed))
            if path.exists():
                continue
            claim = _claim(path)
            if claim is None:
                waiting += 1
                continue
            try:
                if path.exists():  # Finished while this process looked elsewhere.
                    continue
                progress(f"[{index}/{len(todo)}] {setting.name} {model.key} lr={lr:g} seed={seed}")
                result = train_one(
                    preset, setting, model, lr, seed, lambda line: progress(f"  {line}")
                )
                write_json(path, result)
                trained += 1
                progress(f"  accuracy {result['accuracy']:.3f} in {result['train_seconds']:.0f} s")
            finally:
                claim.unlink(missing_ok=True)
        if not waiting:
            return load_runs(out)
        if not trained:
            _time.sleep(wait_seconds)


def load_runs(out: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/*.json"))]


def write_report(preset_name: str, out: pathlib.Path, runs: list[dict[str, Any]]) -> dict:
    """Writes `bottleneck.json`, `README.md` and `bottleneck.png` under `out`."""
    from headsize_tf.core.io import atomic_path
    from headsize_tf.experiments import bottleneck_report

    preset = PRESETS[preset_name]
    summary = {"preset": preset_name, **bottleneck_report.summarize(preset, runs, models)}
    write_json(out / "bottleneck.json", summary)
    command = "python -m headsize_tf.experiments.bottleneck_study"
    if preset_name != "cpu":
        command += f" --preset {preset_name}"
    command += f" --output {out}"
    with atomic_path(out / "README.md") as tmp:
        discussion = next(
            (f"../{name}" for name in ("VERDICT.md",) if (out.parent / name).exists()),
            "VERDICT.md" if (out / "VERDICT.md").exists() else None,
        )
        pathlib.Path(tmp).write_text(
            bottleneck_report.markdown(summary, preset, command, discussion)
        )
    if summary["rows"]:
        with atomic_path(out / "bottleneck.png") as tmp:
            bottleneck_report.plot(summary, preset, tmp)
    return summary


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output", required=True, help="the study's directory (written; reruns resume from it)"
    )
    parser.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
    parser.add_argument(
        "--report-only", action="store_true", help="summarize the finished runs, train nothing"
    )
    parser.add_argument(
        "--summarize-only", dest="report_only", action="store_true", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="SETTING",
        help="train only this setting (e.g. preference_n64_K64; repeatable): two processes "
        "with different settings share the output directory",
    )
    args = parser.parse_args(argv)
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up lines.
    out = pathlib.Path(args.output)
    preset = PRESETS[args.preset]
    names = [setting.name for setting in (*preset.settings, *preset.sweep_only)]
    for name in args.only or []:
        if name not in names:
            print(f"--only {name}: expected one of {', '.join(names)}", file=sys.stderr)
            return 2
    if args.only:
        preset = dataclasses.replace(
            preset,
            settings=tuple(s for s in preset.settings if s.name in args.only),
            sweep_only=tuple(s for s in preset.sweep_only if s.name in args.only),
        )
    if args.report_only:
        runs = load_runs(out)
    else:
        runs = run_all(preset, out, lambda line: print(line, flush=True))
    summary = write_report(args.preset, out, runs)
    from headsize_tf.experiments import bottleneck_report

    print("\n".join(bottleneck_report.verdict_lines(summary)))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
