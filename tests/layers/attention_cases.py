"""Drawn attention-layer cases for the property tests of both fronts (numpy and hypothesis only).

A `Case` is everything one property example needs: the layer kind and its constructor
arguments, the shapes, the inputs, the mask as given to the layer, the head gates and the
dtype policy. `Case.oracle` computes what the layer must return with the numpy equations
of `tests.layers.reference`, on the weights read back from the layer; `check` calls a
layer of either front (or stock MHA) like stock MHA and compares.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes  # numpy's bfloat16, installed with TensorFlow and JAX
import numpy as np
from hypothesis import strategies as st

from tests.layers import reference, util

KINDS = ("standard", "fixed_head", "collaborative")
# The attention mask as given to the layer: none, broadcast over the batch [T, S],
# [B, T, S], per head [B, N, T, S], or [B, 1, T, S].
MASK_FORMS = (None, "query_key", "batch", "per_head", "one_head_axis")
POLICIES = ("float32", "bfloat16", "mixed_float16")
COMPUTE_DTYPES = {
    "float32": np.float32,
    "bfloat16": ml_dtypes.bfloat16,
    "mixed_float16": np.float16,
}

# policy -> tolerances: the output must be within rtol * |want| + atol of the oracle, the
# attention probabilities within probs_atol. The oracle computes in float64 on the very
# weights and inputs the layer holds (read back from its variables, inputs rounded to
# the compute dtype), so what is left is the rounding of the layer's own intermediate
# tensors (projections, logits, softmax, context, output), which scales with the unit
# roundoff u of the compute dtype: 2^-24 (float32), 2^-11 (float16), 2^-8 (bfloat16).
# Each bound is about 3.5 times the worst error measured over 1,000+ draws per front (of
# outputs up to 4.7 in size); float32's is the 1e-5 of the project's other oracle tests.
#   float32:       worst 3.5e-7 (output), 1e-7 (probabilities)
#   mixed_float16: worst 2.8e-3 relative to 1 + |want| (about 6u), 1.4e-3 probabilities
#   bfloat16:      worst 1.1e-2 relative to 1 + |want| (about 3u), 6.9e-3 probabilities
TOLERANCES = {
    "float32": {"rtol": 1e-5, "atol": 1e-5, "probs_atol": 1e-6},
    "mixed_float16": {"rtol": 1e-2, "atol": 1e-2, "probs_atol": 5e-3},
    "bfloat16": {"rtol": 4e-2, "atol": 4e-2, "probs_atol": 2.5e-2},
}


@dataclasses.dataclass(frozen=True)
class Case:
    kind: str
    kwargs: dict  # Constructor arguments besides num_heads.
    num_heads: int
    batch: int
    query_length: int
    key_length: int
    width: int  # Query width.
    key_width: int  # Value (and key) width.
    separate_key: bool  # A key tensor other than the value.
    mask_form: str | None
    blank_rows: bool  # Some query rows mask every key.
    causal: bool
    gates: tuple[float, ...] | None
    policy: str
    return_scores: bool
    seed: int

    @property
    def head_size(self) -> int:
        if self.kind == "standard":
            return self.width // self.num_heads
        return self.kwargs.get("head_size") or self.width // self.num_heads

    def stock_kwargs(self) -> dict:
        """Arguments of stock `MultiHeadAttention` (either front) for a multihead case."""
        return {
            "num_heads": self.num_heads,
            "key_dim": self.head_size,
            "value_dim": self.kwargs.get("value_dim"),
            "use_bias": self.kwargs.get("use_bias", True),
            "output_shape": self.kwargs.get("output_shape"),
            "dtype": self.policy,
        }

    def inputs(self):
        """(query, value, key or None) as float32 holding values of the compute dtype."""
        rng = np.random.default_rng(self.seed)
        dtype = COMPUTE_DTYPES[self.policy]

        def normal(*shape):
            return rng.normal(size=shape).astype(dtype).astype(np.float32)

        b, t, s = self.batch, self.query_length, self.key_length
        x, y = normal(b, t, self.width), normal(b, s, self.key_width)
        return x, y, (normal(b, s, self.key_width) if self.separate_key else None)

    def random_weights(self):
        """Random weights of the case's layer (scale 0.3), from its seed."""
        rng = np.random.default_rng(self.seed + 1)
        d, h, p = self.width, self.num_heads, self.head_size
        sizes = {
            "d_out": self.kwargs.get("output_shape"),
            "d_kv": self.key_width,
            "value_dim": self.kwargs.get("value_dim"),
        }
        if self.kind == "collaborative":
            shared = self.kwargs["shared_key_dim"]
            return util.random_collaborative_weights(rng, d, h, p, shared, **sizes)
        return util.random_multihead_weights(rng, d, h, p, **sizes)

    def mask(self):
        """The boolean `attention_mask` given to the layer (None for no mask)."""
        if self.mask_form is None:
            return None
        rng = np.random.default_rng(self.seed + 2)
        b, n, t, s = self.batch, self.num_heads, self.query_length, self.key_length
        shape = {
            "query_key": (t, s),
            "batch": (b, t, s),
            "per_head": (b, n, t, s),
            "one_head_axis": (b, 1, t, s),
        }[self.mask_form]
        mask = rng.random(shape) < 0.7
        if self.blank_rows:
            mask[..., rng.integers(t), :] = False  # One query row of every head and batch...
            if mask.ndim > 2:  # ...and one more of one batch entry (of one head).
                mask[(rng.integers(b), *rng.integers(mask.shape[1:-1]))] = False
        return mask

    def effective_mask(self):
        """The mask the softmax sees: the given one and the causal one, [B?, N?, T, S]."""
        mask = self.mask()
        if not self.causal:
            return mask
        causal = np.tril(np.ones((self.query_length, self.key_length), bool))
        return causal if mask is None else np.logical_and(mask, causal)

    def oracle(self, x, y, key, w, fully_masked):
        """(output, probabilities) from the papers' equations (see tests.layers.reference)."""
        x, y = x.astype(np.float64), y.astype(np.float64)
        kwargs = dict(
            mask=self.effective_mask(),
            gates=self.gates,
            key=None if key is None else key.astype(np.float64),
            fully_masked=fully_masked,
        )
        if self.kind == "collaborative":
            return reference.collaborative(x, y, w, self.head_size, **kwargs)
        return reference.multihead(x, y, w, **kwargs)


@st.composite
def cases(
    draw,
    kinds=KINDS,
    policies=POLICIES,
    mask_forms=MASK_FORMS,
    blank_rows=None,
    gates=True,
    return_scores=None,
):
    """A `Case`: shapes up to batch 3, query 5, key 6, width 16, 4 heads, head size 6.

    `blank_rows`: whether masks blank whole rows (None: drawn); `gates`: whether head
    gates may be drawn (stock MHA has none); `return_scores`: whether the call returns
    the attention scores (None: drawn).
    """
    kind = draw(st.sampled_from(kinds))
    heads = draw(st.integers(1, 4))
    kwargs = {}
    if kind == "standard":
        width = heads * draw(st.integers(1, 4))
    else:
        width = draw(st.integers(1, 12))
        if kind == "fixed_head":
            kwargs["head_size"] = draw(st.integers(1, 6))
        else:
            kwargs["shared_key_dim"] = draw(st.integers(1, 10))
            explicit = draw(st.booleans()) or width % heads
            if explicit:
                kwargs["head_size"] = draw(st.integers(1, 6))
    if draw(st.booleans()):
        kwargs["value_dim"] = draw(st.integers(1, 5))
    if draw(st.booleans()):
        kwargs["output_shape"] = draw(st.integers(1, 6))
    if not draw(st.integers(0, 3)):  # One in four without biases.
        kwargs["use_bias"] = False
    mask_form = draw(st.sampled_from(mask_forms))
    head_gates = None
    if gates and draw(st.booleans()):
        values = st.sampled_from([0.0, 0.25, 1.0])
        head_gates = tuple(draw(st.lists(values, min_size=heads, max_size=heads)))
    return Case(
        kind=kind,
        kwargs=kwargs,
        num_heads=heads,
        batch=draw(st.integers(1, 3)),
        query_length=draw(st.integers(1, 5)),
        key_length=draw(st.integers(1, 6)),
        width=width,
        key_width=draw(st.integers(1, 12)),
        separate_key=draw(st.booleans()),
        mask_form=mask_form,
        blank_rows=mask_form is not None
        and (draw(st.booleans()) if blank_rows is None else blank_rows),
        causal=draw(st.integers(0, 3)) == 0,
        gates=head_gates,
        policy=draw(st.sampled_from(policies)),
        return_scores=draw(st.booleans()) if return_scores is None else return_scores,
        seed=draw(st.integers(0, 2**16)),
    )


def check(layer, case: Case, fully_masked: str) -> None:
    """Builds `layer` (any front), gives it the case's weights and gates, and asserts its
    output (and probabilities, where the case returns them) equal the oracle's within
    `TOLERANCES[case.policy]`; `fully_masked` is the front's convention (see `reference`)."""
    x, y, key = case.inputs()
    # Built by a call on the path under test: stock Keras 3 MHA on JAX cannot take
    # value_dim != key_dim through dot_product_attention (without scores).
    layer(x, y, key=key, return_attention_scores=case.return_scores)
    util.set_weights(layer, case.random_weights())
    if case.gates is not None:
        layer.set_head_mask(case.gates)
    got = layer(
        x,
        y,
        key=key,
        attention_mask=case.mask(),
        use_causal_mask=case.causal,
        return_attention_scores=case.return_scores,
    )
    out, probs = got if case.return_scores else (got, None)
    want_out, want_probs = case.oracle(x, y, key, util.read_weights(layer), fully_masked)
    tol = TOLERANCES[case.policy]
    np.testing.assert_allclose(_float64(out), want_out, rtol=tol["rtol"], atol=tol["atol"])
    if probs is not None:
        np.testing.assert_allclose(_float64(probs), want_probs, atol=tol["probs_atol"])


def _float64(tensor) -> np.ndarray:
    """A tf / JAX tensor of any float dtype (bfloat16 included) as float64 numpy."""
    return np.asarray(tensor).astype(np.float64)
