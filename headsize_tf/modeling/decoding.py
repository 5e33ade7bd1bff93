"""Greedy and beam-search decoding for `HeadsizeCausalLM` and `HeadsizeSeq2Seq`.

Pass `source_ids` for an encoder-decoder model; the prompt is then the
decoder's start (e.g. a [BOS] column).

The cached paths keep each layer's own cache entries, whatever their shape
(`headsize_tf.core.kv_cache.cache_entries`: per-head keys and values
`[B, T, h, p]` of any head size, grouped ones `[B, T, G, p]`, a collaborative
layer's shared key `[B, T, D]`, a latent `[B, T, r]`): only the batch axis 0
and the length axis 1 are assumed. The uncached paths rerun the whole prefix
every step and are the reference the cached ones are tested against. Beam
search is Model Garden's
`official.nlp.modeling.ops.beam_search.sequence_beam_search`, given the
model's own cache dict (it expands and reorders every tensor along the batch
axis; Model Garden's own decoder cache would assume `[B, T, h, d / h]`).
`cache_bytes` measures a cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf
from official.nlp.modeling.ops import beam_search


def cache_bytes(cache: Mapping[str, Any], memory: bool = False) -> int:
    """Bytes of a decoding cache's self-attention entries (or its cached memory).

    Args:
      cache: From a model's `init_cache` / `decode_step`.
      memory: Measure the cross-attention projections of the encoder output
        (`cache["memory"]`) instead of the self-attention entries.

    Returns:
      The bytes of every tensor of the chosen part (static shapes).

    Example:

    >>> lm = HeadsizeCausalLM(100, 64, 2, {"kind": "grouped", "num_heads": 4,
    ...                                    "num_kv_heads": 2})
    >>> cache_bytes(lm.init_cache(3, length=10))  # 2 layers x (2 + 2) x 16 x 4 bytes x 30
    15360
    >>> lm.kv_cache_bytes_per_token() * 3 * 10
    15360
    """
    if memory:
        parts = [cache.get("memory", {})]
    else:
        parts = [v for k, v in cache.items() if k.startswith("layer_")]
    tensors = [t for part in parts for t in tf.nest.flatten(part)]
    return int(sum(int(np.prod(t.shape.as_list())) * t.dtype.size for t in tensors))


def _check_prompt(prompt_ids, max_new_tokens: int) -> tf.Tensor:
    prompt_ids = tf.convert_to_tensor(prompt_ids, tf.int32)
    if prompt_ids.shape.rank != 2 or (prompt_ids.shape[1] or 0) < 1:
        raise ValueError(
            f"prompt_ids must be [batch, length >= 1] token ids; got shape {prompt_ids.shape}."
        )
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, int)
        or max_new_tokens < 1
    ):
        raise ValueError(f"max_new_tokens must be a positive int; got {max_new_tokens!r}.")
    return prompt_ids


def _full_logits(model, ids, source_ids):
    if source_ids is None:
        return model(ids)
    return model({"inputs": source_ids, "targets": ids})


def _init_cache(model, ids, source_ids, length: int = 0):
    if source_ids is None:
        return model.init_cache(tf.shape(ids)[0], length)
    return model.init_cache(tf.convert_to_tensor(source_ids, tf.int32), length)


def greedy_decode(
    model, prompt_ids, max_new_tokens: int, use_cache: bool = True, source_ids=None
) -> tf.Tensor:
    """Appends `max_new_tokens` argmax tokens to `prompt_ids` [B, P]; returns [B, P + N]."""
    ids = _check_prompt(prompt_ids, max_new_tokens)
    if not use_cache:
        for _ in range(max_new_tokens):
            logits = _full_logits(model, ids, source_ids)
            next_id = tf.argmax(logits[:, -1], axis=-1, output_type=tf.int32)
            ids = tf.concat([ids, next_id[:, tf.newaxis]], axis=1)
        return ids
    cache = _init_cache(model, ids, source_ids)
    logits, cache = model.decode_step(ids, cache, position=0)
    for step in range(max_new_tokens):
        next_id = tf.argmax(logits[:, -1], axis=-1, output_type=tf.int32)
        ids = tf.concat([ids, next_id[:, tf.newaxis]], axis=1)
        if step + 1 < max_new_tokens:
            logits, cache = model.decode_step(
                next_id[:, tf.newaxis], cache, position=tf.shape(ids)[1] - 1
            )
    return ids


def beam_search_decode(
    model,
    prompt_ids,
    max_new_tokens: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    eos_id: int = -1,
    use_cache: bool = True,
    source_ids=None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search continuing `prompt_ids` [B, P].

    Returns:
      (sequences [B, beam, 1 + max_new_tokens] starting with the last prompt
      token, scores [B, beam]).
    """
    ids = _check_prompt(prompt_ids, max_new_tokens)
    prefix, last = ids[:, :-1], ids[:, -1]
    prefix_length = ids.shape[1] - 1
    vocab_size = model.token_embedding.input_dim
    if use_cache:
        # A fixed-length cache (prefix + new tokens) written at decode_loop_step:
        # beam search gathers every cache tensor, which fails on empty ones.
        cache = _init_cache(model, ids, source_ids, length=prefix_length + max_new_tokens)
        for t in range(prefix_length):
            _, cache = model.decode_step(
                prefix[:, t : t + 1], cache, position=t, decode_loop_step=t
            )

        def symbols_to_logits(step_ids, i, cache):
            logits, cache = model.decode_step(
                step_ids[:, -1:],
                cache,
                position=prefix_length + i,
                decode_loop_step=prefix_length + i,
            )
            return logits[:, -1], cache

    else:
        # The prefix rides in the "cache" so beam search expands and reorders it
        # (as float: beam search checks cache dtypes; ids < 2**24 are exact). An
        # empty prefix is stood in for by one ignored column (empty tensors fail).
        cache = {"prefix": tf.cast(prefix if prefix_length else ids[:, :1], tf.float32)}
        if source_ids is not None:
            cache["source"] = tf.cast(source_ids, tf.float32)

        def symbols_to_logits(step_ids, i, cache):
            full = step_ids
            if prefix_length:
                full = tf.concat([tf.cast(cache["prefix"], tf.int32), step_ids], axis=1)
            source = tf.cast(cache["source"], tf.int32) if "source" in cache else None
            return _full_logits(model, full, source)[:, -1], cache

    sequences, scores = beam_search.sequence_beam_search(
        symbols_to_logits_fn=symbols_to_logits,
        initial_ids=last,
        initial_cache=cache,
        vocab_size=vocab_size,
        beam_size=beam_size,
        alpha=alpha,
        max_decode_length=max_new_tokens,
        eos_id=eos_id,
        padded_decode=False,
    )
    return sequences, scores


def greedy_decode_loop(
    model, start_ids, max_new_tokens: int, eos_id: int = -1, source_ids=None
) -> tf.Tensor:
    """Greedy decoding as one `tf.while_loop` over a fixed-length cache (for SavedModels).

    Equal to `greedy_decode(model, start_ids, max_new_tokens)` up to and
    including the first `eos_id` of each row; later tokens are 0 and the loop
    stops once every row has ended. (Model Garden's beam search with one beam
    is not greedy: it returns a finished hypothesis over a better unfinished
    one.)

    Args:
      model: A `HeadsizeCausalLM` or `HeadsizeSeq2Seq`.
      start_ids: [B, 1] first token of each row (e.g. [BOS]).
      max_new_tokens: Tokens to generate at most.
      eos_id: End token (-1: none).
      source_ids: Source ids for an encoder-decoder model.

    Returns:
      [B, max_new_tokens] int32 generated ids.
    """
    start = _check_prompt(start_ids, max_new_tokens)
    if start.shape[1] != 1:
        raise ValueError(f"start_ids must be [batch, 1]; got shape {start.shape}.")
    batch = tf.shape(start)[0]
    cache = _init_cache(model, start, source_ids, length=max_new_tokens)
    out = tf.zeros([batch, max_new_tokens], tf.int32)
    done = tf.zeros([batch], tf.bool)

    def body(i, last, out, cache, done):
        logits, cache = model.decode_step(last, cache, position=i, decode_loop_step=i)
        next_id = tf.argmax(logits[:, -1], axis=-1, output_type=tf.int32)
        next_id = tf.where(done, tf.zeros_like(next_id), next_id)
        out = out + next_id[:, tf.newaxis] * tf.one_hot(i, max_new_tokens, dtype=tf.int32)
        return i + 1, next_id[:, tf.newaxis], out, cache, done | tf.equal(next_id, eos_id)

    def cond(i, last, out, cache, done):
        return tf.logical_and(i < max_new_tokens, tf.logical_not(tf.reduce_all(done)))

    _, _, out, _, _ = tf.while_loop(cond, body, (tf.constant(0), start, out, cache, done))
    return out
