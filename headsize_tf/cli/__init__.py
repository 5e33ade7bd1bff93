"""The `headsize-tf` command line: one module per command.

Each command module has `add_parser(subparsers)` and a handler `run(args)`
that parses, calls one library function and prints. Handlers import their
(heavy) modules lazily, so `headsize-tf --help` stays fast. Every command
spells one concept one way (docs/cli.md, "One vocabulary"); old spellings
parse as hidden aliases (`_args.add_option`), and the commands that run on
either front pick their runner by `_args.model_source` from a `RUNNERS`
registry.

TensorFlow's C++ and Python logs are kept to errors (pass `--verbose` before
the command to see them), and a library error (`ValueError` and its
`SpecError` / `CheckpointError`, `RuntimeError`, `FileExistsError`,
`FileNotFoundError`) is one line `headsize-tf COMMAND: error: MESSAGE` on
stderr with exit status 2; Ctrl-C is one line `headsize-tf COMMAND: interrupted`
with exit status 130.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator, Sequence

from headsize_tf import __version__
from headsize_tf.cli import (
    analyze,
    compress,
    convert,
    data,
    demo,
    embed,
    export,
    generate,
    params,
    prune,
    train,
    tune,
)
from headsize_tf.cli._args import read_lines
from headsize_tf.core.arguments import OneLineParser
from headsize_tf.core.errors import is_interrupt, is_user_error
from headsize_tf.core.extras import as_missing_extra
from headsize_tf.core.io import without_native_logs

__all__ = ["build_parser", "main", "read_lines"]

COMMANDS = (
    params,
    data,
    train,
    embed,
    compress,
    convert,
    analyze,
    prune,
    tune,
    export,
    generate,
    demo,
)


_PYTHON_LOGGERS = ("tensorflow", "absl")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="headsize-tf",
        description=(
            "Head size and head sharing as tunable capacity knobs for TensorFlow / Keras "
            "attention: fixed head size (Bhojanapalli et al. 2020), collaborative heads "
            "(Cordonnier et al. 2020), head importance and pruning (Michel et al. 2019)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"headsize-tf {__version__}")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="keep TensorFlow's info and warning logs (default: errors only)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def _verbose_requested(argv: Sequence[str]) -> bool:
    """Whether `--verbose` (or an abbreviation) comes before the command.

    Read before parsing, so that the log levels hold for whatever parsing
    loads.
    """
    for token in argv:
        if not token.startswith("-") or token == "--":
            return False
        if len(token) >= len("--verb") and "--verbose".startswith(token):
            return True
    return False


@contextlib.contextmanager
def quiet_logs(verbose: bool = False) -> Iterator[None]:
    """TensorFlow's C++ logs (if not yet loaded) at fatal only, TF / absl Python logs at errors.

    `TF_CPP_MIN_LOG_LEVEL` is set to 3 only if unset (its start-up errors, such as
    "failed call to cuInit" on a machine without a GPU, are noise here), and is
    read when TensorFlow loads; the Python loggers get their levels back on exit. Native info and
    warning lines that ignore it (XLA's "Compiled cluster using XLA!") are
    dropped from stderr inside the block (`core.io.without_native_logs`).
    """
    if verbose:
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    loggers = [logging.getLogger(name) for name in _PYTHON_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with without_native_logs():
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _flag(argument: str) -> str:
    return "--" + argument.replace("_", "-")


def _as_flags(message: str) -> str:
    """A library message names Python arguments (`overwrite=True`, `step=`, `model_dir=`);
    the CLI user sees the flags that set them (`--overwrite`, `--step`, `--model-dir`)."""
    message = re.sub(r"\b([a-z][a-z0-9_]*)=True\b", lambda m: _flag(m.group(1)), message)
    return re.sub(r"\b([a-z][a-z0-9_]*)=(?=[\s.,;)]|$)", lambda m: _flag(m.group(1)), message)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    with quiet_logs(_verbose_requested(argv)):
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0
        try:
            return int(args.func(args) or 0)
        except BrokenPipeError:
            # The reader of stdout left (`headsize-tf params | head`): end quietly, as
            # command-line tools do, with the shell's status for SIGPIPE (128 + 13).
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        except KeyboardInterrupt:
            # Ctrl-C: one line and the shell's status for SIGINT (128 + 2), no traceback.
            # What was written stays whole (atomic writes); resumable commands resume.
            print(f"\nheadsize-tf {args.command}: interrupted", file=sys.stderr)
            return 130
        except Exception as err:
            if is_interrupt(err):  # Ctrl-C caught and re-raised by TensorFlow's native code.
                print(f"\nheadsize-tf {args.command}: interrupted", file=sys.stderr)
                return 130
            err = as_missing_extra(err) or err  # An optional package: the extra to install.
            if not is_user_error(err):
                raise
            message = _as_flags(" ".join(str(err).split()) or type(err).__name__)
            print(f"headsize-tf {args.command}: error: {message}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    raise SystemExit(main())
