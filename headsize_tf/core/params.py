"""Parameter counts of the attention layers and encoders, and parameter matching.

The formulas mirror the weights the layers create, so they agree with
`count_params()` (tested over grids of shapes):

* standard / fixed head (width d, heads h, head size p, value head size
  v = p by default, biases on): Q, K: 2 (d h p + h p); V: d h v + h v;
  output: h v d + d. For v = p: 4 d h p + 3 h p + d (the paper's count).
* collaborative (shared key dim D): W_Q, W_K: 2 d D; mixing: h D; content
  bias: d h; V: d h v + h v; output: h v d + d.
* grouped (G key/value heads): Q: d h p + h p; K: d G p; V: d G v; value
  bias per query head: h v; output: h v d + d. No key bias (it cannot change
  a softmax; see `core.kv_sharing`).
* latent (latent size r): Q: d h p + h p; down-projection: d r; key and value
  up-projections: r h p + r h v; value bias per head: h v; output: h v d + d.

The per-head gates used for pruning are not weights and are not counted.
Pure Python: shared by the tf_keras and Keras 3 fronts.

"Matching the number of parameters" (Bhojanapalli et al., 2020, Sec. 5) picks
the head count of a candidate model whose trainable parameters come closest
to a baseline's: `match_num_heads`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from headsize_tf.core.spec import KINDS, AttentionSpec, SpecError, check_positive_int

ATTENTION_TYPES = KINDS


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
    return check_positive_int(name, value)


def _as_spec(
    spec: AttentionSpec | str,
    num_heads: int | None,
    head_size: int | str | None,
    shared_key_dim: int | None,
    value_dim: int | None,
) -> AttentionSpec:
    if isinstance(spec, AttentionSpec):
        if any(v is not None for v in (num_heads, head_size, shared_key_dim, value_dim)):
            raise SpecError("Give either an AttentionSpec or a kind with its sizes, not both.")
        return spec
    if num_heads is None:
        raise SpecError(f"attention kind {spec!r} needs `num_heads`.")
    return AttentionSpec(
        kind=spec,
        num_heads=num_heads,
        head_size=head_size,
        shared_key_dim=shared_key_dim,
        value_dim=value_dim,
    )


def resolve_head_size(
    spec: AttentionSpec | str,
    width: int,
    num_heads: int | None = None,
    head_size: int | str | None = None,
    sequence_length: int | None = None,
    shared_key_dim: int | None = None,
) -> int:
    """The per-head (key/query) size a layer of this spec would use at `width`."""
    spec = _as_spec(spec, num_heads, head_size, shared_key_dim, None)
    return spec.resolve(width, sequence_length).head_size


def attention_params(
    spec: AttentionSpec | str,
    width: int,
    num_heads: int | None = None,
    head_size: int | str | None = None,
    shared_key_dim: int | None = None,
    use_bias: bool = True,
    key_width: int | None = None,
    value_width: int | None = None,
    output_width: int | None = None,
    sequence_length: int | None = None,
    value_dim: int | None = None,
) -> ParamCount:
    """Parameters of one attention layer of `headsize_tf.layers`.

    Args:
      spec: An `AttentionSpec` (scalar), or a kind ("standard",
        "fixed_head", "collaborative") with `num_heads`, `head_size`,
        `shared_key_dim` and `value_dim` given as arguments (grouped and
        latent layers need a spec: they have more sizes).
      width: Query width `d`.
      num_heads, head_size, shared_key_dim, value_dim: With a kind string.
      use_bias: Whether the layer has biases.
      key_width: Key input width (defaults to `value_width`, then `width`).
      value_width: Value input width (defaults to `width`).
      output_width: Output width (defaults to `width`).
      sequence_length: Resolves head_size="sequence_length".

    Returns:
      A `ParamCount` (all trainable: the head gates are not weights).

    Example:

    >>> attention_params("fixed_head", 64, num_heads=8, head_size=32).trainable
    66368
    """
    spec = _as_spec(spec, num_heads, head_size, shared_key_dim, value_dim)
    resolved = spec.resolve(width, sequence_length)
    p, v, h = resolved.head_size, resolved.value_dim, resolved.num_heads
    vw = value_width or width
    kw = key_width or vw
    ow = output_width or width
    b = 1 if use_bias else 0
    value = vw * h * v + b * h * v
    output = h * v * ow + b * ow
    if spec.kind in ("grouped", "latent"):
        # No key bias; the value bias is per query head, applied after attention.
        query = width * h * p + b * h * p
        head_bias = b * h * v
        if spec.kind == "grouped":
            kv = kw * resolved.num_kv_heads * p + vw * resolved.num_kv_heads * v
        else:
            kv = vw * resolved.kv_latent_dim + resolved.kv_latent_dim * h * (p + v)
        return ParamCount(trainable=query + kv + output + head_bias)
    if spec.kind == "collaborative":
        d_shared = resolved.shared_key_dim
        qk = width * d_shared + kw * d_shared + h * d_shared + b * kw * h
    else:
        qk = width * h * p + kw * h * p + 2 * b * h * p
    return ParamCount(trainable=qk + value + output)


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
    """Shape of a BERT-style encoder (`headsize_tf.modeling`), for counting.

    Layout (as Model Garden's `BertEncoderV2`): word, position and type
    embeddings of size `embedding_width` (defaults to `width`) with a
    LayerNorm, an optional projection to `width`, `num_layers` post-LN
    Transformer blocks (attention, LayerNorm, FFN of `intermediate_size`,
    LayerNorm) and a `width x width` pooler. `attention` may hold per-layer
    head counts and sizes; "sequence_length" resolves to
    `max_sequence_length`.
    """

    vocab_size: int
    width: int
    num_layers: int
    attention: AttentionSpec = dataclasses.field(default_factory=AttentionSpec)
    intermediate_size: int | None = None
    max_sequence_length: int = 512
    type_vocab_size: int = 2
    embedding_width: int | None = None
    use_pooler: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "attention", AttentionSpec.coerce(self.attention))
        _positive("num_layers", self.num_layers)
        self.attention.check_num_layers(self.num_layers)

    def layer_attention(self, index: int) -> ParamCount:
        return attention_params(
            self.attention.for_layer(index), self.width, sequence_length=self.max_sequence_length
        )

    def with_heads(self, num_heads: int) -> EncoderSpec:
        """The same spec with `num_heads` heads in every layer."""
        return dataclasses.replace(
            self, attention=dataclasses.replace(self.attention, num_heads=num_heads)
        )


def embedding_params(spec: EncoderSpec) -> ParamCount:
    e = spec.embedding_width or spec.width
    count = (spec.vocab_size + spec.max_sequence_length + spec.type_vocab_size) * e + 2 * e
    if e != spec.width:
        count += e * spec.width + spec.width
    return ParamCount(count)


def ffn_params(spec: EncoderSpec) -> ParamCount:
    """Feed-forward net and the two LayerNorms of one block."""
    d = spec.width
    f = spec.intermediate_size or 4 * d
    return ParamCount(d * f + f + f * d + d + 2 * (2 * d))


def blocks_params(spec: EncoderSpec) -> ParamCount:
    """All `num_layers` Transformer blocks (per-layer attention included)."""
    total = ParamCount(0)
    for i in range(spec.num_layers):
        total = total + spec.layer_attention(i) + ffn_params(spec)
    return total


def encoder_params(spec: EncoderSpec) -> ParamCount:
    """Parameters of a whole BERT-style encoder."""
    pooler = spec.width * spec.width + spec.width if spec.use_pooler else 0
    return embedding_params(spec) + blocks_params(spec) + ParamCount(pooler)


def causal_lm_params(spec: EncoderSpec) -> ParamCount:
    """Parameters of a `HeadsizeCausalLM` with the shape fields of `spec`.

    Token and position embeddings (the output layer is tied to the token
    embedding), `num_layers` pre-LN blocks (attention, two LayerNorms, FFN) and
    a final LayerNorm; `type_vocab_size`, `embedding_width` and `use_pooler`
    are ignored.
    """
    d = spec.width
    embeddings = ParamCount((spec.vocab_size + spec.max_sequence_length) * d)
    return embeddings + blocks_params(spec) + ParamCount(2 * d)


def lm_trainable_params(
    vocab_size: int,
    width: int,
    num_layers: int,
    attention: AttentionSpec | dict,
    sequence_length: int,
) -> int:
    """Trainable parameters of a causal LM with a feed-forward of 4 x `width` (the
    experiments' LMs, on either front): `causal_lm_params` of that shape."""
    spec = EncoderSpec(
        vocab_size=vocab_size,
        width=width,
        num_layers=num_layers,
        attention=attention,
        intermediate_size=4 * width,
        max_sequence_length=sequence_length,
    )
    return causal_lm_params(spec).trainable


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
        except ValueError:  # SpecError included.
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
        lambda h: encoder_params(candidate.with_heads(h)).trainable,
        candidates,
    )
