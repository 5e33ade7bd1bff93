"""The reproduction's runners: one run from step 0 on tf_keras (Model Garden's trainer) or
Keras 3 (`lm_keras3`), and what a run needs around it (data, logs, output checks).

Each run returns its record: the validation curve at `curve_points`
checkpoints, test perplexity, seconds and the device it ran on.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import time
from contextlib import redirect_stdout
from typing import Any

import numpy as np

from headsize_tf.experiments import lm_keras3
from headsize_tf.experiments._devices import device_description
from headsize_tf.experiments.reproduction.plan import Model, run_name
from headsize_tf.experiments.reproduction.presets import Preset


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


def eval_batches(data_dir: str | pathlib.Path, split: str, windows: int | None = None) -> int:
    """Batches of 32 that cover a split's LM windows once (its first `windows`, if given)."""
    from headsize_tf.data import corpora

    manifest = corpora.load_manifest("austen", data_dir)
    examples = manifest["stats"]["splits"][split]["lm_examples"]
    return int(np.ceil(min(examples, windows or examples) / 32))


FRAMEWORKS = ("tf_keras", "keras3")


def run_dir(
    work_dir: pathlib.Path, preset: Preset, key: str, learning_rate: float, seed: int
) -> pathlib.Path:
    """The Model Garden model_dir (checkpoints, summaries) of a tf_keras run."""
    name = run_name(key, learning_rate, seed)
    return work_dir / f"{name}_steps{preset.steps}_l{preset.layers}_n{preset.sequence_length}"


def keras3_model_path(
    work_dir: pathlib.Path, preset: Preset, key: str, learning_rate: float, seed: int
) -> pathlib.Path:
    """The trained `.keras` LM of a Keras 3 run (read by `attention_rank`)."""
    path = run_dir(work_dir, preset, key, learning_rate, seed)
    return path.parent / f"{path.name}.keras"


def train_one(
    model: Model,
    preset: Preset,
    learning_rate: float,
    seed: int,
    data_dir: str,
    work_dir: pathlib.Path,
    framework: str = "tf_keras",
) -> dict[str, Any]:
    """Trains one run; returns its record (curve, test perplexity, device).

    `framework` "tf_keras" trains with Model Garden's trainer; "keras3" with
    `lm_keras3.train_run` on Keras 3's backend (no TensorFlow needed), resuming from
    the run's last curve point when an earlier command was cut off.
    """
    if framework == "keras3":
        # The run's state at every curve point: a run cut off (a job scheduler's
        # time limit) resumes there in the next command instead of from step 0.
        work_dir.mkdir(parents=True, exist_ok=True)
        state = run_dir(work_dir, preset, model.key, learning_rate, seed)
        result = lm_keras3.train_run(
            model.attention(),
            model.width,
            preset,
            learning_rate,
            seed,
            pathlib.Path(data_dir) / "austen",
            model_path=keras3_model_path(work_dir, preset, model.key, learning_rate, seed),
            state_path=state.parent / f"{state.name}_keras3_state.npz",
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
                model,
                preset,
                learning_rate,
                "valid",
                eval_batches(data_dir, "valid", preset.eval_windows),
            ),
            data_dir=data_dir,
            seed=seed,
        )
        seconds = time.perf_counter() - start
        test = train.run(
            "headsize_lm/language_modeling",
            str(model_dir),
            params_override=_override(
                model,
                preset,
                learning_rate,
                "test",
                eval_batches(data_dir, "test", preset.eval_windows),
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
        return (
            "Runner: Model Garden's trainer (tf_keras, `reproduction.runners.train_one`). The "
            "Keras 3 grid (`--framework keras3 --preset gpu`, a grid of its own in another "
            "output) runs when a GPU is available: `benchmarks/reproduction_device.sh` or "
            "`colab/08_reproduction_gpu.ipynb`."
        )
    backends = sorted({r.get("backend", "?") for r in runs.values()})
    return (
        "Runner: Keras 3 (`lm_keras3.train_run`, backend "
        f"{', '.join(backends) or keras_backend()}), the same protocol with a numpy data "
        "order: a grid of its own, not mixed with the tf_keras runs."
    )
