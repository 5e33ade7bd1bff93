"""The encoder config (`EncoderConfig(type="any", any=HeadsizeEncoderConfig())`)."""

from __future__ import annotations

import dataclasses

import tf_keras
from official.modeling import hyperparams
from official.modeling.hyperparams import base_config
from official.nlp.configs import encoders

from headsize_tf import params
from headsize_tf.core.spec import AttentionSpec, SpecError, is_positive_int, migrate_legacy_config
from headsize_tf.modeling.bert_encoder import HeadsizeBertEncoder


@dataclasses.dataclass
class AttentionConfig(hyperparams.Config):
    """The attention spec as a Model Garden config (`AttentionSpec`'s fields).

    YAML:

        attention:
          kind: fixed_head        # standard | fixed_head | collaborative | grouped | latent
          num_heads: 8            # or one per layer: [4, 8, 8, 16]
          head_size: 32           # fixed_head: int or sequence_length (per-layer list allowed)
          value_dim: null         # optional per-head value size
          shared_key_dim: null    # collaborative: shared query/key size D
          mixing_initializer: uniform
          num_kv_heads: null      # grouped: key/value heads G (per-layer list allowed)
          kv_latent_dim: null     # latent: shared key/value latent size r (per layer too)

    Attributes: as `headsize_tf.core.AttentionSpec`.
    """

    kind: str = "standard"
    num_heads: int | list[int] = 12
    head_size: int | str | list | None = None
    value_dim: int | None = None
    shared_key_dim: int | None = None
    mixing_initializer: str = "uniform"
    num_kv_heads: int | list[int] | None = None
    kv_latent_dim: int | list[int] | None = None

    def to_spec(self) -> AttentionSpec:
        """The validated `AttentionSpec` (raises `SpecError` naming the bad field)."""
        return AttentionSpec.from_dict(self.as_dict())


def attention_config(spec: AttentionSpec | None = None, **fields) -> AttentionConfig:
    """An `AttentionConfig` from a spec or from its fields."""
    if spec is not None:
        fields = dict(spec.to_dict(), **fields)
    return AttentionConfig(**fields)


@dataclasses.dataclass
class HeadsizeEncoderConfig(hyperparams.Config):
    """A BERT-style encoder whose attention is one nested spec.

    Attributes:
      attention: The blocks' `AttentionConfig` (kind, num_heads, head_size,
        value_dim, shared_key_dim, mixing_initializer; per-layer lists of
        num_heads / head_size allowed). "sequence_length" head sizes resolve
        to `max_position_embeddings`.
      hidden_activation: A tf_keras activation name: "gelu" is the exact (erf)
        GELU, as Hugging Face BERT and MiniLM checkpoints use it. Model
        Garden's `BertEncoderConfig` maps "gelu" to its tanh approximation
        (`tf_utils.get_activation`): a stock `bert_v2` config and this one
        with the same weights differ by that approximation (about 1e-3 in
        the outputs).
      Other fields: as Model Garden's `BertEncoderConfig`.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    attention: AttentionConfig = dataclasses.field(default_factory=AttentionConfig)
    hidden_activation: str = "gelu"
    intermediate_size: int = 3072
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    embedding_size: int | None = None
    norm_first: bool = False


def check_positive(
    config, names: tuple[str, ...], where: str = "", optional: tuple[str, ...] = ()
) -> None:
    """Raises a ValueError unless each field in `names` is a positive int (or None, for
    the `optional` ones: a None that means "derived", as an LM's `intermediate_size`)."""
    for name in names:
        value = getattr(config, name)
        if value is None and name in optional:
            continue
        if not is_positive_int(value):
            field = f"{where}.{name}" if where else name
            raise ValueError(f"{field} must be a positive int; got {value!r}.")


def model_spec(config, num_layers: int, sequence_length: int) -> AttentionSpec:
    """The validated spec of a config with an `attention` field, checked at its width.

    One validation for the encoder, LM and seq2seq configs: the spec's own
    rules, the per-layer list lengths, and the head size at `hidden_size`.
    Raises a ValueError naming the bad value and what was expected.
    """
    spec = config.attention.to_spec()
    for i, layer in enumerate(spec.with_sequence_length(sequence_length).layers(num_layers)):
        try:
            layer.resolve(config.hidden_size)
        except SpecError as err:
            raise SpecError(f"layer {i}: {err}" if spec.per_layer_length else str(err)) from None
    return spec


def validate(config: HeadsizeEncoderConfig) -> None:
    """Raises a ValueError naming the bad field and what was expected."""
    check_positive(
        config,
        ("vocab_size", "hidden_size", "num_layers", "intermediate_size", "max_position_embeddings"),
        "encoder",
    )
    model_spec(config, config.num_layers, config.max_position_embeddings)


def build_headsize_encoder(config: HeadsizeEncoderConfig) -> HeadsizeBertEncoder:
    """Builds the encoder of a `HeadsizeEncoderConfig`."""
    validate(config)
    return HeadsizeBertEncoder(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_layers=config.num_layers,
        attention=config.attention.to_spec(),
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


def spec_from_config(
    config, max_sequence_length: int, num_layers: int | None = None, **extra
) -> params.EncoderSpec:
    """`params.EncoderSpec` from the shape fields shared by encoder and LM configs."""
    return params.EncoderSpec(
        vocab_size=config.vocab_size,
        width=config.hidden_size,
        num_layers=num_layers or config.num_layers,
        attention=config.attention.to_spec(),
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
    config = migrate_legacy_config(config)
    spec = AttentionSpec.coerce(config["attention"])
    if config.get("pruned_heads"):
        spec = pruned_spec(spec, config["pruned_heads"], config["hidden_size"])
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
        "attention": spec.to_dict(),
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


def pruned_spec(spec: AttentionSpec, pruned_heads, width: int) -> AttentionSpec:
    """The per-layer spec of an encoder after pruning: kept heads, unchanged head sizes.

    A pruned model is an ordinary config: standard heads become fixed-head
    layers of their original size width // heads, and each layer lists its
    remaining head count. A layer with every head pruned keeps one head
    (gated off in the model; as a plain config it is a live head).
    """
    layers = spec.layers(len(pruned_heads))
    heads, sizes = [], []
    for layer, pruned in zip(layers, pruned_heads, strict=True):
        resolved = layer.resolve(width)
        heads.append(max(resolved.num_heads - len(pruned), 1))
        sizes.append(resolved.head_size)
    kind = "fixed_head" if spec.kind == "standard" else spec.kind
    return dataclasses.replace(spec, kind=kind, num_heads=heads, head_size=sizes)
