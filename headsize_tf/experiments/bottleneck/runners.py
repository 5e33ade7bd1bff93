"""The bottleneck study's runners: one run on Keras 3 (a causal LM trained from scratch on
fresh batches of its task, its learning curve and the attention it uses), and a preset's
runs through the reproduction's scheduler (`reproduction.scheduler`)."""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from headsize_tf.core.io import write_json
from headsize_tf.data import rank_tasks
from headsize_tf.experiments.bottleneck.plan import Model, Run, load_runs, pending, todo_list
from headsize_tf.experiments.bottleneck.presets import Preset, Setting
from headsize_tf.experiments.reproduction.scheduler import run_claimed


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


def run_all(
    preset: Preset,
    out: pathlib.Path,
    progress: Callable[[str], None] = print,
    wait_seconds: float = 30.0,
) -> list[dict[str, Any]]:
    """Trains what is missing (`plan.pending`, in `todo_list`'s order); returns every
    finished run.

    Any number of processes may run it on one `out` at once: each claims a run
    (`reproduction.scheduler.claim`, the file `<run>.json.claim` beside the run's, removed
    when released) before training it. A process whose remaining runs are all claimed, or
    wait on a sweep another process is running, waits `wait_seconds` and looks again.
    """
    todo = todo_list(preset)

    def train(run: Run, done: int, left: int) -> bool:
        path = run.path(out)
        if path.exists():  # Finished while this process looked elsewhere.
            return False
        progress(
            f"[{run.index}/{run.total}] {run.setting.name} {run.model.key} "
            f"lr={run.learning_rate:g} seed={run.seed}"
        )
        result = train_one(
            preset,
            run.setting,
            run.model,
            run.learning_rate,
            run.seed,
            lambda line: progress(f"  {line}"),
        )
        write_json(path, result)
        progress(f"  accuracy {result['accuracy']:.3f} in {result['train_seconds']:.0f} s")
        return True

    run_claimed(
        lambda: pending(preset, out, todo),
        lambda run: (run.path(out).parent, run.path(out).name),
        train,
        wait_seconds,
        remove_claims=True,
    )
    return load_runs(out)
