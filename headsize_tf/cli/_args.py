"""Argument types and arguments shared by several commands."""

from __future__ import annotations

import argparse
import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

from headsize_tf.core import arguments


def add_option(
    container: Any, *names: str, hidden: Sequence[str] = (), **kwargs: Any
) -> argparse.Action:
    """`container.add_argument(*names, **kwargs)`, also spelled the `hidden` (old) ways.

    The hidden spellings parse to the same `dest`, type and action, and `--help`
    shows only `names`. A required option and its hidden spellings form a
    required one-of group, so that any spelling satisfies it.
    """
    if not hidden:
        return container.add_argument(*names, **kwargs)
    if kwargs.pop("required", False):
        container = container.add_mutually_exclusive_group(required=True)
    action = container.add_argument(*names, **kwargs)
    alias = {key: kwargs[key] for key in ("action", "type", "choices", "nargs") if key in kwargs}
    container.add_argument(
        *hidden, dest=action.dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **alias
    )
    return action


# The number types, under the names the commands import.
_positive_int = arguments.positive_int
_non_negative_int = arguments.non_negative_int
_non_negative_float = arguments.non_negative_float
_fraction = arguments.fraction
_open_fraction = arguments.open_fraction


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


class _PretrainedNames(Sequence):
    """The registered pretrained models of one kind, read when argparse needs them.

    The registry is the framework-neutral `headsize_tf.data.pretrained` (not
    `headsize_tf.pretrained`, which loads tf_keras: `--framework keras3` must
    not), read when a `--model` value is checked or a command's help lists the
    names, so that checkpoints registered after the parser is built count.
    """

    def __init__(self, kind: str = "encoder"):
        self.kind = kind

    def _names(self) -> list[str]:
        from headsize_tf.data.pretrained import PRETRAINED

        return sorted(name for name, spec in PRETRAINED.items() if spec.kind == self.kind)

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()


KERAS_HUB_HELP = (
    "a keras-hub preset on the Keras 3 front: a name (e.g. gpt2_base_en, "
    "bert_base_en_uncased; downloaded, needs the network) or a local preset directory "
    "(save_to_preset, or this command's own output); BertBackbone / BertTextClassifier, "
    "DistilBertBackbone / DistilBertTextClassifier, GPT2Backbone / GPT2CausalLM"
)


DECODER_HELP = (
    "a pretrained decoder on the Keras 3 front: a registered name (smollm2-135m-instruct-q4), a "
    ".gguf file (llama, qwen2, qwen3, gemma, gemma2, gemma3), a Hugging Face directory (config.json, model.safetensors, "
    "tokenizer.json), a keras-hub preset directory (Llama, Llama3, Mistral, Qwen, Qwen3, Gemma, Gemma 3) or a "
    "DecoderLM .keras file"
)


MODEL_HELP = "a registered pretrained encoder"


def add_model_source(
    p: argparse.ArgumentParser,
    model_dir_help: str | None = None,
    keras_hub: bool = False,
    decoder: bool = False,
    model_file_help: str | None = None,
    checkpoint_help: str | None = None,
) -> Any:
    """The model, one of: `--model NAME` (a registered pretrained encoder) or `--checkpoint
    DIR`; given its help, `--model-dir DIR` (a `headsize-tf train` model_dir; also spelled
    `--model_dir`) and `--model-file FILE.keras`; with `keras_hub`, `--keras-hub-preset
    NAME_OR_DIR`; with `decoder`, `--decoder NAME_OR_PATH`. Returns the one-of group."""
    source = p.add_mutually_exclusive_group(required=True)
    if decoder:
        source.add_argument("--decoder", metavar="NAME_OR_PATH", default=None, help=DECODER_HELP)
    if model_dir_help:
        add_option(source, "--model-dir", hidden=["--model_dir"], help=model_dir_help)
    source.add_argument("--model", choices=_PretrainedNames(), help=MODEL_HELP)
    source.add_argument(
        "--checkpoint",
        help=checkpoint_help
        or "a checkpoint directory (from `compress`/`prune`, or Hugging Face BERT layout: "
        "config.json, model.safetensors, vocab.txt)",
    )
    if model_file_help:
        source.add_argument("--model-file", metavar="FILE.keras", help=model_file_help)
    if keras_hub:
        source.add_argument(
            "--keras-hub-preset", metavar="NAME_OR_DIR", default=None, help=KERAS_HUB_HELP
        )
    return source


# The model source flags, by the registry key of the runner each picks (`model_source`).
SOURCES = (
    ("decoder", "decoder"),
    ("keras_hub", "keras_hub_preset"),
    ("model_file", "model_file"),
    ("model_dir", "model_dir"),
)


def model_source(args: argparse.Namespace) -> str:
    """The registry key of the model the flags name, the one dispatch of every command that
    runs on either front (`embed`, `compress`, `convert`, `prune`, `export`): the source flag
    given (`decoder`, `keras_hub`, `model_file`: Keras 3; `model_dir`: tf_keras), else
    `pretrained/FRAMEWORK` (`--model` or `--checkpoint`, on the front `--framework` names).

    Each command keeps a `RUNNERS` dict from these keys to its runners, which live in
    `_COMMAND_tf_keras` (the tf_keras front, imported inside them) and `_COMMAND_keras3`
    (free of tf_keras) modules.
    """
    for key, dest in SOURCES:
        if getattr(args, dest, None):
            return key
    return f"pretrained/{getattr(args, 'framework', None) or 'tf_keras'}"


# Training windows a healing distils on unless --heal-windows says otherwise.
HEAL_WINDOWS = 32


def check_heal_windows(args: argparse.Namespace) -> None:
    """`--heal-windows` only with `--heal-steps`; its default filled in."""
    if args.heal_windows is not None and not args.heal_steps:
        raise ValueError(
            f"--heal-windows {args.heal_windows} sizes the healing: add --heal-steps N."
        )
    if args.heal_windows is None:
        args.heal_windows = HEAL_WINDOWS


# Flags that name a model to read (a path when it exists), for `check_output_apart`.
SOURCE_FLAGS = (
    ("--decoder", "decoder"),
    ("--keras-hub-preset", "keras_hub_preset"),
    ("--model-file", "model_file"),
    ("--model-dir", "model_dir"),
    ("--checkpoint", "checkpoint"),
)


def check_output_apart(args: argparse.Namespace, inside: bool = False) -> None:
    """Refuses an `--output` that would replace the model the command reads (the source,
    or a folder holding it), and a `--state-dir` that `--output` would replace.

    What is replaced is `args.written_output` where a command sets it (a SavedModel
    export writes only `--output`/`--version`), else `--output`. With `inside`
    (`export`, whose `--output` is a directory of its own), `--output` itself may
    not be the model read either (its versions would land among the model's files).
    """
    output = getattr(args, "output", None)
    if output is None:
        return
    given = pathlib.Path(os.path.realpath(output))
    out = pathlib.Path(os.path.realpath(getattr(args, "written_output", None) or output))
    for flag, dest in SOURCE_FLAGS:
        value = getattr(args, dest, None)
        if value and pathlib.Path(value).expanduser().exists():
            source = pathlib.Path(os.path.realpath(pathlib.Path(value).expanduser()))
            if source == out or out in source.parents:
                raise ValueError(
                    f"--output {output} would replace the model it reads ({flag} {value}); "
                    "expected another path."
                )
            if inside and source == given:
                raise ValueError(
                    f"--output {output} is the model it reads ({flag} {value}); expected a "
                    "directory of its own."
                )
    state = getattr(args, "state_dir", None)
    if state is not None:
        state_path = pathlib.Path(os.path.realpath(state))
        if state_path == out or out in state_path.parents:
            raise ValueError(
                f"--state-dir {state} lies in --output {output}, which a finished run "
                "replaces; expected a directory of its own."
            )


def dispatch(runners: dict[str, Any], args: argparse.Namespace, key: str | None = None) -> Any:
    """The runner of `key` (default: `model_source(args)`) in a command's `runners`, once
    `--output` is checked against the sources (`check_output_apart`)."""
    source = model_source(args)
    key = source if key is None else key
    keras3 = {
        "decoder": "--decoder",
        "keras_hub": "--keras-hub-preset",
        "model_file": "--model-file",
    }
    if getattr(args, "framework_given", None) == "tf_keras" and source in keras3:
        raise ValueError(
            f"{keras3[source]} is a Keras 3 model: drop --framework tf_keras (or say keras3)."
        )
    check_output_apart(args)
    if key not in runners:
        raise ValueError(
            f"This command does not take {key.replace('_', ' ')} models; it takes "
            f"{', '.join(sorted(runners))}."
        )
    return runners[key]


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
    if not lines:
        raise ValueError(f"Input file {path!r} is empty; expected one sentence per line.")
    return [line.rstrip("\r") for line in lines]


FRAMEWORKS = ("tf_keras", "keras3")


class _Framework(argparse.Action):
    """Stores `--framework` and, as `framework_given`, that the command line gave it (its
    default cannot tell), so that `dispatch` refuses tf_keras for a Keras 3 model."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.framework_given = values


def add_framework(p: argparse.ArgumentParser) -> None:
    """`--framework tf_keras|keras3`: which front loads and runs the model."""
    p.add_argument(
        "--framework",
        action=_Framework,
        choices=FRAMEWORKS,
        default="tf_keras",
        help="tf_keras (Model Garden, default) or keras3 (`import keras`; the backend is "
        "$KERAS_BACKEND: tensorflow or jax)",
    )


# `prune`'s data flags, by their `headsize_tf.data.text_tasks.load_task` argument names.
TASK_DATA = (
    "task",
    "data",
    "data_dir",
    "data_file",
    "data_format",
    "text_column",
    "text_pair_column",
    "label_column",
    "split_column",
    "tfds",
)


def task_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """`prune`'s data flags as `load_task` keyword arguments (both frameworks)."""
    return {name: getattr(args, name) for name in TASK_DATA}


def schedule_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """`prune`'s schedule flags as the keyword arguments every pruning driver takes."""
    return {
        "target_fraction": args.target_fraction,
        "step": args.step,
        "recompute": not args.no_recompute,
        "min_heads_per_layer": args.min_heads_per_layer,
    }


def cp_options(args: argparse.Namespace) -> dict:
    """`compress`'s CP decomposition keyword arguments from the flags (both fronts)."""
    return {
        "overwrite": args.overwrite,
        "method": args.method,
        "max_iter": args.max_iter,
        "tolerance": args.tolerance,
    }


def encoder_options(encoder: Any, args: argparse.Namespace) -> Any:
    """`encoder` with `embed`'s `--pooling` and `--sequence-length` applied (both fronts)."""
    if args.pooling:
        encoder.pooling = args.pooling
    if args.sequence_length is not None:
        encoder.max_seq_length = args.sequence_length
    return encoder
