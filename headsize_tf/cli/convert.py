"""`headsize-tf convert`: a trained decoder's attention as grouped, latent or collaborative heads.

Two sources, one flag set:

* `--model-dir DIR` (tf_keras, Model Garden): a `headsize-tf train` causal LM
  or translation model_dir; writes a model_dir of the same experiment with
  `report.json` and `conversion.png` (`headsize_tf.reparam.convert_dir`).
  Encoder-only model_dirs convert to collaborative heads only, as
  `compress --model-dir` does (same driver, same result).
* `--model-file FILE.keras` (Keras 3; the older `--model FILE.keras` still
  works): a Keras 3 `CausalLM`; writes the
  directory `--output` with `model.keras`, `report.json` and
  `conversion.png` (`headsize_tf.keras3.reparam.convert_lm_file`). Its text
  (held-out perplexity, uptraining) is `--data-file` or `--corpus`,
  tokenised with `--vocab-file` (default: the Austen corpus's vocab.txt). This
  path never imports tf_keras.
* `--keras-hub-preset NAME_OR_DIR`: a keras-hub GPT-2 causal LM (a local
  preset directory, or a name such as gpt2_base_en, downloaded: it needs the
  network); the same conversion, report and plot as a `.keras` LM, its text
  tokenised with the model's own tokenizer (no `--vocab-file`); writes `--output`
  as `HubModel.save` does (with the tokenizer: `load_hub_preset` reopens it)
  plus `report.json` and `conversion.png`
  (`headsize_tf.keras3.hub.convert_hub_lm`). Keras 3, no tf_keras.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from headsize_tf.cli import _convert_keras3, _convert_tf_keras
from headsize_tf.cli._args import (
    DECODER_HELP,
    FRAMEWORKS,
    HEAL_WINDOWS,
    _non_negative_float,
    _non_negative_int,
    _open_fraction,
    _positive_int,
    add_option,
    check_heal_windows,
    dispatch,
    model_source,
)

TARGETS = ("grouped", "latent", "collaborative")
# Held-out windows of a Keras 3 LM's perplexity unless --eval-windows says otherwise (fewer
# where the text has fewer).
EVAL_WINDOWS = 64
SIZE_FLAGS = {"grouped": "kv_heads", "latent": "kv_rank", "collaborative": "shared_key_dim"}
# Library argument names -> the flags that set them, for messages.
FLAG_NAMES = {
    "num_kv_heads": "--kv-heads",
    "kv_latent_dim": "--kv-rank",
    "shared_key_dim": "--shared-key-dim",
}


class _ModelFileAlias(argparse.Action):
    """`convert --model FILE.keras`, the older spelling of `--model-file`: a value that ends
    in .keras or is an existing file is the `--model-file`; anything else is refused, one
    line (a registered model is `--model` in the other commands, a decoder `--decoder`)."""

    def __call__(self, parser, namespace, value, option_string=None):
        if not (str(value).endswith(".keras") or os.path.isfile(value)):
            raise argparse.ArgumentError(
                self,
                f"expected a .keras file (now spelled --model-file FILE.keras; a pretrained "
                f"decoder is --decoder NAME_OR_PATH), got {value!r}",
            )
        setattr(namespace, self.dest, value)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "convert",
        help="share a trained decoder's keys and values: grouped-query heads, a latent, "
        "collaborative heads",
        description="Converts every attention layer of a trained LM or translation model into "
        "grouped-query heads (--to grouped --kv-heads G: Ainslie et al. 2023), a shared "
        "key/value latent (--to latent --kv-rank R: MLA) or collaborative heads (--to "
        "collaborative --shared-key-dim D: Cordonnier et al. 2020), exact at G = heads or full "
        "rank, optionally uptrains it (--uptrain-steps) and reports perplexity before / after, "
        "KV-cache bytes per token, parameters and decoding tokens/s.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    add_option(
        source,
        "--model-dir",
        hidden=["--model_dir"],
        help="a `headsize-tf train` model_dir (headsize_lm/language_modeling, "
        "headsize_seq2seq/translation; to collaborative heads also masked-LM and classifier "
        "runs); writes a model_dir of the same experiment",
    )
    source.add_argument(
        "--model-file",
        metavar="FILE.keras",
        help="a Keras 3 CausalLM saved as .keras (Keras 3 front); writes the directory "
        "--output (model.keras, report.json, conversion.png)",
    )
    # The older spelling of --model-file: `--model` names a registered model elsewhere.
    source.add_argument(
        "--model",
        dest="model_file",
        action=_ModelFileAlias,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    source.add_argument("--decoder", metavar="NAME_OR_PATH", default=None, help=DECODER_HELP)
    source.add_argument(
        "--keras-hub-preset",
        metavar="NAME_OR_DIR",
        default=None,
        help="a keras-hub GPT-2 causal LM (GPT2CausalLM) on the Keras 3 front: a name (e.g. "
        "gpt2_base_en; downloaded, needs the network) or a local preset directory; writes "
        "--output as a preset directory (with its tokenizer) plus report.json and "
        "conversion.png; its text is tokenised by its own tokenizer",
    )
    p.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        default=None,
        help="tf_keras (--model-dir, the default) or keras3 (--model-file, --decoder, "
        "--keras-hub-preset; the default for them)",
    )
    p.add_argument("--to", choices=TARGETS, required=True, help="the attention kind converted to")
    sizes = p.add_argument_group("size (the one of --to; one value for every layer, or one each)")
    sizes.add_argument(
        "--kv-heads", nargs="+", type=_positive_int, metavar="G", help="grouped: key/value heads"
    )
    sizes.add_argument(
        "--kv-rank", nargs="+", type=_positive_int, metavar="R", help="latent: the latent size"
    )
    sizes.add_argument(
        "--shared-key-dim",
        type=_positive_int,
        metavar="D",
        help="collaborative: the shared query/key size",
    )
    p.add_argument(
        "--method",
        default=None,
        help="grouped: svd (default; rotary models: mean), mean (Ainslie's mean pooling) or "
        "svd_values (keys by mean, values by their SVD; calibrated with --cache-fraction); "
        "latent: joint_svd "
        "(default), joint_svd_unbalanced or split_svd (keys and values each their own SVD); "
        "collaborative: als (default) or tensorly",
    )
    rotary = p.add_argument_group(
        "a KV cache at a budget (--decoder, --model-file, --keras-hub-preset; --to latent: the "
        "latent, beside MHA2MLA's partial RoPE in a rotary model, in place of --kv-rank; --to "
        "grouped: key/value heads chosen per layer, in place of --kv-heads)"
    )
    rotary.add_argument(
        "--cache-fraction",
        type=_open_fraction,
        default=None,
        help="the fraction of the KV cache kept (e.g. 0.1875): latent + rotary keys per layer, "
        "or grouped key/value heads per layer where pooling costs most",
    )
    rotary.add_argument(
        "--rope-strategy",
        choices=["high", "low", "uniform", "2norm", "rotated", "rotated_high"],
        default=None,
        help="which frequency pairs keep RoPE (2norm: largest query x key pair norms on the "
        "calibration text; default; rotated: TransMLA's RoRoPE, the same number of pairs in "
        "all from a per-frequency PCA across key/value heads; rotated_high: its leading pair "
        "of the fastest frequencies, DeepSeek-V2's rotary key, which llama.cpp runs: "
        "export --format gguf)",
    )
    rotary.add_argument(
        "--rope-pairs",
        type=_positive_int,
        default=None,
        help="pairs kept per key/value head (default 4)",
    )
    rotary.add_argument(
        "--rope-context",
        type=_positive_int,
        default=None,
        help="2norm / rotated: weigh each pair's score by how far its rotation turns over "
        "distances up to this many tokens (slow pairs lose little without RoPE)",
    )
    rotary.add_argument(
        "--rope-fold",
        type=_positive_int,
        default=None,
        help="rotated: one PCA per band of this many neighbouring frequencies (TransMLA's "
        "FreqFold; each kept component turns at one of its band's frequencies); 1 (default): exact RoRoPE",
    )
    rotary.add_argument(
        "--calibration",
        choices=["activations", "weights"],
        default=None,
        help="the latent's SVD (grouped: the pooling error that picks each layer's heads): of "
        "the key/value activations on the calibration text (default) or of the weights",
    )
    rotary.add_argument(
        "--allocation",
        choices=["uniform", "energy", "sensitivity"],
        default=None,
        help="latent sizes per layer at the same total: the same (default), by spectral energy, "
        "or by the "
        "loss measured on the calibration windows (rounds of a second-order estimate, each "
        "proposal measured; joint SVD only)",
    )
    rotary.add_argument(
        "--calibration-windows",
        type=_positive_int,
        default=None,
        help="windows of the corpus's training text the statistics are measured on (default 32)",
    )
    p.add_argument(
        "--heal-steps",
        type=_non_negative_int,
        default=0,
        help="a Keras 3 LM (--decoder, --model-file, --keras-hub-preset): Adam steps per "
        "attention layer of layer-wise distillation from the original (its outputs on the "
        "training text), before any uptraining",
    )
    p.add_argument(
        "--heal-windows",
        type=_positive_int,
        default=None,
        help=f"with --heal-steps: training windows the healing distils on (default {HEAL_WINDOWS})",
    )
    p.add_argument("--output", required=True)
    p.add_argument("--overwrite", action="store_true")
    p.add_argument(
        "--state-dir",
        default=None,
        help="a --decoder or --model-file: keep the converted (healed) model and uptraining "
        "checkpoints here, so that a rerun with the same flags resumes",
    )
    p.add_argument(
        "--uptrain-steps",
        type=_non_negative_int,
        default=0,
        help="training steps after the conversion (a model_dir: its own data, loss and "
        "optimizer; a .keras LM or keras-hub GPT-2: the --data-file or --corpus text); "
        "resumable for model_dirs",
    )
    p.add_argument(
        "--convert-encoder",
        action="store_true",
        help="a translation model_dir: convert the encoder's self-attention too (always for "
        "collaborative heads)",
    )
    p.add_argument(
        "--eval-batches",
        type=_positive_int,
        default=8,
        help="a model_dir: validation batches of the metrics",
    )
    p.add_argument("--decode-tokens", type=_positive_int, default=32)
    p.add_argument(
        "--eval-windows",
        type=_positive_int,
        default=None,
        help="a Keras 3 LM (--model-file, --decoder, --keras-hub-preset): held-out windows of "
        f"the perplexity (default: up to {EVAL_WINDOWS})",
    )
    p.add_argument("--max-iter", type=_positive_int, default=100, help="collaborative: CP sweeps")
    p.add_argument(
        "--tolerance",
        type=_non_negative_float,
        default=None,
        help="collaborative: warn above this CP error (a finite number >= 0)",
    )
    text = p.add_argument_group("text of a .keras LM or a keras-hub GPT-2 (Keras 3)")
    texts = text.add_mutually_exclusive_group()
    texts.add_argument("--data-file", help="plain UTF-8 text (about 20%% of lines held out)")
    texts.add_argument(
        "--corpus",
        choices=["austen", "moby_dick", "python_docs"],
        help="a .keras LM: austen (prepared: train.txt, held out valid.txt); a decoder: a plain "
        "text (austen: four novels train, Northanger Abbey held out; moby_dick: held out "
        "whole; python_docs: the reference trains, the tutorial is held out)",
    )
    text.add_argument("--data-dir", default=None, help="the prepared corpora's directory")
    add_option(
        text,
        "--vocab-file",
        hidden=["--vocab"],
        default=None,
        help="a .keras LM: the WordPiece vocab.txt it was trained with (default: the Austen "
        "corpus's); a keras-hub model uses its own tokenizer",
    )
    text.add_argument(
        "--sequence-length",
        type=_positive_int,
        default=None,
        help="tokens per window (default: the model's max_sequence_length)",
    )
    p.add_argument(
        "--learning-rate",
        type=_open_fraction,
        default=None,
        help="uptraining peak rate (default: a model_dir's own peak rate; 1e-3 for a .keras "
        "LM or keras-hub GPT-2)",
    )
    text.add_argument("--batch-size", type=_positive_int, default=16, help="uptraining windows")
    p.set_defaults(func=run)
    return p


# The flags of a KV cache at a budget and their defaults: without --cache-fraction nothing
# reads them, so they are refused there rather than ignored.
BUDGET_DEFAULTS = {
    "rope_strategy": "2norm",
    "rope_pairs": 4,
    "rope_context": None,
    "rope_fold": 1,
    "calibration": "activations",
    "allocation": "uniform",
    "calibration_windows": 32,
}


def target_of(args: argparse.Namespace) -> Any:
    """The `ConversionTarget` the flags name (the size flag of --to, no other); None for a
    cache budget (`--cache-fraction`), whose flags get their defaults (`args.budget_flags`
    keeps the ones given)."""
    from headsize_tf.core.conversion import METHODS, ConversionTarget

    given = [name for name in BUDGET_DEFAULTS if getattr(args, name, None) is not None]
    if getattr(args, "cache_fraction", None) is None and given:
        raise ValueError(
            f"--{given[0].replace('_', '-')} shapes a KV cache at a budget: it needs "
            "--cache-fraction (--kv-rank and --kv-heads convert without it)."
        )
    latent_only = [name for name in given if name not in ("calibration", "calibration_windows")]
    if getattr(args, "to", None) == "grouped" and latent_only:
        raise ValueError(
            f"--{latent_only[0].replace('_', '-')} shapes a latent's "
            f"{'sizes' if latent_only[0] == 'allocation' else 'rotary keys'} (--to latent); "
            "--to grouped --cache-fraction chooses key/value heads per layer and keeps the keys "
            "as they are."
        )
    args.budget_flags = given
    for name, default in BUDGET_DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, default)
    if getattr(args, "cache_fraction", None) is not None:
        if args.to not in ("latent", "grouped"):
            raise ValueError(
                "--cache-fraction sizes a KV cache: --to latent or --to grouped, not "
                f"--to {args.to}."
            )
        if getattr(args, "model_dir", None) is not None:
            raise ValueError(
                "--cache-fraction is on the Keras 3 front (--decoder, --model-file, "
                "--keras-hub-preset); a model_dir converts with --kv-rank or --kv-heads."
            )
        flag = SIZE_FLAGS[args.to]
        if getattr(args, flag) is not None:
            raise ValueError(
                f"--cache-fraction sets the cache's size: drop --{flag.replace('_', '-')}."
            )
        if args.method not in (None, *METHODS[args.to]):
            raise ValueError(
                f"--method {args.method!r} is not a {args.to} method; expected one of "
                f"{list(METHODS[args.to])}."
            )
        return None

    flag = SIZE_FLAGS[args.to]
    for kind, other in SIZE_FLAGS.items():
        if kind != args.to and getattr(args, other) is not None:
            raise ValueError(
                f"--{other.replace('_', '-')} is for --to {kind}; --to {args.to} takes "
                f"--{flag.replace('_', '-')}."
            )
    size = getattr(args, flag)
    if size is None:
        raise ValueError(f"--to {args.to} needs --{flag.replace('_', '-')}.")
    if isinstance(size, list):
        size = size[0] if len(size) == 1 else tuple(size)
    return ConversionTarget(args.to, size, args.method)


def flag_message(message: str) -> str:
    """A library message with the size arguments named by their flags."""
    for name, flag in FLAG_NAMES.items():
        message = message.replace(f"`{name}`", flag).replace(f"{name}=", f"{flag} ")
    return message


# What `convert` takes, each source to its runner (parsed arguments, target -> report; None:
# printed already), by the keys of `_args.model_source`: the one dispatch of `embed`,
# `compress`, `convert`, `prune` and `export`.
RUNNERS: dict[str, Callable[[argparse.Namespace, Any], dict[str, Any] | None]] = {
    "model_dir": _convert_tf_keras.convert_model_dir,
    "model_file": _convert_keras3.convert_lm_file,
    "decoder": _convert_keras3.convert_decoder,
    "keras_hub": _convert_keras3.convert_hub_preset,
}


def run(args: argparse.Namespace) -> int:
    from headsize_tf.core.spec import SpecError

    runner = dispatch(RUNNERS, args, _source(args))
    try:
        report = runner(args, target_of(args))
    except SpecError as err:
        raise SpecError(flag_message(str(err))) from None
    if report is not None:
        print_report(report, args.output)
    return 0


def _source(args: argparse.Namespace) -> str:
    """The registry key of what the arguments name (the front's options checked)."""
    hub = args.keras_hub_preset is not None
    decoder = args.decoder is not None
    framework = args.framework or ("keras3" if args.model_file or hub or decoder else "tf_keras")
    if args.heal_steps and framework != "keras3":
        raise ValueError(
            "--heal-steps is for Keras 3 LMs (--decoder, --model-file, --keras-hub-preset)."
        )
    check_heal_windows(args)
    args.eval_windows_given = args.eval_windows is not None  # Then the text must hold them.
    if args.eval_windows is None:
        args.eval_windows = EVAL_WINDOWS
    if args.state_dir is not None and not (decoder or args.model_file):
        raise ValueError(
            "--state-dir is for Keras 3 LMs (--decoder, --model-file); a model_dir resumes "
            "from its own checkpoints."
        )
    if decoder and framework != "keras3":
        raise ValueError("--decoder is a Keras 3 model: drop --framework tf_keras (or say keras3).")
    if args.corpus not in (None, "austen") and not decoder:
        raise ValueError(f"--corpus {args.corpus} is a plain text for --decoder models.")
    if args.model_file and framework != "keras3":
        raise ValueError(
            f"--model-file {args.model_file} is a Keras 3 model: drop --framework tf_keras (or "
            "say keras3)."
        )
    if hub and framework != "keras3":
        raise ValueError(
            "--keras-hub-preset is a Keras 3 model: drop --framework tf_keras (or say keras3)."
        )
    if args.model_dir and framework != "tf_keras":
        raise ValueError(
            "--model-dir holds a tf_keras (Model Garden) model: drop --framework keras3."
        )
    return model_source(args)


def print_report(report: dict[str, Any], output: str) -> None:
    """Metrics by stage, KV-cache bytes, parameters and decoding speed."""
    stages = [
        s for s in ("original", "converted", "uptrained") if s in report.get("perplexity", {})
    ]
    metrics = [m for m in ("perplexity", "bleu") if m in report]
    if metrics:
        print(f"{'':<12}" + "".join(f"{s:>12}" for s in stages))
        for metric in metrics:
            values = report[metric]
            print(f"{metric:<12}" + "".join(f"{values[s]:>12.4g}" for s in stages))
    else:
        print("perplexity: not measured (no text: pass --data-file or --corpus)")
    kv, params = report["kv_cache_bytes_per_token"], report["params"]
    print(
        f"KV-cache bytes per token: {kv['original']} -> {kv['converted']} "
        f"({report['kv_cache_fraction']:.3g}x); params: {params['original']} -> "
        f"{params['converted']}"
    )
    speed = report["decoding_tokens_per_second"]
    print(
        f"cached greedy decoding: {speed['original']:.0f} -> {speed['converted']:.0f} tokens/s "
        f"({report['decoding_speedup']:.2f}x, measured side by side)"
    )
    print(f"output: {output}")
