"""`headsize-tf convert` on the Keras 3 front: a `.keras` CausalLM or a keras-hub GPT-2.

An import-linter contract keeps this module (with the core, the data floor and
the Keras 3 front) from importing tf_keras, Model Garden or the tf_keras front.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
from collections.abc import Callable
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
        skip = {"output", "overwrite", "state_dir", "func", "command", "budget_flags"}
        skip |= {"eval_windows_given", "framework_given"}  # Bookkeeping, not flags.
        state = {k: v for k, v in vars(args).items() if k not in skip and not callable(v)}
        state = json.loads(json.dumps(state, default=str))
    return {
        "state_dir": args.state_dir,
        "state": state,
        "uptrain_steps": args.uptrain_steps,
        "learning_rate": 1e-3 if args.learning_rate is None else args.learning_rate,
        "batch_size": args.batch_size,
        "decode_tokens": args.decode_tokens,
        "eval_windows": args.eval_windows,
        "overwrite": args.overwrite,
        **cp,
    }


def _rotary(lm: Any) -> bool:
    """Whether any attention layer of `lm` rotates its keys (RoPE)."""
    return any(getattr(layer, "uses_rope", False) for layer in lm.attention_layers)


def _run(
    args: argparse.Namespace,
    lm: Any,
    target: Any,
    budget: Any,
    text: Any,
    source: str,
    convert: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """Converts `lm` to `target` (None: to the cache budget `budget`), healed by `--heal-steps`,
    through `convert` (`keras3.reparam.convert_lm_file`'s arguments); returns the report."""
    if target is not None and target.kind == "grouped" and args.method is None and _rotary(lm):
        # svd re-bases rotated key dimensions: mean pooling is the rotary models' default.
        target = type(target)(target.kind, target.size, "mean")
    if args.uptrain_steps:
        _check_train_text(args, text, f"--uptrain-steps {args.uptrain_steps}", 1)
    held_out = 0 if text is None else len(text.held_out)
    if (
        getattr(args, "eval_windows_given", False)
        and text is not None
        and held_out < args.eval_windows
    ):
        raise ValueError(
            f"The held-out text has {held_out} windows of {text.held_out.shape[1] - 1} tokens; "
            f"--eval-windows {args.eval_windows} asks for more (give more text, or fewer windows)."
        )
    options = _options(args, target)
    converter = None
    if budget is not None:
        converter = _budget_converter(args, lm, budget, text)
    elif args.heal_steps:
        cp = {k: options.pop(k) for k in ("max_iter", "tolerance") if k in options}

        def converter(model: Any) -> tuple[Any, dict[str, Any]]:
            from headsize_tf.keras3.reparam import convert_model

            converted, layers = convert_model(model, target, **cp)
            return converted, {"layers": layers, "target": target.to_dict()}

    if converter is not None:
        converter = _healed(args, converter, text)
    return convert(
        lm,
        target if converter is None else None,
        args.output,
        text=text,
        source=source,
        converter=converter,
        **options,
    )


def convert_lm_file(args: argparse.Namespace, target: Any) -> dict[str, Any]:
    """Converts the `.keras` CausalLM `args.model_file` to `target` (None: to
    `--cache-fraction`); returns the report.

    The text (`--data-file` or `--corpus`) is tokenised with `--vocab-file` (default:
    the Austen corpus's vocab.txt) into windows of the model's positions (or
    `--sequence-length`) plus one.

    Args:
      args: `convert`'s parsed arguments.
      target: The `ConversionTarget`, or None.
    """
    from headsize_tf.core.io import check_output_free

    text_given = _check_text_flags(args)
    if not text_given and (args.vocab_file or args.sequence_length):
        raise ValueError(
            "--vocab-file and --sequence-length shape the text of --data-file / --corpus."
        )
    check_output_free(args.output, args.overwrite)
    from headsize_tf.data.lm_text import load_lm_text
    from headsize_tf.keras3.modeling.model_file import saved_class_name
    from headsize_tf.keras3.reparam.lm_file import convert_lm_file as convert
    from headsize_tf.keras3.reparam.lm_file import load_lm_file

    if saved_class_name(args.model_file) == "DecoderLM":  # Its text needs its own tokenizer.
        raise ValueError(
            f"--model-file {args.model_file} holds a DecoderLM (a Llama-family decoder with its "
            f"own tokenizer); pass it as --decoder {args.model_file}."
        )
    lm = load_lm_file(args.model_file)
    budget = None if target is not None else _budget_plan(args, lm, str(args.model_file))
    text = None
    if text_given:
        text = load_lm_text(
            _window(args, lm.max_sequence_length),
            data_file=args.data_file,
            corpus=args.corpus,
            data_dir=args.data_dir,
            vocab_file=args.vocab_file,
        )
    return _run(args, lm, target, budget, text, str(args.model_file), convert)


# Tokens per window of a pretrained decoder's text (its positions run to thousands).
DECODER_WINDOW = 256


def convert_decoder(args: argparse.Namespace, target: Any) -> dict[str, Any]:
    """Converts the pretrained decoder `args.decoder` to `target` (None: to
    `--cache-fraction`); returns the report.

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
    # The plan is checked before the text is read and the calibration pass (minutes).
    budget = None if target is not None else _budget_plan(args, lm, str(args.decoder))
    text = None
    if text_given:
        length = args.sequence_length or min(DECODER_WINDOW, lm.max_sequence_length)
        text = decoder_lm_text(
            lm,
            _window(args, lm.max_sequence_length) if args.sequence_length else length + 1,
            corpus=args.corpus,
            data_file=args.data_file,
            data_dir=args.data_dir,
            max_train_windows=max(
                1,
                args.heal_windows,
                args.uptrain_steps * args.batch_size,
                0 if budget is None else args.calibration_windows,
            ),
            max_held_out_windows=args.eval_windows,
            train=budget is not None or args.uptrain_steps > 0 or args.heal_steps > 0,
        )
    return _run(args, lm, target, budget, text, str(args.decoder), convert)


def _check_train_text(
    args: argparse.Namespace, text: Any, flag: str, windows: int, what: str | None = None
) -> None:
    """`what` (default: `flag`'s name) measures or trains on `windows` windows of the training
    text, as `flag` asks."""
    what = what or flag.split()[0]
    if text is None:
        raise ValueError(f"{what} works on training text: pass --corpus or --data-file.")
    if not len(text.train) and args.corpus is not None:
        raise ValueError(
            f"--corpus {args.corpus} is held out whole (no training text), and {what} works "
            "on training text: use --corpus austen or python_docs, or --data-file."
        )
    if len(text.train) < windows:
        raise ValueError(
            f"The training text has {len(text.train)} windows of {text.train.shape[1] - 1} "
            f"tokens; {flag} asks for more (give more text, or fewer windows)."
        )


def _check_heal_text(args: argparse.Namespace, text: Any) -> None:
    """`--heal-steps` needs `--heal-windows` windows of training text."""
    if args.heal_steps:
        flag = f"--heal-windows {args.heal_windows}"
        _check_train_text(args, text, flag, args.heal_windows, "--heal-steps")


def _healed(args: argparse.Namespace, converter: Any, text: Any) -> Any:
    """`converter` followed by `--heal-steps` of layer-wise distillation on the training text."""
    if not args.heal_steps:
        return converter
    _check_heal_text(args, text)

    def healed(model: Any) -> tuple[Any, dict[str, Any]]:
        from headsize_tf.keras3.reparam.heal import layerwise_distill

        converted, report = converter(model)
        windows = text.train[: args.heal_windows, :-1]  # Inputs (the last id is a target).
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


# The budget flags that shape rotary keys (a model without RoPE refuses them).
ROPE_FLAGS = ("rope_strategy", "rope_pairs", "rope_context", "rope_fold")


@dataclasses.dataclass(frozen=True)
class _Budget:
    """`--cache-fraction` on one model: the latent's plan, or grouped K/V's pooling."""

    plan: Any
    pooling: str | None
    needs_text: bool
    measures: bool
    model: str


def _budget_plan(args: argparse.Namespace, lm: Any, model: str) -> _Budget:
    """Checks `--cache-fraction`'s flags against `lm` before any text is read or measured."""
    from headsize_tf.keras3.reparam.kv_compress import KVPlan, check_plan

    rotary = _rotary(lm)
    grouped = args.to == "grouped"
    if not rotary:
        given = [name for name in args.budget_flags if name in ROPE_FLAGS]
        if given:
            raise ValueError(
                f"--{given[0].replace('_', '-')} keeps rotary pairs (RoPE) beside the latent, "
                f"but {model} has no rotary positions: drop it (the latent holds every key)."
            )
    plan = KVPlan(
        args.cache_fraction,
        rope_strategy=args.rope_strategy if rotary else None,
        rope_pairs=args.rope_pairs,
        calibrated=args.calibration == "activations",
        allocation=args.allocation,
        rope_context=args.rope_context,
        rope_fold=args.rope_fold,
        balance=args.method != "joint_svd_unbalanced",
        split=args.method == "split_svd",
    )
    pooling = None
    if grouped:
        pooling = args.method or ("mean" if rotary else "svd")
        if rotary and pooling == "svd":
            raise ValueError(
                "--to grouped --cache-fraction pools the keys by mean (--method mean or "
                "svd_values); --method svd re-bases rotated keys."
            )
    else:
        check_plan(lm, plan)
    needs_text = plan.calibrated or (not grouped and plan.rope_strategy == "2norm")
    measures = not grouped and plan.allocation == "sensitivity"
    if (needs_text or measures) and args.corpus is None and args.data_file is None:
        measured = [
            flag
            for flag, needed in (
                ("--rope-strategy 2norm", not grouped and plan.rope_strategy == "2norm"),
                ("--calibration activations", plan.calibrated),
                ("--allocation sensitivity", measures),
            )
            if needed
        ]
        raise ValueError(
            f"{' and '.join(measured)} measure{'s' if len(measured) == 1 else ''} the model on "
            "text: pass --corpus or --data-file"
            + (" (or --calibration weights)" if plan.calibrated and not measures else "")
            + "."
        )
    return _Budget(plan, pooling, needs_text, measures, model)


def _budget_converter(
    args: argparse.Namespace, lm: Any, budget: _Budget, text: Any
) -> Callable[[Any], tuple[Any, dict[str, Any]]]:
    """`--cache-fraction`: the latent of `compress_kv` (`--to latent`; with partial or rotated
    RoPE in a rotary model) or grouped K/V with key/value heads chosen per layer (`--to
    grouped`, `grouped_budget`), calibrated on the training text (measured once, cached)."""
    from headsize_tf.keras3.reparam import convert_model
    from headsize_tf.keras3.reparam.kv_compress import compress_kv, grouped_budget

    plan = budget.plan
    _check_heal_text(args, text)
    if budget.needs_text or budget.measures:
        count = args.calibration_windows
        _check_train_text(args, text, f"--calibration-windows {count}", count)

    def converter(model: Any) -> tuple[Any, dict[str, Any]]:
        stats = None  # Measured (or read from the cache) only when a conversion is made.
        if budget.needs_text:
            windows = text.train[: args.calibration_windows, :-1]  # Inputs only.
            stats = _cached_stats(budget.model, lm, windows, text.source)
        if budget.pooling is not None:
            pooling = budget.pooling
            target, report = grouped_budget(model, plan.cache_fraction, stats, pooling)
            covariances = None if stats is None or pooling == "mean" else stats.covariances
            converted, layers = convert_model(model, target, covariances=covariances)
            basis = "activations" if stats else "weights"
            method = {
                "mean": "mean pooling",
                "svd_values": f"keys by mean pooling, values by the SVD of their {basis}",
                "svd": f"keys and values by the SVD of their {basis}",
            }[pooling] + f", heads per layer by mean pooling's {basis[:-1]} error"
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
            sizes = _cached_allocation(budget.model, model, plan, stats, text, args)
        converted, report = compress_kv(model, plan, stats, sizes)
        svd = "split" if plan.split else "joint"
        rope = (
            "no RoPE"
            if plan.rope_strategy is None
            else f"rope {plan.rope_strategy} x {plan.rope_pairs}"
            + (f" fold {plan.rope_fold}" if plan.rope_fold != 1 else "")
        )
        target = {
            "kind": "latent",
            "cache_fraction": plan.cache_fraction,
            "method": f"{rope}, {'calibrated' if plan.calibrated else 'weights'} {svd} SVD, "
            f"{plan.allocation}",
        }
        return converted, {**report, "target": target}

    return converter


def _cached_allocation(
    model_name: str, lm: Any, plan: Any, stats: Any, text: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """`--allocation sensitivity`: the latent sizes measured on the calibration windows
    (`allocate_by_sensitivity`), computed once per model, text and plan and cached."""
    from headsize_tf.core.io import cache_root, write_json
    from headsize_tf.keras3.reparam.kv_compress import allocate_by_sensitivity

    windows = text.train[: args.calibration_windows]
    key = _cache_key(model_name, text.source, windows, json.dumps(plan.to_dict(), sort_keys=True))
    path = cache_root() / "allocation" / f"{key}.json"
    if path.exists():
        print(f"latent sizes by sensitivity: {path} (cached)", flush=True)
        return json.loads(path.read_text())
    print(f"allocating latent sizes by the loss on {len(windows)} windows ...", flush=True)
    sizes = allocate_by_sensitivity(lm, plan, stats, windows, progress=print)
    write_json(path, sizes)
    return sizes


def _model_identity(model: str) -> str:
    """A model's name for the caches: a local file or directory with its files' sizes and
    modification times (a retrained file at the same path is another model)."""
    path = pathlib.Path(model)
    files = [path] if path.is_file() else sorted(path.iterdir()) if path.is_dir() else []
    stamps = [f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files if f.is_file()]
    return "|".join([model, *stamps])


def _cache_key(model: str, source: str, windows: Any, *extra: str) -> str:
    """The cache name of what is measured on a model's calibration `windows` (+ `extra`)."""
    import hashlib

    import numpy as np

    digest = hashlib.sha256(np.ascontiguousarray(windows).tobytes()).hexdigest()
    parts = [_model_identity(model), source, str(windows.shape), digest, *extra]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _cached_stats(model: str, lm: Any, windows: Any, source: str) -> Any:
    """Calibration statistics of the model on `windows`, computed once and cached."""

    from headsize_tf.core.io import cache_root
    from headsize_tf.keras3.reparam.calibration import CalibrationStats, calibration_stats

    path = cache_root() / "calibration" / f"{_cache_key(model, source, windows)}.npz"
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
      target: The `ConversionTarget`, or None (`--cache-fraction`).
    """
    from headsize_tf.core.io import check_output_free

    text_given = _check_own_tokenizer_flags(args, "a keras-hub model")
    check_output_free(args.output, args.overwrite)
    from headsize_tf.keras3.hub import convert_hub_lm, hub_lm_text, load_hub_preset

    hub = load_hub_preset(args.keras_hub_preset, tool="convert")
    source = str(args.keras_hub_preset)
    budget = None if target is not None else _budget_plan(args, hub.backbone, source)
    text = None
    if text_given:
        text = hub_lm_text(
            hub,
            _window(args, hub.backbone.max_sequence_length),
            data_file=args.data_file,
            corpus=args.corpus,
            data_dir=args.data_dir,
            train=budget is not None or args.uptrain_steps > 0 or args.heal_steps > 0,
        )
    description = (
        f"{target.kind} {target.size_name} {target.size}"
        if budget is None
        else f"a KV cache of {args.cache_fraction:g} ({args.to})"
    )

    def convert(lm: Any, target: Any, output: str, **kwargs: Any) -> dict[str, Any]:
        return convert_hub_lm(hub, target, output, description=description, **kwargs)

    return _run(args, hub.backbone, target, budget, text, source, convert)
