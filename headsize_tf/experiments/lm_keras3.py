"""One causal-LM run on Keras 3 (JAX or TensorFlow backend) with the reproduction's protocol.

The Model Garden runner (`reproduction.runners.train_one`) needs TensorFlow; this one
needs only Keras 3 and a backend, so the reproduction grid also runs where
only JAX is installed (a lent GPU machine's image). It mirrors that runner:

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

SPLITS = ("train", "valid", "test")
WEIGHT_DECAY, CLIP_NORM, EPSILON, END_LEARNING_RATE = 0.01, 1.0, 1e-7, 0.0
NO_WEIGHT_DECAY = ["bias"]  # Patterns of variable names (`bias`, `content_bias`).
EVAL_BATCH = 32


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

        feature = {"input_ids": tf.io.VarLenFeature(tf.int64)}
        rows = [
            tf.sparse.to_dense(tf.io.parse_single_example(r, feature)["input_ids"]).numpy()
            for r in tf.data.TFRecordDataset(str(source))
        ]
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.save(f, np.stack(rows).astype(np.int32))
    return paths


def load_lm_array(corpus_dir: str | pathlib.Path, split: str) -> np.ndarray:
    path = array_path(corpus_dir, split)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `export_lm_arrays` where TensorFlow is installed (the "
            "reproduction command does it when it prepares the corpus)."
        )
    return np.load(path)


def learning_rate_schedule(learning_rate: float, steps: int, warmup_steps: int) -> Any:
    """Model Garden's warm-up + linear decay as a Keras 3 schedule (see the module doc)."""
    import keras
    from keras import ops

    class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = ops.cast(step, "float32")

            def decayed(s):
                done = ops.minimum(s, float(steps)) / float(steps)
                return (learning_rate - END_LEARNING_RATE) * (1.0 - done) + END_LEARNING_RATE

            warm = decayed(float(warmup_steps)) * ops.maximum(step, 1.0) / float(warmup_steps)
            return ops.where(step < float(warmup_steps), warm, decayed(step))

        def get_config(self):
            return {"learning_rate": learning_rate, "steps": steps, "warmup_steps": warmup_steps}

    return WarmupLinearDecay()


def adamw(learning_rate: Any) -> Any:
    """Keras 3 AdamW with Model Garden's settings (see the module doc)."""
    import keras

    optimizer = keras.optimizers.AdamW(
        learning_rate=learning_rate,
        weight_decay=WEIGHT_DECAY,
        epsilon=EPSILON,
        global_clipnorm=CLIP_NORM,
    )
    optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    return optimizer


def window_stream(windows: int, count: int, seed: int) -> np.ndarray:
    """`count` window indices: epochs of seeded permutations, back to back."""
    rng = np.random.default_rng(seed)
    epochs = -(-count // windows)
    return np.concatenate([rng.permutation(windows) for _ in range(epochs)])[:count]


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


def compile_lm(lm: Any, learning_rate: float, steps: int) -> None:
    """Compiles `lm` with the protocol's AdamW and warm-up + linear decay over `steps`."""
    import keras

    schedule = learning_rate_schedule(learning_rate, steps, max(1, steps // 10))
    cross_entropy = keras.metrics.SparseCategoricalCrossentropy(from_logits=True, name="xent")
    lm.compile(
        optimizer=adamw(schedule),
        metrics=[cross_entropy],
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )


def perplexity(lm: Any, array: np.ndarray) -> tuple[float, float]:
    """(perplexity, loss) of a compiled LM: the token mean over all windows of `array`.

    Every window has n tokens, so this is Model Garden's perplexity; its
    `validation_loss` is a mean over batches instead.
    """
    result = lm.evaluate(
        array[:, :-1], array[:, 1:], batch_size=EVAL_BATCH, verbose=0, return_dict=True
    )
    return float(np.exp(result["xent"])), float(result["xent"])


def fit_windows(
    lm: Any,
    train: np.ndarray,
    steps: int,
    batch_size: int,
    seed: int,
    checkpoints: list[int],
    evaluate: Callable[[], tuple[float, float]],
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Trains a compiled LM `steps` batches of seeded windows; evaluates at `checkpoints`.

    Returns the validation curve and the training curve (the mean loss over
    each chunk's steps, dropout on: Model Garden's `training_loss`).
    """
    order = window_stream(len(train), steps * batch_size, seed)
    curve, train_curve, done = [], [], 0
    for step in checkpoints:
        chunk = train[order[done * batch_size : step * batch_size]]
        history = lm.fit(
            chunk[:, :-1], chunk[:, 1:], batch_size=batch_size, epochs=1, shuffle=False, verbose=0
        ).history
        train_curve.append(
            {
                "step": step,
                "loss": float(history["loss"][-1]),
                "perplexity": float(np.exp(history["xent"][-1])),
            }
        )
        done = step
        ppl, loss = evaluate()
        curve.append({"step": step, "perplexity": ppl, "loss": loss})
        if progress:
            progress(f"step {step}/{steps}: validation perplexity {ppl:.2f}")
    return curve, train_curve


def check_lm_arrays(arrays: dict[str, np.ndarray], sequence_length: int, vocab_size: int) -> None:
    """Raises unless every split is [windows, n + 1] ids in [0, vocab_size)."""
    n = sequence_length
    for name, array in arrays.items():
        if array.ndim != 2 or array.shape[1] != n + 1:
            raise ValueError(f"lm_{name}.npy has shape {array.shape}; expected [windows, {n + 1}].")
        if array.min() < 0 or array.max() >= vocab_size:
            # JAX looks an out-of-range id up as NaN instead of failing: refuse it here.
            raise ValueError(
                f"lm_{name}.npy holds token ids from {array.min()} to {array.max()}; expected "
                f"ids in [0, {vocab_size}) (a corpus prepared with another vocabulary?)."
            )


def train_run(
    attention: dict[str, Any],
    width: int,
    preset: Any,
    learning_rate: float,
    seed: int,
    corpus_dir: str | pathlib.Path,
    progress: Callable[[str], None] | None = None,
    model_path: str | pathlib.Path | None = None,
) -> dict[str, Any]:
    """Trains one LM from scratch; returns its curve, test perplexity and seconds.

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
    """
    import keras

    from headsize_tf.keras3.modeling import CausalLM

    arrays = {split: load_lm_array(corpus_dir, split) for split in SPLITS}
    check_lm_arrays(arrays, preset.sequence_length, preset.vocab_size)
    train, valid, test = (arrays[s] for s in SPLITS)
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
    start = time.perf_counter()
    curve, train_curve = fit_windows(
        lm,
        train,
        preset.steps,
        preset.batch_size,
        seed,
        checkpoints,
        lambda: perplexity(lm, valid),
        progress,
    )
    seconds = time.perf_counter() - start
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
