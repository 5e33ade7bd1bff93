"""Cached decoding and generation of the Keras 3 `CausalLM` (`GenerationMixin`).

`CausalLM` inherits `GenerationMixin` (before `keras.Model` in its bases):
`prefill` runs a prompt and returns every block's fixed-length decoding cache,
`decode_step` the logits of one new token per row over those caches,
`compiled_decode_step` that step compiled by the backend, and `generate`
continues a prompt (token ids, or text through an attached tokenizer), greedy
or sampled.

The mixin holds no state of its own (`generate` keeps its compiled step on the
model) and is no model by itself. The class it is mixed into provides:

* `_blocks`: the decoder blocks, each with `call_cached(x, cache,
  attention_mask=..., decode_loop_step=...)` (`TransformerEncoder`);
* `_embed(token_ids, start)`: the input embeddings of tokens at positions
  start, start + 1, ... (here: token plus learned position embeddings, from
  `token_embedding` and `position_embedding`; rotary models embed tokens only
  and rotate inside attention) and `_logits(x)`: the final norm and the
  output projection;
* optionally `_prefill_mask` / `_step_mask` (here causal; a sliding window
  narrows them), each one mask for every block or a list of one per block
  (local and global layers: Gemma 2);
* `hidden_dim`, `vocabulary_size`, `max_sequence_length` and `tokenizer`
  (None, or a Keras tokenizer layer);
* `variables` and `dtype_policy` (a Keras model's).

Backend-agnostic (`keras.ops`) but for `compiled_decode_step`, which imports
the running backend's compiler (`tf.function` / `jax.jit`) lazily.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from headsize_tf.core.spec import AttentionSpec, check_positive_int


class GenerationMixin:
    """`prefill`, `decode_step`, `compiled_decode_step` and `generate` (see the module docstring).

    It also holds what the library's LMs share beside generation: `attention_spec`,
    `transformer_layers`, `attention_layers`, `_tied_logits` (the output projection
    through the token embedding) and `from_config`.
    """

    @property
    def attention_spec(self) -> AttentionSpec:
        """The spec ("sequence_length" resolved to `max_sequence_length`)."""
        return self.attention.with_sequence_length(self.max_sequence_length)

    @property
    def transformer_layers(self) -> list[Any]:
        """The decoder blocks, first to last."""
        return list(self._blocks)

    @property
    def attention_layers(self) -> list[Any]:
        """The self-attention layer of each block."""
        return [block.attention_layer for block in self._blocks]

    def attention_inputs(self, token_ids: Any) -> Iterator[tuple[int, Any, Any]]:
        """Each block's self-attention input on a batch of windows, first block to last.

        The forward pass of `call` (the model's own embeddings and causal mask,
        a sliding window's included), stopped at each block to yield what its
        attention layer sees: the block's first norm of the residual stream
        (pre-norm blocks) or the residual stream itself (post-norm ones): what
        calibration statistics measure and layer-wise healing distils on (each
        layer then alone, under `attention_mask`).

        Args:
          token_ids: `[batch, length]` token windows.

        Yields:
          (block index, the block, its attention input `[batch, length, hidden_dim]`).
        """
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        batch, length = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
        masks = self._per_block(self._prefill_mask(batch, length))
        x = self._embed(token_ids, 0)
        for index, (block, mask) in enumerate(zip(self._blocks, masks, strict=True)):
            pre_norm = getattr(block, "normalize_first", True)
            yield index, block, block._self_attention_layer_norm(x) if pre_norm else x
            x = block(x, attention_mask=mask)

    def attention_masks(self, length: int) -> list[Any]:
        """Each block's self-attention mask `[1, length, length]` on unpadded windows.

        Causal, and in a block with a sliding window (`DecoderLM(sliding_window=...)`,
        in the layers `sliding_window_layers` names) only the last
        `sliding_window` positions: what layer-wise healing trains each
        attention layer under.
        """
        return self._per_block(self._prefill_mask(1, length))

    def _per_block(self, mask: Any) -> list[Any]:
        """A mask for every block, or a list of one per block, as a list of one per block."""
        return list(mask) if isinstance(mask, list | tuple) else [mask] * len(self._blocks)

    def _tied_logits(self, x: Any) -> Any:
        """Logits of normalised states `x` through the token embedding (tied output)."""
        embedding = self.token_embedding
        if embedding.quantization_mode:
            # A quantized table holds integers and per-row scales: looking up every row
            # dequantizes it the way the input side does (int8, int4, blocks, LoRA).
            table = embedding(ops.arange(self.vocabulary_size, dtype="int32"))
        else:
            table = embedding.embeddings
        return ops.matmul(x, ops.transpose(ops.cast(table, x.dtype)))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        # A quantized model's layers keep their own policies (int8, float8, int4, GPTQ): saved
        # as a `DTypePolicyMap` by layer path below the model's own (keras-hub's backbones
        # save theirs by absolute path), which `from_config` puts under the new model's path
        # so that its layers build quantized variables before the saved ones load.
        dtype = self.dtype_policy
        if not isinstance(dtype, keras.dtype_policies.DTypePolicyMap):
            policies = keras.dtype_policies.DTypePolicyMap(default_policy=dtype)
            prefix = f"{self.path}/"
            for layer in self._flatten_layers(include_self=False):
                if layer.quantization_mode is not None and layer.path.startswith(prefix):
                    policies[layer.path[len(prefix) :]] = layer.dtype_policy
            if len(policies):
                config["dtype"] = keras.dtype_policies.serialize(policies)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> Any:
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.get(config["dtype"])
        if isinstance(config.get("activation"), dict):
            config["activation"] = keras.activations.deserialize(config["activation"])
        policies = config.get("dtype")
        if isinstance(policies, keras.dtype_policies.DTypePolicyMap):
            # Paths below the model's: the model about to be built is at the path a layer of
            # its name gets when built here (the current name scope, then the name).
            probe = keras.layers.Layer(name=config.setdefault("name", cls.__name__.lower()))
            probe.build(None)
            root = probe.path
            config["dtype"] = keras.dtype_policies.DTypePolicyMap(
                default_policy=policies.default_policy,
                policy_map={f"{root}/{key}": value for key, value in policies.items()},
            )
        model = cls(**config)
        policies = model.dtype_policy
        if isinstance(policies, keras.dtype_policies.DTypePolicyMap):
            # The layers were built from the saved map (quantized where it says); each now
            # keeps its own policy, as after `quantize`, since Keras' kernel serialization
            # reads `layer.dtype_policy.quantization_mode`, which a map leaves None (a
            # reloaded model could not be saved again).
            for layer in model._flatten_layers(include_self=False):
                if isinstance(layer._dtype_policy, keras.dtype_policies.DTypePolicyMap):
                    path = layer.path
                    layer._dtype_policy = policies[path] if path else policies.default_policy
            model._dtype_policy = policies.default_policy
        return model

    def _embed(self, token_ids: Any, start: int) -> Any:
        """Token plus position embeddings of `token_ids` at positions start, start + 1, ..."""
        tokens = self.token_embedding(token_ids)
        table = ops.convert_to_tensor(self.position_embedding.position_embeddings)
        positions = ops.slice(table, (start, 0), (ops.shape(token_ids)[1], self.hidden_dim))
        return tokens + ops.cast(positions, tokens.dtype)[None]

    def _prefill_mask(self, batch: Any, prompt: Any) -> Any:
        """The prompt's self-attention mask `[batch, prompt, prompt]` (causal)."""
        causal = ops.cast(ops.tril(ops.ones((prompt, prompt))), "int32")
        return ops.broadcast_to(causal[None], (batch, prompt, prompt))

    def _step_mask(self, batch: Any, length: int, index: Any) -> Any:
        """A new token's mask `[batch, 1, length]` over the caches (positions <= index)."""
        visible = ops.arange(length) <= index
        return ops.broadcast_to(visible[None, None], (batch, 1, length))

    def prefill(self, token_ids: Any, length: int) -> tuple[Any, list[dict[str, Any]]]:
        """Logits of a prompt and every block's decoding cache, padded to `length` positions.

        Args:
          token_ids: `[batch, prompt length]` prompt tokens.
          length: Positions the caches hold (prompt plus tokens to generate).

        Returns:
          (logits `[batch, prompt length, vocabulary_size]`, one fixed-length
          cache per block for `decode_step`).
        """
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        batch, prompt = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
        if not 1 <= prompt <= length <= self.max_sequence_length:
            raise ValueError(
                f"prefill needs 1 <= prompt length ({prompt}) <= length ({length}) <= "
                f"max_sequence_length ({self.max_sequence_length})."
            )
        masks = self._per_block(self._prefill_mask(batch, prompt))
        x, caches = self._embed(token_ids, 0), []
        for block, mask in zip(self._blocks, masks, strict=True):
            x, cache = block.call_cached(x, None, attention_mask=mask)
            pad = [(0, 0), (0, length - prompt)] + [(0, 0)] * 2
            caches.append({name: ops.pad(t, pad[: len(t.shape)]) for name, t in cache.items()})
        return self._logits(x), caches

    def decode_step(
        self, token_ids: Any, caches: list[dict[str, Any]], index: int
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Logits of one new token per row at position `index`, attending to the caches.

        Args:
          token_ids: `[batch, 1]` tokens at position `index`.
          caches: The blocks' fixed-length caches (`prefill`, or a previous step).
          index: The new tokens' position (positions before it are in the caches):
            an int, checked against the caches' length, or a traced int32 scalar
            (a loop counter inside `tf.function` / `jax.jit`), not checked.

        Returns:
          (logits `[batch, 1, vocabulary_size]`, the updated caches).
        """
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        length = next(iter(caches[0].values())).shape[1]  # Time is axis 1 of every entry.
        concrete = isinstance(index, int | np.integer)
        if tuple(token_ids.shape[1:]) != (1,) or (concrete and not 0 <= int(index) < length):
            raise ValueError(
                f"decode_step takes [batch, 1] tokens at an index in [0, {length}) (the "
                f"caches' length); got shape {tuple(token_ids.shape)} and index {index}."
            )
        return self._decode(token_ids, caches, index)

    def _decode(self, token_ids, caches, index):
        """`decode_step` without its checks: `index` may be a traced scalar."""
        length = next(iter(caches[0].values())).shape[1]  # Time is axis 1 of every entry.
        masks = self._per_block(self._step_mask(ops.shape(token_ids)[0], length, index))
        x, updated = self._embed(token_ids, index), []
        for block, cache, mask in zip(self._blocks, caches, masks, strict=True):
            x, cache = block.call_cached(x, cache, attention_mask=mask, decode_loop_step=index)
            updated.append(cache)
        return self._logits(x), updated

    def compiled_decode_step(self) -> Any:
        """`decode_step` compiled by the backend (`tf.function` or `jax.jit`), same arguments.

        The index is a traced scalar, so one compilation serves every step of
        a (batch size, cache length) shape; each new shape compiles once more.
        On JAX the weights are passed in (a `StatelessScope`) and the caches
        are donated (updated in place: do not reuse caches passed to a step),
        on TensorFlow the variables are read, so assigned weights are seen. Other backends
        get the eager `decode_step`. `generate` keeps the compiled step and
        makes a new one when the model's variables or dtype policy change
        (e.g. LoRA enabled, quantized).
        """
        backend = keras.backend.backend()
        if backend == "tensorflow":
            import tensorflow as tf

            # One trace per cache length; no autograph (the step is plain Python over the
            # blocks, as `jax.jit` traces it).
            compiled = tf.function(self._decode, autograph=False)
            return lambda token_ids, caches, index: compiled(
                ops.convert_to_tensor(token_ids, "int32"), caches, tf.constant(index, tf.int32)
            )
        if backend == "jax":
            import jax

            variables = list(self.variables)

            def stateless(values, token_ids, caches, index):
                with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
                    return self._decode(token_ids, caches, index)

            # The caches are donated: a step writes its new position in place instead of
            # copying every layer's cache (`generate` never reads a cache it passed on).
            compiled = jax.jit(stateless, donate_argnums=(2,))
            return lambda token_ids, caches, index: compiled(
                [v.value for v in variables],
                ops.convert_to_tensor(token_ids, "int32"),
                caches,
                jax.numpy.asarray(index, "int32"),
            )
        return self.decode_step

    def generate(
        self,
        prompt_ids: Any,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        seed: int | None = None,
        end_token_id: int | None = None,
        compile: bool = True,
    ) -> np.ndarray | str | list[str]:
        """Continues `prompt_ids` token by token with cached keys and values.

        Each new token attends to the cached projections of the earlier ones,
        so a step costs one position per layer (the caches have every layer's
        own head size). Greedy by default; with `temperature > 0` it samples
        from `softmax(logits / temperature)`, restricted to the `top_k` most
        likely tokens if given, with a numpy generator seeded by `seed`.

        With a `tokenizer` attached, the prompt may be a string (or a list of
        strings, continued one by one): it is tokenized with the tokenizer's
        start token in front (as keras-hub's `generate_preprocess`),
        decoding stops at its end token unless `end_token_id` is given, and
        the prompt and continuation come back as text without special tokens.

        Args:
          prompt_ids: `[batch, prompt length]` int tokens (one prompt length
            for the batch, at least 1), or text (a string or a list of
            strings) when a tokenizer is attached.
          max_new_tokens: Tokens to add; prompt plus new tokens must fit in
            `max_sequence_length`.
          temperature: 0 for greedy decoding, else the sampling temperature.
          top_k: Sample among this many most likely tokens (None: all).
          seed: Seed of the sampling generator.
          end_token_id: A row that produced it is filled with it from then
            on; decoding stops once every row has.
          compile: Run the steps through `compiled_decode_step` (compiled
            once per shape and kept for later calls; False: eager).

        Returns:
          int32 `[batch, prompt length + max_new_tokens]`: prompt and
          continuation; for text, the text (a string or a list of strings).

        Example:

        >>> lm.generate(np.array([[5, 9, 11]]), max_new_tokens=4).shape
        (1, 7)
        >>> lm.generate("The cat", max_new_tokens=4)  # With a tokenizer attached.
        'The cat sat on the mat'
        """
        options = dict(temperature=temperature, top_k=top_k, seed=seed, compile=compile)
        if isinstance(prompt_ids, str) or (
            isinstance(prompt_ids, list | tuple)
            and prompt_ids
            and all(isinstance(p, str) for p in prompt_ids)
        ):
            return self._generate_text(prompt_ids, max_new_tokens, end_token_id, options)
        prompt = np.asarray(keras.ops.convert_to_numpy(prompt_ids)).astype("int32")
        if prompt.ndim != 2 or prompt.shape[1] < 1:
            raise ValueError(
                f"prompt_ids must be [batch, length >= 1] token ids; got shape {prompt.shape}."
            )
        check_positive_int("max_new_tokens", max_new_tokens)
        if prompt.min() < 0 or prompt.max() >= self.vocabulary_size:
            raise ValueError(
                f"prompt_ids must be token ids in [0, {self.vocabulary_size}); got values "
                f"from {prompt.min()} to {prompt.max()}."
            )
        total = prompt.shape[1] + max_new_tokens
        if total > self.max_sequence_length:
            raise ValueError(
                f"prompt length {prompt.shape[1]} + max_new_tokens {max_new_tokens} = {total} "
                f"exceeds max_sequence_length {self.max_sequence_length}."
            )
        if isinstance(temperature, bool) or not float(temperature) >= 0.0:
            raise ValueError(f"temperature must be >= 0 (0: greedy); got {temperature!r}.")
        if top_k is not None:
            check_positive_int("top_k", top_k)
        rng = np.random.default_rng(seed)

        def pick(logits) -> np.ndarray:
            logits = np.asarray(keras.ops.convert_to_numpy(logits), np.float64)[:, -1]
            if temperature == 0.0:
                return logits.argmax(-1)
            if top_k is not None and top_k < logits.shape[-1]:
                # Exactly k candidates per row, even when logits tie at the cut.
                keep = np.argpartition(-logits, top_k - 1, axis=-1)[:, :top_k]
                kept = np.full_like(logits, -np.inf)
                np.put_along_axis(kept, keep, np.take_along_axis(logits, keep, -1), -1)
                logits = kept
            z = logits / float(temperature)
            p = np.exp(z - z.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            return np.array([rng.choice(len(row), p=row) for row in p])

        out = np.zeros((prompt.shape[0], total), np.int32)
        out[:, : prompt.shape[1]] = prompt
        done = np.zeros(prompt.shape[0], bool)
        logits, caches = self.prefill(prompt, total)
        step = self.decode_step
        if compile:
            key = (tuple(id(v) for v in self.variables), self.dtype_policy.name)
            if getattr(self, "_compiled_step", (None, None))[0] != key:
                self._compiled_step = (key, self.compiled_decode_step())  # For later calls.
            step = self._compiled_step[1]
        for index in range(prompt.shape[1], total):
            token = pick(logits)
            if end_token_id is not None:
                token = np.where(done, end_token_id, token)
                done |= token == end_token_id
            out[:, index] = token
            if end_token_id is not None and done.all():
                out[:, index + 1 :] = end_token_id
                break
            if index + 1 < total:
                logits, caches = step(out[:, index : index + 1], caches, index)
        return out

    def _generate_text(
        self, prompt: str | Sequence[str], max_new_tokens: int, end_token_id, options
    ) -> str | list[str]:
        """`generate` of text through the attached tokenizer."""
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise ValueError(
                "generate got text but the model has no tokenizer; build it with one "
                "(CausalLM(..., tokenizer=...)) or pass token ids."
            )
        start = leading_token_id(tokenizer)
        end = getattr(tokenizer, "end_token_id", None) if end_token_id is None else end_token_id
        special = set(getattr(tokenizer, "special_token_ids", None) or ()) | {
            getattr(tokenizer, "start_token_id", None),
            end,
        }
        texts = [prompt] if isinstance(prompt, str) else list(prompt)
        outputs = []
        for text in texts:
            ids = [int(i) for i in _to_numpy(tokenizer.tokenize(text)).reshape(-1)]
            ids = ([start] if start is not None else []) + ids
            if not ids:
                raise ValueError("generate got an empty prompt (no tokens, no start token).")
            tokens = self.generate(
                np.array([ids], "int32"), max_new_tokens, end_token_id=end, **options
            )
            kept = np.array([t for t in tokens[0].tolist() if t not in special], "int32")
            outputs.append(_to_text(tokenizer.detokenize(kept)))
        return outputs[0] if isinstance(prompt, str) else outputs


def leading_token_id(tokenizer: Any) -> int | None:
    """The id a tokenizer's text starts with: its `start_token_id`, unless its
    `add_start_token` is false (the model file's rule: SmolLM2 and Qwen add none)."""
    if not getattr(tokenizer, "add_start_token", True):
        return None
    return getattr(tokenizer, "start_token_id", None)


def _to_numpy(x: Any) -> np.ndarray:
    """A tokenizer's output (a backend or TensorFlow tensor, a list) as numpy."""
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def _to_text(x: Any) -> str:
    """A detokenizer's output (str, bytes or a scalar string tensor) as str."""
    x = x.numpy() if hasattr(x, "numpy") else x
    if isinstance(x, np.ndarray):
        x = x.item()
    return x.decode("utf-8") if isinstance(x, bytes) else str(x)
