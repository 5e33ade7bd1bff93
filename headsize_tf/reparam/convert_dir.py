"""`headsize-tf convert --model-dir`: a trained LM or translation model with shared K/V heads.

`convert_model_dir` converts a `headsize-tf train` model_dir's attention into
grouped-query heads, a shared latent or collaborative heads (the one driver,
`core.conversion.ConversionTarget`, through `reparam.model_dir.
convert_attention_model`), optionally uptrains it (Ainslie et al.'s recipe:
the run's own training data, loss and optimizer, Model Garden's trainer) and
writes an ordinary model_dir of the same experiment: it reloads, decodes with
its small cache, exports, trains and prunes again like any other. Its
`report.json` holds the validation perplexity (translation: also greedy BLEU)
of the original, the converted and the uptrained model, the KV-cache bytes per
token (`core.kv_cache`), the parameters and cached greedy decoding tokens/s of
the original and the converted model measured side by side; `conversion.png`
plots them.

Resumable: the work happens in `.{output}.partial` beside the output; the
converted model_dir, its metrics and the uptraining checkpoints land there as
they are done, so a rerun after an interruption does not convert again and
continues the uptraining from the last checkpoint. The finished directory is
renamed onto `output` at the end (readers never see a partial output).

Example:

>>> report = convert_model_dir("runs/lm", ConversionTarget("grouped", 1), "runs/lm_mqa",
...                            uptrain_steps=100)
>>> report["kv_cache_bytes_per_token"], report["perplexity"]

References:
  Ainslie, Lee-Thorp, de Jong, Zemlyanskiy, Lebrón, Sanghai, "GQA: Training
  Generalized Multi-Query Transformer Models from Multi-Head Checkpoints",
  EMNLP 2023. https://arxiv.org/abs/2305.13245
  DeepSeek-AI, "DeepSeek-V2" (Multi-head Latent Attention), 2024.
  https://arxiv.org/abs/2405.04434
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np

from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.core.conversion_report import PLOT_FILE, REPORT_FILE, plot_conversion
from headsize_tf.core.io import check_output_free, write_json
from headsize_tf.reparam.model_dir import (
    LANGUAGE_MODEL,
    PRETRAINING,
    TRANSLATION,
    compress_model_dir,
    convert_attention_model,
)
from headsize_tf.training.evaluation import perplexity

STATE_FILE = "convert_state.json"
DECODERS = (LANGUAGE_MODEL, TRANSLATION)
SENTENCE_PREDICTION = "headsize_bert/sentence_prediction"
ENCODERS = (
    PRETRAINING,
    SENTENCE_PREDICTION,
    "headsize_bert/sentence_prediction_text",
    "headsize_bert/span_labeling",
)


UPTRAIN_LOG = "uptrain.log"  # The trainer's output, in the work directory.


def work_dir(output: str | os.PathLike) -> pathlib.Path:
    """Where `convert_model_dir` works before the result is renamed onto `output`."""
    output = pathlib.Path(output)
    return output.parent / f".{output.name}.partial"


class _Evaluation:
    """The experiment's validation metrics and the decoding-speed inputs.

    LM: perplexity on the first `eval_batches` validation batches (the prune
    driver's windows); translation: perplexity (padding not counted) and greedy
    BLEU on them (`TranslationBleu`); both `training.evaluation.perplexity`.
    """

    def __init__(self, params, experiment: str, eval_batches: int, decode_batch: int):
        self.source_ids = None
        if experiment == LANGUAGE_MODEL:
            from headsize_tf.pruning import language_model

            batch = int(params.task.validation_data.global_batch_size)
            data = language_model.lm_data(
                params, importance_windows=1, eval_windows=eval_batches * batch, batch_size=batch
            )
            self._metrics: Callable[[Any], dict[str, float]] = lambda model: {
                "perplexity": perplexity(model, data.evaluation)
            }
            self.prompts = data.evaluation[0][0][:decode_batch, :8]
            return
        from headsize_tf.pruning import translation
        from headsize_tf.tasks.translation import BOS, special_ids

        data = translation.translation_batches(params, "validation", eval_batches)
        config = params.task.validation_data
        bleu = translation.TranslationBleu(data, config.vocab_file, config.lower_case)
        self._metrics = lambda model: {
            "perplexity": perplexity(model, data, pad_id=0),
            "bleu": bleu(model),
        }
        self.source_ids = data[0][0]["inputs"][:decode_batch]
        bos = special_ids(config.vocab_file)[BOS]
        self.prompts = np.full([len(self.source_ids), 1], bos, np.int32)

    def __call__(self, model) -> dict[str, float]:
        return {k: float(v) for k, v in self._metrics(model).items()}


def _model_override(model) -> dict[str, Any]:
    """The `task.model` fields of the converted model's params.yaml."""
    config = model.get_config()
    override: dict[str, Any] = {"attention": config["attention"]}
    if config.get("decoder_attention") is not None:
        override["decoder_attention"] = config["decoder_attention"]
    if "num_decoder_layers" in config:  # A seq2seq: pruned_heads is a JSON string there.
        override["pruned_heads"] = (
            json.dumps(config["pruned_heads"]) if config["pruned_heads"] else ""
        )
    return override


def uptrain_override(params, steps: int, learning_rate: float | None = None) -> dict[str, Any]:
    """The `trainer` settings of `steps` uptraining steps (Ainslie et al.'s recipe).

    The run's own optimizer, weight decay and clipping, and its peak learning
    rate unless `learning_rate` is given; its schedule (decay and warm-up steps)
    compressed by `steps / train_steps`; a checkpoint every loop of
    `min(steps_per_loop, steps)` steps (where an interrupted run resumes).

    Args:
      params: The run's `ExperimentConfig`.
      steps: Uptraining steps.
      learning_rate: The peak rate of the uptraining schedule (None: the run's own).
        A model trained to the end of a decaying schedule can lose at its old peak
        more than uptraining recovers (results/kv_sharing/translation).
    """
    trainer = params.trainer
    loop = max(1, min(int(trainer.steps_per_loop), steps))
    scale = steps / max(1, int(trainer.train_steps))
    override: dict[str, Any] = {
        "train_steps": steps,
        "steps_per_loop": loop,
        "summary_interval": loop,
        "checkpoint_interval": loop,
        "validation_interval": steps,
    }
    optimizer: dict[str, Any] = {}
    rate = trainer.optimizer_config.learning_rate
    schedule: dict[str, Any] = {}
    if rate.type and getattr(getattr(rate, rate.type), "decay_steps", None):
        schedule["decay_steps"] = max(1, round(getattr(rate, rate.type).decay_steps * scale))
    if learning_rate is not None:
        field = next(
            (
                f
                for f in ("initial_learning_rate", "learning_rate")
                if rate.type and hasattr(getattr(rate, rate.type), f)
            ),
            None,
        )
        if field is None:
            raise ValueError(
                f"uptrain_learning_rate={learning_rate} needs a schedule with one peak rate; "
                f"the run's is {rate.type!r}."
            )
        schedule[field] = float(learning_rate)
    if schedule:
        optimizer["learning_rate"] = {rate.type: schedule}
    warmup = trainer.optimizer_config.warmup
    if warmup.type and getattr(getattr(warmup, warmup.type), "warmup_steps", None):
        steps_up = getattr(warmup, warmup.type).warmup_steps
        optimizer["warmup"] = {warmup.type: {"warmup_steps": max(1, round(steps_up * scale))}}
    if optimizer:
        override["optimizer_config"] = optimizer
    return {"trainer": override}


def _read_state(work: pathlib.Path) -> dict[str, Any] | None:
    try:
        return json.loads((work / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _check_rate(rate: Any) -> float | None:
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < 1:
        raise ValueError(f"uptrain_learning_rate must be a float in (0, 1) or None; got {rate!r}.")
    return float(rate)


def _check_steps(uptrain_steps: Any) -> int:
    if isinstance(uptrain_steps, bool) or not isinstance(uptrain_steps, int) or uptrain_steps < 0:
        raise ValueError(f"uptrain_steps must be an int >= 0; got {uptrain_steps!r}.")
    return uptrain_steps


def check_source(model_dir: str | os.PathLike, target: ConversionTarget) -> str:
    """The model_dir's experiment, or a ValueError saying why it does not convert to `target`.

    Args:
      model_dir: A `headsize-tf train` model_dir.
      target: The conversion target.
    """
    from headsize_tf.training import train

    experiment = train.experiment_of(model_dir)
    if experiment in ENCODERS and target.kind != "collaborative":
        raise ValueError(
            f"model_dir={model_dir} is an encoder-only {experiment} run: {target.kind} heads "
            "share a decoder's key/value cache, which an encoder does not have. Convert a "
            f"{LANGUAGE_MODEL} or {TRANSLATION} model_dir, or convert to collaborative heads."
        )
    if experiment not in DECODERS + (PRETRAINING, SENTENCE_PREDICTION):
        raise ValueError(
            f"model_dir={model_dir} is a {experiment} run; convert takes {', '.join(DECODERS)} "
            f"model_dirs (and, to collaborative heads, {PRETRAINING} and {SENTENCE_PREDICTION})."
        )
    return experiment


def convert_model_dir(
    model_dir: str | os.PathLike,
    target: ConversionTarget,
    output: str | os.PathLike,
    *,
    uptrain_steps: int = 0,
    uptrain_learning_rate: float | None = None,
    overwrite: bool = False,
    convert_encoder: bool | None = None,
    eval_batches: int = 8,
    decode_tokens: int = 32,
    decode_batch: int = 8,
    decode_repeats: int = 3,
    progress: bool = True,
    **kwargs: Any,
) -> dict[str, Any]:
    """Converts a trained LM or translation model_dir's attention; see the module doc.

    Encoder-only model_dirs (masked-LM pretraining, sentence classifiers)
    convert to collaborative heads only, through `compress --model-dir`'s
    driver (`compress_model_dir` / `compress_classifier_dir`, whose report it
    returns); grouped and latent heads are for decoders.

    Args:
      model_dir: A `headsize_lm/language_modeling` or
        `headsize_seq2seq/translation` model_dir.
      target: `ConversionTarget` (grouped / latent / collaborative, its size
        per layer or one for all, its method).
      output: The model_dir written (with `report.json`, `conversion.png`).
      uptrain_steps: Steps of uptraining after the conversion (0: none).
      uptrain_learning_rate: Peak rate of the uptraining (None: the run's own).
      overwrite: Replace an existing `output`.
      convert_encoder: A translation model's encoder converts too (default:
        only for collaborative targets, see `convert_attention_model`).
      eval_batches: Validation batches of the metrics.
      decode_tokens: Tokens generated per row when timing decoding.
      decode_batch: Rows decoded at once when timing.
      decode_repeats: Timed runs per model (interleaved; the best counts).
      progress: Progress bars.
      **kwargs: Collaborative CP options (`max_iter`, `tol`, `tolerance`, `seed`).

    Returns:
      The report (also written to `output/report.json`).

    Example:

    >>> convert_model_dir("runs/lm", ConversionTarget("latent", 64), "runs/lm_latent")
    """
    from headsize_tf.training import train

    if not isinstance(target, ConversionTarget):
        raise TypeError(f"target must be a ConversionTarget; got {target!r}.")
    uptrain_steps = _check_steps(uptrain_steps)
    uptrain_learning_rate = _check_rate(uptrain_learning_rate)
    experiment = check_source(model_dir, target)
    if experiment not in DECODERS:  # An encoder to collaborative heads: `compress`'s driver.
        if uptrain_steps:
            raise ValueError(
                f"uptrain_steps= is for {', '.join(DECODERS)} model_dirs; fine-tune the "
                "converted encoder with `headsize-tf train` instead."
            )
        cp = dict(overwrite=overwrite, method=target.method, progress=progress, **kwargs)
        if experiment == SENTENCE_PREDICTION:
            from headsize_tf.reparam.classifier_dir import compress_classifier_dir

            return compress_classifier_dir(model_dir, target.size, output, **cp)
        return compress_model_dir(model_dir, target.size, output, eval_batches=eval_batches, **cp)
    output = pathlib.Path(output)
    if output.resolve() == pathlib.Path(model_dir).resolve():
        raise ValueError(f"output={output} is the source model_dir; write somewhere else.")
    check_output_free(output, overwrite)
    params, source = train.load_trained_model(str(model_dir))
    evaluation = _Evaluation(params, experiment, eval_batches, decode_batch)
    work = work_dir(output)
    key = {
        "source": os.path.abspath(model_dir),
        "target": target.to_dict(),
        "convert_encoder": convert_encoder,
    }
    state = _read_state(work)
    uptraining = {"steps": uptrain_steps, "learning_rate": uptrain_learning_rate}
    if state is not None and uptrain_steps and state.get("uptraining", uptraining) != uptraining:
        state = None  # An uptraining cut off under other settings: start from the conversion.
    if state is None or state.get("key") != key:  # Else the conversion is done: resume.
        new, layers = convert_attention_model(
            source, target, convert_encoder=convert_encoder, progress=progress, **kwargs
        )
        original = evaluation(source)
        from headsize_tf.pruning.language_model import save_model_dir

        shutil.rmtree(work, ignore_errors=True)  # A stale run (another source or target).
        save_model_dir(params, new, work, experiment, _model_override(new), overwrite=True)
        _, reloaded = train.load_trained_model(str(work))
        state = {
            "key": key,
            "layers": layers,
            "original": original,
            "converted": evaluation(reloaded),
        }
        write_json(work / STATE_FILE, state)
    done = state.get("uptrained", {})
    if uptrain_steps and {k: done.get(k) for k in uptraining} != uptraining:
        state["uptraining"] = uptraining  # A rerun resumes only under these settings.
        write_json(work / STATE_FILE, state)
        work_params, _ = train.load_trained_model(str(work))
        # The trainer's step lines go to a log beside the checkpoints, not the console.
        with (
            open(work / UPTRAIN_LOG, "a", encoding="utf-8") as log,
            contextlib.redirect_stdout(log),
        ):
            train.run(
                experiment,
                str(work),
                [str(work / "params.yaml")],
                uptrain_override(work_params, uptrain_steps, uptrain_learning_rate),
                mode="train",
            )
        _, uptrained = train.load_trained_model(str(work))
        state["uptrained"] = {**uptraining, **evaluation(uptrained)}
        write_json(work / STATE_FILE, state)
    _, final = train.load_trained_model(str(work))
    report = _report(model_dir, experiment, target, state, source, final, uptrain_steps)
    from headsize_tf.pruning.report import decoding_speeds

    speed = decoding_speeds(
        {"original": source, "converted": final},
        evaluation.prompts,
        decode_tokens,
        decode_repeats,
        evaluation.source_ids,
    )
    report["decoding_tokens_per_second"] = speed
    report["decoding_speedup"] = speed["converted"] / speed["original"]
    report["decoding"] = {
        "batch": int(evaluation.prompts.shape[0]),
        "prompt_tokens": int(evaluation.prompts.shape[1]),
        "new_tokens": int(decode_tokens),
        "repeats": int(decode_repeats),
        "timing": "interleaved, best of the repeats after a warm-up",
    }
    write_json(work / REPORT_FILE, report)
    plot_conversion(report, work / PLOT_FILE)
    if output.exists():  # overwrite=True (checked above).
        shutil.rmtree(output)
    os.replace(work, output)  # One rename: the output appears whole.
    return report


def _report(model_dir, experiment, target, state, source, final, uptrain_steps) -> dict[str, Any]:
    metrics = [k for k in state["original"]]
    stages = ["original", "converted"] + (["uptrained"] if uptrain_steps else [])
    report: dict[str, Any] = {
        "source": str(model_dir),
        "experiment": experiment,
        "target": target.to_dict(),
        "uptrain_steps": int(uptrain_steps),
        "uptrain_learning_rate": state.get("uptrained", {}).get("learning_rate"),
        "layers": state["layers"],
        "params": {"original": int(source.count_params()), "converted": int(final.count_params())},
    }
    for metric in metrics:
        report[metric] = {stage: state[stage][metric] for stage in stages}
    kv = {
        "original": int(source.kv_cache_bytes_per_token()),
        "converted": int(final.kv_cache_bytes_per_token()),
    }
    report["kv_cache_bytes_per_token"] = kv
    report["kv_cache_fraction"] = kv["converted"] / kv["original"]
    if experiment == TRANSLATION:
        report["memory_cache_bytes_per_token"] = {
            "original": int(source.memory_cache_bytes_per_token()),
            "converted": int(final.memory_cache_bytes_per_token()),
        }
    return report


__all__ = [
    "REPORT_FILE",
    "check_source",
    "convert_model_dir",
    "uptrain_override",
    "work_dir",
]
