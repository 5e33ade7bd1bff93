"""A Llama-family decoder checkpoint in one framework-neutral form.

Every Llama-shaped decoder the library reads (a GGUF file, a local Hugging
Face directory, a keras-hub preset) and writes passes through
`LlamaCheckpoint`: a `LlamaConfig` (the architecture, in the Hugging Face
`config.json` vocabulary), the weights as numpy arrays under Hugging Face's
names and in its layout (PyTorch `[out, in]` matrices; queries and keys in
the half-split rotary convention), and the tokenizer as a `tokenizers` JSON
string. Readers produce it, the Keras 3 `DecoderLM` loads it, writers
consume it: one mapping per format, never one per pair of formats.

Weight names (`weight_names`), per layer `i`:

* `model.layers.{i}.self_attn.{q,k,v,o}_proj.weight` (`[h p, d]`,
  `[G p, d]`, `[G p, d]`, `[d, h p]`), with `.bias` on q/k/v when
  `attention_bias` (Qwen2);
* `model.layers.{i}.self_attn.{q,k}_norm.weight` (`[p]`) when `qk_norm`
  (Qwen3);
* `model.layers.{i}.mlp.{gate,up,down}_proj.weight`;
* `model.layers.{i}.input_layernorm.weight`,
  `model.layers.{i}.post_attention_layernorm.weight`;

and `model.embed_tokens.weight`, `model.norm.weight`, and `lm_head.weight`
unless the embeddings are tied.

Gemma (`model_type="gemma"`, Gemma 1: 2B, 7B, CodeGemma) has the same names
and layout with two differences its config implies (`LlamaConfig.embedding_scale`
and `norm_offset`): the token embeddings are multiplied by sqrt(hidden_dim)
on the way in (not on the tied way out), and every RMSNorm weight `w` is
stored as an offset, the norm scaling by `1 + w` (as Hugging Face and
keras-hub both store it). Gemma 2 (`"gemma2"`) adds per layer
`post_attention_layernorm` (after attention, not before the feed-forward),
`pre_feedforward_layernorm` and `post_feedforward_layernorm`, caps on the
attention and output logits, and local (sliding-window) and global layers.
Gemma 3's text decoder (`"gemma3_text"`) has Gemma 2's names plus per-head
query/key norms (offsets too), and the local layers' own RoPE base
(`local_rope_max_wavelength`, Hugging Face's `rope_local_base_freq`).
Pure Python and numpy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from headsize_tf.core.errors import CheckpointError

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text")
GEMMA_TYPES = ("gemma", "gemma2", "gemma3_text")
# Gemma 2 and 3: four norms a block, local and global layers, optional logit caps.
SANDWICH_TYPES = ("gemma2", "gemma3_text")
HIDDEN_ACTIVATIONS = ("silu", "gelu_pytorch_tanh")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """The architecture of a Llama-family decoder (Hugging Face `config.json` terms).

    Attributes:
      model_type: "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2" or
        "gemma3_text".
      vocabulary_size: Tokens in the vocabulary (`vocab_size`).
      num_layers: Decoder blocks (`num_hidden_layers`).
      hidden_dim: Width d (`hidden_size`).
      num_query_heads: Query heads h (`num_attention_heads`).
      num_key_value_heads: Key/value heads G (`num_key_value_heads`).
      head_dim: Per-head size p (`head_dim`; hidden_dim // h by default).
      intermediate_dim: Gated feed-forward size (`intermediate_size`).
      rope_max_wavelength: RoPE base (`rope_theta`).
      rope_scaling: None, or Hugging Face's `rope_scaling` dict ("linear",
        "llama3" or "yarn" under `rope_type`).
      rms_norm_epsilon: RMSNorm epsilon (`rms_norm_eps`).
      tie_word_embeddings: Whether the output projection is the embedding.
      max_sequence_length: Positions (`max_position_embeddings`).
      attention_bias: Whether q/k/v projections have biases (Qwen2).
      sliding_window: None, or the attention window (Mistral).
      qk_norm: Per-head RMSNorm of queries and keys before RoPE (Qwen3).
      hidden_activation: Feed-forward gate activation ("silu": SwiGLU;
        "gelu_pytorch_tanh": GeGLU, Gemma's).
      sliding_window_layers: None (every layer attends within
        `sliding_window`), or one bool per layer: the local layers (Gemma 2's
        even layers).
      attention_logit_soft_cap: None, or the attention logits' cap (Gemma 2's
        `attn_logit_softcapping`).
      final_logit_soft_cap: None, or the output logits' cap (Gemma 2's
        `final_logit_softcapping`).
      query_pre_attn_scalar: None (the head size), or the number whose
        inverse square root scales the queries (Gemma 2 and 3 27B: width /
        query heads).
      local_rope_max_wavelength: None, or the local layers' RoPE base (Gemma
        3's `rope_local_base_freq`; `rope_max_wavelength` and `rope_scaling`
        are then the global layers').
      bos_token_id, eos_token_id: Special token ids (None if unknown).
      layer_heads: None (every layer has `num_query_heads` and
        `num_key_value_heads`), or one `(query heads, key/value heads)` pair
        per layer: a decoder whose heads were pruned layer by layer (llama.cpp's
        "deci" architecture, NVIDIA's Llama-Nemotron NAS models). The two
        counts are then the largest of any layer, and `head_dim` is required.
        Hugging Face's `config.json` has no form for it.
    """

    model_type: str
    vocabulary_size: int
    num_layers: int
    hidden_dim: int
    num_query_heads: int
    num_key_value_heads: int
    intermediate_dim: int
    head_dim: int | None = None
    rope_max_wavelength: float = 10000.0
    rope_scaling: Mapping[str, Any] | None = None
    rms_norm_epsilon: float = 1e-6
    tie_word_embeddings: bool = False
    max_sequence_length: int = 2048
    attention_bias: bool = False
    sliding_window: int | None = None
    qk_norm: bool = False
    hidden_activation: str = "silu"
    sliding_window_layers: tuple[bool, ...] | None = None
    attention_logit_soft_cap: float | None = None
    final_logit_soft_cap: float | None = None
    local_rope_max_wavelength: float | None = None
    query_pre_attn_scalar: float | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    layer_heads: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.model_type not in MODEL_TYPES:
            raise CheckpointError(
                f"Unsupported model_type {self.model_type!r}; expected one of {list(MODEL_TYPES)}."
            )
        for name in (
            "vocabulary_size",
            "num_layers",
            "hidden_dim",
            "num_query_heads",
            "num_key_value_heads",
            "intermediate_dim",
            "max_sequence_length",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
                raise CheckpointError(f"`{name}` must be a positive int; got {value!r}.")
        self._check_layer_heads()  # Each layer's counts divide; the maxima need not.
        if self.layer_heads is None and self.num_query_heads % self.num_key_value_heads:
            raise CheckpointError(
                f"num_key_value_heads={self.num_key_value_heads} does not divide "
                f"num_query_heads={self.num_query_heads}."
            )
        if self.head_dim is None:
            if self.hidden_dim % self.num_query_heads:
                raise CheckpointError(
                    f"hidden_dim {self.hidden_dim} is not a multiple of num_query_heads "
                    f"{self.num_query_heads}; give head_dim."
                )
            object.__setattr__(self, "head_dim", self.hidden_dim // self.num_query_heads)
        if self.head_dim % 2:
            raise CheckpointError(f"head_dim must be even for RoPE; got {self.head_dim}.")
        if self.hidden_activation not in HIDDEN_ACTIVATIONS:
            raise CheckpointError(
                f"Unsupported hidden_activation {self.hidden_activation!r}; expected one of "
                f"{list(HIDDEN_ACTIVATIONS)}."
            )
        if self.model_type in GEMMA_TYPES and self.hidden_activation != "gelu_pytorch_tanh":
            raise CheckpointError(
                "Gemma's feed-forward is GeGLU (hidden_activation 'gelu_pytorch_tanh'); "
                f"got {self.hidden_activation!r}."
            )
        gemma2_only = (
            self.sliding_window_layers is not None
            or self.attention_logit_soft_cap is not None
            or self.final_logit_soft_cap is not None
        )
        if self.model_type == "gemma" and (self.sliding_window is not None or self.qk_norm):
            raise CheckpointError(
                "model_type 'gemma' (Gemma 1) has no sliding window and no query/key norm."
            )
        if gemma2_only and self.model_type not in SANDWICH_TYPES:
            raise CheckpointError(
                "Local and global layers and logit soft caps are Gemma 2's and 3's (model_type "
                f"'gemma2', 'gemma3_text'), not {self.model_type!r}'s."
            )
        if self.model_type in GEMMA_TYPES:
            if self.qk_norm != (self.model_type == "gemma3_text") or self.attention_bias:
                raise CheckpointError(
                    f"model_type {self.model_type!r} has "
                    + (
                        "query/key norms"
                        if self.model_type == "gemma3_text"
                        else "no query/key norm"
                    )
                    + " and no attention biases (Hugging Face's Gemma also biases its output "
                    "projection); got "
                    f"qk_norm={self.qk_norm}, attention_bias={self.attention_bias}."
                )
        if self.qk_norm and self.model_type not in ("qwen3", "gemma3_text"):
            raise CheckpointError(
                f"Query/key norms are Qwen3's and Gemma 3's (model_type 'qwen3', "
                f"'gemma3_text'), not {self.model_type!r}'s."
            )
        if self.sliding_window is not None and (
            isinstance(self.sliding_window, bool) or int(self.sliding_window) <= 0
        ):
            raise CheckpointError(
                f"sliding_window must be a number of tokens > 0 (None: no window); got "
                f"{self.sliding_window!r}."
            )
        if self.sliding_window_layers is not None:
            layers = tuple(bool(flag) for flag in self.sliding_window_layers)
            if len(layers) != self.num_layers or self.sliding_window is None:
                raise CheckpointError(
                    f"sliding_window_layers needs one bool per layer ({self.num_layers}) and a "
                    f"sliding_window; got {list(layers)} and {self.sliding_window!r}."
                )
            object.__setattr__(self, "sliding_window_layers", layers)
        if self.model_type in SANDWICH_TYPES:
            layers = self.sliding_window_layers
            if self.sliding_window is not None and layers is None:  # Every layer local.
                object.__setattr__(self, "sliding_window_layers", (True,) * self.num_layers)
            elif layers is not None and not any(layers):  # No local layer: no window.
                object.__setattr__(self, "sliding_window", None)
                object.__setattr__(self, "sliding_window_layers", None)
                object.__setattr__(self, "local_rope_max_wavelength", None)
        if self.local_rope_max_wavelength is not None and (
            self.model_type != "gemma3_text" or self.sliding_window_layers is None
        ):
            raise CheckpointError(
                "A local RoPE base is Gemma 3's (model_type 'gemma3_text'), for its local layers."
            )
        if (
            self.model_type == "gemma3_text"
            and self.sliding_window_layers is not None
            and self.local_rope_max_wavelength is None
        ):
            raise CheckpointError(
                "Gemma 3's local layers need their RoPE base (local_rope_max_wavelength; "
                "Hugging Face's rope_local_base_freq)."
            )
        if self.rope_scaling is not None:
            object.__setattr__(self, "rope_scaling", dict(self.rope_scaling))
        scalar = self.query_pre_attn_scalar
        if scalar is not None:
            try:
                valid = not isinstance(scalar, bool) and 0 < float(scalar) < float("inf")
            except (TypeError, ValueError):
                valid = False
            if not valid:
                raise CheckpointError(
                    f"query_pre_attn_scalar must be a finite number > 0; got {scalar!r}."
                )
            if self.model_type not in SANDWICH_TYPES and float(scalar) != self.head_dim:
                raise CheckpointError(
                    f"A query scale of its own (query_pre_attn_scalar={scalar}) is Gemma 2's and "
                    f"3's (model_type 'gemma2', 'gemma3_text'), not {self.model_type!r}'s."
                )
            # The head size is the default: one config, one form.
            value = None if float(scalar) == self.head_dim else float(scalar)
            object.__setattr__(self, "query_pre_attn_scalar", value)

    def _check_layer_heads(self) -> None:
        """Validates `layer_heads`; equal pairs collapse to the two counts (one form)."""
        if self.layer_heads is None:
            return
        try:
            pairs = tuple((int(q), int(kv)) for q, kv in self.layer_heads)
        except (TypeError, ValueError):
            pairs = ()
        if len(pairs) != self.num_layers or any(q <= 0 or kv <= 0 or q % kv for q, kv in pairs):
            raise CheckpointError(
                f"layer_heads must give one (query heads, key/value heads) pair per layer "
                f"({self.num_layers}), each count > 0 and the second dividing the first; got "
                f"{self.layer_heads!r}."
            )
        if self.head_dim is None:
            raise CheckpointError("A config with per-layer heads (layer_heads) needs head_dim.")
        if len(set(pairs)) == 1:
            object.__setattr__(self, "num_query_heads", pairs[0][0])
            object.__setattr__(self, "num_key_value_heads", pairs[0][1])
            object.__setattr__(self, "layer_heads", None)
            return
        object.__setattr__(self, "num_query_heads", max(q for q, _ in pairs))
        object.__setattr__(self, "num_key_value_heads", max(kv for _, kv in pairs))
        object.__setattr__(self, "layer_heads", pairs)

    def heads(self, layer: int) -> tuple[int, int]:
        """Layer `layer`'s (query heads, key/value heads)."""
        if self.layer_heads is None:
            return self.num_query_heads, self.num_key_value_heads
        return self.layer_heads[layer]

    @property
    def query_scale(self) -> float | None:
        """The softmax scale where it is not 1 / sqrt(head_dim) (Gemma 2 and 3 27B), else None."""
        scalar = self.query_pre_attn_scalar
        return None if scalar is None else float(scalar) ** -0.5

    @property
    def embedding_scale(self) -> float | None:
        """What the token embeddings are multiplied by on the way in (Gemma: sqrt(width))."""
        return float(np.sqrt(self.hidden_dim)) if self.model_type in GEMMA_TYPES else None

    @property
    def norm_offset(self) -> float:
        """1 where RMSNorm weights are stored as offsets (scale `1 + w`: Gemma), else 0."""
        return 1.0 if self.model_type in GEMMA_TYPES else 0.0

    @property
    def post_norms(self) -> bool:
        """Whether attention and feed-forward outputs are normalised too (Gemma 2, 3)."""
        return self.model_type in SANDWICH_TYPES

    # ------------------------------------------------------------ Hugging Face
    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> LlamaConfig:
        """The config of a Hugging Face `config.json` dict; other model types are refused."""
        model_type = config.get("model_type")
        if model_type not in MODEL_TYPES:
            raise CheckpointError(
                f"config.json has model_type {model_type!r}; supported: {list(MODEL_TYPES)}."
            )
        try:
            heads = int(config["num_attention_heads"])
            hidden = int(config["hidden_size"])
            window = config.get("sliding_window")
            if model_type == "qwen2" and not config.get("use_sliding_window", False):
                window = None
            activation = config.get("hidden_act", "silu")
            gemma2 = {}
            if model_type in SANDWICH_TYPES:
                gemma2 = _gemma2_fields(config, heads, hidden, model_type)
            if model_type in GEMMA_TYPES:
                # Gemma was trained with the tanh GELU; early configs say "gelu" in hidden_act
                # (Hugging Face then used the tanh one as well) and name it in
                # hidden_activation.
                activation = config.get("hidden_activation") or "gelu_pytorch_tanh"
            fields = dict(
                model_type=model_type,
                vocabulary_size=int(config["vocab_size"]),
                num_layers=int(config["num_hidden_layers"]),
                hidden_dim=hidden,
                num_query_heads=heads,
                num_key_value_heads=int(config.get("num_key_value_heads") or heads),
                intermediate_dim=int(config["intermediate_size"]),
                head_dim=config.get("head_dim") or hidden // heads,
                rms_norm_epsilon=float(config.get("rms_norm_eps", 1e-6)),
                tie_word_embeddings=bool(
                    config.get("tie_word_embeddings", model_type in GEMMA_TYPES)
                ),
                max_sequence_length=int(config.get("max_position_embeddings", 2048)),
                attention_bias=bool(config.get("attention_bias", model_type == "qwen2")),
                sliding_window=None if window is None else int(window),
                qk_norm=model_type in ("qwen3", "gemma3_text"),
                hidden_activation=str(activation),
                bos_token_id=_optional_int(config.get("bos_token_id")),
                eos_token_id=_optional_int(config.get("eos_token_id")),
            )
            rope = _rope_fields(config, model_type, gemma2.get("sliding_window_layers"))
            return cls(**{**fields, **gemma2, **rope})
        except KeyError as error:
            raise CheckpointError(f"config.json lacks {error.args[0]!r}.") from None

    def to_hf_config(self) -> dict[str, Any]:
        """A Hugging Face `config.json` dict of this architecture."""
        if self.layer_heads is not None:
            raise CheckpointError(
                "Hugging Face's config.json has one head count for every layer; this model's "
                "layers differ in heads: write a GGUF file (llama.cpp's 'deci' architecture) or "
                ".keras instead."
            )
        architectures = {
            "llama": "LlamaForCausalLM",
            "mistral": "MistralForCausalLM",
            "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM",
            "gemma": "GemmaForCausalLM",
            "gemma2": "Gemma2ForCausalLM",
            "gemma3_text": "Gemma3ForCausalLM",
        }
        config: dict[str, Any] = {
            "architectures": [architectures[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": int(self.vocabulary_size),
            "num_hidden_layers": int(self.num_layers),
            "hidden_size": int(self.hidden_dim),
            "num_attention_heads": int(self.num_query_heads),
            "num_key_value_heads": int(self.num_key_value_heads),
            "head_dim": int(self.head_dim),
            "intermediate_size": int(self.intermediate_dim),
            "rope_theta": float(self.rope_max_wavelength),
            "rope_scaling": None if self.rope_scaling is None else dict(self.rope_scaling),
            "rms_norm_eps": float(self.rms_norm_epsilon),
            "tie_word_embeddings": bool(self.tie_word_embeddings),
            "max_position_embeddings": int(self.max_sequence_length),
            "attention_bias": bool(self.attention_bias),
            "hidden_act": self.hidden_activation,
            "torch_dtype": "float32",
        }
        if self.model_type in GEMMA_TYPES:
            config["hidden_activation"] = self.hidden_activation
        if self.model_type == "gemma3_text" and self.local_rope_max_wavelength is not None:
            config["rope_local_base_freq"] = float(self.local_rope_max_wavelength)
        if self.model_type in SANDWICH_TYPES:
            scalar = self.query_pre_attn_scalar or self.head_dim
            config["query_pre_attn_scalar"] = int(scalar) if float(scalar).is_integer() else scalar
            config["attn_logit_softcapping"] = self.attention_logit_soft_cap
            config["final_logit_softcapping"] = self.final_logit_soft_cap
            layers = self.sliding_window_layers or (self.sliding_window is not None,) * (
                self.num_layers
            )
            config["layer_types"] = [
                "sliding_attention" if local else "full_attention" for local in layers
            ]
            config["sliding_window"] = self.sliding_window or self.max_sequence_length
        if self.model_type == "qwen2":
            config["use_sliding_window"] = self.sliding_window is not None
        if self.sliding_window is not None or self.model_type in ("mistral", "qwen2"):
            config["sliding_window"] = self.sliding_window
        if self.bos_token_id is not None:
            config["bos_token_id"] = int(self.bos_token_id)
        if self.eos_token_id is not None:
            config["eos_token_id"] = int(self.eos_token_id)
        return config


def _gemma2_fields(
    config: Mapping[str, Any], heads: int, hidden: int, model_type: str
) -> dict[str, Any]:
    """A Hugging Face Gemma 2 or 3 config's caps, local layers, local RoPE base and query scale."""
    # Keys a config leaves out take transformers' defaults (Gemma2Config, Gemma3TextConfig).
    gemma3 = model_type == "gemma3_text"
    head_dim = int(config.get("head_dim") or 256)
    scalar = config.get("query_pre_attn_scalar", 256)  # null: the head size.
    window = config.get("sliding_window", 4096)
    layers = int(config["num_hidden_layers"])
    types = config.get("layer_types")
    if types is not None:
        local = tuple(kind == "sliding_attention" for kind in types)
    elif model_type == "gemma2":  # Transformers' default: the even layers are local.
        local = tuple(i % 2 == 0 for i in range(layers))
    else:  # Gemma 3: every sliding_window_pattern-th layer is global, the others local.
        pattern = int(config.get("sliding_window_pattern", 6))
        local = tuple((i + 1) % pattern != 0 for i in range(layers))
    if window is None or not any(local):  # No local layer: no window.
        window, local = None, None
    caps = (None, None) if gemma3 else (50.0, 30.0)
    fields: dict[str, Any] = {
        "head_dim": head_dim,
        "sliding_window": None if window is None else int(window),
        "sliding_window_layers": local,
        "attention_logit_soft_cap": _optional_float(config.get("attn_logit_softcapping", caps[0])),
        "final_logit_soft_cap": _optional_float(config.get("final_logit_softcapping", caps[1])),
        "query_pre_attn_scalar": scalar,
    }
    return fields


def _rope_fields(
    config: Mapping[str, Any], model_type: str, local_layers: tuple[bool, ...] | None
) -> dict[str, Any]:
    """RoPE base and scaling of a Hugging Face config, in transformers 4's or 5's terms.

    Transformers 4 writes `rope_theta`, `rope_scaling` (and Gemma 3's
    `rope_local_base_freq`); transformers 5 writes one `rope_parameters` dict (Gemma
    3: one per layer type, `full_attention` and `sliding_attention`). Values inside
    `rope_parameters` come first, as in transformers 5; a config giving both
    `rope_parameters` and `rope_scaling` is refused (each version reads it
    differently).
    """
    gemma3 = model_type == "gemma3_text"
    parameters = _rope_dict(config, "rope_parameters")
    scaling = _rope_dict(config, "rope_scaling")
    if parameters and scaling:
        raise CheckpointError(
            "config.json gives its RoPE twice, as rope_parameters (transformers 5) and "
            "rope_scaling (transformers 4): keep one."
        )
    nested = sorted(parameters.keys() & {"full_attention", "sliding_attention"})
    local: dict[str, Any] = {}
    if nested and not gemma3:
        raise CheckpointError(
            f"config.json gives rope_parameters per layer type ({', '.join(nested)}); "
            f"model_type {model_type!r} takes one dict (per layer type: Gemma 3)."
        )
    if nested:
        local = _rope_dict(parameters, "sliding_attention", "rope_parameters.")
        parameters = _rope_dict(parameters, "full_attention", "rope_parameters.")
    elif parameters and gemma3:
        raise CheckpointError(
            "Gemma 3's rope_parameters are one dict per layer type (full_attention, "
            "sliding_attention); got one flat dict, which transformers 5 ignores."
        )
    elif not parameters:
        parameters = scaling
    theta = parameters.pop("rope_theta", config.get("rope_theta", 1e6 if gemma3 else 1e4))
    _check_full_rotation(parameters.pop("partial_rotary_factor", None), config)
    kind = parameters.get("rope_type", parameters.get("type", "default"))
    fields: dict[str, Any] = {
        "rope_max_wavelength": _rope_base(theta, "rope_theta"),
        "rope_scaling": None if kind == "default" else parameters,
    }
    if gemma3 and local_layers is not None:
        _check_full_rotation(local.get("partial_rotary_factor"), config)
        local_kind = local.get("rope_type", local.get("type", "default"))
        if local_kind != "default":
            raise CheckpointError(
                "config.json scales the local layers' RoPE (rope_parameters.sliding_attention "
                f"rope_type {local_kind!r}): only the global layers' scaling is read."
            )
        base = local.get("rope_theta", config.get("rope_local_base_freq", 1e4))
        fields["local_rope_max_wavelength"] = _rope_base(base, "the local layers' rope_theta")
    return fields


def _rope_dict(config: Mapping[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
    """A copy of `config[key]`, a dict of RoPE settings; {} where it is missing or null."""
    value = config.get(key)
    if value is not None and not isinstance(value, Mapping):
        raise CheckpointError(f"config.json's {prefix}{key} must be a dict; got {value!r}.")
    return dict(value or {})


def _rope_base(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise CheckpointError(f"config.json's {name} must be a number > 0; got {value!r}.")
    return float(value)


def _check_full_rotation(factor: Any, config: Mapping[str, Any]) -> None:
    factor = config.get("partial_rotary_factor", 1.0) if factor is None else factor
    if factor is not None and factor != 1:
        raise CheckpointError(
            f"partial_rotary_factor {factor} rotates part of each head; these decoders rotate "
            "all of it (1.0)."
        )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _optional_int(value: Any) -> int | None:
    if isinstance(value, list | tuple):  # Some configs list several end tokens.
        value = value[0] if value else None
    return None if value is None else int(value)


@dataclasses.dataclass
class LlamaCheckpoint:
    """A Llama-family decoder: config, Hugging Face-named numpy weights, tokenizer.

    Attributes:
      config: The architecture.
      weights: Name -> float32 array, Hugging Face names and layout.
      tokenizer_json: A `tokenizers.Tokenizer` JSON string, or None.
      chat_template: The chat template (Jinja), or None.
      source: Where it came from, for reports ("gguf:/path", "hf:/dir", ...).
      add_bos_token: Whether text starts with `config.bos_token_id` (llama.cpp's
        `tokenizer.ggml.add_bos_token`; Hugging Face's `add_bos_token` or
        post-processor). SmolLM2 and Qwen files say no; Llama, Mistral and Gemma yes.
    """

    config: LlamaConfig
    weights: dict[str, np.ndarray]
    tokenizer_json: str | None = None
    chat_template: str | None = None
    source: str = ""
    add_bos_token: bool = True

    def check(self) -> None:
        """Raises a `CheckpointError` naming the first missing or misshapen weight."""
        expected = weight_shapes(self.config)
        for name, shape in expected.items():
            if name not in self.weights:
                raise CheckpointError(f"{self.source or 'checkpoint'} lacks weight {name!r}.")
            if tuple(self.weights[name].shape) != shape:
                raise CheckpointError(
                    f"{self.source or 'checkpoint'}: weight {name!r} has shape "
                    f"{tuple(self.weights[name].shape)}; expected {shape}."
                )


def weight_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Hugging Face name -> shape of every weight of `config`, in a fixed order."""
    d, p, f = config.hidden_dim, config.head_dim, config.intermediate_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocabulary_size, d)}
    for i in range(config.num_layers):
        h, g = config.heads(i)
        prefix = f"model.layers.{i}."
        shapes[prefix + "input_layernorm.weight"] = (d,)
        shapes[prefix + "self_attn.q_proj.weight"] = (h * p, d)
        shapes[prefix + "self_attn.k_proj.weight"] = (g * p, d)
        shapes[prefix + "self_attn.v_proj.weight"] = (g * p, d)
        if config.attention_bias:
            shapes[prefix + "self_attn.q_proj.bias"] = (h * p,)
            shapes[prefix + "self_attn.k_proj.bias"] = (g * p,)
            shapes[prefix + "self_attn.v_proj.bias"] = (g * p,)
        if config.qk_norm:
            shapes[prefix + "self_attn.q_norm.weight"] = (p,)
            shapes[prefix + "self_attn.k_norm.weight"] = (p,)
        shapes[prefix + "self_attn.o_proj.weight"] = (d, h * p)
        shapes[prefix + "post_attention_layernorm.weight"] = (d,)
        if config.post_norms:  # Gemma 2: post_attention_layernorm follows attention.
            shapes[prefix + "pre_feedforward_layernorm.weight"] = (d,)
            shapes[prefix + "post_feedforward_layernorm.weight"] = (d,)
        shapes[prefix + "mlp.gate_proj.weight"] = (f, d)
        shapes[prefix + "mlp.up_proj.weight"] = (f, d)
        shapes[prefix + "mlp.down_proj.weight"] = (d, f)
    shapes["model.norm.weight"] = (d,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocabulary_size, d)
    return shapes


def weight_names(config: LlamaConfig) -> list[str]:
    """Every weight name of `config` (`weight_shapes`' keys)."""
    return list(weight_shapes(config))
