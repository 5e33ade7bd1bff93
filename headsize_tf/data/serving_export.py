"""What both fronts' SavedModel exports share: signature inputs, LM outputs, the writer.

The tf_keras `headsize_tf.serving` and the Keras 3 `headsize_tf.keras3.serving`
wrap different models (tf_keras / Model Garden ones, or Keras 3 ones on the
TensorFlow backend) in their own `tf.Module`s; what those modules and their
export have in common is written once here: the input specs of the
signatures, the causal-LM outputs of right-padded token ids, and `export`,
which writes a module in the TF Serving layout `EXPORT_DIR/VERSION/`
atomically. TensorFlow only, no Keras.
"""

from __future__ import annotations

import os
import pathlib

import tensorflow as tf

from headsize_tf.core.io import atomic_directory

TEXT_SPEC = tf.TensorSpec([None], tf.string, name="text")
IDS_SPEC = tf.TensorSpec([None, None], tf.int32, name="input_word_ids")
MASK_SPEC = tf.TensorSpec([None, None], tf.int32, name="input_mask")


def language_model_outputs(lm, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """Log-likelihood of each (right-padded) sequence and the next-token distribution.

    Args:
      lm: A causal LM: int32 ids `[batch, length]` -> logits `[batch, length,
        vocab]` (a tf_keras `HeadsizeCausalLM`, or a Keras 3 `CausalLM` on the
        TensorFlow backend).
      inputs: `input_word_ids` and `input_mask` (1 for tokens), `[batch, length]`.

    Returns:
      `log_likelihood` [batch] (the sum over tokens 2..n of log p(token |
      prefix)), `num_tokens` [batch] and `next_token_probabilities` [batch,
      vocab] after the last token, all float32. A text without tokens (an
      empty one, in any batch, all of it such texts too) has 0, 0 and
      probabilities of 0: no prefix to continue.

    Example:

    >>> outputs = language_model_outputs(lm, tokenizer.tokenize(texts, add_special_tokens=False))
    >>> outputs["log_likelihood"].shape
    TensorShape([2])
    """
    ids = inputs["input_word_ids"]
    mask = tf.cast(inputs["input_mask"], tf.float32)
    # A batch of empty texts has no position at all: one of padding keeps the shapes.
    short = tf.maximum(1 - tf.shape(ids)[1], 0)
    ids = tf.pad(ids, [[0, 0], [0, short]])
    mask = tf.pad(mask, [[0, 0], [0, short]])
    logits = tf.cast(lm(ids, training=False), tf.float32)  # [B, T, V]
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    targets = tf.gather(log_probs[:, :-1], ids[:, 1:], batch_dims=2)  # [B, T - 1]
    num_tokens = tf.reduce_sum(mask, axis=1)
    last = tf.maximum(tf.cast(num_tokens, tf.int32) - 1, 0)
    has_tokens = tf.cast(num_tokens > 0, tf.float32)[:, None]
    return {
        "log_likelihood": tf.reduce_sum(targets * mask[:, 1:], axis=1),
        "num_tokens": num_tokens,
        "next_token_probabilities": tf.nn.softmax(tf.gather(logits, last, batch_dims=1))
        * has_tokens,
    }


def check_export_version(
    export_dir: str | os.PathLike, version: int, overwrite: bool = False
) -> pathlib.Path:
    """`export_dir/version`, after checking `version` and that it may be written.

    Raises:
      ValueError: `version` is not a positive int.
      FileExistsError: the version exists and `overwrite` is False.
    """
    if isinstance(version, bool) or not isinstance(version, int) or version <= 0:
        raise ValueError(f"version must be a positive integer; got {version!r}.")
    final = pathlib.Path(export_dir) / str(version)
    if final.exists() and not overwrite:
        raise FileExistsError(
            f"Export version {final} exists; pass overwrite=True or another version=."
        )
    return final


def export(
    module: tf.Module,
    export_dir: str | os.PathLike,
    version: int = 1,
    overwrite: bool = False,
) -> pathlib.Path:
    """Writes `module` as the SavedModel `export_dir/version/` atomically; returns that path.

    The signatures are `module.serving_signatures()` (a dict of name ->
    `tf.function` with an input signature) if the module has that method,
    else `serving_default` = `module.serve_text` and `serve_ids` =
    `module.serve_ids`. The SavedModel is written into a temporary sibling
    directory and renamed into place, so a failed export leaves nothing
    behind and TF Serving never sees a half-written version.

    Args:
      module: The `tf.Module` to save.
      export_dir: The model's base directory (TF Serving's `model_base_path`).
      version: The version directory's name, a positive int.
      overwrite: Replace an existing version.

    Raises:
      ValueError: a bad version. FileExistsError: the version exists.

    Example:

    >>> export(ServingModule(encoder, "embedding"), "/tmp/export", version=2)
    PosixPath('/tmp/export/2')
    """
    final = check_export_version(export_dir, version, overwrite)
    if hasattr(module, "serving_signatures"):
        signatures = module.serving_signatures()
    else:
        signatures = {"serving_default": module.serve_text, "serve_ids": module.serve_ids}
    with atomic_directory(final, overwrite=overwrite) as tmp:
        tf.saved_model.save(module, str(tmp), signatures=signatures)
    return final
