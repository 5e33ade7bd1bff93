"""`headsize-tf prune`: head importance, iterative pruning, physical head removal."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from headsize_tf.cli import _prune_keras3, _prune_tf_keras
from headsize_tf.cli._args import (
    HEAL_WINDOWS,
    _fraction,
    _non_negative_float,
    _non_negative_int,
    _positive_int,
    add_framework,
    add_model_source,
    check_heal_windows,
    dispatch,
    model_source,
)
from headsize_tf.data.text_tasks import FORMATS, GLUE_TASKS


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "prune",
        help="head importance, iterative pruning and physical head removal",
        description="Fine-tunes the encoder on the task (unless the checkpoint already has a "
        "classifier head from `prune`), scores heads by E|dL/dxi_h| (Michel et al. 2019), "
        "prunes --step of the heads at a time to --target-fraction, removes the pruned heads "
        "physically and writes the checkpoint, report.json, label_map.json, importance.png and "
        "curve.png. The data are the built-in sentiment task (default), a labelled CSV / TSV / "
        "JSONL file (--data-file) or a TFDS GLUE task (--tfds). A keras-hub GPT-2 "
        "(--keras-hub-preset) and a pretrained decoder (--decoder: SmolLM2, GGUF, Hugging Face, "
        "keras-hub Llama / Mistral / Qwen) are pruned on their own next-token loss on plain "
        "text (--data-file, one text a line, or --data austen), with validation perplexity; a "
        "decoder loses whole key/value groups, and its KV cache shrinks.",
    )
    add_model_source(
        p,
        model_dir_help="a `headsize-tf train` model_dir of a sentence classifier "
        "(headsize_bert/sentence_prediction), a masked-LM encoder (headsize_bert/pretraining), "
        "a causal LM (headsize_lm/language_modeling) or a "
        "translation model (headsize_seq2seq/translation): importance from its own loss on its "
        "own training data, dev accuracy or perplexity on its validation data; writes a pruned "
        "model_dir",
        keras_hub=True,
        decoder=True,
    )
    add_framework(p)
    source = p.add_argument_group("data (one of --data, --data-file, --tfds)")
    exclusive = source.add_mutually_exclusive_group()
    source.add_argument(
        "--task", choices=["sentiment"], default=None, help="built-in task (default: sentiment)"
    )
    exclusive.add_argument(
        "--data",
        choices=["rotten_tomatoes", "austen"],
        default=None,
        help="built-in data: rotten_tomatoes (labelled, of --task; the default) or austen "
        "(plain text for a keras-hub GPT-2; `headsize-tf data prepare austen` first)",
    )
    exclusive.add_argument(
        "--data-file",
        help="labelled texts: .csv, .tsv (header row) or .jsonl (one object a line), UTF-8; "
        "for a keras-hub GPT-2, plain UTF-8 text (one text a line)",
    )
    exclusive.add_argument(
        "--tfds",
        metavar="glue/NAME",
        choices=sorted(GLUE_TASKS),
        help=f"a TFDS GLUE task: {', '.join(sorted(GLUE_TASKS))}",
    )
    source.add_argument(
        "--data-format",
        choices=list(FORMATS),
        help="format of --data-file (default: from its extension)",
    )
    source.add_argument("--text-column", help="text column of --data-file (default: text)")
    source.add_argument(
        "--text-pair-column", help="second text column of --data-file, for sentence pairs"
    )
    source.add_argument("--label-column", help="label column of --data-file (default: label)")
    source.add_argument(
        "--split-column",
        help="train / dev (or validation) / test column of --data-file (default: about 10%% "
        "of rows to dev by a SHA-1 hash of the text)",
    )
    source.add_argument(
        "--data-dir", default=None, help="cache of the built-in data, or the TFDS data directory"
    )
    p.add_argument("--target-fraction", type=_fraction, default=0.5)
    p.add_argument("--step", type=_fraction, default=0.1)
    p.add_argument(
        "--no-recompute", action="store_true", help="score heads once on the unpruned model"
    )
    p.add_argument(
        "--min-heads-per-layer",
        type=int,
        default=1,
        help="heads (with --unit kv_group: key/value groups) every layer keeps",
    )
    p.add_argument(
        "--unit",
        choices=["head", "kv_group"],
        default="head",
        help="a --decoder: prune single heads (Michel et al.; a grouped layer loses a group "
        "only when all its heads go) or whole key/value groups by their heads' summed "
        "importance, --target-fraction then being the fraction of the groups removed (of "
        "grouped and multi-head layers, the fraction of the KV cache; of a latent with "
        "several rotary keys, its rotary keys')",
    )
    p.add_argument(
        "--attention-kinds",
        nargs="+",
        default=None,
        choices=["encoder_self", "decoder_self", "encoder_decoder"],
        help="--model-dir of a translation model: the kinds of attention pruned "
        "(default: all three)",
    )
    p.add_argument(
        "--heal-steps",
        type=_non_negative_int,
        default=0,
        help="a --decoder: Adam steps per attention layer of layer-wise distillation from the "
        "original (its outputs on the training text) after removal; the saved model is the "
        "healed one",
    )
    p.add_argument(
        "--heal-windows",
        type=_positive_int,
        default=None,
        help=f"with --heal-steps: training windows the healing distils on (default {HEAL_WINDOWS})",
    )
    p.add_argument(
        "--finetune-epochs",
        type=_non_negative_float,
        default=None,
        help=f"a classifier: epochs of fine-tuning after pruning (default {FINETUNE_EPOCHS:g})",
    )
    p.add_argument("--importance-examples", type=_positive_int, default=1024)
    p.add_argument(
        "--importance-batches",
        type=_positive_int,
        default=None,
        help="a --model-dir: training batches (the run's batch size; an LM's: 32 windows) "
        "the importance is averaged over (default: 16 for a classifier or masked LM, 8 for "
        "an LM or a translation model)",
    )
    p.add_argument(
        "--eval-batches",
        type=_positive_int,
        default=None,
        help="a --model-dir: validation batches of the metric at each point of the curve "
        "(default: 32 for a classifier or masked LM, 8 for an LM or a translation model)",
    )
    p.add_argument("--output", required=True)
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=run)
    return p


# The one registry of what `prune` takes, each source to its runner (parsed arguments ->
# report), by the keys of `_args.model_source` (the one dispatch of `embed`, `compress`,
# `convert`, `prune` and `export`): a `headsize-tf train` model_dir by its experiment, a
# pretrained name or checkpoint by its framework, a keras-hub preset (BERT / DistilBERT
# classifiers, GPT-2 LMs), a pretrained decoder.
RUNNERS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "headsize_bert/sentence_prediction": _prune_tf_keras.prune_classifier_dir,
    "headsize_bert/pretraining": _prune_tf_keras.prune_classifier_dir,
    "headsize_lm/language_modeling": _prune_tf_keras.prune_language_model,
    "headsize_seq2seq/translation": _prune_tf_keras.prune_translation_model,
    "pretrained/tf_keras": _prune_tf_keras.prune_pretrained,
    "pretrained/keras3": _prune_keras3.prune_pretrained,
    "keras_hub": _prune_keras3.prune_hub_preset,
    "decoder": _prune_keras3.prune_decoder,
}


def run(args: argparse.Namespace) -> int:
    report = dispatch(RUNNERS, args, _source(args))(args)
    _print_report(args, report)
    return 0


# Fine-tuning epochs of a pruned classifier unless --finetune-epochs says otherwise.
FINETUNE_EPOCHS = 2.0


def _source(args: argparse.Namespace) -> str:
    """The registry key of what the arguments name (a model_dir's options checked)."""
    source = model_source(args)
    batches = [
        f
        for f, n in (
            ("--importance-batches", "importance_batches"),
            ("--eval-batches", "eval_batches"),
        )
        if getattr(args, n) is not None
    ]
    if batches and source != "model_dir":
        raise ValueError(
            f"{batches[0]} counts a --model-dir's batches; other models take --importance-examples."
        )
    if args.heal_steps and source != "decoder":
        raise ValueError("--heal-steps heals a pruned --decoder; other models fine-tune instead.")
    check_heal_windows(args)
    if args.finetune_epochs is not None and source == "decoder":
        raise ValueError(
            f"--finetune-epochs {args.finetune_epochs:g} fine-tunes a pruned classifier; a pruned "
            "--decoder heals instead (--heal-steps)."
        )
    if args.finetune_epochs is None:
        args.finetune_epochs = FINETUNE_EPOCHS
    if args.unit != "head" and source != "decoder":
        raise ValueError(
            f"--unit {args.unit} prunes a --decoder's key/value groups; other models prune heads."
        )
    if source != "model_dir":
        return source
    experiment = _prune_tf_keras.model_dir_experiment(args.model_dir)
    if experiment.startswith("pretrained/") or experiment not in RUNNERS:
        model_dirs = [name for name in RUNNERS if not name.startswith("pretrained/")]
        raise ValueError(
            f"--model-dir {args.model_dir} is a {experiment} run; prune --model-dir "
            f"takes {', '.join(model_dirs)} runs."
        )
    if args.framework != "tf_keras" or args.data_file or args.tfds or args.data or args.task:
        raise ValueError(
            "--model-dir prunes the model on its own data: drop --framework keras3 "
            "and the data options."
        )
    if args.attention_kinds and experiment != "headsize_seq2seq/translation":
        raise ValueError(
            "--attention-kinds is for translation model_dirs; this model has self-attention only."
        )
    return experiment


def _print_report(args: argparse.Namespace, report: dict) -> None:
    """The one printer: data, the curve, parameters, metric and decoding after removal."""
    from headsize_tf.core.prune_report import read_prune_report

    report = read_prune_report(report)
    info = report.get("data_info")
    if info:
        print(
            f"data: {info['source']}: {info['train_examples']} train / "
            f"{info['dev_examples']} dev examples, labels {report['label_map']}"
        )
    name = report["metric"]
    if name == "accuracy":
        title, scale, unit = "dev accuracy", 100, "%"
    elif report.get("experiment") == "headsize_bert/pretraining":
        title, scale, unit = "valid MLM perplexity", 1, ""
    else:
        title, scale, unit = "valid perplexity", 1, ""
    bleu = isinstance(report.get("bleu"), dict)
    print(
        f"{'pruned':>8}{title:>{len(title) + 2}}{'BLEU':>7}"
        if bleu
        else f"{'pruned':>8}{title:>{len(title) + 2}}",
        end="",
    )
    print("  heads per layer")
    for point in report["curve"]:
        heads = point.get("heads")
        heads = (
            ", ".join(f"{k} {v}" for k, v in heads.items())
            if heads
            else point.get("heads_per_layer", "")
        )
        value = f"{100 * point['fraction']:>7.0f}%{scale * point['metric']:>{len(title) + 1}.2f}{unit or ' '}"
        print(value + (f"{point['bleu']:>6.2f} " if bleu else "") + f" {heads}")
    if bleu:
        b = report["bleu"]
        print(
            f"BLEU (greedy, {b['sentences']} validation sentences): {b['original']:.2f} "
            f"-> {b['pruned']:.2f} after removal (masked {b['masked']:.2f})"
        )
    metric = report[name]
    line = (
        f"params: {report['params']['original']} -> {report['params']['pruned']}; {name} after "
        f"removal{' and healing' if report.get('heal') else ''} "
        f"{scale * metric['pruned']:.2f}{unit} (masked {scale * metric['masked']:.2f}{unit})"
    )
    speed = report.get("decoding_tokens_per_second")
    if speed:
        line += (
            f"; cached decoding {speed['original']:.0f} -> {speed['pruned']:.0f} tokens/s "
            f"({report['decoding_speedup']:.2f}x)"
        )
    print(line)
    heal = report.get("heal")
    if heal:
        print(
            f"healed ({heal['steps']} steps a layer, {heal['seconds']:.0f} s): {name} "
            f"{heal['perplexity_before']:.2f} -> {metric['pruned']:.2f}"
        )
    kv_heads = report.get("kv_heads_per_layer")
    source = (report.get("source_attention") or {}).get("num_kv_heads")
    if kv_heads and source:
        before = sum(source) if isinstance(source, list) else source * len(kv_heads)
        print(
            f"key/value heads: {before} -> {sum(kv_heads)} (KV cache {sum(kv_heads) / before:.1%} "
            f"of the original's)"
        )
    print(f"output{' (a model_dir)' if getattr(args, 'model_dir', None) else ''}: {args.output}")
