"""Writing a `LlamaCheckpoint` as a GGUF file that llama.cpp runs.

`write_gguf_llama` is `read_gguf_llama`'s inverse, with llama.cpp's
converter (`convert_hf_to_gguf.py`) as the model for every convention:

* architecture: "llama" (Llama, Mistral, SmolLM), "deci" when the layers
  differ in heads (`LlamaConfig.layer_heads`: a decoder pruned layer by
  layer; llama.cpp's "deci" is NVIDIA's Llama-Nemotron NAS layout, a Llama
  with per-layer head counts) or when a layer's attention output projection
  is all zero (pruning left it no head): that layer is written
  attention-free, with no heads, no attention tensors and no KV cache in
  llama.cpp, exactly the same function; "qwen2", "qwen3", "gemma", "gemma2" or
  "gemma3";
* tensors under llama.cpp's names (`gguf_llama.LAYER_TENSORS` and the
  others, inverted), query and key rows permuted to llama.cpp's adjacent
  rotary pairs for "llama" and "deci" (`permute_llama_cpp`, per layer), Gemma's
  norms stored as 1 + offset, Llama 3's RoPE scaling as the `rope_freqs`
  frequency factors;
* the tokenizer: a byte-level BPE ("gpt2": tokens, merges, and the
  `tokenizer.ggml.pre` whose llama.cpp pre-tokenizer splits a probe text as
  the checkpoint's own tokenizer does) or a SentencePiece-style BPE with byte
  fallback ("llama": tokens, types, and scores ranking the pieces as the
  merges do). Before anything is written, the tokenizer that
  `read_gguf_llama` will build from the metadata must give the same ids as
  the checkpoint's on `PROBE_TEXTS`; a tokenizer this cannot express is refused.
  One difference is let through: a SentencePiece tokenizer with a Metaspace
  pre-tokenizer (Llama 2's newer tokenizer.json) puts no space before text
  that starts with one, where SentencePiece itself and llama.cpp do; the
  file follows SentencePiece.

Tensor types: "f32", "f16", "bf16" or "q8_0" (llama.cpp's 8-bit blocks of 32:
its near-lossless quantization) for the matrices; norms and other vectors stay
float32, and a matrix whose rows are not a multiple of 32 long falls back
from q8_0 to f16, as in llama.cpp's converter. The file is written atomically.
Needs the `gguf` package (the `gguf` extra); no TensorFlow or Keras.

Example:

>>> lm = remove_heads(lm, mask)  # A pruned SmolLM2: layers differ in heads.
>>> write_gguf_llama(checkpoint_from_decoder(lm), "smollm2-pruned.gguf", "q8_0")
>>> # llama-cli -m smollm2-pruned.gguf -p "The capital of France is"
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.extras import require
from headsize_tf.core.io import atomic_path
from headsize_tf.core.llama_checkpoint import (
    GEMMA_TYPES,
    LlamaCheckpoint,
    LlamaConfig,
    weight_shapes,
)
from headsize_tf.data.gguf_llama import (
    ATTENTION_TENSORS,
    GEMMA_27B_LAYERS,
    GLOBAL_TENSORS,
    LAYER_TENSORS,
    LLAMA3_ROPE_CANDIDATES,
    PRE_TOKENIZERS,
    SANDWICH_LAYER_TENSORS,
    SPACE_PIECE,
    TOKEN_TYPE_CONTROL,
    TOKEN_TYPE_NORMAL,
    TOKEN_TYPE_UNKNOWN,
    TOKEN_TYPE_USER_DEFINED,
    permute_llama_cpp,
    tokenizer_json_of_metadata,
)

TENSOR_TYPES = ("f32", "f16", "bf16", "q8_0")
# Hugging Face model_type -> GGUF architecture (per-layer heads: "deci").
GGUF_ARCHITECTURES = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3",
}
# llama.cpp's token types beyond those the reader names (gguf.TokenType).
TOKEN_TYPE_UNUSED = 5
TOKEN_TYPE_BYTE = 6
# Texts a written tokenizer must split into the checkpoint's own ids: llama.cpp's
# pre-tokenizer probe (convert_hf_to_gguf_update.py's `chktxt`) and a few more.
PROBE_TEXTS = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis "
    "concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 "
    "កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български "
    "''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? "
    "'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "Hello world! The capital of France is Paris.",
    "  leading spaces, trailing spaces  ",
    "tabs\tand\nnewlines\r\nand digits 1234567890 and café naïve Ångström",
    "def f(x):\n    return x ** 2  # squares\n",
)


def write_gguf_llama(
    checkpoint: LlamaCheckpoint,
    path: str | os.PathLike,
    tensor_type: str = "f32",
    name: str | None = None,
) -> pathlib.Path:
    """Writes `checkpoint` as a GGUF file llama.cpp and `read_gguf_llama` read, atomically.

    Args:
      checkpoint: A checked checkpoint with a tokenizer (`checkpoint_from_decoder`,
        `read_gguf_llama`, `read_hf_llama_dir`).
      path: The `.gguf` file to write (replaced atomically if it exists).
      tensor_type: "f32", "f16", "bf16" or "q8_0" for the matrices.
      name: `general.name` (default: the file's stem).

    Returns:
      `path` as a path.

    Raises:
      CheckpointError: The tensor type is unknown, or llama.cpp's runtime
        cannot compute the checkpoint's function (a sliding window on a
        non-Gemma model shorter than its context, per-layer heads outside
        the Llama architecture, a Gemma query scale other than llama.cpp's,
        a RoPE scaling other than linear or Llama 3's, a tokenizer the GGUF
        vocabulary cannot express), each in one line.
      MissingExtraError: `gguf` is not installed.

    Example:

    >>> write_gguf_llama(read_hf_llama_dir("SmolLM2-135M"), "smollm2.gguf", "q8_0")
    PosixPath('smollm2.gguf')
    """
    require("gguf", purpose="writing GGUF files")
    if tensor_type not in TENSOR_TYPES:
        raise CheckpointError(
            f"Unknown GGUF tensor type {tensor_type!r}; expected one of {list(TENSOR_TYPES)}."
        )
    checkpoint.check()
    if checkpoint.tokenizer_json is None:
        raise CheckpointError(
            f"{checkpoint.source or 'checkpoint'} has no tokenizer; a GGUF file carries one."
        )
    path = pathlib.Path(path)
    config = checkpoint.config
    free = attention_free_layers(checkpoint)
    architecture = _architecture(config, free)
    metadata = _model_metadata(config, architecture, free)
    metadata.update(_tokenizer_metadata(checkpoint))
    tensors = _tensors(checkpoint, architecture, free)
    return write_file(path, architecture, metadata, tensors, tensor_type, name)


def write_file(
    path: pathlib.Path,
    architecture: str,
    metadata: Mapping[str, Any],
    tensors: Mapping[str, np.ndarray],
    tensor_type: str,
    name: str | None = None,
    float32: frozenset[str] = frozenset(),
) -> pathlib.Path:
    """Writes a GGUF file atomically: `general.name` (default: the file's stem), the file
    type, `metadata` as llama.cpp's converter types it, and `tensors` as `tensor_type`
    (those named in `float32`, and every vector, as float32)."""
    gguf = require("gguf", purpose="writing GGUF files")
    with atomic_path(path) as tmp:
        writer = gguf.GGUFWriter(str(tmp), architecture)
        writer.add_name(name or path.stem)
        writer.add_file_type(_file_type(gguf, tensor_type))
        for key, value in metadata.items():
            _add(writer, key, value)
        for gguf_name, array in tensors.items():
            kind = "f32" if gguf_name in float32 else tensor_type
            data, raw_type = _encode(gguf, array, kind)
            writer.add_tensor(gguf_name, data, raw_dtype=raw_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return path


def attention_free_layers(checkpoint: LlamaCheckpoint) -> list[int]:
    """The layers of a Llama-architecture checkpoint whose attention adds nothing: an
    output projection of zeros (a layer pruned of every head keeps one, gated to 0).

    Layer 0 is never among them: llama.cpp reads the head size and the rotary
    dimensions only when layer 0 has heads (src/llama-model.cpp), so it keeps its
    head of zeros.
    """
    config = checkpoint.config
    if GGUF_ARCHITECTURES[config.model_type] != "llama":
        return []
    return [
        layer
        for layer in range(1, config.num_layers)
        if not np.any(checkpoint.weights[f"model.layers.{layer}.self_attn.o_proj.weight"])
    ]


def _architecture(config: LlamaConfig, free: Sequence[int]) -> str:
    architecture = GGUF_ARCHITECTURES[config.model_type]
    if config.attention_bias and architecture != "qwen2":
        raise CheckpointError(
            f"A GGUF {architecture!r} file here has no attention biases (Qwen2's do: "
            f"model_type 'qwen2'); this {config.model_type!r} model has them."
        )
    if config.layer_heads is not None and architecture != "llama":
        raise CheckpointError(
            f"llama.cpp holds per-layer head counts for Llama-shaped models only (its 'deci' "
            f"architecture); this {config.model_type!r} model's layers differ in heads."
        )
    width = config.num_query_heads * config.head_dim
    if architecture == "qwen2" and width != config.hidden_dim:
        raise CheckpointError(
            f"llama.cpp's Qwen2 has query heads x head size = width; this model has "
            f"{config.num_query_heads} x {config.head_dim} = {width} against {config.hidden_dim}."
        )
    if config.model_type in GEMMA_TYPES and not config.tie_word_embeddings:
        raise CheckpointError(
            "llama.cpp's Gemma reads its output projection from the token embeddings; this "
            "model's are untied."
        )
    return architecture if config.layer_heads is None and not free else "deci"


def _model_metadata(config: LlamaConfig, architecture: str, free: Sequence[int]) -> dict[str, Any]:
    """The `{architecture}.*` keys of `config`, as `read_gguf_llama` and llama.cpp read them."""
    if config.model_type not in GEMMA_TYPES and config.sliding_window is not None:
        if config.sliding_window < config.max_sequence_length:
            raise CheckpointError(
                f"llama.cpp's {architecture!r} architecture attends to the whole context; this "
                f"model's sliding window is {config.sliding_window} of its "
                f"{config.max_sequence_length} positions (set max_sequence_length to the window "
                "to write it)."
            )
    if architecture == "deci":
        pairs = [
            (0, 0) if layer in free else config.heads(layer) for layer in range(config.num_layers)
        ]
        queries = [int(q) for q, _ in pairs]
        groups = [int(kv) for _, kv in pairs]
    else:
        queries, groups = int(config.num_query_heads), int(config.num_key_value_heads)
    keys: dict[str, Any] = {
        "context_length": int(config.max_sequence_length),
        "embedding_length": int(config.hidden_dim),
        "block_count": int(config.num_layers),
        "feed_forward_length": int(config.intermediate_dim),
        "attention.head_count": queries,
        "attention.head_count_kv": groups,
        "attention.key_length": int(config.head_dim),
        "attention.value_length": int(config.head_dim),
        "rope.dimension_count": int(config.head_dim),
        "rope.freq_base": float(config.rope_max_wavelength),
        "attention.layer_norm_rms_epsilon": float(config.rms_norm_epsilon),
        "vocab_size": int(config.vocabulary_size),
    }
    scaling = config.rope_scaling
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind == "linear":
        keys["rope.scaling.type"] = "linear"
        keys["rope.scaling.factor"] = float(scaling["factor"])
    elif kind == "llama3" and architecture not in ("llama", "deci"):
        raise CheckpointError(
            f"llama.cpp reads Llama 3's RoPE frequency factors for 'llama' and 'deci' files; "
            f"this is a {architecture!r} one."
        )
    elif kind not in (None, "default", "llama3"):
        raise CheckpointError(
            f"RoPE scaling {kind!r} has no GGUF form here; expected none, 'linear' or 'llama3'."
        )
    if config.model_type in ("gemma2", "gemma3_text"):
        keys.update(_gemma_metadata(config, architecture))
    return {f"{architecture}.{key}": value for key, value in keys.items()}


def _gemma_metadata(config: LlamaConfig, architecture: str) -> dict[str, Any]:
    """Gemma 2 and 3's window, local layers, caps and local RoPE base."""
    width_per_head = config.hidden_dim // config.num_query_heads  # llama.cpp's integer rule.
    rule = width_per_head if config.num_layers == GEMMA_27B_LAYERS[architecture] else None
    scalar = config.query_pre_attn_scalar
    if (None if rule is None or rule == config.head_dim else rule) != scalar:
        raise CheckpointError(
            f"llama.cpp scales a {config.num_layers}-layer {architecture} model's queries by "
            f"1/sqrt({rule or config.head_dim:g}) (its 27B rule); this model uses "
            f"1/sqrt({scalar or config.head_dim:g})."
        )
    local = config.sliding_window_layers or (False,) * config.num_layers
    keys: dict[str, Any] = {
        "attention.sliding_window": int(config.sliding_window or config.max_sequence_length),
        "attention.sliding_window_pattern": list(local),
    }
    caps = (config.attention_logit_soft_cap, config.final_logit_soft_cap)
    if architecture == "gemma2":
        if None in caps:  # llama.cpp's Gemma 2 divides by both caps, always.
            raise CheckpointError(
                f"llama.cpp's Gemma 2 caps both the attention and the output logits; this model "
                f"has caps {caps[0]} and {caps[1]}."
            )
        keys["attn_logit_softcapping"] = float(caps[0])
        keys["final_logit_softcapping"] = float(caps[1])
    else:
        if caps[0] is not None:
            raise CheckpointError(
                "llama.cpp's Gemma 3 has no attention logit cap; this model caps them at "
                f"{caps[0]}."
            )
        if caps[1] is not None:
            keys["final_logit_softcapping"] = float(caps[1])
    if config.local_rope_max_wavelength is not None:
        keys["rope.freq_base_swa"] = float(config.local_rope_max_wavelength)
    return keys


def _tensors(
    checkpoint: LlamaCheckpoint, architecture: str, free: Sequence[int]
) -> dict[str, np.ndarray]:
    """GGUF name -> float32 array (`[out, in]`), in llama.cpp's conventions; the
    attention-free layers `free` without their attention tensors."""
    config = checkpoint.config
    layer_tensors = SANDWICH_LAYER_TENSORS if config.post_norms else LAYER_TENSORS
    to_gguf = {hf: name for name, hf in GLOBAL_TENSORS.items()}
    to_layer = {hf: name for name, hf in layer_tensors.items()}
    tensors: dict[str, np.ndarray] = {}
    for hf_name in weight_shapes(config):
        array = np.asarray(checkpoint.weights[hf_name], np.float32)
        if hf_name.startswith("model.layers."):
            _, _, index, rest = hf_name.split(".", 3)
            if int(index) in free and rest in ATTENTION_TENSORS:
                continue
            gguf_name = f"blk.{index}.{to_layer[rest]}"
            if architecture in ("llama", "deci") and rest.endswith(
                ("q_proj.weight", "k_proj.weight")
            ):
                heads = config.heads(int(index))
                array = permute_llama_cpp(array, heads[0 if rest.startswith("self_attn.q") else 1])
        else:
            gguf_name = to_gguf[hf_name]
        if config.model_type in GEMMA_TYPES and hf_name.endswith("norm.weight"):
            array = array + np.float32(1)  # llama.cpp stores Gemma's norms as 1 + offset.
        tensors[gguf_name] = np.ascontiguousarray(array)
    factors = _llama3_frequency_factors(config)
    if factors is not None:
        tensors["rope_freqs.weight"] = factors
    return tensors


def _llama3_frequency_factors(config: LlamaConfig) -> np.ndarray | None:
    """Llama 3.1's RoPE scaling as llama.cpp's `rope_freqs` (convert_hf_to_gguf's formula)."""
    scaling = config.rope_scaling
    if scaling is None or scaling.get("rope_type", scaling.get("type")) != "llama3":
        return None
    factor = float(scaling.get("factor", 8.0))  # convert_hf_to_gguf's defaults.
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    original = float(scaling.get("original_max_position_embeddings", 8192))
    if (low, high, original) not in LLAMA3_ROPE_CANDIDATES:
        raise CheckpointError(
            f"Llama 3 RoPE scaling with low/high frequency factors {low:g}/{high:g} over "
            f"{original:g} positions is not read back from rope_freqs here; expected "
            f"{LLAMA3_ROPE_CANDIDATES[0]}."
        )
    p = config.head_dim
    wavelengths = 2 * np.pi * config.rope_max_wavelength ** (np.arange(0, p, 2) / p)
    smooth = (original / wavelengths - low) / (high - low)
    factors = np.where(
        wavelengths < original / high,
        1.0,
        np.where(wavelengths > original / low, factor, 1 / ((1 - smooth) / factor + smooth)),
    )
    return factors.astype(np.float32)


def _file_type(gguf: Any, tensor_type: str) -> int:
    kinds = {
        "f32": gguf.LlamaFileType.ALL_F32,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "bf16": gguf.LlamaFileType.MOSTLY_BF16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    }
    return int(kinds[tensor_type])


def _encode(gguf: Any, array: np.ndarray, tensor_type: str) -> tuple[np.ndarray, Any]:
    """The stored bytes and GGML type of one tensor (vectors stay float32)."""
    kinds = gguf.GGMLQuantizationType
    if array.ndim < 2 or tensor_type == "f32":
        return array, kinds.F32
    if tensor_type == "q8_0" and array.shape[-1] % 32:
        tensor_type = "f16"  # Q8_0 blocks are 32 values of a row.
    kind = {"f16": kinds.F16, "bf16": kinds.BF16, "q8_0": kinds.Q8_0}[tensor_type]
    if kind == kinds.F16:
        return array.astype(np.float16), kind
    return gguf.quants.quantize(array, kind), kind


def _add(writer: Any, key: str, value: Any) -> None:
    """One metadata key, typed as llama.cpp's converter types it: counts uint32, floats
    float32, lists as `GGUFWriter.add_array` types them (ints int32, floats float32)."""
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    else:
        writer.add_array(key, list(value))


# ---------------------------------------------------------------- tokenizer
def _tokenizer_metadata(checkpoint: LlamaCheckpoint) -> dict[str, Any]:
    """`tokenizer.ggml.*` keys whose tokenizer (as `read_gguf_llama` builds it) equals the
    checkpoint's on `PROBE_TEXTS`."""
    from tokenizers import Tokenizer

    config = checkpoint.config
    data = json.loads(checkpoint.tokenizer_json)
    model = data.get("model") or {}
    original = Tokenizer.from_str(checkpoint.tokenizer_json)
    tokens, added = _token_list(original, data, config.vocabulary_size)
    if model.get("type") != "BPE":
        raise CheckpointError(
            f"A {model.get('type')!r} tokenizer has no GGUF form here; expected a byte-level "
            "BPE (SmolLM, Llama 3, Qwen) or a SentencePiece BPE with byte fallback (Llama 2, "
            "Mistral, Gemma)."
        )
    sentencepiece = bool(model.get("byte_fallback"))
    keys: dict[str, Any] = {
        "tokenizer.ggml.model": "llama" if sentencepiece else "gpt2",
        "tokenizer.ggml.tokens": tokens,
    }
    if sentencepiece:
        keys.update(_sentencepiece_metadata(data, tokens, added))
    else:
        keys["tokenizer.ggml.token_type"] = _token_types(tokens, added, {})
        keys["tokenizer.ggml.merges"] = [_merge_string(merge) for merge in model["merges"]]
    for role in ("bos", "eos"):
        token_id = getattr(config, f"{role}_token_id")
        if token_id is not None:
            keys[f"tokenizer.ggml.{role}_token_id"] = int(token_id)
    # Without a BOS id the model adds none (llama.cpp would add its default id).
    adds_bos = bool(checkpoint.add_bos_token) and config.bos_token_id is not None
    keys["tokenizer.ggml.add_bos_token"] = adds_bos
    if checkpoint.chat_template is not None:
        keys["tokenizer.chat_template"] = checkpoint.chat_template
    if sentencepiece:
        # A Metaspace pre-tokenizer puts no space before text that starts with one;
        # SentencePiece and llama.cpp always do, and so does the file's tokenizer.
        _check_probe(original, keys, None, leading_space=not _metaspace(data))
        return keys
    for pre in PRE_TOKENIZERS:
        candidate = {**keys, "tokenizer.ggml.pre": pre}
        if _check_probe(original, candidate, pre, raise_error=False):
            return candidate
    raise CheckpointError(
        "The tokenizer's pre-tokenizer splits text unlike every llama.cpp pre-tokenizer read "
        f"here ({', '.join(PRE_TOKENIZERS)}); expected one of them."
    )


def _token_list(original: Any, data: Mapping[str, Any], size: int) -> tuple[list[str], dict]:
    """Tokens by id (padded to the embedding's rows with llama.cpp's `[PAD{i}]`) and the
    added tokens (id -> special)."""
    vocab = original.get_vocab(with_added_tokens=True)
    if len(vocab) > size:
        raise CheckpointError(f"The tokenizer has {len(vocab)} tokens; the model embeds {size}.")
    tokens: list[str | None] = [None] * size
    for token, index in vocab.items():
        if not 0 <= index < size:
            raise CheckpointError(f"Token {token!r} has id {index}; the model embeds {size}.")
        tokens[index] = token
    taken = [token is not None for token in tokens]
    for index, token in enumerate(tokens):
        if token is None:  # llama.cpp's padding names, kept unique (it asserts they are).
            name = f"[PAD{index}]"
            while name in vocab:
                name += "_"
            tokens[index] = name
    added = {int(item["id"]): bool(item.get("special")) for item in data.get("added_tokens", [])}
    for index, used in enumerate(taken):
        if not used:
            added.setdefault(index, None)  # Padding: llama.cpp's unused tokens.
    return tokens, added


def _token_types(tokens: list[str], added: Mapping[int, Any], known: Mapping[int, int]) -> list:
    types = []
    for index in range(len(tokens)):
        if index in known:
            types.append(known[index])
        elif index in added:
            special = added[index]
            types.append(
                TOKEN_TYPE_UNUSED
                if special is None
                else TOKEN_TYPE_CONTROL
                if special
                else TOKEN_TYPE_USER_DEFINED
            )
        else:
            types.append(TOKEN_TYPE_NORMAL)
    return types


def _merge_string(merge: Any) -> str:
    return merge if isinstance(merge, str) else f"{merge[0]} {merge[1]}"


def _sentencepiece_metadata(
    data: Mapping[str, Any], tokens: list[str], added: Mapping[int, Any]
) -> dict[str, Any]:
    """Scores, types and the space prefix of a SentencePiece-style BPE.

    A piece's score is minus the rank of the first merge that makes it, so
    llama.cpp's SentencePiece tokenizer (which joins the highest-scoring
    piece first) and the reader's merges (`sentencepiece_merges`) follow the
    checkpoint's merge order; pieces no merge makes score below all others.
    """
    model = data["model"]
    index = {token: i for i, token in enumerate(tokens)}
    scores = [0.0] * len(tokens)
    ranked = set()
    for rank, merge in enumerate(model.get("merges") or []):
        merged = _merge_string(merge).replace(" ", "", 1)
        i = index.get(merged)
        if i is not None and i not in ranked:
            scores[i] = -float(rank)
            ranked.add(i)
    last = -float(len(model.get("merges") or []))
    known = {}
    unknown = model.get("unk_token")
    for i, token in enumerate(tokens):
        # llama.cpp's SentencePiece merging may join into a piece of any type: special,
        # added and padding pieces, and pieces no merge makes, score below every merge.
        if i not in ranked and (len(token) > 1 or i in added):
            scores[i] = last - 1.0
        if token == unknown:
            known[i] = TOKEN_TYPE_UNKNOWN
        elif len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            known[i] = TOKEN_TYPE_BYTE
    keys: dict[str, Any] = {
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": _token_types(tokens, added, known),
        "tokenizer.ggml.add_space_prefix": _space_prefix(data),
    }
    if unknown in index:
        keys["tokenizer.ggml.unknown_token_id"] = index[unknown]
    return keys


def _steps(step: Any) -> list[Mapping[str, Any]]:
    """The steps of a tokenizer JSON normalizer or pre-tokenizer (a Sequence's, or itself)."""
    if not isinstance(step, Mapping):
        return []
    inner = step.get("normalizers") or step.get("pretokenizers")
    return [item for sub in inner for item in _steps(sub)] if inner else [step]


def _space_prefix(data: Mapping[str, Any]) -> bool:
    """Whether the tokenizer puts U+2581 before the text (a Prepend normalizer or Metaspace)."""
    for step in _steps(data.get("normalizer")) + _steps(data.get("pre_tokenizer")):
        if step.get("type") == "Prepend" and step.get("prepend") == SPACE_PIECE:
            return True
        if step.get("type") == "Metaspace":
            # tokenizers' default is "always"; older files say add_prefix_space instead.
            default = "never" if step.get("add_prefix_space") is False else "always"
            return step.get("prepend_scheme", default) != "never"
    return False


def _metaspace(data: Mapping[str, Any]) -> bool:
    """Whether the tokenizer's pre-tokenizer is (or holds) a Metaspace step."""
    return any(step.get("type") == "Metaspace" for step in _steps(data.get("pre_tokenizer")))


def _check_probe(
    original: Any,
    keys: Mapping[str, Any],
    pre: str | None,
    raise_error: bool = True,
    leading_space: bool = True,
) -> bool:
    """Whether the reader's tokenizer of `keys` encodes `PROBE_TEXTS` as `original` does
    (`leading_space` False: texts starting with whitespace are not compared)."""
    from tokenizers import Tokenizer

    written = Tokenizer.from_str(tokenizer_json_of_metadata(keys, "the GGUF tokenizer"))
    for text in PROBE_TEXTS:
        if not leading_space and text[:1].isspace():
            continue
        expected = original.encode(text, add_special_tokens=False).ids
        got = written.encode(text, add_special_tokens=False).ids
        if expected != got:
            if not raise_error:
                return False
            raise CheckpointError(
                f"The GGUF form of the tokenizer ({pre or 'SentencePiece'}) encodes "
                f"{text[:30]!r} as {got[:8]}...; the checkpoint's tokenizer as {expected[:8]}...: "
                "expected a tokenizer the GGUF vocabulary can express."
            )
    return True
