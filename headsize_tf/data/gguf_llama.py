"""Reading Llama-family GGUF files (llama.cpp's format) into a `LlamaCheckpoint`.

`read_gguf_llama` opens a GGUF file of architecture "llama" (Llama 2 and 3,
Mistral, TinyLlama, SmolLM), "deci" (a Llama whose layers differ in heads,
as pruned ones do: `LlamaConfig.layer_heads`; an attention-free layer, with no
heads, becomes one head of zeros), "qwen2" (Qwen2 and 2.5: query/key/value biases),
"qwen3" (per-head query/key RMSNorms), "gemma", "gemma2" or "gemma3" (Gemma
3's text decoder) with `gguf`'s reader, turns its metadata (under the
architecture's prefix) into a `LlamaConfig`, dequantizes every tensor to
float32 (`gguf.quants.dequantize`: F32, F16, BF16, the legacy, k- and
i-quants) and renames it to its Hugging Face name:

* ``token_embd.weight`` -> ``model.embed_tokens.weight``
* ``blk.{i}.attn_{q,k,v,output}.weight`` -> ``model.layers.{i}.self_attn.{q,k,v,o}_proj.weight``
  (``attn_{q,k,v}.bias`` -> ``{q,k,v}_proj.bias``; ``attn_{q,k}_norm.weight`` -> ``{q,k}_norm.weight``)
* ``blk.{i}.ffn_{gate,up,down}.weight`` -> ``model.layers.{i}.mlp.{gate,up,down}_proj.weight``
* ``blk.{i}.attn_norm.weight``, ``blk.{i}.ffn_norm.weight`` -> ``input_layernorm`` and
  ``post_attention_layernorm``
* ``output_norm.weight`` -> ``model.norm.weight``; ``output.weight`` -> ``lm_head.weight``
  (without it, the embeddings are tied).

GGUF lists a tensor's dimensions innermost first (a `[out, in]` matrix shows
as `(in, out)`); the arrays `gguf` returns are row-major `[out, in]` already,
PyTorch's layout.

llama.cpp rotates adjacent pairs `(2i, 2i + 1)` of each head, Hugging Face
the pairs `(i, i + p/2)`: llama.cpp's `convert_hf_to_gguf.py` permutes the
rows of the query and key projections of each head to match
(`permute_llama_cpp`, with the query or the key/value head count). The reader
applies the inverse, `unpermute_llama_cpp`, so the weights are in Hugging
Face's half-split convention. Only the "llama" architecture is permuted:
llama.cpp runs Qwen's and Gemma's RoPE in its NEOX (half-split) mode, and its
converter writes their projections as they are. A `rope_freqs.weight` tensor
(Llama 3.1's frequency factors) becomes the "llama3" `rope_scaling` it was
computed from.

Gemma files follow llama.cpp's converter and runtime: every norm weight is
stored as 1 + Hugging Face's offset (the reader subtracts the 1); Gemma 2 and
3's four norms per layer are ``attn_norm``, ``post_attention_norm``,
``ffn_norm`` (Hugging Face's ``pre_feedforward_layernorm``) and
``post_ffw_norm``; the local layers, logit caps, local RoPE base and query
scale are read or defaulted as llama.cpp does (`GEMMA_PATTERNS` and the other
constants below; the query scale follows llama.cpp's rule for the 27B models).

The tokenizer becomes a `tokenizers.Tokenizer`:

* `tokenizer.ggml.model` "gpt2" (byte-level BPE: SmolLM, Llama 3, Qwen): from
  `tokenizer.ggml.tokens` and `.merges`, with the pre-tokenizer llama.cpp
  uses for `tokenizer.ggml.pre` (`PRE_TOKENIZERS`; "qwen2" adds the NFC
  normalizer of Qwen's own tokenizer.json);
* "llama" (SentencePiece BPE with byte fallback: Llama 2, Mistral, Gemma): from
  the tokens and `tokenizer.ggml.scores`, merges derived from the scores
  (`sentencepiece_merges`), spaces escaped as U+2581 and, unless
  `tokenizer.ggml.add_space_prefix` is false (Gemma), one put before the text
  and after each special token, as llama.cpp does; ids equal SentencePiece's
  own (tested against `sentencepiece`).

Control tokens (token type 3) become special added tokens, user-defined ones
(type 4) plain added tokens. No post-processor adds BOS: the model code adds
it where `tokenizer.ggml.add_bos_token` says so (`LlamaCheckpoint.add_bos_token`;
llama.cpp's default where the key is absent). Needs the `gguf` package (the `gguf` extra; `tokenizers` is in the base
install); no TensorFlow or Keras.

Example:

>>> checkpoint = read_gguf_llama("SmolLM2-135M-Instruct.Q4_1.gguf")
>>> checkpoint.weights["model.layers.0.self_attn.k_proj.weight"].shape
(192, 576)
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.extras import require
from headsize_tf.core.llama_checkpoint import (
    GEMMA_TYPES,
    LlamaCheckpoint,
    LlamaConfig,
    weight_shapes,
)

# GGUF architecture -> Hugging Face model_type.
ARCHITECTURES = {
    "llama": "llama",
    "deci": "llama",  # Llama with per-layer head counts (NVIDIA's Nemotron NAS; pruned heads).
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
}
GEMMA_ARCHITECTURES = ("gemma", "gemma2", "gemma3")

# GGUF tensor name (after "blk.{i}.") -> Hugging Face name (after "model.layers.{i}.").
LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",  # Qwen2
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",  # Qwen3
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}
# A Llama layer's attention tensors (Hugging Face names): what an attention-free "deci"
# layer (no query or key/value heads) lacks.
ATTENTION_TENSORS = (
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
)
# Gemma 2 and 3's four norms per layer (llama.cpp's gguf-py tensor_mapping).
SANDWICH_LAYER_TENSORS = {
    **LAYER_TENSORS,
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

# The regular expressions of llama.cpp's pre-tokenizers (src/llama-vocab.cpp).
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2's: Llama 3's with single digits.
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")
DEFAULT_REGEXES = (r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]")
# `tokenizer.ggml.pre` -> (pre-tokenizer kind, BPE ignores merges for whole-vocabulary words).
# "digits": each digit alone, then the GPT-2 regex (Hugging Face: Digits(individual_digits)
# + ByteLevel(use_regex)); "gpt2": the GPT-2 regex; "llama3": Llama 3's regex; "qwen2":
# Qwen2's regex after Qwen's NFC normalizer (Qwen2, 2.5 and 3); "default":
# llama.cpp's default chain of four regexes. A file without the key gets "default", as in
# llama.cpp.
PRE_TOKENIZERS = {
    "smollm": ("digits", False),
    "starcoder": ("digits", False),
    "refact": ("digits", False),
    "gpt-2": ("gpt2", False),
    "llama-bpe": ("llama3", True),
    "llama3": ("llama3", True),
    "llama-v3": ("llama3", True),
    "qwen2": ("qwen2", False),
    "default": ("default", False),
}
# `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
# Byte-level pre-tokenizers after which llama.cpp adds BOS by default (Llama 3's).
LLAMA3_PRE_TOKENIZERS = ("llama-bpe", "llama3", "llama-v3")
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
# `tokenizer.ggml.model` values read: byte-level BPE and SentencePiece BPE.
TOKENIZER_MODELS = ("gpt2", "llama")
# SentencePiece's whitespace piece, U+2581.
SPACE_PIECE = "\u2581"
# llama.cpp's Gemma defaults (src/llama-model.cpp, llama-hparams.h): Gemma 2's window and
# logit caps where a file leaves them out; every `pattern`-th layer is global (Gemma 2: 2,
# Gemma 3: 6) unless `attention.sliding_window_pattern` says otherwise; Gemma 3's local
# layers' RoPE base, unless `rope.freq_base_swa` gives it. Gemma 2 and 3 27B (46 and 62
# layers) scale queries by 1 / sqrt(width / heads), the others by 1 / sqrt(head size).
GEMMA_WINDOW = 4096
GEMMA2_CAPS = (50.0, 30.0)
GEMMA_PATTERNS = {"gemma2": 2, "gemma3": 6}
GEMMA3_LOCAL_ROPE_BASE = 10000.0
GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}
# (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings) tried
# against a `rope_freqs.weight` tensor; the factor comes from the tensor.
LLAMA3_ROPE_CANDIDATES = ((1.0, 4.0, 8192),)


def permute_llama_cpp(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's permutation of query/key rows: half-split rotary pairs -> adjacent pairs.

    The formula of `LlamaModel.permute` in llama.cpp's `convert_hf_to_gguf.py`:
    within each of the `n_head` heads of `p` rows, row `j * p/2 + i` (half `j`,
    pair `i`) moves to row `2 i + j`, so Hugging Face's pair `(i, i + p/2)`
    becomes llama.cpp's pair `(2i, 2i + 1)`.

    Args:
      weights: `[n_head * p, ...]` rows of a query or key projection (or its bias).
      n_head: Heads of the projection (query heads for q, key/value heads for k).

    Returns:
      The permuted array, same shape.

    Example:

    >>> permute_llama_cpp(np.arange(4.0), 1)
    array([0., 2., 1., 3.])
    """
    weights = np.asarray(weights)
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def unpermute_llama_cpp(weights: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of `permute_llama_cpp`: llama.cpp's adjacent rotary pairs -> half-split.

    Args:
      weights: `[n_head * p, ...]` rows of a query or key projection from a GGUF file.
      n_head: Heads of the projection (query heads for q, key/value heads for k).

    Returns:
      The rows in Hugging Face's order, same shape.

    Example:

    >>> unpermute_llama_cpp(np.array([0.0, 2.0, 1.0, 3.0]), 1)
    array([0., 1., 2., 3.])
    """
    weights = np.asarray(weights)
    return (
        weights.reshape(n_head, weights.shape[0] // n_head // 2, 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def read_gguf_llama(path: str | os.PathLike) -> LlamaCheckpoint:
    """Reads a Llama, Qwen2, Qwen3 or Gemma 1-3 GGUF file as a float32 `LlamaCheckpoint`.

    Args:
      path: The `.gguf` file.

    Returns:
      The checkpoint: config (model_type "llama", "qwen2", "qwen3", "gemma",
        "gemma2" or "gemma3_text"), Hugging Face-named float32
      weights in Hugging Face's layout, the tokenizer as a `tokenizers` JSON
      string, the chat template, and source "gguf:<path>".

    Raises:
      CheckpointError: The file is missing, truncated or not GGUF; its
        architecture is not one of `ARCHITECTURES`; it has a tensor type `gguf` cannot
        dequantize, an unknown tensor, a RoPE scaling, tokenizer model or
        pre-tokenizer this reader does not map.
      MissingExtraError: `gguf` is not installed (an `ImportError` naming the
        `gguf` extra).

    Example:

    >>> checkpoint = read_gguf_llama("SmolLM2-135M-Instruct.Q4_1.gguf")
    >>> checkpoint.config.num_key_value_heads
    3
    """
    gguf = require("gguf", purpose="reading GGUF files")
    path = pathlib.Path(path)
    reader, fields = _open_gguf(gguf, path)
    architecture = fields.get("general.architecture")
    if architecture not in ARCHITECTURES:
        hint = " (a latent model: read_gguf_mla)" if architecture == "deepseek2" else ""
        raise CheckpointError(
            f"GGUF architecture {architecture!r} is not supported{hint}; expected one of "
            f"{sorted(ARCHITECTURES)}."
        )
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    config = _config(fields, tensors, path, architecture)
    weights = _weights(gguf, tensors, config, path)
    _without_attention(
        weights, config, _attention_free(fields, architecture, config.num_layers, path)
    )
    checkpoint = LlamaCheckpoint(
        config=config,
        weights=weights,
        tokenizer_json=_tokenizer_json(fields, path),
        chat_template=fields.get("tokenizer.chat_template"),
        source=f"gguf:{path}",
        add_bos_token=_add_bos_token(fields),
    )
    checkpoint.check()
    return checkpoint


def _open_gguf(gguf: Any, path: pathlib.Path) -> tuple[Any, _Fields]:
    """A reader of the GGUF file `path` and its metadata; a missing or damaged file is refused."""
    if not path.exists():
        raise CheckpointError(f"GGUF file {path} does not exist.")
    if not path.is_file():
        raise CheckpointError(f"{path} is not a file; expected a .gguf file.")
    try:
        reader = _plain_reader(gguf)(path)
    except Exception as error:  # gguf raises ValueError, IndexError, struct errors, ...
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(
            f"{path} is not a readable GGUF file ({reason}); expected a complete .gguf file."
        ) from None
    return reader, _Fields(reader)


def _plain_reader(gguf: Any) -> type:
    """`gguf.GGUFReader` reading through a plain ndarray view of its memory map.

    The stock reader slices its `np.memmap` once per metadata value (a vocabulary of
    50K tokens and merges: about 1.2M slices), each paying memmap's subclass
    bookkeeping; a plain view of the same mapping reads the same bytes 3x faster.
    """

    class PlainReader(gguf.GGUFReader):
        @property
        def data(self) -> np.ndarray:
            return self._plain

        @data.setter
        def data(self, value: np.ndarray) -> None:
            self._mapped = value  # Keeps the mapping open while views of it live.
            self._plain = value.view(np.ndarray)

    return PlainReader


class _Fields:
    """The metadata of a GGUF reader as Python values."""

    def __init__(self, reader: Any):
        self._fields = reader.fields

    def __contains__(self, key: str) -> bool:
        return key in self._fields

    def get(self, key: str, default: Any = None) -> Any:
        field = self._fields.get(key)
        return default if field is None else field.contents()

    def require(self, key: str, path: pathlib.Path) -> Any:
        if key not in self._fields:
            raise CheckpointError(f"{path} lacks GGUF metadata {key!r}.")
        return self.get(key)


def _one_value(value: Any, key: str, path: pathlib.Path) -> Any:
    """A per-layer list of equal values as one value (some files list head counts per layer)."""
    if isinstance(value, list):
        if not value or any(item != value[0] for item in value):
            raise CheckpointError(
                f"{path}: {key} varies between layers ({value[:4]}...); expected one value."
            )
        return value[0]
    return value


def _config(
    fields: _Fields, tensors: Mapping[str, Any], path: pathlib.Path, architecture: str
) -> LlamaConfig:
    def key(name: str) -> str:
        return f"{architecture}.{name}"

    experts = fields.get(key("expert_count"), 0)
    if experts:
        raise CheckpointError(
            f"{path}: {key('expert_count')}={experts} (a mixture of experts) is not supported; "
            "expected a dense model."
        )
    hidden = int(fields.require(key("embedding_length"), path))
    layers = int(fields.require(key("block_count"), path))
    layer_heads = None
    if architecture == "deci":
        # An attention-free layer holds one head of zeros (`_without_attention`).
        layer_heads = tuple((q or 1, kv or 1) for q, kv in _layer_heads(fields, key, layers, path))
        heads, kv_heads = (max(column) for column in zip(*layer_heads, strict=True))
    else:
        heads = int(
            _one_value(fields.require(key("attention.head_count"), path), "head_count", path)
        )
        kv_heads = int(
            _one_value(fields.get(key("attention.head_count_kv"), heads), "head_count_kv", path)
        )
    head_dim = int(fields.get(key("attention.key_length"), 0) or hidden // heads)
    rope_dim = int(fields.get(key("rope.dimension_count"), head_dim))
    if rope_dim != head_dim:
        raise CheckpointError(
            f"{path}: {key('rope.dimension_count')}={rope_dim} rotates part of each head; "
            f"expected the whole head_dim {head_dim}."
        )
    theta = _float32(fields.get(key("rope.freq_base"), 10000.0))
    tokens = fields.get("tokenizer.ggml.tokens")
    if tokens is not None:
        vocab = len(tokens)
    elif key("vocab_size") in fields:
        vocab = int(fields.get(key("vocab_size")))
    else:
        vocab = int(tensors["token_embd.weight"].shape[-1]) if "token_embd.weight" in tensors else 0
    gemma = {}
    if architecture in GEMMA_ARCHITECTURES:
        gemma = _gemma_fields(fields, architecture, layers, hidden // heads, head_dim, path)
    return LlamaConfig(
        model_type=ARCHITECTURES[architecture],
        vocabulary_size=vocab,
        num_layers=layers,
        hidden_dim=hidden,
        num_query_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_dim=int(
            _one_value(
                fields.require(key("feed_forward_length"), path), "feed_forward_length", path
            )
        ),
        head_dim=head_dim,
        rope_max_wavelength=theta,
        rope_scaling=_rope_scaling(fields, tensors, theta, head_dim, path, architecture),
        rms_norm_epsilon=_float32(fields.get(key("attention.layer_norm_rms_epsilon"), 1e-5)),
        tie_word_embeddings="output.weight" not in tensors,
        attention_bias=architecture == "qwen2",  # Hugging Face's Qwen2 always has them.
        qk_norm=architecture in ("qwen3", "gemma3"),
        max_sequence_length=int(fields.get(key("context_length"), 2048)),
        bos_token_id=_optional_int(fields.get("tokenizer.ggml.bos_token_id")),
        eos_token_id=_optional_int(fields.get("tokenizer.ggml.eos_token_id")),
        layer_heads=layer_heads,
        **gemma,
    )


def _layer_heads(
    fields: _Fields, key: Any, layers: int, path: pathlib.Path
) -> tuple[tuple[int, int], ...]:
    """A "deci" file's (query heads, key/value heads) per layer (a count or one per layer);
    (0, 0) is an attention-free layer."""

    def per_layer(name: str, default: Any) -> list[int]:
        value = fields.get(key(name), default)
        values = value if isinstance(value, list) else [value] * layers
        if len(values) != layers:
            raise CheckpointError(
                f"{path}: {key(name)} lists {len(values)} layers; expected {layers}."
            )
        return [int(count) for count in values]

    queries = per_layer("attention.head_count", fields.require(key("attention.head_count"), path))
    groups = per_layer("attention.head_count_kv", queries)
    for i, (q, kv) in enumerate(zip(queries, groups, strict=True)):
        if (q <= 0 or kv <= 0) and (q, kv) != (0, 0):
            kind = "a linear-attention layer of Nemotron NAS" if q > 0 and kv == 0 else "invalid"
            raise CheckpointError(
                f"{path}: layer {i} has {q} query and {kv} key/value heads ({kind}); expected "
                "heads in every layer, or none (an attention-free layer)."
            )
    return tuple(zip(queries, groups, strict=True))


def _attention_free(
    fields: _Fields, architecture: str, layers: int, path: pathlib.Path
) -> list[int]:
    """The attention-free layers of a "deci" file (no heads: the layer adds no attention)."""
    if architecture != "deci":
        return []
    pairs = _layer_heads(fields, lambda name: f"{architecture}.{name}", layers, path)
    return [i for i, pair in enumerate(pairs) if pair == (0, 0)]


def _without_attention(
    weights: dict[str, np.ndarray], config: LlamaConfig, layers: Sequence[int]
) -> None:
    """Gives each attention-free layer one head whose weights are zero (its output, and so
    its contribution to the residual stream, is 0 for every input) and a norm of ones: the
    library's form of a layer with no head left."""
    shapes = weight_shapes(config)
    for layer in layers:
        for name in ATTENTION_TENSORS:
            hf_name = f"model.layers.{layer}.{name}"
            fill = np.ones if name.endswith("layernorm.weight") else np.zeros
            weights[hf_name] = fill(shapes[hf_name], np.float32)


def _gemma_fields(
    fields: _Fields,
    architecture: str,
    layers: int,
    width_per_head: int,
    head_dim: int,
    path: pathlib.Path,
) -> dict[str, Any]:
    """A Gemma file's GeGLU, local layers, caps and query scale, as llama.cpp reads them."""
    if architecture == "gemma":
        return {"hidden_activation": "gelu_pytorch_tanh"}

    def key(name: str) -> str:
        return f"{architecture}.{name}"

    gemma3 = architecture == "gemma3"
    window = fields.get(key("attention.sliding_window"), None if gemma3 else GEMMA_WINDOW)
    if window is not None and int(window) <= 0:
        if not gemma3:
            raise CheckpointError(
                f"{path}: {key('attention.sliding_window')}={window}; expected Gemma 2's "
                "window of tokens > 0."
            )
        window = None  # llama.cpp: Gemma 3 without sliding-window layers.
    local = _local_layers(
        fields, key("attention.sliding_window_pattern"), architecture, layers, path
    )
    caps = (None, None) if gemma3 else GEMMA2_CAPS
    if not gemma3:  # llama.cpp's Gemma 2 divides by both caps: 0 is no "no cap" there.
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            if float(fields.get(key(name), 1.0)) == 0:
                raise CheckpointError(
                    f"{path}: {key(name)}=0; llama.cpp's Gemma 2 divides by it, so a Gemma 2 "
                    "file caps its logits at a number > 0."
                )
    base = _float32(fields.get(key("rope.freq_base"), 10000.0))
    local_base = fields.get(key("rope.freq_base_swa"))
    if not gemma3 and local_base is not None and _float32(local_base) != base:
        raise CheckpointError(
            f"{path}: {key('rope.freq_base_swa')}={local_base} differs from the global RoPE "
            f"base {base}; expected Gemma 2's one base."
        )
    scalar = width_per_head if layers == GEMMA_27B_LAYERS[architecture] else head_dim
    no_window = window is None or not any(local)
    gemma = {
        "hidden_activation": "gelu_pytorch_tanh",
        "sliding_window": None if no_window else int(window),
        "sliding_window_layers": None if no_window else local,
        "attention_logit_soft_cap": _optional_float(
            fields.get(key("attn_logit_softcapping"), caps[0])
        ),
        "final_logit_soft_cap": _optional_float(
            fields.get(key("final_logit_softcapping"), caps[1])
        ),
        "query_pre_attn_scalar": float(scalar),
    }
    if gemma3 and not no_window:
        gemma["local_rope_max_wavelength"] = (
            GEMMA3_LOCAL_ROPE_BASE if local_base is None else _float32(local_base)
        )
    return gemma


def _float32(value: Any) -> float:
    """A float32 metadata value as its shortest decimal (1e-05, not 9.999999747378752e-06)."""
    return float(str(np.float32(value)))


def _local_layers(
    fields: _Fields, name: str, architecture: str, layers: int, path: pathlib.Path
) -> tuple[bool, ...]:
    """The sliding-window layers: `name` as a period (every period-th layer global) or one
    bool per layer (true: local), else the architecture's period (`GEMMA_PATTERNS`)."""
    pattern = fields.get(name, GEMMA_PATTERNS[architecture])
    if isinstance(pattern, list) and len(pattern) == layers:
        if all(isinstance(flag, bool) for flag in pattern):
            return tuple(pattern)
    elif isinstance(pattern, int | np.integer) and not isinstance(pattern, bool) and pattern >= 1:
        return tuple(i % int(pattern) < int(pattern) - 1 for i in range(layers))
    raise CheckpointError(
        f"{path}: {name}={pattern!r}; expected a period >= 1 (every period-th layer global) "
        f"or one bool per layer ({layers})."
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_float(value: Any) -> float | None:
    """A cap: None where absent or 0 (llama.cpp's "no cap")."""
    return None if value is None or float(value) == 0 else _float32(value)


def _rope_scaling(
    fields: _Fields,
    tensors: Mapping[str, Any],
    theta: float,
    head_dim: int,
    path: pathlib.Path,
    architecture: str,
) -> dict[str, Any] | None:
    scaling_type = fields.get(f"{architecture}.rope.scaling.type")
    factor = fields.get(f"{architecture}.rope.scaling.factor")
    old_linear = fields.get(f"{architecture}.rope.scale_linear")
    if scaling_type is None and old_linear is not None and float(old_linear) != 1.0:
        scaling_type, factor = "linear", old_linear
    scaling = None
    if scaling_type not in (None, "none"):
        if scaling_type != "linear" or factor is None:
            raise CheckpointError(
                f"{path}: RoPE scaling type {scaling_type!r} is not supported; expected 'none' or "
                "'linear' with a factor."
            )
        scaling = {"rope_type": "linear", "factor": _float32(factor)}
    if "rope_freqs.weight" in tensors:
        if scaling is not None:
            raise CheckpointError(
                f"{path} has both linear RoPE scaling and rope_freqs.weight; expected one of them."
            )
        freqs = np.asarray(tensors["rope_freqs.weight"].data, np.float64).reshape(-1)
        scaling = _llama3_rope_scaling(freqs, theta, head_dim, path)
    return scaling


def _llama3_rope_scaling(
    factors: np.ndarray, theta: float, head_dim: int, path: pathlib.Path
) -> dict[str, Any] | None:
    """The "llama3" `rope_scaling` whose frequency factors (llama.cpp's rope_freqs) are `factors`."""
    if factors.shape != (head_dim // 2,):
        raise CheckpointError(
            f"{path}: rope_freqs.weight has {factors.size} values; expected {head_dim // 2}."
        )
    if np.allclose(factors, 1.0):
        return None
    factor = float(factors.max())
    wavelengths = 2 * np.pi * theta ** (np.arange(0, head_dim, 2) / head_dim)
    for low, high, original in LLAMA3_ROPE_CANDIDATES:
        smooth = (original / wavelengths - low) / (high - low)
        expected = np.where(
            wavelengths < original / high,
            1.0,
            np.where(wavelengths > original / low, factor, 1 / ((1 - smooth) / factor + smooth)),
        )
        if np.allclose(factors, expected, rtol=1e-4):
            return {
                "rope_type": "llama3",
                "factor": _float32(factor),
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": original,
            }
    raise CheckpointError(
        f"{path}: rope_freqs.weight matches no Llama 3 RoPE scaling (factor {factor:g}, "
        "low/high frequency factors 1/4, 8192 original positions); expected one that does."
    )


def _weights(
    gguf: Any, tensors: Mapping[str, Any], config: LlamaConfig, path: pathlib.Path
) -> dict[str, np.ndarray]:
    names = _hf_names(tensors, config, path)
    expected = weight_shapes(config)
    weights = {}
    for gguf_name, hf_name in names.items():
        tensor = tensors[gguf_name]
        try:
            array = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        except NotImplementedError:
            raise CheckpointError(
                f"{path}: tensor {gguf_name!r} has type {tensor.tensor_type.name}, which gguf "
                "cannot dequantize; expected F32, F16, BF16 or a quantization gguf supports."
            ) from None
        except ValueError as error:
            raise CheckpointError(
                f"{path}: tensor {gguf_name!r} of type {tensor.tensor_type.name} is damaged "
                f"({error}); expected a complete tensor."
            ) from None
        array = np.array(array, dtype=np.float32)  # A copy: the reader's memory map closes.
        if tuple(array.shape) != expected[hf_name]:
            raise CheckpointError(
                f"{path}: tensor {gguf_name!r} has shape {tuple(array.shape)} (as [out, in]); "
                f"expected {expected[hf_name]}."
            )
        if config.model_type in GEMMA_TYPES and hf_name.endswith("norm.weight"):
            array = array - np.float32(1)  # llama.cpp stores Gemma's norms as 1 + offset.
        elif config.model_type != "llama":  # Qwen, Gemma: written as they are (NEOX RoPE).
            pass
        elif hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = config.heads(int(hf_name.split(".")[2]))
            array = unpermute_llama_cpp(array, heads[0 if "q_proj" in hf_name else 1])
        weights[hf_name] = np.ascontiguousarray(array)
    return weights


def _hf_names(
    tensors: Mapping[str, Any], config: LlamaConfig, path: pathlib.Path
) -> dict[str, str]:
    """GGUF name -> Hugging Face name of every weight tensor; unknown tensors, and tensors the
    architecture has no place for (a Llama's biases, a Qwen2's query/key norms), are refused."""
    expected = weight_shapes(config)
    layer_tensors = SANDWICH_LAYER_TENSORS if config.post_norms else LAYER_TENSORS
    names = {}
    for name in tensors:
        if name == "rope_freqs.weight":
            continue
        if name in GLOBAL_TENSORS:
            names[name] = GLOBAL_TENSORS[name]
            continue
        parts = name.split(".", 2)
        if (
            len(parts) == 3
            and parts[0] == "blk"
            and parts[1].isdigit()
            and int(parts[1]) < config.num_layers
            and parts[2] in layer_tensors
        ):
            hf_name = f"model.layers.{parts[1]}.{layer_tensors[parts[2]]}"
            if hf_name not in expected:
                raise CheckpointError(
                    f"{path}: tensor {name!r} has no place in a {config.model_type!r} model "
                    "(biases are Qwen2's, query/key norms Qwen3's and Gemma 3's); expected a file of the "
                    "architecture its tensors belong to."
                )
            names[name] = hf_name
            continue
        raise CheckpointError(
            f"{path}: tensor {name!r} is not part of a dense Llama; expected token_embd, blk.N "
            "attention/feed-forward/norm tensors, output_norm and output."
        )
    return names


def _add_bos_token(fields: _Fields) -> bool:
    """`tokenizer.ggml.add_bos_token`, else llama.cpp's default (src/llama-vocab.cpp): yes for
    SentencePiece vocabularies and Llama 3's pre-tokenizer, no for other byte-level BPEs."""
    value = fields.get("tokenizer.ggml.add_bos_token")
    if value is not None:
        return bool(value)
    if fields.get("tokenizer.ggml.model") == "llama":
        return True
    return fields.get("tokenizer.ggml.pre", "default") in LLAMA3_PRE_TOKENIZERS


class _ValueFields(_Fields):
    """GGUF metadata given as a dict of Python values (what a writer is about to write)."""

    def __init__(self, values: Mapping[str, Any]):
        self._fields = dict(values)

    def get(self, key: str, default: Any = None) -> Any:
        return self._fields.get(key, default)


def tokenizer_json_of_metadata(metadata: Mapping[str, Any], source: str = "metadata") -> str:
    """The `tokenizers` JSON `read_gguf_llama` builds from GGUF tokenizer metadata.

    Args:
      metadata: `tokenizer.ggml.*` keys and their Python values.
      source: Named in errors.

    Returns:
      The tokenizer as a JSON string (no post-processor).

    Raises:
      CheckpointError: The metadata is incomplete or names a model or
        pre-tokenizer the reader does not map.
    """
    return _tokenizer_json(_ValueFields(metadata), pathlib.Path(source))


def _tokenizer_json(fields: _Fields, path: pathlib.Path) -> str:
    from tokenizers import AddedToken

    model = fields.get("tokenizer.ggml.model")
    if model not in TOKENIZER_MODELS:
        raise CheckpointError(
            f"{path}: GGUF tokenizer model {model!r} is not supported; expected one of "
            f"{sorted(TOKENIZER_MODELS)} (byte-level BPE, SentencePiece BPE)."
        )
    tokens = fields.require("tokenizer.ggml.tokens", path)
    types = fields.get("tokenizer.ggml.token_type") or [TOKEN_TYPE_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise CheckpointError(
            f"{path}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} "
            "tokens; expected one per token."
        )
    if model == "gpt2":
        tokenizer = _byte_level_bpe(fields, tokens, path)
    else:
        tokenizer = _sentencepiece_bpe(fields, tokens, types, path)
    special = [tokens[i] for i, kind in enumerate(types) if kind == TOKEN_TYPE_CONTROL]
    added = [tokens[i] for i, kind in enumerate(types) if kind == TOKEN_TYPE_USER_DEFINED]
    if added:
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    if special:
        tokenizer.add_special_tokens(
            [AddedToken(t, special=True, normalized=False) for t in special]
        )
    return tokenizer.to_str()


def _byte_level_bpe(fields: _Fields, tokens: list[str], path: pathlib.Path) -> Any:
    """`tokenizer.ggml.model` "gpt2": byte-level BPE with llama.cpp's pre-tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    pre = fields.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise CheckpointError(
            f"{path}: GGUF pre-tokenizer {pre!r} is not supported; expected one of "
            f"{sorted(PRE_TOKENIZERS)}."
        )
    kind, ignore_merges = PRE_TOKENIZERS[pre]
    merges = []
    for merge in fields.get("tokenizer.ggml.merges", []):
        split = merge.find(" ", 1)  # As llama.cpp: the first space after the first character.
        if split < 0:
            raise CheckpointError(f"{path}: BPE merge {merge!r} has no space; expected 'a b'.")
        merges.append((merge[:split], merge[split + 1 :]))
    vocab = {token: index for index, token in enumerate(tokens)}
    try:
        bpe = models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges)
    except Exception as error:
        raise CheckpointError(
            f"{path}: the GGUF vocabulary and merges do not form a BPE model ({error})."
        ) from None
    tokenizer = Tokenizer(bpe)
    # The byte-level step splits with the GPT-2 regex itself where that regex comes last.
    use_regex = kind in ("digits", "gpt2")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)
    if kind == "digits":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    elif kind == "gpt2":
        tokenizer.pre_tokenizer = byte_level
    elif kind in ("llama3", "qwen2"):
        regex = LLAMA3_REGEX if kind == "llama3" else QWEN2_REGEX
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(regex), behavior="isolated"), byte_level]
        )
        if kind == "qwen2":
            tokenizer.normalizer = normalizers.NFC()
    else:
        splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in DEFAULT_REGEXES]
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([*splits, byte_level])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def sentencepiece_merges(
    tokens: list[str], scores: list[float], types: list[int]
) -> list[tuple[str, str]]:
    """BPE merges equivalent to SentencePiece's BPE merging by piece score.

    SentencePiece (and llama.cpp's SPM tokenizer) repeatedly joins the two
    neighbouring symbols whose concatenation is the highest-scoring normal
    piece. As Hugging Face's `SentencePieceExtractor`, every split `(a, b)` of
    a normal piece into two normal pieces becomes a merge, ranked by the
    piece's score (highest first), then by the ids of `a` and `b`.

    Example:

    >>> sentencepiece_merges(["a", "b", "ab"], [0.0, 0.0, -1.0], [1, 1, 1])
    [('a', 'b')]
    """
    normal = {
        token: index
        for index, (token, kind) in enumerate(zip(tokens, types, strict=True))
        if kind == TOKEN_TYPE_NORMAL
    }
    ranked = []
    for piece, index in normal.items():
        splits = [
            (piece[:j], piece[j:])
            for j in range(1, len(piece))
            if piece[:j] in normal and piece[j:] in normal
        ]
        splits.sort(key=lambda pair: (normal[pair[0]], normal[pair[1]]))
        ranked += [(float(scores[index]), pair) for pair in splits]
    ranked.sort(key=lambda item: -item[0])  # Stable: equal scores keep the order of ids.
    return [pair for _, pair in ranked]


def _sentencepiece_bpe(
    fields: _Fields, tokens: list[str], types: list[int], path: pathlib.Path
) -> Any:
    """`tokenizer.ggml.model` "llama": SentencePiece BPE with byte fallback (Llama 2, Mistral,
    Gemma), as Hugging Face's `LlamaConverter` / `GemmaConverter` build it."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    scores = fields.require("tokenizer.ggml.scores", path)
    if len(scores) != len(tokens):
        raise CheckpointError(
            f"{path}: tokenizer.ggml.scores has {len(scores)} entries for {len(tokens)} "
            "tokens; expected one per token."
        )
    unknown = fields.get("tokenizer.ggml.unknown_token_id")
    if unknown is None and TOKEN_TYPE_UNKNOWN in types:
        unknown = types.index(TOKEN_TYPE_UNKNOWN)
    if unknown is not None and not 0 <= int(unknown) < len(tokens):
        raise CheckpointError(
            f"{path}: tokenizer.ggml.unknown_token_id={unknown} is not a token id; expected "
            f"0 to {len(tokens) - 1}."
        )
    vocab = {token: index for index, token in enumerate(tokens)}
    try:
        bpe = models.BPE(
            vocab=vocab,
            merges=sentencepiece_merges(tokens, scores, types),
            unk_token=None if unknown is None else tokens[int(unknown)],
            byte_fallback=True,
            fuse_unk=True,
        )
    except Exception as error:
        raise CheckpointError(
            f"{path}: the GGUF SentencePiece vocabulary does not form a BPE model ({error})."
        ) from None
    tokenizer = Tokenizer(bpe)
    # llama.cpp's SPM default (Llama 2, Mistral); Gemma's files say False.
    prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", True))
    escape = normalizers.Replace(" ", SPACE_PIECE)
    tokenizer.normalizer = (
        normalizers.Sequence([normalizers.Prepend(SPACE_PIECE), escape]) if prefix else escape
    )
    steps = [decoders.Replace(SPACE_PIECE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence([*steps, decoders.Strip(" ", 1, 0)] if prefix else steps)
    return tokenizer
