"""The tf_keras front's one perplexity, shared by the tools that report one.

exp of the token-mean cross entropy of a model's logits over every counted
target token of a batch list: a causal LM's next tokens (every token counts),
a translation model's target tokens (`pad_id`: padding does not count) and a
BERT encoder's masked positions (per-token weights). The Keras 3 front's
counterpart is `headsize_tf.keras3.lm_training.windows_perplexity`.

Example:

>>> perplexity(lm, [(ids, next_ids)])  # a causal LM
>>> perplexity(seq2seq, [(features, labels)], pad_id=0)  # a translation model
>>> perplexity(bert, [(features, ids, weights)], logits_key="mlm_logits")  # masked LM
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras


def perplexity(
    model: tf_keras.Model,
    data: Iterable[tuple[Any, ...]],
    *,
    pad_id: int | None = None,
    logits_key: str | None = None,
) -> float:
    """exp of the mean cross entropy over every counted target token of `data`.

    Logits are cast to float32; each batch's sums are taken in one traced call
    and added up on the host, so the mean is over tokens, not over batches.

    Args:
      model: A tf_keras model: `model(inputs, training=False)` -> logits
        `[..., V]` (or a dict of outputs holding them under `logits_key`).
      data: Batches `(inputs, targets)` or `(inputs, targets, weights)`:
        integer targets of the logits' leading shape and optional per-token
        weights of the same shape (0: not counted).
      pad_id: Targets equal to it are not counted (a translation's padding).
      logits_key: The key of the logits when the model returns a dict.

    Returns:
      The perplexity (1.0 when no token counts).
    """

    @tf.function(reduce_retracing=True, autograph=False)
    def totals(inputs, targets, weights):
        outputs = model(inputs, training=False)
        logits = outputs if logits_key is None else outputs[logits_key]
        loss = tf_keras.losses.sparse_categorical_crossentropy(
            targets, tf.cast(logits, tf.float32), from_logits=True
        )
        weights = tf.ones_like(loss) if weights is None else tf.cast(weights, tf.float32)
        if pad_id is not None:
            weights = weights * tf.cast(tf.not_equal(targets, pad_id), tf.float32)
        return tf.reduce_sum(loss * weights), tf.reduce_sum(weights)

    loss, tokens = 0.0, 0.0
    for inputs, targets, *weights in data:
        batch_loss, batch_tokens = totals(inputs, targets, weights[0] if weights else None)
        loss, tokens = loss + float(batch_loss), tokens + float(batch_tokens)
    return float(np.exp(loss / max(tokens, 1.0)))


__all__ = ["perplexity"]
