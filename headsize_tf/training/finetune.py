"""Fine-tune a pretrained sentence encoder on a labelled sentence (or sentence-pair) task.

The classifier is the encoder, mean pooling over the attention mask (how
sentence-transformers models are trained), dropout and a linear layer. Data
are pre-tokenised once (a pair as `[CLS] a [SEP] b [SEP]` with segment ids
0 / 1, the longer side truncated first) and batched by length (little
padding), with a seeded batch order; AdamW with linear warm-up and decay, as
usual for BERT fine-tuning. Used by the pruning tool and the compression and
pruning studies.
"""

from __future__ import annotations

import dataclasses
import math
import time
import weakref
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from headsize_tf.modeling.sentence_classifier import SentenceClassifier
from headsize_tf.modeling.sentence_encoder import SentenceEncoder


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """Fine-tuning recipe (the same for every model a study compares)."""

    epochs: float = 1.0
    batch_size: int = 32
    learning_rate: float = 5e-5
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    dropout: float = 0.1
    max_seq_length: int = 64
    seed: int = 0


def truncate_pair_lengths(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Word pieces kept of each side of a pair, the longer side trimmed first.

    BERT's `_truncate_seq_pair`: drop the last piece of the longer side until
    the pair fits `budget` (on a tie, of the second side).

    Args:
      len_a: Word pieces of the first text.
      len_b: Word pieces of the second text.
      budget: Word pieces the pair may keep (`max_seq_length - 3`).

    Returns:
      (kept of the first text, kept of the second).
    """
    if len_a + len_b <= budget:
        return len_a, len_b
    keep_b = min(len_b, max(budget // 2, budget - len_a))
    return budget - keep_b, keep_b


def _token_ids(
    sentence_encoder: SentenceEncoder,
    texts: Sequence[str],
    max_seq_length: int,
    add_special_tokens: bool = True,
) -> list[np.ndarray]:
    """Unpadded ids of each text, tokenised 1024 texts at a time."""
    out: list[np.ndarray] = []
    for start in range(0, len(texts), 1024):
        batch = tf.constant(list(texts[start : start + 1024]))
        inputs = sentence_encoder.tokenize(batch, max_seq_length, add_special_tokens)
        ids, mask = inputs["input_word_ids"].numpy(), inputs["input_mask"].numpy()
        out.extend(row[: int(m.sum())] for row, m in zip(ids, mask, strict=True))
    return out


def tokenize_all(
    sentence_encoder: SentenceEncoder,
    texts: Sequence[str] | Sequence[tuple[str, str]],
    max_seq_length: int,
) -> list[np.ndarray]:
    """Token ids of each text or sentence pair, unpadded (for `pad_batch`).

    Args:
      sentence_encoder: Its `tokenize` gives the word pieces.
      texts: Texts, or (first, second) pairs (not both kinds).
      max_seq_length: Tokens per example, special tokens included (capped at
        the encoder's positions).

    Returns:
      One int32 array per example: `[CLS] a [SEP]` word ids `[length]` for a
      text; for a pair, `[length, 2]` (word id, segment id) rows of
      `[CLS] a [SEP] b [SEP]` with segment 0 up to the first [SEP] and 1
      after, the longer side truncated first as BERT does.
    """
    if not len(texts) or isinstance(texts[0], str):
        return _token_ids(sentence_encoder, texts, max_seq_length)
    if any(isinstance(t, str) or len(t) != 2 for t in texts):
        raise ValueError("texts must be all strings or all (text, text) pairs.")
    positions = sentence_encoder.encoder.get_config().get("max_sequence_length")
    length = min(max_seq_length, positions) if positions else max_seq_length
    if length < 3:
        raise ValueError(f"A sentence pair needs max_seq_length >= 3; got {length}.")
    cls_id, sep_id = sentence_encoder.token_ids([""])[0]
    firsts = _token_ids(sentence_encoder, [a for a, _ in texts], length, False)
    seconds = _token_ids(sentence_encoder, [b for _, b in texts], length, False)
    pairs = []
    for a, b in zip(firsts, seconds, strict=True):
        keep_a, keep_b = truncate_pair_lengths(len(a), len(b), length - 3)
        ids = np.concatenate([[cls_id], a[:keep_a], [sep_id], b[:keep_b], [sep_id]])
        segments = np.repeat(np.array([0, 1]), [keep_a + 2, keep_b + 1])
        pairs.append(np.stack([ids, segments], axis=1).astype(np.int32))
    return pairs


def length_batches(
    token_ids: Sequence[np.ndarray], batch_size: int, rng: np.random.Generator | None = None
) -> list[np.ndarray]:
    """Index batches of similar lengths; shuffled (within length buckets) if `rng`."""
    lengths = np.array([len(t) for t in token_ids])
    if rng is None:
        order = np.argsort(lengths, kind="stable")
    else:
        noise = rng.uniform(-2.0, 2.0, size=len(lengths))  # Mix nearby lengths.
        order = np.argsort(lengths + noise, kind="stable")
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if rng is not None:
        rng.shuffle(batches)
    return batches


def pad_batch(token_ids: Sequence[np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """Encoder inputs of the examples `index`, zero-padded to the longest.

    Args:
      token_ids: From `tokenize_all`: word ids `[length]`, or (word id,
        segment id) rows `[length, 2]` for sentence pairs.
      index: The examples of the batch.

    Returns:
      int32 `input_word_ids`, `input_mask` and `input_type_ids` (the segment
      ids; zeros for single texts), each `[len(index), longest]`.
    """
    length = max(len(token_ids[i]) for i in index)
    ids = np.zeros([len(index), length], np.int32)
    mask = np.zeros([len(index), length], np.int32)
    types = np.zeros([len(index), length], np.int32)
    for row, i in enumerate(index):
        example = np.asarray(token_ids[i])
        n = len(example)
        if example.ndim == 2:  # A sentence pair: (word id, segment id) per token.
            ids[row, :n], types[row, :n] = example[:, 0], example[:, 1]
        else:
            ids[row, :n] = example
        mask[row, :n] = 1
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


_SPEC = {
    "input_word_ids": tf.TensorSpec([None, None], tf.int32),
    "input_mask": tf.TensorSpec([None, None], tf.int32),
    "input_type_ids": tf.TensorSpec([None, None], tf.int32),
}


# One traced forward pass per model, reused by every later call (a timed pass must not
# trace again). The function holds its model weakly, so the entry goes with the model.
_FORWARD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _forward(model: tf_keras.Model):
    forward = _FORWARD.get(model)
    if forward is None:
        model_ref = weakref.ref(model)

        # autograph=False (here and in `finetune`'s step): the models' calls have no
        # tensor-dependent Python control flow, and converting every layer's call
        # costs seconds per process.
        @tf.function(input_signature=[_SPEC], reduce_retracing=True, autograph=False)
        def forward(inputs):
            return model_ref()(inputs, training=False)

        _FORWARD[model] = forward
    return forward


def predict_logits(
    model: tf_keras.Model, token_ids: Sequence[np.ndarray], batch_size: int = 128
) -> np.ndarray:
    """Logits for pre-tokenised examples, in input order (the model's forward pass is
    traced on the first call and reused)."""
    if len(token_ids) == 0:
        return np.zeros([0, int(model.head.units)], np.float32)
    forward = _forward(model)
    out = None
    for index in length_batches(token_ids, batch_size):
        logits = forward(pad_batch(token_ids, index)).numpy()
        if out is None:
            out = np.zeros([len(token_ids), logits.shape[-1]], np.float32)
        out[index] = logits
    return out


def accuracy(model: tf_keras.Model, token_ids: Sequence[np.ndarray], labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(predict_logits(model, token_ids), axis=-1) == labels))


def finetune(
    sentence_encoder: SentenceEncoder,
    train: tuple[Sequence[str] | Sequence[tuple[str, str]], np.ndarray],
    config: FinetuneConfig = FinetuneConfig(),
    num_classes: int = 2,
    verbose: int = 1,
) -> tuple[SentenceClassifier, dict]:
    """Fine-tunes (in place) and returns (classifier, {"seconds", "steps", "loss"}).

    Args:
      sentence_encoder: The encoder (fine-tuned in place).
      train: (texts or (text, text) pairs, int labels in [0, num_classes): an
        array or a list, one per text).
      config: The recipe.
      num_classes: Labels of the linear head.
      verbose: Progress bar (1) or none (0).
    """
    tf_keras.utils.set_random_seed(config.seed)
    texts, labels = train
    labels = np.asarray(labels)
    if len(texts) == 0 or len(labels) != len(texts):
        raise ValueError(
            f"finetune needs one label per text and at least one text; got {len(texts)} "
            f"texts and {len(labels)} labels."
        )
    token_ids = tokenize_all(sentence_encoder, texts, config.max_seq_length)
    model = SentenceClassifier(sentence_encoder, num_classes, config.dropout)
    model(pad_batch(token_ids, np.arange(min(2, len(token_ids)))))  # Builds the model.
    rng = np.random.default_rng(config.seed)
    steps_per_epoch = math.ceil(len(token_ids) / config.batch_size)
    total = max(1, int(round(config.epochs * steps_per_epoch)))
    warmup = int(config.warmup_fraction * total)
    schedule = tf_keras.optimizers.schedules.PolynomialDecay(
        config.learning_rate, max(total - warmup, 1), end_learning_rate=0.0
    )
    from official.modeling.optimization import lr_schedule

    if warmup:
        schedule = lr_schedule.LinearWarmup(schedule, warmup, 0.0)
    optimizer = tf_keras.optimizers.AdamW(
        learning_rate=schedule, weight_decay=config.weight_decay, epsilon=1e-6
    )
    optimizer.exclude_from_weight_decay(var_names=["layer_norm", "bias", "LayerNorm"])
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # The encoder's CLS pooler is unused (mean pooling): leave it out.
    variables = [v for v in model.trainable_variables if "pooler" not in v.name]
    # The optimizer's slots exist before `step` is traced: a tf.function whose first
    # call creates variables is traced twice (seconds for a pretrained encoder).
    optimizer.build(variables)

    @tf.function(
        input_signature=[_SPEC, tf.TensorSpec([None], tf.int32)],
        reduce_retracing=True,
        autograph=False,
    )
    def step(inputs, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(inputs, training=True))
        grads = tape.gradient(loss, variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    progbar = tf_keras.utils.Progbar(total, verbose=verbose, stateful_metrics=["loss"])
    start = time.perf_counter()
    done, loss = 0, float("nan")
    while done < total:
        for index in length_batches(token_ids, config.batch_size, rng):
            if done == total:
                break
            loss = float(step(pad_batch(token_ids, index), labels[index]))
            done += 1
            progbar.update(done, [("loss", loss)])
    return model, {"seconds": time.perf_counter() - start, "steps": total, "final_loss": loss}
