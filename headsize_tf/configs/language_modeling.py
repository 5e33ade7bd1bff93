"""Causal language modeling task for Model Garden (`headsize_lm/language_modeling`).

Data: TFRecords with an int64 `input_ids` feature of `seq_length + 1` tokens
per example (`headsize-tf data prepare austen` writes `lm_{split}.tfrecord`);
inputs are the first `seq_length` tokens, targets the last `seq_length`.
Metrics: token accuracy and perplexity (exp of the mean token loss).
"""

from __future__ import annotations

import dataclasses

from official.core import config_definitions as cfg
from official.modeling import hyperparams

from headsize_tf import params
from headsize_tf.configs.encoders import (
    AttentionConfig,
    check_positive,
    model_spec,
    spec_from_config,
)
from headsize_tf.modeling.causal_lm import HeadsizeCausalLM


@dataclasses.dataclass
class CausalLMConfig(hyperparams.Config):
    """Shape of a `HeadsizeCausalLM` (see its docstring)."""

    vocab_size: int = 32000
    hidden_size: int = 256
    num_layers: int = 6
    attention: AttentionConfig = dataclasses.field(
        default_factory=lambda: AttentionConfig(num_heads=8)
    )
    intermediate_size: int | None = None
    max_sequence_length: int = 256
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.0
    initializer_range: float = 0.02


@dataclasses.dataclass
class LMDataConfig(cfg.DataConfig):
    """LM data: prepared TFRecords (`input_path`) or raw TFDS text (`tfds_name`).

    With `tfds_name` (e.g. "lm1b", on networked machines) the `text` feature
    is tokenized with tensorflow-text's `BertTokenizer` from `vocab_file` and
    the token stream is cut into windows of `seq_length + 1`.

    `shuffle_buffer_size` is 4096 windows (Model Garden's `DataConfig` has
    100): a prepared file holds its windows in corpus order, and a buffer of
    100 would fill each batch from about 25k consecutive tokens of one book.
    4096 covers the whole Austen training file (2.9k windows); the buffer is
    part of every checkpoint (the trainer saves the input iterator), about
    4 MB at sequence 128.
    """

    input_path: str = ""
    shuffle_buffer_size: int = 4096
    seq_length: int = 128
    global_batch_size: int = 64
    is_training: bool = True
    vocab_file: str = ""
    lower_case: bool = True
    text_feature: str = "text"


@dataclasses.dataclass
class LanguageModelingConfig(cfg.TaskConfig):
    model: CausalLMConfig = dataclasses.field(default_factory=CausalLMConfig)
    train_data: LMDataConfig = dataclasses.field(default_factory=LMDataConfig)
    # Every validation window counts: a last partial batch too (a set smaller than one
    # batch would otherwise give no tokens and a perplexity of 1), as the BERT and
    # translation experiments here validate.
    validation_data: LMDataConfig = dataclasses.field(
        default_factory=lambda: LMDataConfig(is_training=False, drop_remainder=False)
    )


def validate(config: CausalLMConfig) -> None:
    """Raises a ValueError naming the bad field and what was expected."""
    check_positive(
        config,
        ("vocab_size", "hidden_size", "num_layers", "intermediate_size", "max_sequence_length"),
        optional=("intermediate_size",),
    )
    model_spec(config, config.num_layers, config.max_sequence_length)


def build_lm(config: CausalLMConfig) -> HeadsizeCausalLM:
    validate(config)
    return HeadsizeCausalLM(**config.as_dict())


def to_spec(config: CausalLMConfig) -> params.EncoderSpec:
    """The shape of an LM config, for `params.causal_lm_params`."""
    return spec_from_config(config, config.max_sequence_length)
