"""Keras 3 causal-LM training pieces: Model Garden's optimizer, schedule and perplexity.

Shared by the reproduction grid's Keras 3 runner (`headsize_tf.experiments.
lm_keras3`), the KV-sharing study and `headsize-tf convert --framework keras3`
(uptraining a converted `.keras` LM), so the Keras 3 CLI path needs no
experiments module:

* AdamW with decoupled weight decay 0.01 on every weight but the biases,
  epsilon 1e-7 and the gradients' global norm clipped at 1.0 (Model Garden's
  `adamw` as the experiments configure it);
* linear decay from the peak rate to 0 at the last step, with a linear
  warm-up over the first 10% of steps (Model Garden's `polynomial` rate with
  a `polynomial` warm-up);
* batches of windows of n + 1 tokens in epochs of seeded permutations;
  perplexity is exp of the token-mean cross-entropy over every window.

Example:

>>> compile_lm(lm, learning_rate=1e-3, steps=100)
>>> fit_windows(lm, train, 100, 16, seed=0, checkpoints=[100],
...             evaluate=lambda: perplexity(lm, valid))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

WEIGHT_DECAY, CLIP_NORM, EPSILON, END_LEARNING_RATE = 0.01, 1.0, 1e-7, 0.0
NO_WEIGHT_DECAY = ["bias"]  # Patterns of variable names (`bias`, `content_bias`).
EVAL_BATCH = 32
GRADIENT_BACKENDS = ("tensorflow", "jax")


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


def variable_gradients(
    model: Callable, loss_fn: Callable, variables: list[Any]
) -> Callable[[Any, Any], list[np.ndarray]]:
    """`grads(inputs, targets)` -> d loss_fn(targets, model(inputs)) / d each of `variables`.

    Keras 3 has no backend-neutral gradient API: this takes the backend's own,
    compiled (`tf.GradientTape` in a `tf.function` on TensorFlow; `jax.grad`
    under `jax.jit` on JAX, the variables' values substituted through a
    `keras.StatelessScope`, so the model's weights stay as they are). Other
    backends raise a clear error. Used by head importance (the head gates'
    gradients) and by the latent's measured sensitivity (its down-projection's).

    Example:

    >>> grads = variable_gradients(lm, loss, [layer.head_gates for layer in layers])
    >>> per_layer = grads(inputs, targets)
    """
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.function(reduce_retracing=True, autograph=False)
        def tf_grads(inputs, targets):
            with tf.GradientTape() as tape:
                values = [v.value for v in variables]
                tape.watch(values)
                loss = loss_fn(targets, model(inputs, training=False))
            return tape.gradient(loss, values)

        return lambda x, y: [np.asarray(g) for g in tf_grads(x, y)]
    if backend == "jax":
        import jax

        def loss_of(values, inputs, targets):
            with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
                outputs = model(inputs, training=False)
            return loss_fn(targets, outputs)

        jax_grads = jax.jit(jax.grad(loss_of))
        return lambda x, y: [np.asarray(g) for g in jax_grads([v.value for v in variables], x, y)]
    raise ValueError(
        f"Gradients need the TensorFlow or JAX Keras backend; the {backend!r} backend is not "
        f"supported (expected one of {list(GRADIENT_BACKENDS)})."
    )


def window_stream(windows: int, count: int, seed: int) -> np.ndarray:
    """`count` window indices: epochs of seeded permutations, back to back."""
    rng = np.random.default_rng(seed)
    epochs = -(-count // windows)
    return np.concatenate([rng.permutation(windows) for _ in range(epochs)])[:count]


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


def build_optimizer(model: Any) -> None:
    """Creates a compiled, built model's optimizer variables now, before `fit` traces.

    On the TensorFlow backend (without a `tf.distribute` strategy) Keras 3 creates
    them inside the first traced training step, and a `tf.function` whose first call
    creates variables is traced twice: every `fit` of a freshly compiled model traced
    its step twice (a 1-layer LM's `fit` + `evaluate`: 4.0 -> 2.4 CPU-s, the same
    losses). Keras does the same itself at the start of `fit` under a strategy and
    on JAX. Call it once the trainable weights are final (after any `enable_lora` or
    freezing); an uncompiled or unbuilt model is left to `fit`.
    """
    optimizer = getattr(model, "optimizer", None)
    built = model.built and all(layer.built for layer in model._flatten_layers())
    if built and optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)


def perplexity(lm: Any, array: np.ndarray) -> tuple[float, float]:
    """(perplexity, loss) of a compiled LM: the token mean over all windows of `array`.

    Every window has n tokens, so this is Model Garden's perplexity; its
    `validation_loss` is a mean over batches instead. The training loops' form of
    `windows_perplexity` (the same quantity): it reads the `xent` metric of
    `compile_lm` (float32, on the device) and gives the loss too; an uncompiled
    model (a converted or keras-hub one) takes `windows_perplexity`.
    """
    result = lm.evaluate(
        array[:, :-1], array[:, 1:], batch_size=EVAL_BATCH, verbose=0, return_dict=True
    )
    return float(np.exp(result["xent"])), float(result["xent"])


def windows_perplexity(lm: Any, windows: np.ndarray, batch_size: int = 8) -> float:
    """exp of the token-mean next-token cross entropy of `lm` over `windows` (no compile needed).

    The perplexity of the Keras 3 front's decoders: every position of a window
    but the last predicts the next id (a start token in position 0 is
    context only). Log-softmax in float64 on the host.

    Args:
      lm: A causal LM: `lm.predict_on_batch(ids [B, T])` -> logits `[B, T, V]`.
      windows: int32 `[N, T + 1]` token windows.
      batch_size: Windows per batch (one compiled shape but the last).

    Example:

    >>> windows_perplexity(lm, windows)
    """
    total, count = 0.0, 0
    for start in range(0, len(windows), batch_size):
        batch = np.asarray(windows[start : start + batch_size])
        inputs, targets = batch[:, :-1], batch[:, 1:]
        logits = np.asarray(lm.predict_on_batch(inputs), np.float64)
        top = logits.max(-1, keepdims=True)
        log_z = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
        picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
        total += float((log_z - picked).sum())
        count += targets.size
    return float(np.exp(total / max(count, 1)))


def fit_windows(
    lm: Any,
    train: np.ndarray,
    steps: int,
    batch_size: int,
    seed: int,
    checkpoints: list[int],
    evaluate: Callable[[], tuple[float, float]],
    progress: Callable[[str], None] | None = None,
    start_step: int = 0,
    after_checkpoint: Callable[[int, dict[str, float], dict[str, float]], None] | None = None,
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Trains a compiled LM `steps` batches of seeded windows; evaluates at `checkpoints`.

    Returns the validation curve and the training curve (the mean loss over
    each chunk's steps, dropout on: Model Garden's `training_loss`). A run resumed
    at `start_step` (a checkpoint it reached, its state restored by
    `restore_training_state`) trains the same windows from there on and returns the
    points after it; `after_checkpoint(step, validation point, training point)` runs
    after each evaluation (e.g. `save_training_state`).
    """
    build_optimizer(lm)
    order = window_stream(len(train), steps * batch_size, seed)
    curve, train_curve, done = [], [], start_step
    for step in (c for c in checkpoints if c > start_step):
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
        if after_checkpoint:
            after_checkpoint(step, curve[-1], train_curve[-1])
    return curve, train_curve


def save_training_state(lm: Any, path: Any, meta: dict[str, Any]) -> None:
    """Writes a compiled LM's variables (the dropout seeds' too), its optimizer's and
    `meta` (JSON) to one `.npz`, atomically: `restore_training_state` continues from it."""
    import json

    from headsize_tf.core.io import atomic_path

    arrays = {f"model_{i}": np.asarray(v) for i, v in enumerate(lm.variables)}
    arrays |= {f"optimizer_{i}": np.asarray(v) for i, v in enumerate(lm.optimizer.variables)}
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, meta=np.array(json.dumps(meta)), **arrays)


def restore_training_state(lm: Any, path: Any, sample: np.ndarray) -> dict[str, Any]:
    """Loads `save_training_state`'s file into a compiled LM of the same shape (built on
    `sample`, a batch of token ids); returns the saved `meta`."""
    import json

    lm(sample)  # Builds the variables.
    lm.optimizer.build(lm.trainable_variables)
    with np.load(path) as saved:
        for prefix, variables in (("model", lm.variables), ("optimizer", lm.optimizer.variables)):
            shapes = [saved[k].shape for k in saved.files if k.startswith(prefix + "_")]
            if shapes != [tuple(v.shape) for v in variables]:
                raise ValueError(
                    f"{path}: its {len(shapes)} {prefix} variables do not have this "
                    f"model's {len(variables)} shapes: a state of another model."
                )
            for i, v in enumerate(variables):
                v.assign(saved[f"{prefix}_{i}"])
        return json.loads(str(saved["meta"]))


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


__all__ = [
    "CLIP_NORM",
    "END_LEARNING_RATE",
    "EPSILON",
    "EVAL_BATCH",
    "NO_WEIGHT_DECAY",
    "WEIGHT_DECAY",
    "adamw",
    "build_optimizer",
    "check_lm_arrays",
    "compile_lm",
    "fit_windows",
    "save_training_state",
    "restore_training_state",
    "learning_rate_schedule",
    "perplexity",
    "window_stream",
]
