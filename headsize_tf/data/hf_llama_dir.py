"""Reading and writing Llama-family decoders as local Hugging Face directories.

`read_hf_llama_dir` reads a directory with `config.json` (model_type
"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2" or "gemma3_text"), the weights (`model.safetensors`, or
shards listed in `model.safetensors.index.json`) and `tokenizer.json`, plus
the chat template and `add_bos_token` of an optional `tokenizer_config.json`
(without that key: whether tokenizer.json's post-processor puts a special
token first, as Llama 3's does and SmolLM2's does not; yes without a
post-processor), into a
`LlamaCheckpoint` of float32 arrays (float16 and bfloat16 tensors are
widened; safetensors' numpy API has no bfloat16, so those are read from the
file's bytes).

`write_hf_llama_dir` writes a checkpoint back as such a directory, atomically:
`config.json`, `model.safetensors` (float32), `tokenizer.json`,
`tokenizer_config.json` (`PreTrainedTokenizerFast`, the BOS/EOS token strings,
`add_bos_token`, the chat template) and `generation_config.json`; the
tokenizer's post-processor is made to put BOS first exactly when the model
adds it (other steps, such as a ByteLevel one, kept), so Hugging Face's own
tokenizer of the directory agrees. Transformers and keras-hub
(`keras_hub.models.CausalLM.from_preset(directory)`) load it offline. Needs
the `safetensors` package; no TensorFlow or Keras.

Example:

>>> checkpoint = read_gguf_llama("SmolLM2-135M-Instruct.Q4_1.gguf")
>>> write_hf_llama_dir(checkpoint, "smollm2-hf")
>>> read_hf_llama_dir("smollm2-hf").config.num_layers
30
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.hf_checkpoint import read_json_object
from headsize_tf.core.io import atomic_directory
from headsize_tf.core.llama_checkpoint import LlamaCheckpoint, LlamaConfig, weight_shapes

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_NEEDS = "a Hugging Face directory needs config.json, model.safetensors and tokenizer.json"
_FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")


def read_hf_llama_dir(directory: str | os.PathLike) -> LlamaCheckpoint:
    """Reads a local Hugging Face Llama-family directory as a float32 `LlamaCheckpoint`.

    Args:
      directory: Holds `config.json`, `model.safetensors` (or sharded
        `model-0000x-of-0000y.safetensors` with `model.safetensors.index.json`),
        `tokenizer.json`, and optionally `tokenizer_config.json`.

    Returns:
      The checkpoint (weights `weight_shapes(config)` names, float32), with
      the tokenizer JSON, the chat template (or None) and source "hf:<directory>".

    Raises:
      CheckpointError: A required file is missing or invalid, the model type is
        not a Llama-family one, or a weight is missing or misshapen.
      ImportError: `safetensors` is not installed.

    Example:

    >>> checkpoint = read_hf_llama_dir("SmolLM2-135M-Instruct/")
    >>> checkpoint.weights["model.layers.0.self_attn.k_proj.weight"].shape
    (192, 576)
    """
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory; {_NEEDS}.")
    for name in ("config.json", "tokenizer.json"):
        if not (directory / name).is_file():
            raise CheckpointError(f"{directory} has no {name}; {_NEEDS}.")
    config = LlamaConfig.from_hf_config(read_json_object(directory / "config.json"))
    tokenizer_json = (directory / "tokenizer.json").read_text(encoding="utf-8")
    try:
        json.loads(tokenizer_json)
    except json.JSONDecodeError as error:
        raise CheckpointError(
            f"{directory / 'tokenizer.json'} is not valid JSON ({error})."
        ) from None
    tokenizer_config = {}
    if (directory / "tokenizer_config.json").is_file():
        tokenizer_config = read_json_object(directory / "tokenizer_config.json")
    template = tokenizer_config.get("chat_template")
    add_bos = tokenizer_config.get("add_bos_token")
    checkpoint = LlamaCheckpoint(
        config=config,
        weights=_read_weights(directory, config),
        tokenizer_json=tokenizer_json,
        chat_template=template if isinstance(template, str) else None,
        source=f"hf:{directory}",
        add_bos_token=add_bos if isinstance(add_bos, bool) else _adds_bos(tokenizer_json),
    )
    checkpoint.check()
    return checkpoint


def write_hf_llama_dir(
    checkpoint: LlamaCheckpoint, directory: str | os.PathLike, overwrite: bool = True
) -> pathlib.Path:
    """Writes `checkpoint` as a Hugging Face directory (float32 safetensors), atomically.

    Args:
      checkpoint: A checked checkpoint with a tokenizer.
      directory: The directory to write; readers see the old one or the whole new one.
      overwrite: Replace an existing `directory` (else `FileExistsError`).

    Returns:
      `directory` as a path.

    Raises:
      CheckpointError: The checkpoint lacks a weight or its tokenizer.
      ImportError: `safetensors` is not installed.

    Example:

    >>> write_hf_llama_dir(read_gguf_llama("model.gguf"), "model-hf")
    PosixPath('model-hf')
    """
    save_file = _safetensors().numpy.save_file
    checkpoint.check()
    if checkpoint.tokenizer_json is None:
        raise CheckpointError(
            f"{checkpoint.source or 'checkpoint'} has no tokenizer; a Hugging Face directory "
            "needs tokenizer.json."
        )
    config = checkpoint.config
    tokens = _token_strings(checkpoint.tokenizer_json)
    tokenizer_config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(config.max_sequence_length),
        "clean_up_tokenization_spaces": False,
    }
    generation_config: dict[str, Any] = {}
    for role, token_id in (("bos", config.bos_token_id), ("eos", config.eos_token_id)):
        if token_id is None:
            continue
        if token_id not in tokens:
            raise CheckpointError(
                f"{role}_token_id {token_id} is not in the tokenizer's vocabulary; expected one "
                f"of its {len(tokens)} ids."
            )
        tokenizer_config[f"{role}_token"] = tokens[token_id]
        generation_config[f"{role}_token_id"] = int(token_id)
    if checkpoint.chat_template is not None:
        tokenizer_config["chat_template"] = checkpoint.chat_template
    adds_bos = bool(checkpoint.add_bos_token) and config.bos_token_id is not None
    tokenizer_config["add_bos_token"] = adds_bos
    tokenizer_json = _with_bos_rule(
        checkpoint.tokenizer_json,
        tokens[config.bos_token_id] if adds_bos else None,
        config.bos_token_id,
    )
    names = weight_shapes(config)
    tensors = {name: np.ascontiguousarray(checkpoint.weights[name], np.float32) for name in names}
    final = pathlib.Path(directory)
    with atomic_directory(final, overwrite=overwrite) as tmp:
        _write_json(tmp / "config.json", config.to_hf_config())
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        (tmp / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
        _write_json(tmp / "tokenizer_config.json", tokenizer_config)
        _write_json(tmp / "generation_config.json", generation_config)
    return final


def _write_json(path: pathlib.Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _safetensors() -> Any:
    try:
        import safetensors
        import safetensors.numpy
    except ImportError:
        raise ImportError(
            "Hugging Face Llama directories need the `safetensors` package: pip install safetensors"
        ) from None
    return safetensors


def _post_processors(data: dict[str, Any]) -> list[Any]:
    """The steps of a `tokenizers` JSON's post-processor (a `Sequence`'s, or itself)."""
    processor = data.get("post_processor")
    if processor is None:
        return []
    if isinstance(processor, dict) and processor.get("type") == "Sequence":
        return list(processor.get("processors") or [])
    return [processor]


def _puts_special_first(step: Any) -> bool:
    """Whether a post-processor step is a `TemplateProcessing` that puts a special token first."""
    if not isinstance(step, dict) or step.get("type") != "TemplateProcessing":
        return False
    single = step.get("single") or [{}]
    return isinstance(single[0], dict) and "SpecialToken" in single[0]


def _adds_bos(tokenizer_json: str) -> bool:
    """Whether tokenizer.json adds BOS: its post-processor puts a special token first (Llama
    3's); one that does not (SmolLM2's, Qwen's ByteLevel) adds none; without a
    post-processor, yes (the Llama convention)."""
    data = json.loads(tokenizer_json)
    if data.get("post_processor") is None:
        return True
    return any(_puts_special_first(step) for step in _post_processors(data))


def _with_bos_rule(tokenizer_json: str, bos: str | None, bos_id: int | None) -> str:
    """The tokenizer with a post-processor that adds BOS exactly where the model does (BOS
    given) or never (None), so Hugging Face's tokenizer of the directory agrees."""
    data = json.loads(tokenizer_json)
    steps = [step for step in _post_processors(data) if not _puts_special_first(step)]
    text = {"Sequence": {"id": "A", "type_id": 0}}
    pair = {"Sequence": {"id": "B", "type_id": 1}}
    if bos is not None:
        first = {"SpecialToken": {"id": bos, "type_id": 0}}
        second = {"SpecialToken": {"id": bos, "type_id": 1}}
        steps.append(
            {
                "type": "TemplateProcessing",
                "single": [first, text],
                "pair": [first, text, second, pair],
                "special_tokens": {bos: {"id": bos, "ids": [int(bos_id)], "tokens": [bos]}},
            }
        )
    elif not steps:  # An explicit "no BOS" (without a post-processor, readers assume BOS).
        steps.append(
            {
                "type": "TemplateProcessing",
                "single": [text],
                "pair": [text, pair],
                "special_tokens": {},
            }
        )
    processor = steps[0] if len(steps) == 1 else {"type": "Sequence", "processors": steps}
    if processor == data.get("post_processor"):
        return tokenizer_json  # Already the rule: written as it came.
    data["post_processor"] = processor
    return json.dumps(data, ensure_ascii=False)


def _token_strings(tokenizer_json: str) -> dict[int, str]:
    """Id -> token string of a `tokenizers` JSON (its model's vocabulary and added tokens)."""
    data = json.loads(tokenizer_json)
    vocab = data.get("model", {}).get("vocab", {})
    tokens = {int(i): token for token, i in vocab.items()} if isinstance(vocab, dict) else {}
    for added in data.get("added_tokens", []):
        tokens[int(added["id"])] = added["content"]
    return tokens


def _read_weights(directory: pathlib.Path, config: LlamaConfig) -> dict[str, np.ndarray]:
    """The weights `config` needs, as float32, from one safetensors file or its shards."""
    if (directory / INDEX_FILE).is_file():
        index = read_json_object(directory / INDEX_FILE)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{directory / INDEX_FILE} has no weight_map object.")
        files = sorted(set(weight_map.values()))
    elif (directory / WEIGHTS_FILE).is_file():
        files = [WEIGHTS_FILE]
    else:
        raise CheckpointError(f"{directory} has no {WEIGHTS_FILE}; {_NEEDS}.")
    wanted = set(weight_shapes(config))
    weights: dict[str, np.ndarray] = {}
    for name in files:
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{directory / INDEX_FILE} lists {name}, which does not exist.")
        weights.update(_read_safetensors(path, wanted))
    return weights


def _read_safetensors(path: pathlib.Path, wanted: set[str]) -> dict[str, np.ndarray]:
    """The tensors of `path` named in `wanted`, as float32 arrays."""
    safe_open = _safetensors().safe_open
    header, data_start = _safetensors_header(path)
    arrays = {}
    try:
        with safe_open(str(path), framework="numpy") as handle:
            for name, info in header.items():
                if name == "__metadata__" or name not in wanted:
                    continue
                dtype = info.get("dtype")
                if dtype not in _FLOAT_DTYPES:
                    raise CheckpointError(
                        f"{path}: tensor {name!r} has dtype {dtype}; expected one of "
                        f"{list(_FLOAT_DTYPES)}."
                    )
                if dtype == "BF16":
                    array = _read_bfloat16(path, data_start, info)
                else:
                    array = handle.get_tensor(name)
                arrays[name] = np.ascontiguousarray(array, np.float32)
    except CheckpointError:
        raise
    except Exception as error:
        raise CheckpointError(f"{path} is not a readable safetensors file ({error}).") from None
    return arrays


def _safetensors_header(path: pathlib.Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's JSON header and the offset where its tensor data starts."""
    with open(path, "rb") as file:
        prefix = file.read(8)
        if len(prefix) < 8:
            raise CheckpointError(f"{path} is too short for a safetensors file.")
        size = int.from_bytes(prefix, "little")
        raw = file.read(size)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{path} has no valid safetensors header.") from None
    if len(raw) < size or not isinstance(header, dict):
        raise CheckpointError(f"{path} has no valid safetensors header.")
    return header, 8 + size


def _read_bfloat16(path: pathlib.Path, data_start: int, info: dict[str, Any]) -> np.ndarray:
    """A bfloat16 tensor of a safetensors file, widened to float32 (its bits, shifted up)."""
    start, end = (int(x) for x in info["data_offsets"])
    shape = tuple(int(x) for x in info["shape"])
    count = (end - start) // 2
    if count != int(np.prod(shape, dtype=np.int64)):
        raise CheckpointError(f"{path}: a BF16 tensor's byte range does not match shape {shape}.")
    raw = np.fromfile(path, dtype="<u2", count=count, offset=data_start + start)
    if raw.size != count:
        raise CheckpointError(f"{path} is truncated; expected {count} BF16 values.")
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
