"""`headsize-tf convert` on the Keras 3 front: a `.keras` CausalLM or a keras-hub GPT-2.

An import-linter contract keeps this module (with the core, the data floor and
the Keras 3 front) from importing tf_keras, Model Garden or the tf_keras front.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any


def _check_text_flags(args: argparse.Namespace) -> bool:
    """Checks the flags both Keras 3 sources share; returns whether text was given."""
    text_given = args.data_file is not None or args.corpus is not None
    if args.uptrain_steps and not text_given:
        raise ValueError(
            "--uptrain-steps needs text to train on: pass --data-file FILE (plain text) or "
            "--corpus austen."
        )
    if args.convert_encoder:
        raise ValueError("--convert-encoder is for translation model_dirs; a CausalLM has none.")
    return text_given


def _check_own_tokenizer_flags(args: argparse.Namespace, what: str) -> bool:
    """The text flags of a model that tokenises its text itself; returns whether text was given."""
    text_given = _check_text_flags(args)
    if args.vocab_file:
        raise ValueError(
            f"--vocab-file is the WordPiece vocabulary of a .keras CausalLM; {what} tokenises the "
            "text with its own tokenizer: drop --vocab-file."
        )
    if not text_given and args.sequence_length:
        raise ValueError("--sequence-length shapes the text of --data-file / --corpus.")
    return text_given


def _window(args: argparse.Namespace, max_sequence_length: int) -> int:
    """Ids per text window: `--sequence-length` (default: the model's positions) plus one."""
    length = args.sequence_length or max_sequence_length
    if length > max_sequence_length:
        raise ValueError(
            f"--sequence-length {length} is above the model's max_sequence_length "
            f"({max_sequence_length})."
        )
    return length + 1


def _options(args: argparse.Namespace, target: Any) -> dict[str, Any]:
    """`convert_lm_file`'s keyword arguments from the flags (text and source aside)."""
    cp = (
        {"max_iter": args.max_iter, "tolerance": args.tolerance}
        if target is not None and target.kind == "collaborative"
        else {}
    )
    state = None
    if args.state_dir is not None:
        skip = {"output", "overwrite", "state_dir", "func", "command"}
        state = {k: v for k, v in vars(args).items() if k not in skip and not callable(v)}
        state = json.loads(json.dumps(state, default=str))
    return {
        "state_dir": args.state_dir,
        "state": state,
        "uptrain_steps": args.uptrain_steps,
        "learning_rate": 1e-3 if args.learning_rate is None else args.learning_rate,
        "batch_size": args.batch_size,
        "decode_tokens": args.decode_tokens,
        "overwrite": args.overwrite,
        **cp,
    }


def convert_lm_file(args: argparse.Namespace, target: Any) -> dict[str, Any]:
    """Converts the `.keras` CausalLM `args.model_file` to `target`; returns the report.

    The text (`--data-file` or `--corpus`) is tokenised with `--vocab-file` (default:
    the Austen corpus's vocab.txt) into windows of the model's positions (or
    `--sequence-length`) plus one.

    Args:
      args: `convert`'s parsed arguments.
      target: The `ConversionTarget`.
    """
    from headsize_tf.core.io import check_output_free

    text_given = _check_text_flags(args)
    if not text_given and (args.vocab_file or args.sequence_length):
        raise ValueError(
            "--vocab-file and --sequence-length shape the text of --data-file / --corpus."
        )
    check_output_free(args.output, args.overwrite)
    from headsize_tf.data.lm_text import load_lm_text
    from headsize_tf.keras3.reparam.lm_file import convert_lm_file as convert
    from headsize_tf.keras3.reparam.lm_file import load_lm_file

    lm = load_lm_file(args.model_file)
    text = None
    if text_given:
        text = load_lm_text(
            _window(args, lm.max_sequence_length),
            data_file=args.data_file,
            corpus=args.corpus,
            data_dir=args.data_dir,
            vocab_file=args.vocab_file,
        )
    return convert(
        lm, target, args.output, text=text, source=str(args.model_file), **_options(args, target)
    )


# Tokens per window of a pretrained decoder's text (its positions run to thousands).
DECODER_WINDOW = 256


def convert_decoder(args: argparse.Namespace, target: Any) -> dict[str, Any]:
    """Converts the pretrained decoder `args.decoder` to `target`; returns the report.

    Its text (`--data-file` or `--corpus`: austen, moby_dick, python_docs) is
    tokenised by its own tokenizer into windows of `--sequence-length`
    (default 256) tokens after its start token. Writes `--output` with
    `model.keras` (a `DecoderLM`, tokenizer included), `report.json` and
    `conversion.png`.
    """
    from headsize_tf.core.io import check_output_free

    text_given = _check_own_tokenizer_flags(args, "a decoder")
    check_output_free(args.output, args.overwrite)
    from headsize_tf.keras3.pretrained.decoder_text import decoder_lm_text
    from headsize_tf.keras3.pretrained.decoders import load_decoder
    from headsize_tf.keras3.reparam.lm_file import convert_lm_file as convert

    lm = load_decoder(args.decoder)
    if target is None:
        return _compress_decoder(args, lm)
    if (
        target.kind == "grouped"
        and args.method is None
        and lm.attention_spec.rope_max_wavelength is not None
    ):
        # svd re-bases rotated key dimensions: mean pooling is the rotary models' default.
        target = type(target)(target.kind, target.size, "mean")
    text = None
    if text_given:
        length = args.sequence_length or min(DECODER_WINDOW, lm.max_sequence_length)
        text = decoder_lm_text(
            lm,
            _window(args, lm.max_sequence_length) if args.sequence_length else length + 1,
            corpus=args.corpus,
            data_file=args.data_file,
            data_dir=args.data_dir,
            max_train_windows=max(1, args.heal_windows, args.uptrain_steps * args.batch_size),
            max_held_out_windows=args.eval_windows,
            train=args.uptrain_steps > 0 or args.heal_steps > 0,
        )

    def converter(model: Any) -> tuple[Any, dict[str, Any]]:
        from headsize_tf.keras3.reparam import convert_model

        converted, layers = convert_model(model, target)
        return converted, {"layers": layers, "target": target.to_dict()}

    return convert(
        lm,
        None,
        args.output,
        text=text,
        source=str(args.decoder),
        eval_windows=args.eval_windows,
        converter=_healed(args, converter, text),
        **_options(args, target),
    )


def _check_heal_text(args: argparse.Namespace, text: Any) -> None:
    """`--heal-steps` needs `--heal-windows` windows of training text."""
    if not args.heal_steps:
        return
    if text is None or not len(text.train):
        raise ValueError("--heal-steps distils on training text: pass --corpus or --data-file.")
    if len(text.train) < args.heal_windows:
        raise ValueError(
            f"The training text has {len(text.train)} windows; --heal-windows "
            f"{args.heal_windows} asks for more (give more text, or fewer windows)."
        )


def _healed(args: argparse.Namespace, converter: Any, text: Any) -> Any:
    """`converter` followed by `--heal-steps` of layer-wise distillation on the training text."""
    if not args.heal_steps:
        return converter
    _check_heal_text(args, text)

    def healed(model: Any) -> tuple[Any, dict[str, Any]]:
        from headsize_tf.keras3.reparam.heal import layerwise_distill

        converted, report = converter(model)
        windows = text.train[: args.heal_windows]
        print(f"healing: {args.heal_steps} steps per layer on {len(windows)} windows", flush=True)
        state = None if args.state_dir is None else pathlib.Path(args.state_dir) / "heal"
        heal = layerwise_distill(
            model,
            converted,
            windows,
            args.heal_steps,
            progress=lambda line: print(f"  {line}", flush=True),
            state_dir=state,
        )
        return converted, {**report, "heal": heal}

    return healed


def _compress_decoder(args: argparse.Namespace, lm: Any) -> dict[str, Any]:
    """`--cache-fraction`: the rotary latent of `compress_kv` (`--to latent`) or grouped K/V
    with key/value heads chosen per layer (`--to grouped`, `grouped_budget`), calibrated on the
    training text."""
    from headsize_tf.keras3.pretrained.decoder_text import decoder_lm_text
    from headsize_tf.keras3.reparam import convert_model
    from headsize_tf.keras3.reparam.kv_compress import (
        KVPlan,
        check_plan,
        compress_kv,
        grouped_budget,
    )
    from headsize_tf.keras3.reparam.lm_file import convert_lm_file as convert

    grouped = args.to == "grouped"
    plan = KVPlan(
        args.cache_fraction,
        rope_strategy=args.rope_strategy,
        rope_pairs=args.rope_pairs,
        calibrated=args.calibration == "activations",
        allocation=args.allocation,
        rope_context=args.rope_context,
        rope_fold=args.rope_fold,
        balance=args.method != "joint_svd_unbalanced",
        split=args.method == "split_svd",
    )
    if not grouped:
        check_plan(lm, plan)  # Before the calibration pass, which takes minutes on SmolLM2.
    stats = None
    needs_text = plan.calibrated or (not grouped and plan.rope_strategy == "2norm")
    measures = not grouped and plan.allocation == "sensitivity"
    if (needs_text or measures) and args.corpus is None and args.data_file is None:
        raise ValueError(
            "--rope-strategy 2norm, --calibration activations and --allocation sensitivity "
            "measure the model on text: pass --corpus or --data-file (or --calibration weights"
            + ("" if grouped else " with --rope-strategy high/low/uniform")
            + ")."
        )
    length = args.sequence_length or min(DECODER_WINDOW, lm.max_sequence_length)
    text = None
    if args.corpus is not None or args.data_file is not None:
        text = decoder_lm_text(
            lm,
            length + 1,
            corpus=args.corpus,
            data_file=args.data_file,
            data_dir=args.data_dir,
            max_train_windows=max(
                args.calibration_windows, args.heal_windows, args.uptrain_steps * args.batch_size
            ),
            max_held_out_windows=args.eval_windows,
        )
        _check_heal_text(args, text)
        if needs_text or measures:
            if len(text.train) < args.calibration_windows:
                raise ValueError(
                    f"The calibration text has {len(text.train)} training windows of {length} "
                    f"tokens; --calibration-windows {args.calibration_windows} asks for more "
                    "(give more text, or fewer windows)."
                )
        if needs_text:
            stats = _cached_stats(args, lm, text.train[: args.calibration_windows], text.source)

    def converter(model: Any) -> tuple[Any, dict[str, Any]]:
        if grouped:
            pooling = args.method or "mean"
            target, report = grouped_budget(model, plan.cache_fraction, stats, pooling)
            covariances = None if stats is None or pooling == "mean" else stats.covariances
            converted, layers = convert_model(model, target, covariances=covariances)
            basis = "activations" if stats else "weights"
            method = (
                "mean pooling"
                if pooling == "mean"
                else f"keys by mean pooling, values by the SVD of their {basis}"
            ) + f", heads per layer by {basis[:-1]} error"
            return converted, {
                **report,
                "layers": layers,
                "target": {
                    "kind": "grouped",
                    "cache_fraction": plan.cache_fraction,
                    "method": method,
                },
            }
        sizes = None
        if plan.allocation == "sensitivity":
            sizes = _cached_allocation(args, model, plan, stats, text)
        converted, report = compress_kv(model, plan, stats, sizes)
        svd = "split" if plan.split else "joint"
        target = {
            "kind": "latent",
            "cache_fraction": plan.cache_fraction,
            "method": f"rope {plan.rope_strategy} x {plan.rope_pairs}"
            + (f" fold {plan.rope_fold}" if plan.rope_fold != 1 else "")
            + ", "
            f"{'calibrated' if plan.calibrated else 'weights'} {svd} SVD, {plan.allocation}",
        }
        return converted, {**report, "target": target}

    return convert(
        lm,
        None,
        args.output,
        text=text,
        source=str(args.decoder),
        eval_windows=args.eval_windows,
        converter=_healed(args, converter, text),
        **_options(args, None),
    )


def _cached_allocation(
    args: argparse.Namespace, lm: Any, plan: Any, stats: Any, text: Any
) -> dict[str, Any]:
    """`--allocation sensitivity`: the latent sizes measured on the calibration windows
    (`allocate_by_sensitivity`), computed once per model, text and plan and cached."""
    import json

    from headsize_tf.core.io import cache_root, write_json
    from headsize_tf.keras3.reparam.kv_compress import allocate_by_sensitivity

    windows = text.train[: args.calibration_windows]
    key = _cache_key(args, text.source, windows, json.dumps(plan.to_dict(), sort_keys=True))
    path = cache_root() / "allocation" / f"{key}.json"
    if path.exists():
        print(f"latent sizes by sensitivity: {path} (cached)", flush=True)
        return json.loads(path.read_text())
    print(f"allocating latent sizes by the loss on {len(windows)} windows ...", flush=True)
    sizes = allocate_by_sensitivity(lm, plan, stats, windows, progress=print)
    write_json(path, sizes)
    return sizes


def _cache_key(args: argparse.Namespace, source: str, windows: Any, *extra: str) -> str:
    """The cache name of what is measured on the decoder's calibration `windows` (+ `extra`)."""
    import hashlib

    parts = [str(args.decoder), source, str(windows.shape), windows.tobytes().hex()[:64], *extra]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _cached_stats(args: argparse.Namespace, lm: Any, windows: Any, source: str) -> Any:
    """Calibration statistics of the decoder on `windows`, computed once and cached."""

    from headsize_tf.core.io import cache_root
    from headsize_tf.keras3.reparam.calibration import CalibrationStats, calibration_stats

    path = cache_root() / "calibration" / f"{_cache_key(args, source, windows)}.npz"
    if path.exists():
        print(f"calibration statistics: {path} (cached)", flush=True)
        return CalibrationStats.load(path)
    print(f"measuring calibration statistics on {windows.shape[0]} windows ...", flush=True)
    stats = calibration_stats(
        lm,
        windows,
        source=f"{source}; the first {windows.shape[0]} training windows of {windows.shape[1]} "
        "tokens, in order (no random sample, so no seed)",
    )
    stats.save(path)
    return stats


def convert_hub_preset(args: argparse.Namespace, target: Any) -> dict[str, Any]:
    """Converts the keras-hub GPT-2 `args.keras_hub_preset` to `target`; returns the report.

    The text (`--data-file` or `--corpus`, split as for a `.keras` LM) is
    tokenised with the model's own keras-hub tokenizer (`hub_lm_text`);
    `--output` is written as `HubModel.save` writes it, with `report.json` and
    `conversion.png` (`convert_hub_lm`).

    Args:
      args: `convert`'s parsed arguments.
      target: The `ConversionTarget`.
    """
    from headsize_tf.core.io import check_output_free

    text_given = _check_own_tokenizer_flags(args, "a keras-hub model")
    check_output_free(args.output, args.overwrite)
    from headsize_tf.keras3.hub import convert_hub_lm, hub_lm_text, load_hub_preset

    hub = load_hub_preset(args.keras_hub_preset, tool="convert")
    text = None
    if text_given:
        text = hub_lm_text(
            hub,
            _window(args, hub.backbone.max_sequence_length),
            data_file=args.data_file,
            corpus=args.corpus,
            data_dir=args.data_dir,
            train=args.uptrain_steps > 0,
        )
    return convert_hub_lm(hub, target, args.output, text=text, **_options(args, target))
