"""A `keras_tuner.HyperModel` over attention kind, heads, head size and shared key dim.

Keras Tuner is written for Keras 3, so unlike the tf_keras tuner
(`headsize_tf.tuning`, which overrides `run_trial`) this is the native way:
`build(hp)` returns a compiled Keras 3 model and any tuner's `search` calls
`model.fit`. The space is the shared `headsize_tf.core.search_space.SearchSpace`
(the same YAML as `headsize-tf tune`); the parameter budget is checked with
the core formulas before anything is built, and a configuration over it
fails its trial with `OverBudgetError` (a `keras_tuner.errors.FailedTrialError`:
the tuner records it and goes on).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from headsize_tf.core.extras import require
from headsize_tf.core.params import EncoderSpec, encoder_params
from headsize_tf.core.search_space import SearchSpace
from headsize_tf.core.spec import AttentionSpec, check_positive_int
from headsize_tf.keras3.lm_training import build_optimizer
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone

# Keras Tuner is the `tune` extra: without it, importing this module fails with one line
# naming the extra.
keras_tuner = require("keras_tuner", purpose="the Keras 3 hypermodels, headsize_tf.keras3.tuning")

_DEFAULTS = {"attention_type": "standard", "num_heads": 4, "width": 64, "num_layers": 2}


class OverBudgetError(keras_tuner.errors.FailedTrialError):
    """A trial's configuration has more parameters than the budget."""


class ClassifierHyperModel(keras_tuner.HyperModel):
    """Builds a compiled BERT-style text classifier per trial.

    The model is a `BertBackbone` (inputs `token_ids`, `segment_ids`,
    `padding_mask`) with dropout and a linear head on the pooled output,
    compiled with AdamW and sparse categorical cross-entropy on logits,
    reporting "accuracy".

    Args:
      search_space: A `SearchSpace` (or a dict of it) over `attention_type`,
        `num_heads`, `head_size`, `shared_key_dim`, `width`, `num_layers`.
      vocabulary_size: Token vocabulary size.
      num_classes: Number of labels.
      max_sequence_length: Longest input (and "sequence_length" head size).
      defaults: Values of hyperparameters outside the space (width 64, two
        layers, four standard heads unless given).
      intermediate_ratio: Feed-forward size as a multiple of the width.
      budget_params: Optional largest parameter count of a trial's model.
      learning_rate: AdamW learning rate.
      dropout: Backbone and head dropout.
      name: The hypermodel's name.

    Example:

    >>> space = SearchSpace.from_dict({"attention_type": ["standard", "fixed_head"],
    ...                                "num_heads": [2, 4], "head_size": [16, 32]})
    >>> hypermodel = ClassifierHyperModel(space, vocabulary_size=1000, num_classes=2,
    ...                                   max_sequence_length=64, budget_params=200_000)
    >>> tuner = keras_tuner.RandomSearch(hypermodel, objective="val_accuracy", max_trials=4)
    >>> tuner.search(x, y, validation_data=(x_val, y_val), epochs=2)

    References:
      Bhojanapalli et al., 2020, https://arxiv.org/abs/2002.07028 (head size
      as a capacity knob); Cordonnier et al., 2020,
      https://arxiv.org/abs/2006.16362 (shared key dim).
    """

    def __init__(
        self,
        search_space: SearchSpace | Mapping[str, Any],
        *,
        vocabulary_size: int,
        num_classes: int,
        max_sequence_length: int,
        defaults: Mapping[str, Any] | None = None,
        intermediate_ratio: int = 4,
        budget_params: int | None = None,
        learning_rate: float = 1e-3,
        dropout: float = 0.1,
        name: str = "headsize_classifier",
    ):
        super().__init__(name=name, tunable=True)
        if not isinstance(search_space, SearchSpace):
            search_space = SearchSpace.from_dict(dict(search_space))
        self.space = search_space
        self.vocabulary_size = check_positive_int("vocabulary_size", vocabulary_size)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.max_sequence_length = check_positive_int("max_sequence_length", max_sequence_length)
        self.defaults = {**_DEFAULTS, **dict(defaults or {})}
        self.intermediate_ratio = check_positive_int("intermediate_ratio", intermediate_ratio)
        self.budget_params = (
            None if budget_params is None else check_positive_int("budget_params", budget_params)
        )
        self.learning_rate = float(learning_rate)
        self.dropout = float(dropout)

    def settings(self, hp: keras_tuner.HyperParameters) -> dict[str, Any]:
        """The trial's settings (declares the hyperparameters on `hp`)."""
        return self.space.declare(hp, self.defaults)

    def encoder_spec(self, settings: Mapping[str, Any]) -> EncoderSpec:
        """The shape of the trial's backbone, for the core parameter formulas."""
        attention = AttentionSpec(
            settings["attention_type"],
            num_heads=settings["num_heads"],
            head_size=settings.get("head_size"),
            shared_key_dim=settings.get("shared_key_dim"),
        )
        return EncoderSpec(
            vocab_size=self.vocabulary_size,
            width=settings["width"],
            num_layers=settings["num_layers"],
            attention=attention,
            intermediate_size=self.intermediate_ratio * settings["width"],
            max_sequence_length=self.max_sequence_length,
        )

    def count_params(self, settings: Mapping[str, Any]) -> int:
        """Trainable parameters of the trial's whole classifier (backbone + head)."""
        width = settings["width"]
        head = width * self.num_classes + self.num_classes
        return encoder_params(self.encoder_spec(settings)).trainable + head

    def build(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        settings = self.settings(hp)
        count = self.count_params(settings)
        if self.budget_params is not None and count > self.budget_params:
            raise OverBudgetError(
                f"{count:,} params > budget {self.budget_params:,} for {dict(settings)}."
            )
        spec = self.encoder_spec(settings)
        backbone = BertBackbone(
            vocabulary_size=spec.vocab_size,
            num_layers=spec.num_layers,
            hidden_dim=spec.width,
            intermediate_dim=spec.intermediate_size,
            attention=spec.attention,
            dropout=self.dropout,
            max_sequence_length=spec.max_sequence_length,
        )
        pooled = backbone.output["pooled_output"]
        pooled = keras.layers.Dropout(self.dropout, name="head_dropout")(pooled)
        logits = keras.layers.Dense(self.num_classes, name="logits")(pooled)
        model = keras.Model(backbone.input, logits, name="classifier")
        model.compile(
            optimizer=keras.optimizers.AdamW(self.learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        return model

    def fit(self, hp: keras_tuner.HyperParameters, model: keras.Model, *args, **kwargs) -> Any:
        """`model.fit`, its optimizer built first (`lm_training.build_optimizer`): a
        subclass may still change the trainable weights after `build`."""
        build_optimizer(model)
        return model.fit(*args, **kwargs)
