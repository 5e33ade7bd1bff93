"""Reading Hugging Face-layout BERT checkpoints into numpy arrays by role.

A directory with `config.json` (a BERT config), `model.safetensors` and
`vocab.txt` is read and validated here, once for both fronts: tensors are
loaded with `safetensors.numpy` (no torch), found under their Hugging Face
names or the aliases of checkpoints converted from TF ("bert." prefixes,
LayerNorm "gamma" / "beta"), checked against the shapes `config.json`
implies, and returned in the library's kernel layout (see `headsize_tf.core`)
keyed by role. PyTorch `Linear` weights are `(out, in)`; a Keras kernel is
the transpose, split into heads for attention:

* ``layer_{i}/attention/{query,key,value}/kernel``: `[width, heads, head_size]`
* ``layer_{i}/attention/{query,key,value}/bias``: `[heads, head_size]`
* ``layer_{i}/attention/output/kernel``: `[heads, head_size, width]`
* ``layer_{i}/attention/output/bias``: `[width]`
* ``layer_{i}/attention_norm/{gamma,beta}``, ``layer_{i}/output_norm/{gamma,beta}``
* ``layer_{i}/intermediate/{kernel,bias}``, ``layer_{i}/output/{kernel,bias}``
  (`[width, inner]`, `[inner, width]`)
* ``embeddings/{word,position,segment}``, ``embeddings/norm/{gamma,beta}``
* ``pooler/{kernel,bias}`` (optional: sentence-transformers checkpoints
  sometimes drop it).

Optional `tokenizer_config.json` (do_lower_case), `sentence_bert_config.json`
(max_seq_length) and `1_Pooling/config.json` (pooling) give the sentence
encoder's settings. Pure numpy: the tf_keras and Keras 3 importers assign
these arrays to their variables (`assign_arrays`, given the variables by role).

Example:

>>> checkpoint = read_hf_bert("all-MiniLM-L6-v2/")
>>> checkpoint.arrays["layer_0/attention/query/kernel"].shape
(384, 12, 32)
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.core.spec import is_positive_int

REQUIRED_FILES = ("config.json", "model.safetensors", "vocab.txt")
# Hugging Face `hidden_act` -> the activation name both fronts resolve.
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_approximate"}
IGNORED_TENSORS = ("embeddings.position_ids",)
# Pretraining heads (masked LM, next sentence): present in some checkpoints, unused.
HEAD_PREFIXES = ("cls.", "lm_head.")
LAYOUTS = ("copy", "linear", "heads_in", "heads_out", "head_bias")


@dataclasses.dataclass(frozen=True)
class TensorRole:
    """One encoder weight: its role, Hugging Face name and layout conversion.

    Attributes:
      role: Key of the converted array (e.g. "layer_0/attention/query/kernel").
      name: Hugging Face tensor name (e.g. "encoder.layer.0.attention.self.query.weight").
      layout: "copy", "linear" (transpose), "heads_in" (transpose, then
        `[in, heads, p]`), "heads_out" (transpose, then `[heads, p, out]`) or
        "head_bias" (`[heads, p]`).
      optional: Whether a checkpoint may lack it (the pooler).
    """

    role: str
    name: str
    layout: str
    optional: bool = False


# (role, Hugging Face name, layout) of each block's weights, after "layer_{i}/"
# and "encoder.layer.{i}.".
_EMBEDDING_TENSORS = (
    ("embeddings/word", "embeddings.word_embeddings.weight", "copy"),
    ("embeddings/position", "embeddings.position_embeddings.weight", "copy"),
    ("embeddings/segment", "embeddings.token_type_embeddings.weight", "copy"),
    ("embeddings/norm/gamma", "embeddings.LayerNorm.weight", "copy"),
    ("embeddings/norm/beta", "embeddings.LayerNorm.bias", "copy"),
)
_LAYER_TENSORS = (
    *(
        entry
        for part in ("query", "key", "value")
        for entry in (
            (f"attention/{part}/kernel", f"attention.self.{part}.weight", "heads_in"),
            (f"attention/{part}/bias", f"attention.self.{part}.bias", "head_bias"),
        )
    ),
    ("attention/output/kernel", "attention.output.dense.weight", "heads_out"),
    ("attention/output/bias", "attention.output.dense.bias", "copy"),
    ("attention_norm/gamma", "attention.output.LayerNorm.weight", "copy"),
    ("attention_norm/beta", "attention.output.LayerNorm.bias", "copy"),
    ("intermediate/kernel", "intermediate.dense.weight", "linear"),
    ("intermediate/bias", "intermediate.dense.bias", "copy"),
    ("output/kernel", "output.dense.weight", "linear"),
    ("output/bias", "output.dense.bias", "copy"),
    ("output_norm/gamma", "output.LayerNorm.weight", "copy"),
    ("output_norm/beta", "output.LayerNorm.bias", "copy"),
)


def tensor_roles(num_layers: int) -> list[TensorRole]:
    """Every weight of a `num_layers` BERT encoder, embeddings first, pooler last."""
    roles = [TensorRole(*entry) for entry in _EMBEDDING_TENSORS]
    for i in range(num_layers):
        roles += [
            TensorRole(f"layer_{i}/{role}", f"encoder.layer.{i}.{name}", layout)
            for role, name, layout in _LAYER_TENSORS
        ]
    roles += [
        TensorRole("pooler/kernel", "pooler.dense.weight", "linear", optional=True),
        TensorRole("pooler/bias", "pooler.dense.bias", "copy", optional=True),
    ]
    return roles


def to_keras_layout(array: np.ndarray, layout: str, num_heads: int | None = None) -> np.ndarray:
    """A Hugging Face (PyTorch-layout) tensor in the library's kernel layout."""
    if layout not in LAYOUTS:
        raise ValueError(f"Unknown layout {layout!r}; expected one of {list(LAYOUTS)}.")
    array = np.asarray(array)
    if layout == "copy":
        return array
    if layout == "head_bias":  # [heads * p] -> [heads, p]
        return array.reshape(num_heads, -1)
    kernel = array.T
    if layout == "heads_in":  # [in, heads * p] -> [in, heads, p]
        return kernel.reshape(kernel.shape[0], num_heads, -1)
    if layout == "heads_out":  # [heads * p, out] -> [heads, p, out]
        return kernel.reshape(num_heads, -1, kernel.shape[1])
    return kernel


def from_keras_layout(array: np.ndarray, layout: str) -> np.ndarray:
    """The inverse of `to_keras_layout`: a kernel-layout array in PyTorch layout."""
    if layout not in LAYOUTS:
        raise ValueError(f"Unknown layout {layout!r}; expected one of {list(LAYOUTS)}.")
    array = np.asarray(array)
    if layout == "copy":
        return array
    if layout == "head_bias":
        return array.reshape(-1)
    if layout == "heads_in":  # [in, heads, p] -> (heads * p, in)
        return array.reshape(array.shape[0], -1).T
    if layout == "heads_out":  # [heads, p, out] -> (out, heads * p)
        return array.reshape(-1, array.shape[-1]).T
    return array.T


def from_keras_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """The PyTorch-layout shape of a kernel-layout array of `shape` (see `from_keras_layout`)."""
    shape = tuple(int(n) for n in shape)
    if layout not in LAYOUTS:
        raise ValueError(f"Unknown layout {layout!r}; expected one of {list(LAYOUTS)}.")
    if layout == "copy":
        return shape
    if layout == "head_bias":
        return (shape[0] * shape[1],)
    if layout == "heads_in":
        return (shape[1] * shape[2], shape[0])
    if layout == "heads_out":
        return (shape[2], shape[0] * shape[1])
    return shape[::-1]


def checkpoint_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Hugging Face tensor name -> the (PyTorch-layout) shape `config` implies."""
    d = int(config["hidden_size"])
    f = int(config.get("intermediate_size", 4 * d))
    positions = int(config.get("max_position_embeddings", 512))
    shapes = {
        "embeddings.word_embeddings.weight": (int(config["vocab_size"]), d),
        "embeddings.position_embeddings.weight": (positions, d),
        "embeddings.token_type_embeddings.weight": (int(config.get("type_vocab_size", 2)), d),
    }
    for role in tensor_roles(int(config["num_hidden_layers"])):
        if role.name in shapes:
            continue
        if role.name.endswith("intermediate.dense.weight"):
            shapes[role.name] = (f, d)
        elif role.name.endswith("intermediate.dense.bias"):
            shapes[role.name] = (f,)
        elif role.name.endswith("output.dense.weight") and ".attention." not in role.name:
            shapes[role.name] = (d, f)
        elif role.name.endswith(".weight") and role.layout != "copy":
            shapes[role.name] = (d, d)
        else:
            shapes[role.name] = (d,)
    return shapes


def find_tensor(tensors: Mapping[str, Any], name: str) -> str | None:
    """The key holding tensor `name`: itself, "bert."-prefixed, or LayerNorm gamma / beta."""
    candidates = [name, f"bert.{name}"]
    if name.endswith("LayerNorm.weight"):
        candidates += [name[: -len("weight")] + "gamma", "bert." + name[: -len("weight")] + "gamma"]
    if name.endswith("LayerNorm.bias"):
        candidates += [name[: -len("bias")] + "beta", "bert." + name[: -len("bias")] + "beta"]
    return next((key for key in candidates if key in tensors), None)


def bert_arrays(
    tensors: Mapping[str, np.ndarray],
    num_layers: int,
    num_heads: int,
    source: str,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Converts Hugging Face tensors to float32 arrays by role.

    Args:
      tensors: Tensor name -> array (as `safetensors.numpy.load_file` returns).
      num_layers: Transformer layers of the encoder.
      num_heads: Attention heads (to split the attention kernels).
      source: Named in errors (the file the tensors came from).
      shapes: Optional expected PyTorch-layout shapes by name
        (`checkpoint_shapes(config)`); a mismatch is a `CheckpointError`.

    Returns:
      (arrays keyed by role, sorted names of the tensors not used). A missing
      optional tensor (the pooler) has no entry.

    Raises:
      CheckpointError: a required tensor is missing or mis-shaped.
    """
    arrays: dict[str, np.ndarray] = {}
    used = {key for name in IGNORED_TENSORS for key in (name, f"bert.{name}") if key in tensors}
    for role in tensor_roles(num_layers):
        key = find_tensor(tensors, role.name)
        if key is None:
            if role.optional:
                continue
            raise CheckpointError(f"{source}: tensor {role.name!r} is missing.")
        value = np.asarray(tensors[key])
        expected = None if shapes is None else shapes.get(role.name)
        if expected is not None and tuple(value.shape) != tuple(expected):
            raise CheckpointError(
                f"{source}: tensor {key!r} has shape {tuple(value.shape)}, which does not fit "
                f"{role.role} of shape {tuple(expected)} (check config.json against the weights)."
            )
        if role.layout in ("heads_in", "heads_out", "head_bias") and value.shape[0] % num_heads:
            raise CheckpointError(
                f"{source}: tensor {key!r} has shape {tuple(value.shape)}, which does not split "
                f"into {num_heads} heads (check config.json against the weights)."
            )
        arrays[role.role] = to_keras_layout(value, role.layout, num_heads).astype(np.float32)
        used.add(key)
    return arrays, sorted(set(tensors) - used)


def assign_arrays(
    variables: Mapping[str, Any], arrays: Mapping[str, np.ndarray], source: str, model: str
) -> None:
    """Assigns arrays by role (from `bert_arrays`) to a model's variables, on either front.

    Args:
      variables: Role -> variable (a tf_keras or Keras 3 variable: anything
        with `shape`, `name` or `path`, and `assign`).
      arrays: Role -> array; every role but the pooler must be present.
      source: Named in errors (the file the arrays came from).
      model: What the variables belong to, named in errors ("encoder").

    Raises:
      CheckpointError: an array is missing or does not have its variable's shape.
    """
    for role, variable in variables.items():
        if role not in arrays:
            if role.startswith("pooler/"):
                continue
            raise CheckpointError(f"{source}: no array for the {model} weight {role!r}.")
        value = np.asarray(arrays[role])
        if tuple(value.shape) != tuple(variable.shape):
            name = getattr(variable, "path", None) or variable.name
            raise CheckpointError(
                f"{source}: {role} has shape {tuple(value.shape)}, which does not fit the {model} "
                f"weight {name} of shape {tuple(variable.shape)} (check config.json against the "
                "weights)."
            )
        variable.assign(value.astype(np.float32))


def read_json_object(path: pathlib.Path) -> dict[str, Any]:
    """The JSON object in `path`; a `CheckpointError` if it is invalid or not an object."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path} is not valid JSON ({err}).") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} holds {type(data).__name__}; expected a JSON object.")
    return data


def read_config(directory: str | os.PathLike) -> dict[str, Any]:
    """`config.json` of a BERT directory, checked for what the importers support."""
    path = pathlib.Path(directory) / "config.json"
    config = read_json_object(path)
    if config.get("model_type", "bert") != "bert":
        raise CheckpointError(
            f"{path}: model_type {config.get('model_type')!r} is not supported; expected 'bert'."
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(
            f"{path}: position_embedding_type {config['position_embedding_type']!r} is not "
            "supported; expected 'absolute'."
        )
    eps = float(config.get("layer_norm_eps", 1e-12))
    if abs(eps - 1e-12) > 1e-15:
        raise CheckpointError(f"{path}: layer_norm_eps {eps} is not supported; expected 1e-12.")
    if config.get("hidden_act", "gelu") not in ACTIVATIONS:
        raise CheckpointError(
            f"{path}: hidden_act {config.get('hidden_act')!r} is not supported; expected one of "
            f"{sorted(ACTIVATIONS)}."
        )
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
        if key not in config:
            raise CheckpointError(f"{path} has no {key!r}.")
    for key in (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
        "type_vocab_size",
    ):
        value = config.get(key, 1)
        if not is_positive_int(value):
            raise CheckpointError(f"{path}: {key} must be a positive integer; got {value!r}.")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise CheckpointError(
            f"{path}: hidden_size {config['hidden_size']} is not a multiple of "
            f"num_attention_heads {config['num_attention_heads']}."
        )
    return config


def sentence_settings(directory: str | os.PathLike) -> dict[str, Any]:
    """Tokenizer and pooling settings: `lower_case`, `max_seq_length`, `pooling`, ...

    Defaults (no sentence-transformers files): lower-cased, 512 tokens, [CLS]
    pooling. `1_Pooling/config.json` selects mean or [CLS] pooling and
    L2-normalisation.
    """
    directory = pathlib.Path(directory)
    settings: dict[str, Any] = {"lower_case": True, "max_seq_length": 512, "pooling": "cls"}
    tokenizer_config = directory / "tokenizer_config.json"
    if tokenizer_config.exists():
        settings["lower_case"] = bool(read_json_object(tokenizer_config).get("do_lower_case", True))
    sbert = directory / "sentence_bert_config.json"
    if sbert.exists():
        settings["max_seq_length"] = int(read_json_object(sbert).get("max_seq_length", 512))
    pooling = directory / "1_Pooling" / "config.json"
    if pooling.exists():
        mode = read_json_object(pooling)
        settings["pooling"] = "mean" if mode.get("pooling_mode_mean_tokens") else "cls"
        settings["normalize"] = True
    return settings


def read_tensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """All tensors of a safetensors file (a `CheckpointError` if unreadable)."""
    from safetensors.numpy import load_file

    try:
        return load_file(str(path))
    except Exception as err:  # safetensors raises its own error types.
        raise CheckpointError(f"{path} is unreadable ({err}).") from None


def check_files(directory: str | os.PathLike) -> pathlib.Path:
    """`directory` as a path; a `CheckpointError` naming the files it lacks."""
    directory = pathlib.Path(directory)
    missing = [name for name in REQUIRED_FILES if not (directory / name).exists()]
    if missing:
        raise CheckpointError(
            f"Checkpoint directory {directory} lacks {missing}; a BERT checkpoint needs "
            f"{list(REQUIRED_FILES)} (Hugging Face layout) or a headsize_checkpoint.json."
        )
    return directory


@dataclasses.dataclass(frozen=True)
class HFBertCheckpoint:
    """A validated Hugging Face BERT directory, its weights by role.

    Attributes:
      directory: The checkpoint directory.
      config: Its `config.json` (validated by `read_config`).
      arrays: float32 arrays by role in the library's kernel layout.
      settings: `SentenceEncoder` settings (`lower_case`, `max_seq_length`
        capped at the position embeddings, `pooling`, maybe `normalize`).
    """

    directory: pathlib.Path
    config: dict[str, Any]
    arrays: dict[str, np.ndarray]
    settings: dict[str, Any]

    @property
    def vocab_file(self) -> pathlib.Path:
        return self.directory / "vocab.txt"

    @property
    def num_layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def num_heads(self) -> int:
        return int(self.config["num_attention_heads"])

    @property
    def activation(self) -> str:
        """ "gelu" (exact), "gelu_approximate" (tanh) or "relu"."""
        return ACTIVATIONS[self.config.get("hidden_act", "gelu")]

    def encoder_settings(self) -> dict[str, Any]:
        """Shape and regularisation of the encoder, under neutral names."""
        c = self.config
        return {
            "vocab_size": int(c["vocab_size"]),
            "hidden_size": int(c["hidden_size"]),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "intermediate_size": int(c.get("intermediate_size", 4 * c["hidden_size"])),
            "activation": self.activation,
            "dropout": float(c.get("hidden_dropout_prob", 0.1)),
            "attention_dropout": float(c.get("attention_probs_dropout_prob", 0.1)),
            "max_sequence_length": int(c.get("max_position_embeddings", 512)),
            "type_vocab_size": int(c.get("type_vocab_size", 2)),
            "layer_norm_epsilon": float(c.get("layer_norm_eps", 1e-12)),
        }


def read_hf_bert(directory: str | os.PathLike) -> HFBertCheckpoint:
    """Reads and validates a Hugging Face-layout BERT directory.

    Raises:
      CheckpointError: files are missing, the config is unsupported, the
        safetensors file is unreadable, or tensors are missing, mis-shaped
        or unused (pretraining heads "cls." / "lm_head." excepted).
    """
    directory = check_files(directory)
    config = read_config(directory)
    path = directory / "model.safetensors"
    tensors = read_tensors(path)
    arrays, unused = bert_arrays(
        tensors,
        int(config["num_hidden_layers"]),
        int(config["num_attention_heads"]),
        str(path),
        shapes=checkpoint_shapes(config),
    )
    unused = [name for name in unused if not name.startswith(HEAD_PREFIXES)]
    if unused:
        raise CheckpointError(
            f"{path} has tensors the BERT encoder does not use: "
            f"{unused[:5]}{' ...' if len(unused) > 5 else ''}."
        )
    settings = sentence_settings(directory)
    positions = int(config.get("max_position_embeddings", 512))
    settings["max_seq_length"] = min(settings["max_seq_length"], positions)
    return HFBertCheckpoint(directory, config, arrays, settings)
