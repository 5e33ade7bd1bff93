"""Shared checkpoint assertions of the model tests (encoder, causal LM, seq2seq).

Each takes factories, so the same contract is checked for every model:

* `assert_unmasked_checkpoint_restores`: a checkpoint written before any
  mask was set restores into a fresh model (built first or not) under
  `assert_consumed()` and Model Garden's
  `expect_partial().assert_existing_objects_matched()`, and the fresh model
  computes the same outputs;
* `assert_masked_checkpoint_keeps_its_mask`: a masked model's checkpoint
  restores its masks (built first or not), the other layers stay unmasked, and
  the outputs match.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

Make = Callable[[], Any]
Run = Callable[[Any], Any]
Layers = Callable[[Any], Sequence[Any]]


def _fresh(make: Make, seed: int) -> Any:
    """`make()`, whose weights (created at the first call) come from `seed`.

    Models seeded alike would compute the same outputs with or without a
    restore; each model of these checks draws other initial weights.
    """
    model = make()
    tf_keras.utils.set_random_seed(seed)
    return model


def write(model: Any, directory: str, name: str, key: str = "model") -> str:
    """Writes `tf.train.Checkpoint(key=model)` under `directory`; returns its path."""
    return tf.train.Checkpoint(**{key: model}).write(os.path.join(directory, name))


def assert_unmasked_checkpoint_restores(
    test: tf.test.TestCase, make: Make, run: Run, key: str = "model"
) -> None:
    """A never-masked model's checkpoint restores under both checks, built first or not."""
    original = _fresh(make, 0)
    expected = np.asarray(run(original))
    path = write(original, test.get_temp_dir(), "unmasked", key)
    for seed, (build_first, strict) in enumerate(
        [(True, True), (True, False), (False, True), (False, False)], start=1
    ):
        fresh = _fresh(make, seed)
        if build_first:
            test.assertNotAllClose(run(fresh), expected)  # The restore has work to do.
        status = tf.train.Checkpoint(**{key: fresh}).read(path)
        out = np.asarray(run(fresh))  # Deferred restores happen here if not built.
        if strict:
            status.assert_consumed()
        else:
            status.expect_partial().assert_existing_objects_matched()
        test.assertAllClose(out, expected, atol=1e-6)


def assert_masked_checkpoint_keeps_its_mask(
    test: tf.test.TestCase,
    make: Make,
    run: Run,
    layers: Layers,
    masks: Mapping[int, Sequence[float]],
    key: str = "model",
) -> str:
    """Masks `layers(model)[i]` with `masks[i]`, saves, restores into fresh models.

    Returns the checkpoint's path (for further checks by the caller).
    """
    original = _fresh(make, 0)
    run(original)
    for index, mask in masks.items():
        layers(original)[index].set_head_mask(list(mask))
    expected = np.asarray(run(original))
    path = write(original, test.get_temp_dir(), "masked", key)
    for seed, build_first in enumerate((True, False), start=1):
        fresh = _fresh(make, seed)
        if build_first:
            test.assertNotAllClose(run(fresh), expected)
        status = tf.train.Checkpoint(**{key: fresh}).read(path)
        out = np.asarray(run(fresh))
        status.assert_consumed()
        for index, layer in enumerate(layers(fresh)):
            want = masks.get(index, np.ones(layer.head_gates.shape))
            test.assertAllEqual(layer.head_gates.numpy(), want)
        test.assertAllClose(out, expected, atol=1e-6)
    return path
