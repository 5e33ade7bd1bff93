"""`headsize-tf prune --framework keras3`: the Keras 3 runner, free of tf_keras.

An import-linter contract keeps this module (with the core, the data floor and
the Keras 3 front) from importing tf_keras, Model Garden or the tf_keras front.
"""

from __future__ import annotations

import argparse
from typing import Any

from headsize_tf.cli._args import read_lines, schedule_arguments, task_arguments

# Flags of labelled data, which a causal LM's plain-text pruning does not take.
_LABELLED_FLAGS = (
    ("--tfds", "tfds"),
    ("--task", "task"),
    ("--data-format", "data_format"),
    ("--text-column", "text_column"),
    ("--text-pair-column", "text_pair_column"),
    ("--label-column", "label_column"),
    ("--split-column", "split_column"),
)
# Tokens per window of a causal LM's importance and perplexity; perplexity windows.
LM_WINDOW, LM_EVAL_WINDOWS = 64, 128


def prune_pretrained(args: argparse.Namespace) -> dict:
    """Fine-tunes and prunes a pretrained encoder (`--model` / `--checkpoint`) on the task."""
    from headsize_tf.core.io import check_output_free
    from headsize_tf.data.text_tasks import load_task
    from headsize_tf.keras3.pretrained import load_sentence_encoder
    from headsize_tf.keras3.pruning.classifier import PruneSettings, prune_classifier

    check_output_free(args.output, args.overwrite)
    task = load_task(**task_arguments(args))
    encoder = load_sentence_encoder(args.model, args.checkpoint)
    settings = PruneSettings(
        **schedule_arguments(args),
        finetune_epochs=args.finetune_epochs,
        importance_examples=args.importance_examples,
    )
    report = prune_classifier(encoder, task, args.output, settings, overwrite=args.overwrite)
    data = report["data"]
    report["data_info"] = {
        "source": data["source"],
        "train_examples": len(task.train_labels),
        "dev_examples": len(task.dev_labels),
    }
    return report


def prune_hub_preset(args: argparse.Namespace) -> dict:
    """`--keras-hub-preset`: a BERT / DistilBERT classifier on the labelled task, or GPT-2 on
    plain text (its own next-token loss, validation perplexity)."""
    from headsize_tf.core.io import check_output_free
    from headsize_tf.keras3.hub import load_hub_preset, prune_hub_classifier
    from headsize_tf.keras3.pruning.classifier import PruneSettings

    check_output_free(args.output, args.overwrite)
    if args.attention_kinds:
        raise ValueError(
            "--attention-kinds is for translation model_dirs; a keras-hub model has "
            "self-attention only."
        )
    hub = load_hub_preset(args.keras_hub_preset, tool="prune")
    if hub.arch.causal_lm:
        return _prune_hub_lm(args, hub)
    if args.data == "austen":
        raise ValueError(
            f"--data austen is plain text for a causal LM; {hub.architecture} is an encoder: "
            "pass labelled data (--data-file, --tfds, or the built-in sentiment task)."
        )
    from headsize_tf.data.text_tasks import load_task

    task = load_task(**task_arguments(args))
    settings = PruneSettings(
        **schedule_arguments(args),
        finetune_epochs=args.finetune_epochs,
        importance_examples=args.importance_examples,
    )
    report = prune_hub_classifier(hub, task, args.output, settings, overwrite=args.overwrite)
    report["data_info"] = {
        "source": report["data"]["source"],
        "train_examples": len(task.train_labels),
        "dev_examples": len(task.dev_labels),
    }
    return report


def _lm_texts(args: argparse.Namespace, architecture: str) -> tuple[list[str], list[str], str]:
    """(train texts, dev texts, description) of a causal LM's plain-text data."""
    given = [flag for flag, name in _LABELLED_FLAGS if getattr(args, name, None)]
    if given or args.data == "rotten_tomatoes":
        flags = ", ".join(given or ["--data rotten_tomatoes"])
        raise ValueError(
            f"{flags}: labelled data; {architecture} (a causal LM) is pruned on plain text: "
            "--data-file FILE (one text a line) or --data austen."
        )
    if args.data_file:
        from headsize_tf.data.splits import split_of

        lines = [line for line in read_lines(args.data_file) if line.strip()]
        dev = [line for line in lines if split_of(line) == "dev"]
        train = [line for line in lines if split_of(line) != "dev"]
        if not dev or not train:
            raise ValueError(
                f"Input file {args.data_file!r} has {len(lines)} non-empty lines; too few for a "
                "train / dev split (about 10% go to dev by a hash of the line)."
            )
        return train, dev, f"{args.data_file}: {len(train)} train / {len(dev)} dev lines"
    if args.data == "austen":
        from headsize_tf.data.corpora import corpus_path

        train = read_lines(corpus_path("austen", "train.txt", args.data_dir))
        dev = read_lines(corpus_path("austen", "valid.txt", args.data_dir))
        return train, dev, "austen (train / valid)"
    raise ValueError(
        f"{architecture} (a causal LM) is pruned on plain text: pass --data-file FILE (UTF-8, "
        "one text a line) or --data austen (`headsize-tf data prepare austen` first)."
    )


def prune_decoder(args: argparse.Namespace) -> dict:
    """`--decoder`: a pretrained decoder pruned on its own next-token loss on plain text.

    Importance windows from the training text (`--importance-examples` of
    them), perplexity on the held-out text; grouped K/V layers lose whole
    groups (`remove_heads`), so the KV cache shrinks (`--unit kv_group`: whole
    groups by importance). `--heal-steps` then distils each pruned attention
    layer from the original's outputs (layer-wise, as `convert` heals). Writes
    `model.keras` and `report.json`.
    """
    from headsize_tf.core.io import check_output_free
    from headsize_tf.core.prune_loop import PruneSchedule, prune_loop
    from headsize_tf.keras3.pretrained.decoder_text import decoder_lm_text
    from headsize_tf.keras3.pretrained.decoders import load_decoder
    from headsize_tf.keras3.pruning import LMAdapter

    check_output_free(args.output, args.overwrite)
    if args.attention_kinds:
        raise ValueError("--attention-kinds is for translation model_dirs; a decoder has one kind.")
    given = [flag for flag, name in _LABELLED_FLAGS if getattr(args, name, None)]
    if given or args.data == "rotten_tomatoes":
        raise ValueError(
            f"{', '.join(given or ['--data rotten_tomatoes'])}: labelled data; a decoder is "
            "pruned on plain text: --data-file FILE or --data austen."
        )
    if not args.data_file and args.data != "austen":
        raise ValueError("A decoder is pruned on plain text: pass --data austen or --data-file.")
    lm = load_decoder(args.decoder)
    heal_windows = args.heal_windows if args.heal_steps else 0
    text = decoder_lm_text(
        lm,
        LM_WINDOW + 1,
        corpus=None if args.data_file else "austen",
        data_file=args.data_file,
        max_train_windows=max(args.importance_examples, heal_windows),
        max_held_out_windows=LM_EVAL_WINDOWS,
    )
    if len(text.train) < heal_windows:
        raise ValueError(
            f"--heal-windows {heal_windows} asks for more training windows than the text has "
            f"({len(text.train)} of {LM_WINDOW + 1} tokens)."
        )
    importance = text.train[: args.importance_examples]
    adapter = LMAdapter(lm, importance, text.held_out, source=args.decoder)
    spec = lm.attention_spec

    def extras(report: dict[str, Any], pruned: Any) -> None:
        if args.heal_steps:  # The saved model is the healed one; "pruned" measures it.
            from headsize_tf.keras3.reparam.heal import layerwise_distill

            before = pruned.evaluate()["perplexity"]
            print(f"healing: {args.heal_steps} steps per layer on {heal_windows} windows")
            heal = layerwise_distill(
                lm,
                pruned.lm,
                text.train[:heal_windows, :-1],  # Inputs (the last id is a target).
                args.heal_steps,
                progress=lambda line: print(f"  {line}", flush=True),
            )
            report["heal"] = {**heal, "perplexity_before": before}
        report.update(
            framework="keras3",
            data=text.source,
            windows={"importance": int(len(text.train)), "eval": int(len(text.held_out))},
            heads_per_layer=list(pruned.lm.attention_spec.num_heads),
            kv_heads_per_layer=list(pruned.lm.attention_spec.num_kv_heads)
            if pruned.lm.attention_spec.kind == "grouped"
            else None,
            source_attention=spec.to_dict(),
        )

    schedule = PruneSchedule(**schedule_arguments(args), unit=args.unit)
    return prune_loop(adapter, schedule, args.output, overwrite=args.overwrite, extras=extras)


def _prune_hub_lm(args: argparse.Namespace, hub: Any) -> dict:
    from headsize_tf.keras3.hub import prune_hub_lm

    train, dev, description = _lm_texts(args, hub.architecture)
    return prune_hub_lm(
        hub,
        train,
        dev,
        args.output,
        **schedule_arguments(args),
        importance_windows=args.importance_examples,
        eval_windows=LM_EVAL_WINDOWS,
        sequence_length=LM_WINDOW,
        overwrite=args.overwrite,
        data=description,
    )
