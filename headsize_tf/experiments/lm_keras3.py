"""One causal-LM run on Keras 3 (JAX or TensorFlow backend) with the reproduction's protocol.

The Model Garden runner (`reproduction.runners.train_one`) needs TensorFlow; this one
needs only Keras 3 and a backend, so the reproduction grid also runs where
only JAX is installed (a GPU image with JAX alone). It mirrors that runner:

* the Keras 3 `CausalLM` of the same shape (the core formula counts the same
  parameters as the tf_keras `HeadsizeCausalLM`), dropout 0.1;
* AdamW with decoupled weight decay 0.01 on every weight but the biases,
  epsilon 1e-7 and the gradients' global norm clipped at 1.0 (Model Garden's
  `adamw` as the experiment configures it: its exclusion patterns
  "LayerNorm", "layer_norm", "bias" match only the biases of the tf_keras
  LM, whose norms are named `*_norm`);
* linear decay from the peak rate to 0 at the last step, with a linear
  warm-up over the first 10% of steps up to the rate the decay has reached
  there (Model Garden's `polynomial` rate with a `polynomial` warm-up);
* batches of `batch_size` windows of n + 1 tokens, validation perplexity at
  `curve_points` evenly spaced steps, test perplexity after the last step;
  perplexity is exp of the token-mean cross-entropy over a whole split.

The data order differs: each epoch is a numpy permutation of all windows
(seeded by the run's seed), where the Model Garden grid shuffles the file's
corpus-ordered windows through a buffer of 100 (each batch from ~25k nearby
tokens). So its runs are a grid of their own, recorded with
`"framework": "keras3"` and never mixed with the tf_keras runs.

Data: `lm_{split}.npy` (int32 `[windows, n + 1]`) beside the corpus's
TFRecords. `export_lm_arrays` writes them from the TFRecords once, on a
machine with TensorFlow; a machine without it trains from the arrays alone.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from headsize_tf.core.io import atomic_path
from headsize_tf.experiments import _devices

# The training pieces live in the Keras 3 front (the `convert` CLI uptrains with them);
# their names stay importable from here.
from headsize_tf.keras3.lm_training import (  # noqa: F401
    CLIP_NORM,
    END_LEARNING_RATE,
    EPSILON,
    EVAL_BATCH,
    NO_WEIGHT_DECAY,
    WEIGHT_DECAY,
    adamw,
    check_lm_arrays,
    compile_lm,
    fit_windows,
    learning_rate_schedule,
    perplexity,
    restore_training_state,
    save_training_state,
    window_stream,
)

SPLITS = ("train", "valid", "test")


def array_path(corpus_dir: str | pathlib.Path, split: str) -> pathlib.Path:
    return pathlib.Path(corpus_dir) / f"lm_{split}.npy"


def export_lm_arrays(corpus_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """Writes `lm_{split}.npy` from `lm_{split}.tfrecord` (TensorFlow needed); returns them.

    An array at least as new as its TFRecord is kept (a re-prepared corpus, e.g.
    with another vocabulary, is exported again); an array without its TFRecord
    (a copied data dir) is kept too. Each file is written atomically.
    """
    paths = []
    for split in SPLITS:
        path = array_path(corpus_dir, split)
        paths.append(path)
        source = pathlib.Path(corpus_dir) / f"lm_{split}.tfrecord"
        if path.exists() and (
            not source.exists() or path.stat().st_mtime_ns >= source.stat().st_mtime_ns
        ):
            continue
        if not source.exists():
            raise FileNotFoundError(f"{source} is missing: prepare the corpus first.")
        try:
            import tensorflow as tf
        except ImportError:
            if path.exists():  # Copied with new file times onto a machine without TensorFlow.
                continue
            raise

        feature = {"input_ids": tf.io.RaggedFeature(tf.int64)}
        # Parsed in batches of records: one op per record costs seconds per thousand.
        batches = [
            tf.io.parse_example(batch, feature)["input_ids"]
            for batch in tf.data.TFRecordDataset(str(source)).batch(4096)
        ]
        lengths = {int(n) for batch in batches for n in batch.row_lengths().numpy()}
        if len(lengths) > 1:
            raise ValueError(f"{source} holds windows of {sorted(lengths)} tokens: one length.")
        batches = [batch.to_tensor().numpy() for batch in batches]
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.save(f, np.concatenate(batches).astype(np.int32))
    return paths


def load_lm_array(corpus_dir: str | pathlib.Path, split: str) -> np.ndarray:
    path = array_path(corpus_dir, split)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `export_lm_arrays` where TensorFlow is installed (the "
            "reproduction command does it when it prepares the corpus)."
        )
    return np.load(path)


def device_description() -> str:
    """The accelerator (or CPU) Keras 3's backend runs on."""
    import keras

    if keras.backend.backend() == "tensorflow":
        return _devices.device_description()  # TensorFlow's own GPU lookup.
    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform != "cpu":
            return f"{device.platform.upper()}: {device.device_kind}"
    return _devices.cpu_description()


def train_run(
    attention: dict[str, Any],
    width: int,
    preset: Any,
    learning_rate: float,
    seed: int,
    corpus_dir: str | pathlib.Path,
    progress: Callable[[str], None] | None = None,
    model_path: str | pathlib.Path | None = None,
    state_path: str | pathlib.Path | None = None,
) -> dict[str, Any]:
    """Trains one LM from scratch (or from its last checkpoint); returns its curve, test
    perplexity and seconds.

    Args:
      attention: The model's `AttentionSpec` fields.
      width: Hidden size (feed-forward 4 x width).
      preset: `reproduction.presets.Preset` (layers, sequence_length, batch_size,
        steps, curve_points, dropout, vocab_size).
      learning_rate: Peak learning rate.
      seed: Seed of the initialisation, dropout and data order.
      corpus_dir: Directory with `lm_{train,valid,test}.npy`.
      progress: Called with a line at every curve point.
      model_path: Where to save the trained model (`.keras`, atomically), if given.
      state_path: If given, the run's state (`.npz`: weights, optimizer, curve so far) is
        written there at every curve point, and a run that finds it resumes from it: a
        run longer than one command (a job scheduler's time limit) goes on in the next one.
    """
    import keras

    from headsize_tf.keras3.modeling import CausalLM

    arrays = {split: load_lm_array(corpus_dir, split) for split in SPLITS}
    check_lm_arrays(arrays, preset.sequence_length, preset.vocab_size)
    train, valid, test = (arrays[s] for s in SPLITS)
    valid, test = valid[: preset.eval_windows], test[: preset.eval_windows]
    keras.utils.set_random_seed(seed)
    lm = CausalLM(
        vocabulary_size=preset.vocab_size,
        num_layers=preset.layers,
        hidden_dim=width,
        attention=attention,
        intermediate_dim=4 * width,
        max_sequence_length=preset.sequence_length,
        dropout=preset.dropout,
    )
    compile_lm(lm, learning_rate, preset.steps)
    interval = max(1, preset.steps // preset.curve_points)
    checkpoints = sorted({*range(interval, preset.steps + 1, interval), preset.steps})
    done = {"step": 0, "curve": [], "train_curve": [], "seconds": 0.0}
    if state_path is not None and pathlib.Path(state_path).exists():
        done = restore_training_state(lm, state_path, train[:1, :-1])
        if progress:
            progress(f"resumed at step {done['step']}/{preset.steps}")
    start = time.perf_counter()

    def save(step: int, point: dict[str, float], train_point: dict[str, float]) -> None:
        done["step"] = step
        done["curve"].append(point)
        done["train_curve"].append(train_point)
        if state_path is not None:
            meta = {**done, "seconds": done["seconds"] + time.perf_counter() - start}
            save_training_state(lm, state_path, meta)

    fit_windows(
        lm,
        train,
        preset.steps,
        preset.batch_size,
        seed,
        checkpoints,
        lambda: perplexity(lm, valid),
        progress,
        start_step=done["step"],
        after_checkpoint=save,
    )
    curve, train_curve = done["curve"], done["train_curve"]
    seconds = done["seconds"] + time.perf_counter() - start
    test_ppl, test_loss = perplexity(lm, test)
    if model_path is not None:
        with atomic_path(model_path) as tmp:
            lm.save(tmp)
    return {
        "curve": curve,
        "train_curve": train_curve,
        "test_perplexity": test_ppl,
        "test_loss": test_loss,
        "train_seconds": seconds,
        "params_built": int(lm.count_params()),
        "framework": "keras3",
        "backend": keras.backend.backend(),
        "device": device_description(),
    }
