"""Restoring a `HeadsizeBertEncoder` from a checkpoint whose attention shapes may differ.

A stock `BertEncoderV2` checkpoint restores into `HeadsizeBertEncoder`
wherever the attention variables have the stock shapes (standard attention;
fixed heads of the stock size). Where they cannot (fixed heads of another
size, collaborative heads, another head count, pruned heads), this module

* finds every attention layer whose variables differ from the checkpoint's
  (`attention_mismatches`), comparing the checkpoint's object graph and
  variable shapes with the model's attention variables;
* raises one `ValueError` naming all of them, with what the checkpoint holds
  against what the model expects (`check_attention_checkpoint`; the encoder
  runs the same check whenever a checkpoint restores into it, so Model
  Garden's `task.initialize` reports it instead of TensorFlow's shape error
  for the first variable);
* restores everything else, leaving those attention layers at their
  initialisation (`restore_encoder(..., skip_mismatched_attention=True)`).

The encoder is duck-typed (`transformer_layers`, `build_weights`, `name`) so
that `bert_encoder` can import this module.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_LAYERS = "_transformer_layers"
_ATTENTION = "_attention_layer"
_GATES = "head_gate_values"
_ENCODER_CHILDREN = {_LAYERS, "_embedding_layer"}  # What marks a BertEncoderV2 node.

Shape = list[int]
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AttentionMismatch:
    """One attention layer whose variables differ from a checkpoint's.

    Attributes:
      layer: The model's layer name, e.g. "transformer/layer_0/self_attention".
      index: The block index.
      checkpoint_object: The layer's object path in the checkpoint, e.g.
        "encoder/_transformer_layers/0/_attention_layer".
      checkpoint: The checkpoint's variables of that layer (path below the
        layer -> shape); empty if the checkpoint has no such layer.
      model: The model's attention variables (path -> shape).
    """

    layer: str
    index: int
    checkpoint_object: str
    checkpoint: Mapping[str, Shape]
    model: Mapping[str, Shape]

    def differences(self) -> list[str]:
        """One line per variable that differs: its path, checkpoint shape, model shape."""
        lines = []
        for path in sorted(set(self.checkpoint) | set(self.model)):
            ours, theirs = self.model.get(path), self.checkpoint.get(path)
            if ours == theirs:
                continue
            held = "none" if theirs is None else str(theirs)
            wanted = "none" if ours is None else str(ours)
            lines.append(f"{path}: checkpoint {held}, model {wanted}")
        return lines


# The SavedModel object graph's lists of a layer's weights by position.
_LISTS = frozenset({"variables", "trainable_variables", "non_trainable_variables", "keras_api"})


class _CheckpointGraph:
    """A checkpoint's object graph and variable shapes."""

    def __init__(self, path: str):
        reader = tf.train.load_checkpoint(path)
        self.shapes: dict[str, Shape] = {
            k: list(v) for k, v in reader.get_variable_to_shape_map().items()
        }
        self.graph = trackable_object_graph_pb2.TrackableObjectGraph()
        self.graph.ParseFromString(reader.get_tensor(_GRAPH_KEY))

    def child(self, node: int | None, name: str) -> int | None:
        """The node id of `node`'s child `name`, or None."""
        if node is None:
            return None
        for ref in self.graph.nodes[node].children:
            if ref.local_name == name:
                return ref.node_id
        return None

    def find(self, path: str) -> int | None:
        """The node at a "/"-separated path of child names from the root."""
        node: int | None = 0
        for name in path.split("/"):
            node = self.child(node, name)
        return node

    def encoder_nodes(self) -> dict[int, str]:
        """Nodes shaped like a `BertEncoderV2` (-> their shortest path from the root)."""
        paths = {0: ""}
        queue = collections.deque([0])
        found = {}
        while queue:
            node = queue.popleft()
            names = {ref.local_name for ref in self.graph.nodes[node].children}
            if _ENCODER_CHILDREN <= names:
                found[node] = paths[node]
            for ref in self.graph.nodes[node].children:
                if ref.node_id not in paths:
                    paths[ref.node_id] = f"{paths[node]}/{ref.local_name}".lstrip("/")
                    queue.append(ref.node_id)
        return found

    def variables(self, node: int | None) -> dict[str, Shape]:
        """Variables below `node` (first path of each, breadth first) -> shapes.

        A SavedModel's graph also lists each layer's weights by position
        (`variables/0`, `trainable_variables/1`, ...): those lists are walked
        last, so a weight is named by its attribute path (`_query_dense/kernel`),
        as in a checkpoint written by `tf.train.Checkpoint`.
        """
        if node is None:
            return {}
        out: dict[str, Shape] = {}
        seen = {node}
        queue = collections.deque([(node, "")])
        while queue:
            current, prefix = queue.popleft()
            for attribute in self.graph.nodes[current].attributes:
                if attribute.name == "VARIABLE_VALUE" and prefix:
                    out[prefix] = self.shapes.get(attribute.checkpoint_key, [])
            children = sorted(
                self.graph.nodes[current].children, key=lambda ref: ref.local_name in _LISTS
            )
            for ref in children:
                if ref.node_id not in seen:
                    seen.add(ref.node_id)
                    queue.append((ref.node_id, f"{prefix}/{ref.local_name}".lstrip("/")))
        return out


def _layer_variables(layer: Any) -> dict[str, Shape]:
    """A built attention layer's weights (checkpoint path below the layer -> shape)."""
    weights = {id(w) for w in layer.weights}
    out: dict[str, Shape] = {}
    seen = {id(layer)}
    queue = collections.deque([(layer, "")])
    while queue:
        current, prefix = queue.popleft()
        view = tf.train.TrackableView(current)
        children = sorted(view.children(current).items(), key=lambda item: item[0] in _LISTS)
        for name, child in children:  # Attribute paths before positional lists, as below.
            if id(child) in seen:
                continue
            seen.add(id(child))
            path = f"{prefix}/{name}".lstrip("/")
            if isinstance(child, tf.Variable):
                if id(child) in weights:
                    out[path] = child.shape.as_list()
            else:
                queue.append((child, path))
    return out


def _built_attention_layers(encoder: Any) -> list[tuple[str, Any]]:
    """(name, attention layer) per block; unbuilt encoders are measured on built copies."""
    blocks = list(encoder.transformer_layers)
    attention = [getattr(block, _ATTENTION, None) for block in blocks]
    if all(layer is not None and layer.built for layer in attention):
        return [(f"{b.name}/{a.name}", a) for b, a in zip(blocks, attention, strict=True)]
    width = int(encoder.get_config()["hidden_size"])
    layers = []
    for block in blocks:  # Throwaway copies: the encoder itself stays unbuilt.
        copy = type(block).from_config(block.get_config())
        copy(tf.zeros([1, 1, width]))
        layers.append((f"{block.name}/{copy.attention_layer.name}", copy.attention_layer))
    return layers


def _mismatches(
    encoder: Any, graph: _CheckpointGraph, node: int, where: str
) -> list[AttentionMismatch]:
    """Compares each block's attention with the checkpoint's below encoder `node`."""
    layers_node = graph.child(node, _LAYERS)
    found = []
    for index, (name, layer) in enumerate(_built_attention_layers(encoder)):
        attention = graph.child(graph.child(layers_node, str(index)), _ATTENTION)
        theirs = {
            k: v for k, v in graph.variables(attention).items() if "_random_generator" not in k
        }
        ours = _layer_variables(layer)
        gates = getattr(layer, "head_gates", None)
        if _GATES in theirs and gates is not None:  # Gates restore only where a mask was saved.
            ours[_GATES] = gates.shape.as_list()
        if ours != theirs:
            found.append(
                AttentionMismatch(
                    layer=name,
                    index=index,
                    checkpoint_object=f"{where}/{_LAYERS}/{index}/{_ATTENTION}".lstrip("/"),
                    checkpoint=theirs,
                    model=ours,
                )
            )
    return found


def _checkpoint_file(checkpoint: str) -> str:
    """A checkpoint path prefix; a directory gives its latest checkpoint."""
    if tf.io.gfile.isdir(checkpoint):
        latest = tf.train.latest_checkpoint(checkpoint)
        if not latest:
            raise ValueError(f"{checkpoint} holds no TF checkpoint.")
        return latest
    return checkpoint


def attention_mismatches(
    encoder: Any, checkpoint: str, key: str = "encoder"
) -> list[AttentionMismatch]:
    """The attention layers of `encoder` that cannot restore from `checkpoint`.

    Args:
      encoder: A `HeadsizeBertEncoder` (built here if it is not).
      checkpoint: A checkpoint path prefix, or a directory (its latest
        checkpoint is read).
      key: The path of the encoder in the checkpoint's object graph: "encoder"
        for Model Garden's encoder / pretrainer checkpoints
        (`tf.train.Checkpoint(encoder=...)`); "/"-separated for nested ones.

    Returns:
      One `AttentionMismatch` per layer whose attention variables (names or
      shapes) differ from the checkpoint's, in layer order; empty if all agree.

    Raises:
      ValueError: If the checkpoint has no object at `key`.
    """
    encoder.build_weights()
    path = _checkpoint_file(checkpoint)
    graph = _CheckpointGraph(path)
    node = graph.find(key)
    if node is None:
        top = sorted(ref.local_name for ref in graph.graph.nodes[0].children)
        raise ValueError(f"The checkpoint {path} has no object {key!r}; its top level: {top}.")
    return _mismatches(encoder, graph, node, key)


def mismatch_message(encoder: Any, checkpoint: str, mismatches: Sequence[AttentionMismatch]) -> str:
    """The error text naming every mismatching layer and how to restore the rest."""
    total = len(list(encoder.transformer_layers))
    lines = [
        f"The attention of {len(mismatches)} of the {total} layers of {encoder.name!r} cannot "
        f"restore from the checkpoint {checkpoint} (its attention variables differ: another "
        "head count or head size, or another attention kind): "
        + ", ".join(m.layer for m in mismatches)
        + "."
    ]
    for m in mismatches:
        lines.append(f"  {m.layer} (checkpoint object {m.checkpoint_object}):")
        if not m.checkpoint:
            lines.append("    the checkpoint has no attention variables for this layer")
        lines += [f"    {line}" for line in m.differences()]
    lines.append(
        "To restore everything else (embeddings, feed-forward layers, layer norms, pooler) and "
        "leave these attention layers at their initialisation, call "
        "headsize_tf.modeling.restore_encoder(encoder, checkpoint, "
        "skip_mismatched_attention=True) instead of restoring the checkpoint."
    )
    return "\n".join(lines)


def check_attention_checkpoint(encoder: Any, checkpoint: str, key: str = "encoder") -> None:
    """Raises one `ValueError` naming every attention layer that cannot restore.

    Args:
      encoder: A `HeadsizeBertEncoder` (built here if it is not).
      checkpoint: A checkpoint path prefix or directory.
      key: The encoder's path in the checkpoint (see `attention_mismatches`).

    Raises:
      ValueError: If any layer's attention differs from the checkpoint's; the
        message lists every such layer with the checkpoint's and the model's
        variable shapes.
    """
    mismatches = attention_mismatches(encoder, checkpoint, key)
    if mismatches:
        raise ValueError(mismatch_message(encoder, _checkpoint_file(checkpoint), mismatches))


def check_on_restore(encoder: Any, path: str | None) -> None:
    """The check run whenever a checkpoint restores into `encoder`.

    Finds the encoder in the checkpoint by its shape (a node with
    `_transformer_layers` and `_embedding_layer`); with several such nodes it
    takes the one with the encoder's layer count, and skips the check if that
    is ambiguous. Anything unreadable (no object graph, ...) skips it too:
    TensorFlow's own restore then reports what it finds.

    Args:
      encoder: The `HeadsizeBertEncoder` being restored (built or not; an
        unbuilt one is measured on built copies of its blocks).
      path: The checkpoint path TensorFlow is reading (None: no check).

    Raises:
      ValueError: As `check_attention_checkpoint`.
    """
    if not path:
        return
    try:
        graph = _CheckpointGraph(path)
    except (tf.errors.OpError, KeyError, ValueError):
        return
    candidates = graph.encoder_nodes()
    if len(candidates) > 1:
        count = len(list(encoder.transformer_layers))
        candidates = {
            node: where
            for node, where in candidates.items()
            if graph.child(graph.child(node, _LAYERS), str(count - 1)) is not None
            and graph.child(graph.child(node, _LAYERS), str(count)) is None
        }
    if len(candidates) != 1:
        return
    [(node, where)] = candidates.items()
    try:
        mismatches = _mismatches(encoder, graph, node, where)
    except Exception as err:  # A diagnostic must never break a restore TensorFlow can do.
        _LOG.debug("Attention check of %s skipped: %s", encoder.name, err)
        return
    if mismatches:
        raise ValueError(mismatch_message(encoder, path, mismatches))


def _subset(children: Mapping[str, Any]) -> tf.__internal__.tracking.Trackable:
    """A trackable whose checkpoint children are exactly `children`.

    Restoring through it uses TensorFlow's own matching (object graph, deferred
    restores, `assert_existing_objects_matched`) on the objects it names only.
    """
    proxy = tf.__internal__.tracking.Trackable()
    for name, child in children.items():
        proxy._track_trackable(child, name=name)
    return proxy


def restore_encoder(
    encoder: Any,
    checkpoint: str,
    *,
    key: str = "encoder",
    skip_mismatched_attention: bool = False,
) -> list[str]:
    """Restores `encoder` from `checkpoint`, optionally skipping attention that cannot restore.

    Every object of the encoder the checkpoint should hold must be there
    (Model Garden's `expect_partial().assert_existing_objects_matched()`).

    Args:
      encoder: A `HeadsizeBertEncoder` (built here if it is not).
      checkpoint: A checkpoint path prefix or directory (e.g. a stock
        `BertEncoderV2` / `BertPretrainerV2` checkpoint).
      key: The encoder's top-level name in the checkpoint ("encoder" in Model
        Garden's checkpoints).
      skip_mismatched_attention: If True, the attention layers whose variables
        differ from the checkpoint's keep their current (initial) values and
        everything else (embeddings, feed-forward layers, layer norms, the
        other attention layers, pooler) restores; if False, such layers raise.

    Returns:
      The names of the attention layers left at their initialisation (empty
      when everything restored).

    Raises:
      ValueError: If attention layers cannot restore and
        `skip_mismatched_attention` is False (one message naming them all), or
        if the checkpoint has no object at `key`.
      AssertionError: If the checkpoint lacks other parts of the encoder.

    Example:

    >>> skipped = restore_encoder(encoder, "/path/to/bert_ckpt",
    ...                           skip_mismatched_attention=True)
    """
    if "/" in key:
        raise ValueError(f"key must be a top-level checkpoint name; got {key!r}.")
    path = _checkpoint_file(checkpoint)
    mismatches = attention_mismatches(encoder, path, key)
    if mismatches and not skip_mismatched_attention:
        raise ValueError(mismatch_message(encoder, path, mismatches))
    skipped = {m.index for m in mismatches}
    if not skipped:
        root = encoder
    else:
        children = dict(tf.train.TrackableView(encoder).children(encoder))
        blocks = {}
        for index, block in enumerate(encoder.transformer_layers):
            if index in skipped:
                kept = tf.train.TrackableView(block).children(block)
                block = _subset({n: c for n, c in kept.items() if n != _ATTENTION})
            blocks[str(index)] = block
        children[_LAYERS] = _subset(blocks)
        root = _subset(children)
    status = tf.train.Checkpoint(**{key: root}).read(path)
    status.expect_partial().assert_existing_objects_matched()
    names = [m.layer for m in mismatches]
    if names:
        _LOG.warning(
            "Restored %s from %s except the attention of %s (left at initialisation).",
            encoder.name,
            path,
            ", ".join(names),
        )
    return names
