"""`headsize-tf convert --framework keras3 --model FILE.keras`: a saved Keras 3 LM with shared K/V.

`convert_lm_file` loads a Keras 3 `CausalLM` saved as `.keras`, converts its
attention with the one driver (`convert_model` over
`core.conversion.ConversionTarget`: grouped-query heads, a shared latent or
collaborative heads), measures it on held-out text, optionally uptrains it
(Keras 3 `fit` with the library's LM recipe, `keras3.lm_training`: AdamW,
warm-up and linear decay over the uptrain steps) and writes a directory:

* `model.keras`: the converted (uptrained) `CausalLM` without optimizer
  state, loadable with `keras.saving.load_model` once
  `headsize_tf.keras3.modeling` is imported;
* `report.json`: held-out perplexity of the original, the converted and the
  uptrained model, KV-cache bytes per token (`core.kv_cache`), parameters and
  `generate` tokens/s of original and converted measured side by side;
* `conversion.png`: those numbers as bars.

The directory is written atomically. Text (`data.lm_text.LMText`) is
optional for the conversion (the report then has no perplexity) and
required for uptraining. Nothing here imports tf_keras or Model Garden.

A long conversion is resumable with `state_dir`: the converted model (after
any healing the converter does) is kept there as `converted.keras` with its
report, and uptraining writes its weights, optimizer state and curve
(`uptrain.npz`) at every tenth of its steps; a rerun with the same settings
(`state`, recorded in `state.json`) goes on from the last of them.

Example:

>>> text = load_lm_text(129, corpus="austen")
>>> report = convert_lm_file("lm.keras", ConversionTarget("latent", 64), "lm_latent",
...                          text=text, uptrain_steps=100)

References:
  Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models
  from Multi-Head Checkpoints", EMNLP 2023. https://arxiv.org/abs/2305.13245
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np

from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.conversion_report import PLOT_FILE, REPORT_FILE, plot_conversion
from headsize_tf.core.io import atomic_directory, check_output_free, write_json
from headsize_tf.core.kv_cache import kv_cache_bytes_per_token
from headsize_tf.keras3 import lm_training
from headsize_tf.keras3.modeling import CausalLM, DecoderLM
from headsize_tf.keras3.modeling.model_file import load_model_file
from headsize_tf.keras3.reparam.convert import convert_model

# The Keras 3 LMs `convert_lm_file` takes.
LM_CLASSES = (CausalLM, DecoderLM)

MODEL_FILE = "model.keras"


def load_lm_file(path: str | os.PathLike) -> CausalLM:
    """The Keras 3 `CausalLM` saved at `path` (a `.keras` file).

    Args:
      path: The `.keras` file.
    """
    path = pathlib.Path(path)
    if path.suffix != ".keras" or not path.is_file():
        raise ValueError(
            f"model={str(path)!r} is not a .keras file (a Keras 3 CausalLM saved with "
            "model.save('NAME.keras'))."
        )
    model = load_model_file(path, "a Keras 3 CausalLM or DecoderLM")
    if not isinstance(model, LM_CLASSES):
        raise ValueError(
            f"model={str(path)!r} holds a {type(model).__name__}; convert takes a Keras 3 "
            "headsize_tf CausalLM or DecoderLM."
        )
    return model


def kv_bytes_per_token(lm: CausalLM) -> int:
    """KV-cache bytes one decoded token adds (all layers, one row), by `core.kv_cache`.

    Args:
      lm: A Keras 3 `CausalLM`.
    """
    return kv_cache_bytes_per_token(
        lm.attention_spec,
        lm.hidden_dim,
        lm.num_layers,
        dtype=lm.dtype_policy.compute_dtype,
        query_key_norm=getattr(lm, "query_key_norm", False),
    )


def generation_speeds(
    models: Mapping[str, CausalLM],
    prompts: np.ndarray,
    new_tokens: int = 32,
    repeats: int = 3,
) -> dict[str, float]:
    """Greedy `generate` tokens/s of several LMs, measured side by side.

    One warm-up run each (it compiles the decode step), then `repeats` timed
    runs interleaved across the models; each model's best run counts.

    Args:
      models: Name -> `CausalLM`.
      prompts: `[batch, prompt length]` token ids (the same for every model).
      new_tokens: Tokens generated per row (capped by the models' positions).
      repeats: Timed runs per model.

    Returns:
      Name -> generated tokens per second.
    """
    for model in models.values():
        new_tokens = min(new_tokens, model.max_sequence_length - prompts.shape[1])
    if new_tokens < 1:
        raise ValueError(f"A prompt of {prompts.shape[1]} tokens leaves no position to decode.")
    for model in models.values():
        model.generate(prompts, new_tokens)
    best = dict.fromkeys(models, np.inf)
    for _ in range(repeats):
        for name, model in models.items():
            start = time.perf_counter()
            model.generate(prompts, new_tokens)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: float(prompts.shape[0] * new_tokens / best[name]) for name in models}


def _uncompiled(lm: CausalLM) -> CausalLM:
    """A copy of `lm` without its optimizer (the saved file then needs no training classes)."""
    if not lm.compiled:
        return lm
    # The same tokenizer object (a keras-hub one keeps its vocabulary, which its config lacks).
    fresh = type(lm).from_config({**lm.get_config(), "tokenizer": lm.tokenizer})
    fresh(np.zeros([1, 1], "int32"))
    fresh.set_weights(lm.get_weights())
    return fresh


def _check_ids(text: Any, lm: CausalLM) -> None:
    for name in ("train", "held_out"):
        array = getattr(text, name)
        if array.shape[1] - 1 > lm.max_sequence_length:
            raise ValueError(
                f"Text windows of {array.shape[1]} ids need {array.shape[1] - 1} positions; the "
                f"model has {lm.max_sequence_length}."
            )
        if array.size and array.max() >= lm.vocabulary_size:
            raise ValueError(
                f"The {text.vocab_file} ids reach {array.max()}; the model's vocabulary has "
                f"{lm.vocabulary_size} ids: pass the vocabulary it was trained with (vocab_file=)."
            )


def convert_lm_file(
    model: str | os.PathLike | CausalLM,
    target: ConversionTarget,
    output: str | os.PathLike,
    *,
    text: Any = None,
    uptrain_steps: int = 0,
    learning_rate: float = 1e-3,
    batch_size: int = 16,
    seed: int = 0,
    eval_windows: int = 64,
    decode_tokens: int = 32,
    decode_batch: int = 8,
    decode_repeats: int = 3,
    overwrite: bool = False,
    source: str | None = None,
    save_model: Callable[[CausalLM, pathlib.Path], Any] | None = None,
    converter: Callable[[Any], tuple[Any, dict[str, Any]]] | None = None,
    state_dir: str | os.PathLike | None = None,
    state: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Converts a `.keras` CausalLM's attention; see the module doc.

    Args:
      model: The `.keras` file of a Keras 3 `CausalLM` or `DecoderLM` (or the loaded
        model; a pretrained decoder from `keras3.pretrained.load_decoder`).
      target: `ConversionTarget` (grouped / latent / collaborative and size).
      output: The directory written (`model.keras`, `report.json`,
        `conversion.png`), atomically.
      text: `data.lm_text.LMText` windows (held-out perplexity; uptraining
        data); None: no perplexity, no uptraining.
      uptrain_steps: Steps of uptraining (0: none; needs `text`).
      learning_rate: Peak learning rate of the uptraining.
      batch_size: Windows per uptraining step.
      seed: Seed of the uptraining's data order and dropout.
      eval_windows: Held-out windows the perplexity is measured on.
      decode_tokens: Tokens generated per row when timing decoding.
      decode_batch: Rows generated at once when timing.
      decode_repeats: Timed runs per model (interleaved; the best counts).
      overwrite: Replace an existing `output`.
      source: The report's name of the source (default: the file, or the model's name).
      save_model: Writes the converted (uncompiled) model into the directory
        being written (default: as `model.keras`); e.g. a keras-hub model's
        own format with its tokenizer (`keras3.hub.convert_hub_lm`).
      converter: Converts the model in place of `convert_model(lm, target)`:
        `lm -> (converted, a report with "target" and "layers")`, e.g. a
        budgeted rotary latent (`keras3.reparam.kv_compress.compress_kv`);
        `target` is then None.
      state_dir: Where the converted model and the uptraining's checkpoints
        are kept, so that a rerun resumes (None: nowhere).
      state: JSON-able settings the state belongs to (e.g. the command's
        arguments); a `state_dir` written with other settings is an error.
      **kwargs: Collaborative CP options (`max_iter`, `tol`, `tolerance`, `seed`).

    Returns:
      The report (also `output/report.json`).
    """
    if converter is None and not isinstance(target, ConversionTarget):
        raise TypeError(f"target must be a ConversionTarget; got {target!r}.")
    if isinstance(uptrain_steps, bool) or not isinstance(uptrain_steps, int) or uptrain_steps < 0:
        raise ValueError(f"uptrain_steps must be an int >= 0; got {uptrain_steps!r}.")
    if uptrain_steps and text is None:
        raise ValueError(
            "uptrain_steps= needs text to train on: pass data_file= (plain text) or corpus=."
        )
    check_output_free(output, overwrite)
    lm = model if isinstance(model, LM_CLASSES) else load_lm_file(model)
    resume = _ResumeState(state_dir, state, uptrain_steps)

    def convert_now() -> tuple[Any, dict[str, Any]]:
        if converter is None:
            converted, layers = convert_model(lm, target, **kwargs)
            return converted, {"layers": layers, "target": target.to_dict()}
        return converter(lm)

    converted, details = resume.converted(convert_now)
    layers, target_report = details.pop("layers"), details.pop("target")
    report: dict[str, Any] = {
        "source": source or (lm.name if isinstance(model, LM_CLASSES) else str(model)),
        "framework": "keras3",
        "backend": keras.backend.backend(),
        "target": target_report,
        **details,
        "uptrain_steps": int(uptrain_steps),
        "layers": layers,
        "params": {"original": int(lm.count_params()), "converted": int(converted.count_params())},
    }
    if text is not None:
        _check_ids(text, lm)
        held = text.held_out[:eval_windows]
        steps = max(1, uptrain_steps)
        perplexity = {}
        for name, m in (("original", lm), ("converted", converted)):
            lm_training.compile_lm(m, learning_rate, steps)
            perplexity[name] = lm_training.perplexity(m, held)[0]
        if uptrain_steps:
            keras.utils.set_random_seed(seed)
            start, curve = resume.uptrain_start(converted, text.train[:1, :-1])
            points, _ = lm_training.fit_windows(
                converted,
                text.train,
                uptrain_steps,
                batch_size,
                seed,
                resume.checkpoints(uptrain_steps),
                lambda: lm_training.perplexity(converted, held),
                progress=resume.progress,
                start_step=start,
                after_checkpoint=lambda step, point, _: resume.save_uptrain(
                    converted, step, curve, point
                ),
            )
            curve = curve + [p for p in points if p not in curve]
            perplexity["uptrained"] = curve[-1]["perplexity"]
            report["uptrain"] = {
                "curve": curve,
                "tokens": int(uptrain_steps * batch_size * (text.train.shape[1] - 1)),
                "learning_rate": learning_rate,
                "batch_size": batch_size,
                "seed": seed,
                "train_windows": int(len(text.train)),
            }
        report["perplexity"] = perplexity
        report["text"] = {
            "source": text.source,
            "vocab_file": text.vocab_file,
            "held_out_windows": int(len(held)),
            "window": int(text.held_out.shape[1]),
        }
        prompts = text.held_out[:decode_batch, :8]
    else:
        rng = np.random.default_rng(0)
        prompts = rng.integers(0, lm.vocabulary_size, (decode_batch, 8)).astype("int32")
    kv = {"original": kv_bytes_per_token(lm), "converted": kv_bytes_per_token(converted)}
    report["kv_cache_bytes_per_token"] = kv
    report["kv_cache_fraction"] = kv["converted"] / kv["original"]
    speed = generation_speeds(
        {"original": lm, "converted": converted}, prompts, decode_tokens, decode_repeats
    )
    report["decoding_tokens_per_second"] = speed
    report["decoding_speedup"] = speed["converted"] / speed["original"]
    report["decoding"] = {
        "batch": int(prompts.shape[0]),
        "prompt_tokens": int(prompts.shape[1]),
        "new_tokens": int(decode_tokens),
        "repeats": int(decode_repeats),
        "timing": "generate (compiled step), interleaved, best of the repeats after a warm-up",
    }
    with atomic_directory(output, overwrite=overwrite) as tmp:
        if save_model is None:
            _uncompiled(converted).save(tmp / MODEL_FILE)
        else:
            save_model(_uncompiled(converted), tmp)
        write_json(tmp / REPORT_FILE, report)
        plot_conversion(report, tmp / PLOT_FILE)
    return report


class _ResumeState:
    """`convert_lm_file`'s state directory: the converted model and uptraining checkpoints."""

    CONVERTED = "converted.keras"
    DETAILS = "converted.json"
    UPTRAIN = "uptrain.npz"
    SETTINGS = "state.json"

    def __init__(self, path: Any, state: Mapping[str, Any] | None, uptrain_steps: int):
        self.path = None if path is None else pathlib.Path(path)
        self.progress = print if self.path is not None else None
        if self.path is None:
            return
        import json

        settings = {"state": dict(state or {}), "uptrain_steps": int(uptrain_steps)}
        settings = json.loads(json.dumps(settings))
        saved = self.path / self.SETTINGS
        if saved.exists():
            before = json.loads(saved.read_text())
            if before != settings:
                raise ValueError(
                    f"The state directory {self.path} belongs to another conversion ({before}); "
                    "remove it, or give another one."
                )
        else:
            write_json(saved, settings)

    def converted(self, convert_now: Callable[[], tuple[Any, dict[str, Any]]]) -> tuple:
        """The converted model and its details: from the state directory, or converted now."""
        import json

        from headsize_tf.core.io import atomic_path

        if self.path is not None and (self.path / self.DETAILS).exists():
            print(f"resuming: the converted model from {self.path / self.CONVERTED}", flush=True)
            model = keras.saving.load_model(self.path / self.CONVERTED)
            return model, json.loads((self.path / self.DETAILS).read_text())
        converted, details = convert_now()
        if self.path is not None:
            with atomic_path(self.path / self.CONVERTED) as tmp:
                _uncompiled(converted).save(tmp.with_suffix(".keras"))
                tmp.with_suffix(".keras").rename(tmp)
            write_json(self.path / self.DETAILS, details)
        return converted, details

    def checkpoints(self, steps: int) -> list[int]:
        if self.path is None:
            return [steps]
        every = max(1, steps // 10)
        return sorted({*range(every, steps, every), steps})

    def uptrain_start(self, lm: Any, sample: np.ndarray) -> tuple[int, list[dict[str, float]]]:
        """(the step uptraining goes on from, the curve so far)."""
        if self.path is None or not (self.path / self.UPTRAIN).exists():
            return 0, []
        meta = lm_training.restore_training_state(lm, self.path / self.UPTRAIN, sample)
        print(f"resuming: uptraining from step {meta['step']}", flush=True)
        return int(meta["step"]), list(meta["curve"])

    def save_uptrain(self, lm: Any, step: int, curve: list, point: dict[str, float]) -> None:
        curve.append(point)
        if self.path is not None:
            lm_training.save_training_state(
                lm, self.path / self.UPTRAIN, {"step": int(step), "curve": curve}
            )


__all__ = [
    "MODEL_FILE",
    "convert_lm_file",
    "generation_speeds",
    "kv_bytes_per_token",
    "load_lm_file",
]
