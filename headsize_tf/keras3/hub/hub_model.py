"""A keras-hub model imported into the library's Keras 3 models, with its head and preprocessor."""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from headsize_tf.core.io import atomic_directory, check_output_free
from headsize_tf.core.spec import AttentionSpec
from headsize_tf.keras3.hub import layout
from headsize_tf.keras3.hub.architectures import ARCHITECTURES, Architecture
from headsize_tf.keras3.layers.roles import assign_weights, numpy_weights
from headsize_tf.keras3.modeling.activations import get_activation
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone
from headsize_tf.keras3.modeling.causal_lm import CausalLM
from headsize_tf.keras3.modeling.surgery import non_attention_layers
from headsize_tf.keras3.pretrained._keras_hub import require_keras_hub
from headsize_tf.keras3.pruning.remove import head_mask

POOLINGS = ("mean", "cls")


def to_numpy(x: Any) -> np.ndarray:
    """A preprocessor's output (a TensorFlow or backend tensor) as numpy."""
    if hasattr(x, "numpy"):
        return np.asarray(x.numpy())
    return np.asarray(keras.ops.convert_to_numpy(x))


class HubModel:
    """A keras-hub model as the library's Keras 3 model, with its task head and preprocessor.

    `import_hub_model` and `load_hub_preset` make one from keras-hub's
    `BertBackbone` / `BertTextClassifier`, `DistilBertBackbone` /
    `DistilBertTextClassifier` or `GPT2Backbone` / `GPT2CausalLM`: the
    library's `BertBackbone` or `CausalLM` (whose attention every Keras 3
    tool rewrites) holds keras-hub's weights and computes keras-hub's
    outputs; a text classifier's logits layer and keras-hub's own
    preprocessor (tokenizer inside) are kept. `save` writes a keras-hub
    preset directory while keras-hub's blocks can express the model (standard
    attention with the original head count, no head masked), and the
    library's `.keras` layout (`headsize_tf.keras3.hub.layout`) once pruned
    or converted.

    Args:
      architecture: "bert", "distil_bert" or "gpt2" (`ARCHITECTURES`).
      backbone: The library's `BertBackbone` (BERT, DistilBERT) or
        `CausalLM` (GPT-2, with the tokenizer attached for text generation).
      head: A text classifier's logits `Dense` on the pooled output, or None.
      head_dropout: Dropout before `head` (training only).
      preprocessor: keras-hub's preprocessor (with its tokenizer), or None.
      hub_config: `{"backbone": keras-hub backbone config, "task": task
        config (no backbone, no preprocessor) or None}`: what `to_keras_hub`
        rebuilds.
      source: Where the model came from (a preset name or directory).
      pooling: `embed`'s sentence vector: "mean" over the padding mask (as
        keras-hub's `BertTextEmbedder`) or "cls" (the first token).
      normalize: L2-normalise `embed`'s vectors.

    Example:

    >>> hub = load_hub_preset("bert_tiny_en_uncased_sst2")  # or a local preset directory
    >>> hub.predict(["a good movie"]).shape  # the kept classifier head's logits
    (1, 2)
    >>> hub.embed(["a good movie"]).shape
    (1, 128)

    References:
      - keras-hub (https://github.com/keras-team/keras-hub): the models and
        their preset directories.
    """

    def __init__(
        self,
        architecture: str,
        backbone: BertBackbone | CausalLM,
        *,
        head: keras.layers.Dense | None = None,
        head_dropout: float = 0.1,
        preprocessor: Any = None,
        hub_config: dict[str, Any] | None = None,
        source: str = "",
        pooling: str = "mean",
        normalize: bool = True,
    ):
        if architecture not in ARCHITECTURES:
            raise ValueError(
                f"Unknown architecture {architecture!r}; expected one of {sorted(ARCHITECTURES)}."
            )
        self.arch: Architecture = ARCHITECTURES[architecture]
        expected = CausalLM if self.arch.causal_lm else BertBackbone
        if not isinstance(backbone, expected):
            raise TypeError(
                f"A {architecture} HubModel holds a {expected.__name__}; got "
                f"{type(backbone).__name__}."
            )
        if head is not None and self.arch.causal_lm:
            raise ValueError("A causal LM has no classifier head (its logits are tied).")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {list(POOLINGS)}; got {pooling!r}.")
        self.backbone = backbone
        self.head = head
        self.head_dropout = float(head_dropout)
        self.preprocessor = preprocessor
        self.hub_config = dict(hub_config or {})
        self.source = str(source)
        self.pooling = pooling
        self.normalize = bool(normalize)
        self._classifier: tuple[Any, keras.Model] | None = None

    # ------------------------------------------------------------ properties
    @property
    def architecture(self) -> str:
        """ "bert", "distil_bert" or "gpt2"."""
        return self.arch.name

    @property
    def task(self) -> str:
        """ "text_classifier", "causal_lm" or "backbone" (an encoder without a head)."""
        if self.arch.causal_lm:
            return "causal_lm"
        return "text_classifier" if self.head is not None else "backbone"

    @property
    def tokenizer(self) -> Any:
        """keras-hub's tokenizer (the preprocessor's), or None."""
        return getattr(self.preprocessor, "tokenizer", None)

    @property
    def width(self) -> int:
        """Width of the hidden states (and of `embed`'s vectors)."""
        return int(self.backbone.hidden_dim)

    @property
    def num_classes(self) -> int | None:
        """The classifier head's classes, or None."""
        return None if self.head is None else int(self.head.units)

    @property
    def model(self) -> keras.Model:
        """The Keras model to call: the classifier (backbone, dropout, logits), the LM or
        the backbone. A classifier's logits layer is `model.get_layer("logits")`."""
        if self.head is None:
            return self.backbone
        if self._classifier is None or self._classifier[0] is not self.backbone:
            pooled = self.backbone.output["pooled_output"]
            dropped = keras.layers.Dropout(self.head_dropout, name="head_dropout")(pooled)
            classifier = keras.Model(self.backbone.input, self.head(dropped), name="classifier")
            self._classifier = (self.backbone, classifier)
        return self._classifier[1]

    def with_backbone(
        self, backbone: BertBackbone | CausalLM, source: str | None = None
    ) -> HubModel:
        """The same head, preprocessor and settings around another (pruned, converted) backbone."""
        return self._like(backbone=backbone, source=self.source if source is None else source)

    def with_head(
        self, head: keras.layers.Dense | None, head_dropout: float | None = None
    ) -> HubModel:
        """The same backbone and preprocessor with another classifier head (None: none)."""
        dropout = self.head_dropout if head_dropout is None else head_dropout
        return self._like(head=head, head_dropout=dropout)

    def _like(self, **changes: Any) -> HubModel:
        kwargs = {
            "backbone": self.backbone,
            "head": self.head,
            "head_dropout": self.head_dropout,
            "preprocessor": self.preprocessor,
            "hub_config": self.hub_config,
            "source": self.source,
            "pooling": self.pooling,
            "normalize": self.normalize,
        }
        kwargs.update(changes)
        return HubModel(self.architecture, **kwargs)

    # ------------------------------------------------------------- inputs
    def _require_preprocessor(self) -> Any:
        if self.preprocessor is None:
            raise ValueError(
                f"This {self.architecture} model has no keras-hub preprocessor (its preset has no "
                "tokenizer); pass token ids."
            )
        return self.preprocessor

    def tokenize(
        self, texts: Sequence[str], max_seq_length: int | None = None
    ) -> dict[str, np.ndarray]:
        """The backbone's int32 inputs of `texts` through keras-hub's preprocessor.

        An encoder's inputs (`token_ids`, `segment_ids` for BERT,
        `padding_mask`), padded to the preprocessor's sequence length (or
        `max_seq_length`, at most the backbone's `max_sequence_length`).
        """
        if self.arch.causal_lm:
            raise ValueError("tokenize is for encoders; a causal LM uses token_ids().")
        pre = self._require_preprocessor()
        length = max_seq_length or pre.sequence_length
        length = min(int(length), self.backbone.max_sequence_length)
        old = pre.sequence_length
        pre.sequence_length = length
        try:
            outputs = pre(list(texts))
        finally:
            pre.sequence_length = old
        if isinstance(outputs, tuple):
            outputs = outputs[0]
        return {name: to_numpy(outputs[name]).astype("int32") for name in self.backbone.input}

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text by keras-hub's tokenizer (no special tokens, no padding)."""
        tokenizer = self._require_preprocessor().tokenizer
        return [[int(i) for i in to_numpy(tokenizer.tokenize(text)).reshape(-1)] for text in texts]

    # ------------------------------------------------------------- outputs
    def predict(self, texts: Sequence[str], batch_size: int = 32) -> Any:
        """`model`'s outputs of texts: a classifier's logits `[N, classes]`, an encoder's
        outputs dict, or an LM's logits `[N, length, vocabulary]` (padded to the longest)."""
        if self.arch.causal_lm:
            ids = self.token_ids(texts)
            start = getattr(self.tokenizer, "start_token_id", None)
            ids = [([start] if start is not None else []) + row for row in ids]
            length = max(len(row) for row in ids)
            token_ids = np.zeros([len(ids), length], "int32")
            mask = np.zeros([len(ids), length], "int32")
            for i, row in enumerate(ids):
                token_ids[i, : len(row)], mask[i, : len(row)] = row, 1
            return self.model.predict(
                {"token_ids": token_ids, "padding_mask": mask}, batch_size=batch_size, verbose=0
            )
        return self.model.predict(self.tokenize(texts), batch_size=batch_size, verbose=0)

    def embed(
        self, texts: Sequence[str], batch_size: int = 32, progress: bool = False
    ) -> np.ndarray:
        """float32 `[len(texts), width]` sentence vectors (`pooling`, `normalize`).

        Batches are padded to `batch_size` rows (padding rows dropped) and the
        preprocessor's sequence length, so a compiling backend compiles once.
        """
        if self.arch.causal_lm:
            raise ValueError(
                f"embed takes an encoder (BERT, DistilBERT); {self.architecture} is a causal LM."
            )
        texts = list(texts)
        out = np.zeros([len(texts), self.width], np.float32)
        starts = range(0, len(texts), batch_size)
        if progress:
            from tqdm import tqdm

            starts = tqdm(starts, desc="embedding", unit="batch")
        for start in starts:
            inputs = self.tokenize(texts[start : start + batch_size])
            rows = len(next(iter(inputs.values())))
            if rows < batch_size:  # One shape for every batch; extra rows are dropped.
                for name, array in inputs.items():
                    inputs[name] = np.concatenate(
                        [array, np.zeros([batch_size - rows, array.shape[1]], array.dtype)]
                    )
                inputs["padding_mask"][rows:, 0] = 1
            sequence = np.asarray(
                self.backbone.predict_on_batch(inputs)["sequence_output"], np.float64
            )
            mask = inputs["padding_mask"].astype(np.float64)[..., None]
            if self.pooling == "cls":
                pooled = sequence[:, 0]
            else:
                pooled = (sequence * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            if self.normalize:
                pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
            out[start : start + rows] = pooled[:rows]
        return out

    def generate(self, prompt: Any, max_new_tokens: int = 32, **kwargs: Any) -> Any:
        """`CausalLM.generate` (text in, text out through keras-hub's tokenizer)."""
        if not self.arch.causal_lm:
            raise ValueError(
                f"generate takes a causal LM (GPT-2); {self.architecture} is an encoder."
            )
        return self.backbone.generate(prompt, max_new_tokens, **kwargs)

    # ------------------------------------------------------ keras-hub again
    def keras_hub_incompatibility(self) -> str | None:
        """Why keras-hub's blocks cannot express this model (None: they can)."""
        if "backbone" not in self.hub_config:
            return "it has no keras-hub config"
        task = self.hub_config.get("task")
        if not self.arch.causal_lm:
            theirs = None if task is None else task.get("num_classes")
            if self.num_classes != theirs:
                return f"its classifier head has {self.num_classes} classes (keras-hub: {theirs})"
            if self.head is not None and keras.activations.serialize(
                self.head.activation
            ) != keras.activations.serialize(keras.activations.get(task.get("activation"))):
                return "its classifier head's activation differs"
        expected = self.arch.our_config(self.hub_config["backbone"], task)
        for key, value in expected.items():
            mine = getattr(self.backbone, key)
            if key == "attention":
                if AttentionSpec.coerce(value) != mine:
                    return f"its attention is {mine.to_dict()} (keras-hub: {value})"
            elif key == "activation":
                if keras.activations.serialize(get_activation(value)) != (
                    keras.activations.serialize(mine)
                ):
                    return "its activation differs"
            elif mine != value:
                return f"its {key} is {mine!r} (keras-hub: {value!r})"
        mask = head_mask(self.backbone)
        if not np.all(mask[np.isfinite(mask)] == 1.0):
            return "heads are masked (keras-hub has no head gates)"
        return None

    def to_keras_hub(self) -> Any:
        """keras-hub's model (task with head and preprocessor, or backbone) with these weights.

        Raises:
          ValueError: keras-hub's blocks cannot express the model (pruned
            heads, converted attention); save it with `save` instead.
        """
        why = self.keras_hub_incompatibility()
        if why is not None:
            raise ValueError(f"keras-hub cannot express this model: {why}.")
        keras_hub = require_keras_hub()
        hub_backbone = getattr(keras_hub.models, self.arch.backbone_class).from_config(
            dict(self.hub_config["backbone"])
        )
        task = None
        task_config = self.hub_config.get("task")
        if task_config is not None:
            task_class = getattr(keras_hub.models, self.arch.task_class)
            task = task_class.from_config(
                {**task_config, "backbone": hub_backbone, "preprocessor": self.preprocessor}
            )
        mine = non_attention_layers(self.backbone)
        theirs = self.arch.hub_layers(hub_backbone, task)
        for dst, src in zip(theirs, mine, strict=True):
            dst.set_weights(src.get_weights())
        hub_attention = self.arch.hub_attention_layers(hub_backbone)
        for dst, src in zip(hub_attention, self.backbone.attention_layers, strict=True):
            weights = numpy_weights(src)
            weights.pop("head_gates")
            assign_weights(dst, weights)
        if task is not None and self.head is not None:
            task.output_dense.set_weights(self.head.get_weights())
        return task if task is not None else hub_backbone

    # ---------------------------------------------------------------- saving
    def save(self, directory: str | os.PathLike, *, overwrite: bool = False) -> pathlib.Path:
        """Writes `directory` atomically: a keras-hub preset when keras-hub can express the
        model (`keras_hub.models.*.from_preset(directory)` loads it), else the library's
        layout (`headsize_tf.keras3.hub.layout`). `load_hub_preset` opens both."""
        final = pathlib.Path(directory)
        check_output_free(final, overwrite)
        with atomic_directory(final) as tmp:
            self.write_into(tmp)
        return final

    def write_into(self, directory: pathlib.Path) -> str:
        """`save`'s files into an existing empty directory; returns "keras_hub" or "keras"."""
        directory = pathlib.Path(directory)
        if self.keras_hub_incompatibility() is None:
            hub = self.to_keras_hub()
            hub.save_to_preset(str(directory))  # A task saves its preprocessor too.
            if self.preprocessor is not None and self.hub_config.get("task") is None:
                self.preprocessor.save_to_preset(str(directory))
            return "keras_hub"
        self.backbone.save(str(directory / layout.MODEL_FILE))
        if self.head is not None:
            kernel, bias = (to_numpy(w) for w in self.head.weights)
            np.savez(directory / layout.HEAD_FILE, kernel=kernel, bias=bias)
        if self.preprocessor is not None:
            self.preprocessor.save_to_preset(str(directory / layout.PREPROCESSOR_DIR))
        config = {
            "format": layout.FORMAT,
            "architecture": self.architecture,
            "source": self.source,
            "model": layout.MODEL_FILE,
            "head": None
            if self.head is None
            else {
                "num_classes": self.num_classes,
                "activation": keras.activations.serialize(self.head.activation),
                "dropout": self.head_dropout,
            },
            "preprocessor": layout.PREPROCESSOR_DIR if self.preprocessor is not None else None,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "hub_config": self.hub_config,
        }
        (directory / layout.HUB_FILE).write_text(json.dumps(config, indent=2) + "\n")
        return "keras"
