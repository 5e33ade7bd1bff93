"""Replacing a stock sublayer while keeping the stock weight order."""

from __future__ import annotations

from typing import Any

import tf_keras


def replace_sublayer(owner: tf_keras.layers.Layer, name: str, value: Any) -> None:
    """`setattr(owner, name, value)`, with `value` tracked where the old value was.

    tf_keras appends a newly assigned sublayer (or list of sublayers) to the end
    of its owner's tracked layers, so `weights` / `get_weights()` would list the
    replacement after every later sublayer (e.g. a block's attention after its
    feed-forward layers) and a stock model's `get_weights()` would not
    `set_weights()` into ours. Checkpoints are unaffected either way (they match
    by attribute name).
    """
    tracked = owner._self_tracked_trackables
    old = getattr(owner, name)
    _hand_over_pending_restores(old, value)
    index = next((i for i, item in enumerate(tracked) if item is old), None)
    setattr(owner, name, value)
    if index is None:
        return
    new = getattr(owner, name)  # Lists come back wrapped.
    tracked = owner._self_tracked_trackables  # `__delattr__` may have rebuilt the list.
    position = next((i for i, item in enumerate(tracked) if item is new), None)
    if position is not None:
        tracked.insert(index, tracked.pop(position))


def _hand_over_pending_restores(old: Any, new: Any) -> None:
    """Gives `new` the checkpoint restores still waiting on `old`'s sublayers.

    A checkpoint read before the owner was built binds the replaced (unbuilt)
    stock layer, which queues its children's values ("_query_dense", ...)
    until they exist; the replacement has the same children, so it takes the
    queue over and restores them when it builds (`assert_consumed()` holds).
    """
    pending = getattr(old, "_self_unconditional_deferred_dependencies", None)
    if not pending or not hasattr(new, "_maybe_initialize_trackable"):
        return
    new._maybe_initialize_trackable()
    for child, positions in pending.items():
        new._self_unconditional_deferred_dependencies.setdefault(child, []).extend(positions)
    pending.clear()
