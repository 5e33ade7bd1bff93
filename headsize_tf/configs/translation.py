"""Translation configs (`headsize_seq2seq/translation`): the model and data fields.

The task (pipeline, loss, metrics) is `headsize_tf.tasks.translation`.
"""

from __future__ import annotations

import dataclasses
import json

from official.core import config_definitions as cfg
from official.modeling import hyperparams

from headsize_tf import params
from headsize_tf.configs.encoders import (
    AttentionConfig,
    check_positive,
    model_spec,
    spec_from_config,
)
from headsize_tf.modeling.seq2seq import HeadsizeSeq2Seq

PAD, BOS, EOS = "[PAD]", "[CLS]", "[SEP]"


@dataclasses.dataclass
class Seq2SeqConfig(hyperparams.Config):
    """Shape of a `HeadsizeSeq2Seq` (see its docstring); defaults: transformer-base."""

    vocab_size: int = 32000
    hidden_size: int = 512
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    attention: AttentionConfig = dataclasses.field(
        default_factory=lambda: AttentionConfig(num_heads=8)
    )
    # The decoder's own spec (self- and encoder-decoder attention), e.g. grouped or
    # latent heads written by `headsize-tf convert`; None: the decoder uses `attention`.
    decoder_attention: AttentionConfig | None = None
    intermediate_size: int | None = 2048
    max_sequence_length: int = 128
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    initializer_range: float = 0.02
    # Heads removed by `headsize-tf prune --model-dir` (JSON of HeadsizeSeq2Seq's
    # `pruned_heads`: {"encoder": [{"self_attention": [...]}, ...], "decoder":
    # [{"self_attention": [...], "cross_attention": [...]}, ...]}); "" = none.
    pruned_heads: str = ""


@dataclasses.dataclass
class TranslationDataConfig(cfg.DataConfig):
    """Sentence pairs: TFDS `tfds_name` with `src_lang` / `tgt_lang` text features, or
    (`tfds_name: ""`) the `input_path` text files of source<TAB>target lines."""

    tfds_name: str = "wmt14_translate/de-en"
    src_lang: str = "en"
    tgt_lang: str = "de"
    vocab_file: str = ""
    lower_case: bool = True
    max_seq_length: int = 64
    global_batch_size: int = 64
    is_training: bool = True


@dataclasses.dataclass
class TranslationConfig(cfg.TaskConfig):
    model: Seq2SeqConfig = dataclasses.field(default_factory=Seq2SeqConfig)
    train_data: TranslationDataConfig = dataclasses.field(default_factory=TranslationDataConfig)
    validation_data: TranslationDataConfig = dataclasses.field(
        default_factory=lambda: TranslationDataConfig(is_training=False, drop_remainder=False)
    )
    label_smoothing: float = 0.1


def validate(config: Seq2SeqConfig) -> None:
    """Raises a ValueError naming the bad field and what was expected."""
    check_positive(
        config,
        (
            "vocab_size",
            "hidden_size",
            "num_encoder_layers",
            "num_decoder_layers",
            "intermediate_size",
            "max_sequence_length",
        ),
        optional=("intermediate_size",),
    )
    model_spec(config, config.num_encoder_layers, config.max_sequence_length)
    decoder = config
    if config.decoder_attention is not None:
        decoder = dataclasses.replace(config, attention=config.decoder_attention)
    try:
        model_spec(decoder, config.num_decoder_layers, config.max_sequence_length)
    except ValueError as err:
        if config.decoder_attention is None:
            raise
        raise ValueError(f"decoder_attention: {err}") from None


def build_seq2seq(config: Seq2SeqConfig) -> HeadsizeSeq2Seq:
    validate(config)
    fields = config.as_dict()
    pruned = fields.pop("pruned_heads", "")
    if pruned:
        try:
            fields["pruned_heads"] = json.loads(pruned)
        except json.JSONDecodeError as err:
            raise ValueError(f"task.model.pruned_heads is not JSON ({err}): {pruned!r}") from None
    return HeadsizeSeq2Seq(**fields)


def to_spec(config: Seq2SeqConfig) -> params.EncoderSpec:
    """The encoder's shape (its attention layers' sizes), for parameter counts."""
    return spec_from_config(config, config.max_sequence_length, config.num_encoder_layers)
