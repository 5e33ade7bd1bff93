"""The encoder config (`EncoderConfig(type="any", any=HeadsizeEncoderConfig())`)."""

from __future__ import annotations

import dataclasses

import tf_keras
from official.modeling import hyperparams
from official.modeling.hyperparams import base_config
from official.nlp.configs import encoders

from headsize_tf import params
from headsize_tf.layers.factory import attention_kwargs
from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder


@dataclasses.dataclass
class HeadsizeEncoderConfig(hyperparams.Config):
    """A BERT-style encoder whose attention kind is one config field.

    Attributes:
      attention_type: "standard" (head size = hidden_size / heads),
        "fixed_head" or "collaborative".
      num_attention_heads: Heads per layer.
      head_size: fixed_head: head size (an int, or "sequence_length" for the
        paper's d_p = n with static-length inputs); collaborative: optional
        value head size (default hidden_size / heads). Ignored by standard.
      shared_key_dim: collaborative: the shared query/key size D.
      mixing_initializer: collaborative: "concatenate", "ones", "uniform",
        "normal" or a Keras initializer name.
      Other fields: as Model Garden's `BertEncoderConfig`.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_attention_heads: int = 12
    attention_type: str = "standard"
    head_size: int | str | None = None
    shared_key_dim: int | None = None
    mixing_initializer: str = "uniform"
    hidden_activation: str = "gelu"
    intermediate_size: int = 3072
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    embedding_size: int | None = None
    norm_first: bool = False


def layer_head_size(config) -> int | str | None:
    """The `head_size` the layers get: standard attention ignores the field."""
    return None if config.attention_type == "standard" else config.head_size


def validate_attention_fields(config) -> None:
    """Checks the attention fields shared by the encoder and LM configs.

    `config` has `attention_type`, `hidden_size`, `num_attention_heads`,
    `head_size`, `shared_key_dim` and `mixing_initializer`. Raises a
    ValueError naming the bad value and what was expected.
    """
    attention_kwargs(
        config.attention_type,
        config.num_attention_heads,
        layer_head_size(config),
        config.shared_key_dim,
        config.mixing_initializer,
    )
    if config.attention_type == "standard" and config.hidden_size % config.num_attention_heads:
        raise ValueError(
            f"standard attention needs hidden_size ({config.hidden_size}) to be a multiple of "
            f"num_attention_heads ({config.num_attention_heads}); use attention_type "
            "'fixed_head' for a head size independent of the width."
        )


def validate(config: HeadsizeEncoderConfig) -> None:
    """Raises a ValueError naming the bad field and what was expected."""
    validate_attention_fields(config)
    for name in ("vocab_size", "hidden_size", "num_layers", "intermediate_size"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"encoder.{name} must be a positive int; got {value!r}.")


def build_headsize_encoder(config: HeadsizeEncoderConfig) -> HeadsizeBertEncoder:
    """Builds the encoder of a `HeadsizeEncoderConfig`."""
    validate(config)
    return HeadsizeBertEncoder(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_layers=config.num_layers,
        num_attention_heads=config.num_attention_heads,
        attention_type=config.attention_type,
        head_size=layer_head_size(config),
        shared_key_dim=config.shared_key_dim,
        mixing_initializer=config.mixing_initializer,
        inner_activation=config.hidden_activation,
        inner_dim=config.intermediate_size,
        output_dropout=config.dropout_rate,
        attention_dropout=config.attention_dropout_rate,
        max_sequence_length=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range),
        embedding_width=config.embedding_size,
        norm_first=config.norm_first,
    )


if HeadsizeEncoderConfig not in base_config._BOUND:  # Module reloads must not bind twice.
    base_config.bind(HeadsizeEncoderConfig)(build_headsize_encoder)


def encoder_config(**kwargs) -> encoders.EncoderConfig:
    """`EncoderConfig(type="any", any=HeadsizeEncoderConfig(**kwargs))`."""
    return encoders.EncoderConfig(type="any", any=HeadsizeEncoderConfig(**kwargs))


def spec_from_config(config, max_sequence_length: int, **extra) -> params.EncoderSpec:
    """`params.EncoderSpec` from the shape fields shared by encoder and LM configs."""
    return params.EncoderSpec(
        vocab_size=config.vocab_size,
        width=config.hidden_size,
        num_layers=config.num_layers,
        num_heads=config.num_attention_heads,
        attention_type=config.attention_type,
        head_size=layer_head_size(config),
        shared_key_dim=config.shared_key_dim,
        intermediate_size=config.intermediate_size,
        max_sequence_length=max_sequence_length,
        **extra,
    )


def to_spec(config: HeadsizeEncoderConfig) -> params.EncoderSpec:
    """The `params.EncoderSpec` of a config, for parameter counts."""
    return spec_from_config(
        config,
        config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        embedding_width=config.embedding_size,
    )


def fields_from_encoder_config(config: dict) -> dict:
    """`HeadsizeEncoderConfig` fields of a `HeadsizeBertEncoder.get_config()` dict.

    Used to write the YAML with which `headsize-tf train` rebuilds (and
    initialises from a checkpoint) an encoder made outside an experiment.
    """
    if config.get("pruned_heads"):
        raise ValueError(
            "A pruned encoder (pruned_heads set) has no HeadsizeEncoderConfig form; load it with "
            "headsize_tf.pretrained.load_sentence_encoder instead."
        )
    activation = config.get("inner_activation", "gelu")
    if not isinstance(activation, str):
        raise ValueError(
            f"The encoder's inner_activation {activation!r} has no config name; only named "
            "activations ('gelu', 'relu', ...) can be written to an experiment config."
        )
    if config.get("embedding_width") not in (None, config["hidden_size"]):
        embedding_size = int(config["embedding_width"])
    else:
        embedding_size = None
    fields = {
        "vocab_size": int(config["vocab_size"]),
        "hidden_size": int(config["hidden_size"]),
        "num_layers": int(config["num_layers"]),
        "num_attention_heads": int(config["num_attention_heads"]),
        "attention_type": config.get("attention_type", "standard"),
        "head_size": config.get("head_size"),
        "shared_key_dim": config.get("shared_key_dim"),
        "mixing_initializer": config.get("mixing_initializer", "uniform"),
        "hidden_activation": activation,
        "intermediate_size": int(config["inner_dim"]),
        "dropout_rate": float(config["output_dropout"]),
        "attention_dropout_rate": float(config["attention_dropout"]),
        "max_position_embeddings": int(config["max_sequence_length"]),
        "type_vocab_size": int(config["type_vocab_size"]),
        "embedding_size": embedding_size,
        "norm_first": bool(config.get("norm_first", False)),
    }
    validate(HeadsizeEncoderConfig(**fields))
    return fields
