"""`load_hub_preset`: a keras-hub preset (a name or a local directory) as a `HubModel`.

A local directory is either a keras-hub preset (`save_to_preset`:
`config.json`, `metadata.json`, weights, tokenizer) or the library's layout
of a pruned or converted model (`headsize_tf.keras3.hub.layout`). A name
(`gpt2_base_en`, `kaggle://...`, `hf://...`) is downloaded by keras-hub
(Kaggle or Hugging Face): it needs the network. `HEADSIZE_TF_OFFLINE=1` (or
`HF_HUB_OFFLINE=1`) says there is none, so a name fails at once instead of
after keras-hub's retries.
"""

from __future__ import annotations

import json
import os
import pathlib
import zipfile
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from headsize_tf.core.errors import CheckpointError
from headsize_tf.keras3.hub import layout
from headsize_tf.keras3.hub.architectures import (
    ARCHITECTURES,
    HF_MODEL_TYPES,
    Architecture,
    architecture_of_class,
    supported,
)
from headsize_tf.keras3.hub.hub_model import HubModel
from headsize_tf.keras3.hub.importer import import_hub_model
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone
from headsize_tf.keras3.modeling.causal_lm import CausalLM
from headsize_tf.keras3.pretrained._keras_hub import require_keras_hub

OFFLINE_VARIABLES = ("HEADSIZE_TF_OFFLINE", "HF_HUB_OFFLINE")


def offline() -> bool:
    """Whether the environment says there is no network (`OFFLINE_VARIABLES`)."""
    return any(
        os.environ.get(name, "").lower() in ("1", "true", "yes") for name in OFFLINE_VARIABLES
    )


def _needs_network(preset: str, why: str = "") -> CheckpointError:
    return CheckpointError(
        f"keras-hub preset {preset!r} is a name: it is downloaded from Kaggle / Hugging Face and "
        f"needs the network{why}; offline, pass a local preset directory (written by "
        "save_to_preset)."
    )


def _looks_like_path(preset: str) -> bool:
    if "://" in preset:  # kaggle://, hf://, modelscope://
        return False
    return preset.startswith((".", "/", "~")) or os.sep in preset or "." in preset


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path} is not readable JSON ({err}).") from None


def _architecture(config: dict[str, Any], preset: str) -> Architecture:
    name = config.get("class_name") or HF_MODEL_TYPES.get(config.get("model_type", ""))
    arch = architecture_of_class(str(name))
    if arch is None:
        found = config.get("class_name") or config.get("model_type") or "an unknown model"
        raise CheckpointError(
            f"keras-hub preset {preset} holds {found}; the bridge supports {supported()}."
        )
    return arch


def check_tool(arch: Architecture, tool: str | None) -> None:
    """Raises a `CheckpointError` when the command `tool` does not apply to `arch`."""
    if tool is None or tool in arch.tools:
        return
    takers = [a.name for a in ARCHITECTURES.values() if tool in a.tools]
    raise CheckpointError(
        f"{tool} does not apply to {arch.name} ({arch.model_kind}); {tool} takes "
        f"{', '.join(takers)} presets, and {arch.name} takes {', '.join(arch.tools)}."
    )


def load_hub_preset(preset: str | os.PathLike, tool: str | None = None) -> HubModel:
    """A keras-hub preset (name or directory) imported as a `HubModel`.

    The preset's task is kept when it is the architecture's text classifier
    (`BertTextClassifier`, `DistilBertTextClassifier`) or `GPT2CausalLM`; an
    encoder preset without one (e.g. `bert_base_en_uncased`) imports the
    backbone with its text-classifier preprocessor, and tools that need a head
    add one.

    Args:
      preset: A keras-hub preset name or handle (`gpt2_base_en`,
        `kaggle://keras/gpt2/keras/gpt2_base_en`, `hf://...`; needs the
        network), a local keras-hub preset directory, or a directory written
        by `HubModel.save`.
      tool: The command that will use it (`embed`, `compress`, `prune`):
        checked against the architecture before the weights load.

    Raises:
      CheckpointError: A name while offline, a directory that is not a
        preset, an unsupported architecture (the message names the supported
        ones), or unreadable files.
      MissingExtraError: keras-hub is not installed (the message names the
        `hub` extra).

    Example:

    >>> gpt2 = load_hub_preset("gpt2_base_en")      # on Colab
    >>> tiny = load_hub_preset("presets/tiny_gpt2")  # offline: a local directory
    """
    text = os.fspath(preset)
    path = pathlib.Path(text).expanduser()
    require_keras_hub()
    if path.is_dir():
        if (path / layout.HUB_FILE).exists():
            saved = _read_json(path / layout.HUB_FILE).get("architecture")
            if saved in ARCHITECTURES:
                check_tool(ARCHITECTURES[saved], tool)
            return read_hub_directory(path)
        if not (path / layout.PRESET_CONFIG_FILE).exists():
            raise CheckpointError(
                f"{path} is not a keras-hub preset directory: it has no "
                f"{layout.PRESET_CONFIG_FILE} (save_to_preset writes config.json, metadata.json, "
                f"weights and tokenizer) and no {layout.HUB_FILE} (written by HubModel.save)."
            )
        arch = _architecture(_read_json(path / layout.PRESET_CONFIG_FILE), str(path))
        check_tool(arch, tool)
        return _load(str(path), arch, lambda name: (path / name).exists())
    if path.exists():
        raise CheckpointError(f"{path} is a file; a keras-hub preset is a directory or a name.")
    if _looks_like_path(text):
        raise CheckpointError(f"keras-hub preset directory {text} does not exist.")
    if offline():
        raise _needs_network(text, f" ({'/'.join(OFFLINE_VARIABLES)} is set)")
    return _load_named(text, tool)


def _load_named(name: str, tool: str | None) -> HubModel:
    from keras_hub.src.utils import preset_utils  # keras-hub's loader of named presets

    try:
        config = preset_utils.load_json(name, layout.PRESET_CONFIG_FILE)
        arch = _architecture(config, name)
        check_tool(arch, tool)
        return _load(name, arch, lambda file: preset_utils.check_file_exists(name, file))
    except CheckpointError:
        raise
    except OSError as err:  # requests' ConnectionError, DNS, timeouts
        raise _needs_network(name, f" ({type(err).__name__})") from None
    except ValueError as err:
        message = " ".join(str(err).split())
        if "Unknown preset identifier" in message:
            raise CheckpointError(
                f"{name!r} is neither a local directory nor a keras-hub preset name "
                "(e.g. gpt2_base_en, bert_base_en_uncased, distil_bert_base_en_uncased)."
            ) from None
        raise CheckpointError(f"keras-hub preset {name!r}: {message[:300]}") from None


def _load(preset: str, arch: Architecture, has_file: Callable[[str], bool]) -> HubModel:
    keras_hub = require_keras_hub()
    models = keras_hub.models
    task_class = getattr(models, arch.task_class)
    has_tokenizer = has_file(layout.PRESET_TOKENIZER_FILE)
    task_name = None
    if has_file(layout.PRESET_TASK_FILE):
        task_name = _task_class_name(preset)
    if arch.causal_lm and has_tokenizer:
        return import_hub_model(task_class.from_preset(preset), source=preset)
    if task_name == arch.task_class:
        return import_hub_model(task_class.from_preset(preset), source=preset)
    backbone = getattr(models, arch.backbone_class).from_preset(preset)
    preprocessor = None
    if has_tokenizer:
        preprocessor = getattr(models, arch.preprocessor_class).from_preset(preset)
    return import_hub_model(backbone, preprocessor=preprocessor, source=preset)


def _task_class_name(preset: str) -> str | None:
    local = pathlib.Path(preset) / layout.PRESET_TASK_FILE
    if local.exists():
        return _read_json(local).get("class_name")
    from keras_hub.src.utils import preset_utils

    return preset_utils.load_json(preset, layout.PRESET_TASK_FILE).get("class_name")


def read_hub_directory(directory: str | os.PathLike) -> HubModel:
    """A `HubModel` saved in the library's layout (`headsize_tf.keras3.hub.layout`)."""
    require_keras_hub()  # Registers the tokenizer classes a CausalLM holds.
    directory = pathlib.Path(directory)
    config = _read_json(directory / layout.HUB_FILE)
    if config.get("format") != layout.FORMAT:
        raise CheckpointError(
            f"{directory / layout.HUB_FILE} has format {config.get('format')!r}; expected "
            f"{layout.FORMAT!r}."
        )
    path = directory / config.get("model", layout.MODEL_FILE)
    if not path.exists():
        raise CheckpointError(f"{directory} has no {path.name}.")
    try:
        backbone = keras.saving.load_model(str(path))
    except (OSError, ValueError, TypeError, KeyError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"{path} is not a loadable Keras model ({err}).") from None
    if not isinstance(backbone, BertBackbone | CausalLM):
        raise CheckpointError(f"{path} holds a {type(backbone).__name__}, not ours.")
    preprocessor = None
    if config.get("preprocessor"):
        pre_dir = directory / config["preprocessor"]
        pre_config = _read_json(pre_dir / layout.PRESET_PREPROCESSOR_FILE)
        preprocessor = keras.saving.deserialize_keras_object(pre_config)
        preprocessor.load_preset_assets(str(pre_dir))
    head, dropout = None, 0.1
    if config.get("head"):
        spec = config["head"]
        weights = np.load(directory / layout.HEAD_FILE)
        head = keras.layers.Dense(
            spec["num_classes"],
            activation=keras.activations.deserialize(spec["activation"]),
            name="logits",
        )
        head.build((None, backbone.output["pooled_output"].shape[-1]))
        head.set_weights([weights["kernel"], weights["bias"]])
        dropout = spec["dropout"]
    return HubModel(
        config["architecture"],
        backbone,
        head=head,
        head_dropout=dropout,
        preprocessor=preprocessor,
        hub_config=config.get("hub_config") or {},
        source=config.get("source") or str(directory),
        pooling=config.get("pooling", "mean"),
        normalize=config.get("normalize", True),
    )
