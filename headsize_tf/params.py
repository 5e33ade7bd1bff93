"""Parameter counts of the attention layers and encoders, and parameter matching.

The formulas mirror the weights the layers create, so they agree with
`count_params()` (tested over grids of shapes):

* standard / fixed head (width d, heads h, head size p, biases on):
  Q, K, V: 3 (d h p + h p); output: h p d + d; gates: h (non-trainable).
* collaborative (shared key dim D): W_Q, W_K: 2 d D; mixing: h D; content
  bias: d h; V: d h p + h p; output: h p d + d; gates: h.

"Matching the number of parameters" (Bhojanapalli et al., 2020, Sec. 5) picks
the head count of a candidate model whose trainable parameters come closest
to a baseline's: `match_num_heads`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

ATTENTION_TYPES = ("standard", "fixed_head", "collaborative")


@dataclasses.dataclass(frozen=True)
class ParamCount:
    """Trainable and non-trainable parameter counts."""

    trainable: int
    non_trainable: int = 0

    @property
    def total(self) -> int:
        return self.trainable + self.non_trainable

    def __add__(self, other: ParamCount) -> ParamCount:
        return ParamCount(
            self.trainable + other.trainable, self.non_trainable + other.non_trainable
        )

    def __mul__(self, k: int) -> ParamCount:
        return ParamCount(self.trainable * k, self.non_trainable * k)


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive int; got {value!r}.")
    return value


def resolve_head_size(
    attention_type: str,
    width: int,
    num_heads: int,
    head_size: int | str | None = None,
    sequence_length: int | None = None,
) -> int:
    """The per-head size a layer of this kind would use."""
    if attention_type not in ATTENTION_TYPES:
        raise ValueError(
            f"Unknown attention_type {attention_type!r}; expected one of {list(ATTENTION_TYPES)}."
        )
    _positive("width", width)
    _positive("num_heads", num_heads)
    if attention_type == "standard" or (attention_type == "collaborative" and head_size is None):
        if width % num_heads:
            raise ValueError(
                f"width ({width}) is not a multiple of num_heads ({num_heads}); "
                f"{attention_type} attention uses head size = width // num_heads."
            )
        return width // num_heads
    if head_size == "sequence_length":
        if sequence_length is None:
            raise ValueError(
                'head_size="sequence_length" needs `sequence_length` to count parameters.'
            )
        return _positive("sequence_length", sequence_length)
    if head_size is None:
        raise ValueError(f"{attention_type} attention needs `head_size`; got None.")
    return _positive("head_size", head_size)


def attention_params(
    attention_type: str,
    width: int,
    num_heads: int,
    head_size: int | str | None = None,
    shared_key_dim: int | None = None,
    use_bias: bool = True,
    key_width: int | None = None,
    value_width: int | None = None,
    output_width: int | None = None,
    sequence_length: int | None = None,
) -> ParamCount:
    """Parameters of one attention layer of `headsize_tf.layers`.

    Args:
      attention_type: "standard", "fixed_head" or "collaborative".
      width: Query width `d`.
      num_heads: Number of heads `h`.
      head_size: Per-head size (fixed_head; optional for collaborative).
      shared_key_dim: Shared query/key size `D` (collaborative only).
      use_bias: Whether the layer has biases.
      key_width: Key input width (defaults to `value_width`, then `width`).
      value_width: Value input width (defaults to `width`).
      output_width: Output width (defaults to `width`).
      sequence_length: Resolves head_size="sequence_length".

    Returns:
      A `ParamCount`; its `non_trainable` part is the `h` head gates.
    """
    p = resolve_head_size(attention_type, width, num_heads, head_size, sequence_length)
    h = num_heads
    vw = value_width or width
    kw = key_width or vw
    ow = output_width or width
    b = 1 if use_bias else 0
    value = vw * h * p + b * h * p
    output = h * p * ow + b * ow
    if attention_type == "collaborative":
        d_shared = _positive("shared_key_dim", shared_key_dim)
        qk = width * d_shared + kw * d_shared + h * d_shared + b * kw * h
    else:
        qk = width * h * p + kw * h * p + 2 * b * h * p
    return ParamCount(trainable=qk + value + output, non_trainable=h)


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
    """Shape of a BERT-style encoder (`headsize_tf.modeling`), for counting.

    Layout (as Model Garden's `BertEncoderV2`): word, position and type
    embeddings of size `embedding_width` (defaults to `width`) with a
    LayerNorm, an optional projection to `width`, `num_layers` post-LN
    Transformer blocks (attention, LayerNorm, FFN of `intermediate_size`,
    LayerNorm) and a `width x width` pooler.
    """

    vocab_size: int
    width: int
    num_layers: int
    num_heads: int
    attention_type: str = "standard"
    head_size: int | str | None = None
    shared_key_dim: int | None = None
    intermediate_size: int | None = None
    max_sequence_length: int = 512
    type_vocab_size: int = 2
    embedding_width: int | None = None
    use_pooler: bool = True

    def attention(self) -> ParamCount:
        return attention_params(
            self.attention_type,
            self.width,
            self.num_heads,
            head_size=self.head_size,
            shared_key_dim=self.shared_key_dim,
            sequence_length=self.max_sequence_length,
        )


def embedding_params(spec: EncoderSpec) -> ParamCount:
    e = spec.embedding_width or spec.width
    count = (spec.vocab_size + spec.max_sequence_length + spec.type_vocab_size) * e + 2 * e
    if e != spec.width:
        count += e * spec.width + spec.width
    return ParamCount(count)


def transformer_block_params(spec: EncoderSpec) -> ParamCount:
    d = spec.width
    f = spec.intermediate_size or 4 * d
    ffn = d * f + f + f * d + d
    layer_norms = 2 * (2 * d)
    return spec.attention() + ParamCount(ffn + layer_norms)


def encoder_params(spec: EncoderSpec) -> ParamCount:
    """Parameters of a whole BERT-style encoder."""
    _positive("num_layers", spec.num_layers)
    pooler = spec.width * spec.width + spec.width if spec.use_pooler else 0
    return (
        embedding_params(spec)
        + transformer_block_params(spec) * spec.num_layers
        + ParamCount(pooler)
    )


def causal_lm_params(spec: EncoderSpec) -> ParamCount:
    """Parameters of a `HeadsizeCausalLM` with the shape fields of `spec`.

    Token and position embeddings (the output layer is tied to the token
    embedding), `num_layers` pre-LN blocks (attention, two LayerNorms, FFN) and
    a final LayerNorm; `type_vocab_size`, `embedding_width` and `use_pooler`
    are ignored.
    """
    _positive("num_layers", spec.num_layers)
    d = spec.width
    embeddings = ParamCount((spec.vocab_size + spec.max_sequence_length) * d)
    return embeddings + transformer_block_params(spec) * spec.num_layers + ParamCount(2 * d)


def match_num_heads(
    target: int,
    count: Callable[[int], int],
    candidates: Iterable[int] = range(1, 1025),
) -> int:
    """The head count whose parameter count is closest to `target`.

    Args:
      target: The parameter count to match (e.g. a baseline's trainable
        parameters).
      count: Maps a head count to a parameter count; raising ValueError marks
        a head count as invalid (e.g. width not divisible).
      candidates: Head counts to consider.

    Returns:
      The valid candidate minimising |count(h) - target| (ties: fewer heads).
    """
    _positive("target", target)
    best: tuple[int, int] | None = None
    for h in candidates:
        try:
            c = count(h)
        except ValueError:
            continue
        key = (abs(c - target), h)
        if best is None or key < best:
            best = key
    if best is None:
        raise ValueError("No valid head count among the candidates.")
    return best[1]


def match_encoder_heads(
    baseline: EncoderSpec,
    candidate: EncoderSpec,
    candidates: Iterable[int] = range(1, 1025),
) -> int:
    """Head count of `candidate` matching `baseline`'s trainable parameters.

    Example: the fixed-head (head size 32) model of width 256 matching a
    standard baseline of width 512 (Bhojanapalli et al., Table 1).
    """
    target = encoder_params(baseline).trainable
    return match_num_heads(
        target,
        lambda h: encoder_params(dataclasses.replace(candidate, num_heads=h)).trainable,
        candidates,
    )
